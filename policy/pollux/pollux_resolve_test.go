package pollux_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/pollux"
)

// TestPolluxResolve pins the effective configuration of the zero
// Config in each regime, and that set knobs win everywhere.
func TestPolluxResolve(t *testing.T) {
	common := pollux.Config{Population: 100, Generations: 100, RestartPenalty: 30, MaxNodesPerJob: 16, AgeWeightPower: 1}
	with := func(f func(*pollux.Config)) pollux.Config {
		c := common
		f(&c)
		return c
	}
	small := with(func(c *pollux.Config) {
		c.StallGenerations, c.FairnessP = 20, -1
		c.RestartHysteresis, c.GrowthHysteresis, c.ServiceWeight = 0.45, 0.3, 14400
		c.AgeWeightScale, c.StandInKnee, c.FirstHold, c.ConfigSeed = -1, -1, -1, -1
	})
	large := with(func(c *pollux.Config) {
		c.StallGenerations, c.FairnessP = -1, -1
		c.RestartHysteresis, c.GrowthHysteresis, c.ServiceWeight = 0.3, 0.3, -1
		c.AgeWeightScale, c.StandInKnee, c.FirstHold, c.ConfigSeed = -1, -1, -1, -1
	})
	several := with(func(c *pollux.Config) {
		c.StallGenerations, c.FairnessP = -1, 0.5
		c.RestartHysteresis, c.GrowthHysteresis, c.ServiceWeight = 0.5, -1, -1
		c.AgeWeightScale, c.StandInKnee, c.FirstHold, c.ConfigSeed = 28800, 4, 2, -1
	})
	// Above SmallClusterGPUs the configuration seed is on.
	severalBig := several
	severalBig.ConfigSeed = 1
	set := pollux.Config{
		Population: 10, Generations: 20, StallGenerations: 5, FairnessP: 1, RestartPenalty: -1,
		RestartHysteresis: 0.2, GrowthHysteresis: 0.1, ServiceWeight: 100, AgeWeightScale: 60,
		AgeWeightPower: 2, StandInKnee: 8, FirstHold: 1, MaxNodesPerJob: 2, Workers: 3, ConfigSeed: 1,
	}
	setOneType := set
	setOneType.StandInKnee = -1
	for name, tc := range map[string]struct {
		cfg    pollux.Config
		regime policy.Regime
		want   pollux.Config
	}{
		"one type, 64 GPUs":          {regime: policy.Regime{GPUs: 64, Types: 1}, want: small},
		"untyped, 4 GPUs":            {regime: policy.Regime{GPUs: 4, Types: 1}, want: small},
		"one type, 65 GPUs":          {regime: policy.Regime{GPUs: 65, Types: 1}, want: large},
		"one type, 4096 GPUs":        {regime: policy.Regime{GPUs: 4096, Types: 1}, want: large},
		"two types, 16 GPUs":         {regime: policy.Regime{GPUs: 16, Types: 2}, want: several},
		"three types, 4096 GPUs":     {regime: policy.Regime{GPUs: 4096, Types: 3}, want: severalBig},
		"three types, 64 GPUs":       {regime: policy.Regime{GPUs: 64, Types: 3}, want: several},
		"three types, 128 GPUs":      {regime: policy.Regime{GPUs: 128, Types: 3}, want: severalBig},
		"set knobs, several types":   {cfg: set, regime: policy.Regime{GPUs: 16, Types: 2}, want: set},
		"set knobs, one type":        {cfg: set, regime: policy.Regime{GPUs: 16, Types: 1}, want: setOneType},
		"set knobs, large":           {cfg: set, regime: policy.Regime{GPUs: 1024, Types: 1}, want: setOneType},
		"hysteresis off, growth too": {cfg: pollux.Config{RestartHysteresis: -1}, regime: policy.Regime{GPUs: 64, Types: 1}, want: with(func(c *pollux.Config) { *c = small; c.RestartHysteresis, c.GrowthHysteresis = -1, -1 })},
		"hysteresis off, growth set": {cfg: pollux.Config{RestartHysteresis: -1, GrowthHysteresis: 0.2}, regime: policy.Regime{GPUs: 64, Types: 1}, want: with(func(c *pollux.Config) { *c = small; c.RestartHysteresis, c.GrowthHysteresis = -1, 0.2 })},
		"growth on a large cluster":  {cfg: pollux.Config{GrowthHysteresis: 0.3}, regime: policy.Regime{GPUs: 1024, Types: 1}, want: with(func(c *pollux.Config) { *c = large; c.GrowthHysteresis = 0.3 })},
		"service weight on several":  {cfg: pollux.Config{ServiceWeight: 3600}, regime: policy.Regime{GPUs: 16, Types: 3}, want: with(func(c *pollux.Config) { *c = several; c.ServiceWeight = 3600 })},
		"age weights off on several": {cfg: pollux.Config{AgeWeightScale: -1}, regime: policy.Regime{GPUs: 16, Types: 3}, want: with(func(c *pollux.Config) { *c = several; c.AgeWeightScale = -1 })},
	} {
		t.Run(name, func(t *testing.T) {
			got := tc.cfg.Resolve(tc.regime)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Resolve(%+v) (-want +got):\n%s", tc.regime, diff)
			}
			if again := got.Resolve(tc.regime); again != got {
				t.Errorf("Resolve is not idempotent: %+v then %+v", got, again)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("resolved configuration is invalid: %v", err)
			}
		})
	}
}

// TestRegimeOf checks the regime a node list gives: untyped nodes are one
// type, as are nodes that all carry the same type.
func TestRegimeOf(t *testing.T) {
	for name, tc := range map[string]struct {
		nodes []policy.Node
		want  policy.Regime
	}{
		"untyped":     {nodes: []policy.Node{{ID: "a", GPUs: 4}, {ID: "b", GPUs: 2}}, want: policy.Regime{GPUs: 6, Types: 1}},
		"all t4":      {nodes: []policy.Node{{ID: "a", GPUs: 4, Type: "t4"}, {ID: "b", GPUs: 4, Type: "t4"}}, want: policy.Regime{GPUs: 8, Types: 1}},
		"t4 and a100": {nodes: []policy.Node{{ID: "a", GPUs: 4, Type: "t4"}, {ID: "b", GPUs: 8, Type: "a100"}}, want: policy.Regime{GPUs: 12, Types: 2}},
	} {
		t.Run(name, func(t *testing.T) {
			got := policy.RegimeOf(tc.nodes)
			if got != tc.want {
				t.Errorf("RegimeOf = %+v, want %+v", got, tc.want)
			}
			if got.SeveralTypes() != (tc.want.Types > 1) {
				t.Errorf("SeveralTypes = %v with %d types", got.SeveralTypes(), tc.want.Types)
			}
		})
	}
}
