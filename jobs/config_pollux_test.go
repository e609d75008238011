package jobs

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/registry"
)

// TestPolluxKnobs reads every Pollux knob from HCL and JSON and checks
// the policy configuration the controller makes of them.
func TestPolluxKnobs(t *testing.T) {
	hclSrc := `
restart_penalty = "off"
ga {
  stall_generations = "off"
  workers           = 2
}
pollux {
  restart_hysteresis = 0.4
  growth_hysteresis  = "off"
  service_weight     = 3600
  age_weight_scale   = "8h"
  age_weight_power   = 2
  first_hold         = 0
  stand_in_knee      = 8
  max_nodes_per_job  = 4
  restart_horizon    = "2h"
  penalize_starts    = true
  move_restoring     = true
}
`
	jsonSrc := `{"restart_penalty": "off", "ga": {"stall_generations": "off", "workers": 2},
"pollux": {"restart_hysteresis": 0.4, "growth_hysteresis": "off", "service_weight": 3600,
"age_weight_scale": "8h", "age_weight_power": 2, "first_hold": "off", "stand_in_knee": "8",
"max_nodes_per_job": 4, "restart_horizon": "2h", "penalize_starts": true, "move_restoring": true}}`
	want := registry.PolluxConfig{
		Population: 100, Generations: 100, Seed: 1, RestartPenalty: -1,
		StallGenerations: -1, Workers: 2,
		RestartHysteresis: 0.4, GrowthHysteresis: -1, ServiceWeight: 3600,
		AgeWeightScale: 8 * 3600, AgeWeightPower: 2, FirstHold: -1, StandInKnee: 8,
		MaxNodesPerJob: 4, RestartHorizon: 2 * 3600, PenalizeStarts: true, MoveRestoring: true,
	}
	fromHCL, err := DefaultConfig().MergeHCL([]byte(hclSrc), "agent.hcl")
	if err != nil {
		t.Fatalf("HCL: %v", err)
	}
	fromJSON, err := DefaultConfig().MergeJSON([]byte(jsonSrc))
	if err != nil {
		t.Fatalf("JSON: %v", err)
	}
	for name, cfg := range map[string]Config{"HCL": fromHCL, "JSON": fromJSON} {
		if diff := cmp.Diff(want, cfg.PolluxConfig()); diff != "" {
			t.Errorf("%s: PolluxConfig (-want +got):\n%s", name, diff)
		}
	}
	if fromHCL.RestartPenalty != 0 {
		t.Errorf(`restart_penalty = "off" gave %s, want 0`, fromHCL.RestartPenalty)
	}
}

// TestPolluxKnobsDefault: an agent configuration that sets no Pollux
// knob leaves every one to the policy, with the restart penalty of 30 s.
func TestPolluxKnobsDefault(t *testing.T) {
	want := registry.PolluxConfig{Population: 100, Generations: 100, Seed: 1, RestartPenalty: 30}
	if diff := cmp.Diff(want, DefaultConfig().PolluxConfig()); diff != "" {
		t.Errorf("PolluxConfig of the defaults (-want +got):\n%s", diff)
	}
}

// TestPolluxKnobErrors: a bad knob is an error naming the field and, in
// HCL, where it is.
func TestPolluxKnobErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		hcl, json string
		want      string
	}{
		"hysteresis of 1":      {hcl: "pollux {\n  restart_hysteresis = 1\n}\n", want: `agent.hcl:2,24-25: pollux.restart_hysteresis: want a number in [0, 1) or "off", got "1"`},
		"word for a number":    {json: `{"pollux": {"growth_hysteresis": "none"}}`, want: `pollux.growth_hysteresis: want a number in [0, 1) or "off", got "none"`},
		"negative weight":      {json: `{"pollux": {"service_weight": -5}}`, want: `pollux.service_weight: want a number in [0, 1e+09] or "off", got "-5"`},
		"scale without unit":   {hcl: "pollux {\n  age_weight_scale = 3600\n}\n", want: `pollux.age_weight_scale: want a duration in [0s, 8760h0m0s] such as "8h", or "off", got "3600"`},
		"power off":            {json: `{"pollux": {"age_weight_power": "off"}}`, want: `pollux.age_weight_power: want a number in (0, 100], got "off"`},
		"fractional knee":      {json: `{"pollux": {"stand_in_knee": 2.5}}`, want: `pollux.stand_in_knee: want a whole number in [0, 16777216] or "off", got "2.5"`},
		"no nodes":             {json: `{"pollux": {"max_nodes_per_job": 0}}`, want: `pollux.max_nodes_per_job: want a whole number in [1, 16777216], got "0"`},
		"stall as a word":      {json: `{"ga": {"stall_generations": "never"}}`, want: `ga.stall_generations: want a whole number in [0, 100000] or "off", got "never"`},
		"unknown pollux field": {json: `{"pollux": {"hysteresis": 0.3}}`, want: `unknown field "hysteresis"`},
		"knob as an object":    {json: `{"pollux": {"first_hold": {}}}`, want: `want a number or a string, got {}`},
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			if tc.hcl != "" {
				_, err = DefaultConfig().MergeHCL([]byte(tc.hcl), "agent.hcl")
			} else {
				_, err = DefaultConfig().MergeJSON([]byte(tc.json))
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestEffectivePollux shows the defaults the policy takes in each regime
// and marks what the configuration sets.
func TestEffectivePollux(t *testing.T) {
	get := func(settings []EffectiveSetting) map[string]EffectiveSetting {
		out := map[string]EffectiveSetting{}
		for _, s := range settings {
			out[s.Key] = s
		}
		return out
	}
	small := get(DefaultConfig().EffectivePollux(policy.Regime{GPUs: 64, Types: 1}))
	large := get(DefaultConfig().EffectivePollux(policy.Regime{GPUs: 1024, Types: 1}))
	several := get(DefaultConfig().EffectivePollux(policy.Regime{GPUs: 64, Types: 3}))
	for _, tc := range []struct {
		key                   string
		small, large, several string
	}{
		{"fairness_p", "-1", "-1", "0.5"},
		{"restart_penalty", "30s", "30s", "30s"},
		{"ga.stall_generations", "20", "off", "off"},
		{"ga.workers", "auto", "auto", "auto"},
		{"pollux.restart_hysteresis", "0.45", "0.3", "0.5"},
		{"pollux.growth_hysteresis", "0.3", "0.3", "off"},
		{"pollux.service_weight", "14400", "off", "off"},
		{"pollux.age_weight_scale", "off", "off", "8h0m0s"},
		{"pollux.stand_in_knee", "off", "off", "4"},
		{"pollux.first_hold", "off", "off", "2"},
		{"pollux.max_nodes_per_job", "16", "16", "16"},
		{"pollux.restart_horizon", "off", "off", "off"},
	} {
		for regime, got := range map[string]map[string]EffectiveSetting{"small": small, "large": large, "several": several} {
			want := map[string]string{"small": tc.small, "large": tc.large, "several": tc.several}[regime]
			if got[tc.key].Value != want {
				t.Errorf("%s on %s: %q, want %q", tc.key, regime, got[tc.key].Value, want)
			}
		}
		if small[tc.key].Set && strings.HasPrefix(tc.key, "pollux.") {
			t.Errorf("%s marked set by the defaults", tc.key)
		}
	}
	cfg := DefaultConfig()
	cfg.Pollux.GrowthHysteresis = 0.2
	cfg.RestartPenalty = 0
	set := get(cfg.EffectivePollux(policy.Regime{GPUs: 64, Types: 3}))
	if s := set["pollux.growth_hysteresis"]; s.Value != "0.2" || !s.Set {
		t.Errorf("growth hysteresis set to 0.2: %+v", s)
	}
	if s := set["restart_penalty"]; s.Value != "off" {
		t.Errorf("restart penalty 0: %+v, want off", s)
	}
}
