package jobs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/registry"
)

// PolluxKnobs are the Pollux policy's settings beyond fairness_p,
// restart_penalty, interference_avoidance and the ga block's population,
// generations and seed: the configuration's pollux block, and
// stall_generations and workers in its ga block. Each is 0 when the
// document leaves it unset, which means the policy's default for the
// cluster's regime (registry.PolluxConfig.Resolve), and -1 when the
// document turns it off (the word "off", or 0 where 0 means none).
type PolluxKnobs struct {
	// RestartHysteresis (pollux.restart_hysteresis, in [0, 1) or "off")
	// is the share of its gain a running job gives up when it is shrunk
	// or moved, so that small gains do not restart it.
	RestartHysteresis float64
	// GrowthHysteresis (pollux.growth_hysteresis, in [0, 1) or "off") is
	// the same for a job that would get more GPUs.
	GrowthHysteresis float64
	// ServiceWeight (pollux.service_weight, GPU-seconds or "off") A0
	// weighs each job by A0/(A0 + its attained service), so that jobs
	// with little service get GPUs first.
	ServiceWeight float64
	// AgeWeightScale (pollux.age_weight_scale, a duration or "off") τ and
	// AgeWeightPower (pollux.age_weight_power, > 0) weigh each job of age
	// T by (τ/(τ + T))^a.
	AgeWeightScale time.Duration
	AgeWeightPower float64
	// FirstHold (pollux.first_hold, restart times or "off") keeps a job
	// on its first allocation until it has held it for 1 + FirstHold
	// restart times.
	FirstHold float64
	// StandInKnee (pollux.stand_in_knee, GPUs or "off") is where the
	// linear speedup a job without a model is assumed to have bends, on a
	// cluster of several GPU types.
	StandInKnee int
	// MaxNodesPerJob (pollux.max_nodes_per_job, at least 1) is the most
	// nodes one job may span.
	MaxNodesPerJob int
	// RestartHorizon (pollux.restart_horizon, a duration or "off") caps
	// the age that the restart penalty credits a job with.
	RestartHorizon time.Duration
	// PenalizeStarts (pollux.penalize_starts) applies the restart penalty
	// to starting jobs too, as the Pollux artifact does.
	PenalizeStarts bool
	// MoveRestoring (pollux.move_restoring) lets a round move a job that
	// is still restoring from its last restart.
	MoveRestoring bool
	// StallGenerations (ga.stall_generations, a count or "off") ends a
	// round's search once the best solutions have not changed for that
	// many generations.
	StallGenerations int
	// Workers (ga.workers, 0 for the default) is the number of goroutines
	// that breed the GA's offspring.
	Workers int
}

// polluxDoc is the pollux block of the configuration document.
type polluxDoc struct {
	RestartHysteresis *knob `json:"restart_hysteresis" hcl:"restart_hysteresis,optional"`
	GrowthHysteresis  *knob `json:"growth_hysteresis" hcl:"growth_hysteresis,optional"`
	ServiceWeight     *knob `json:"service_weight" hcl:"service_weight,optional"`
	AgeWeightScale    *knob `json:"age_weight_scale" hcl:"age_weight_scale,optional"`
	AgeWeightPower    *knob `json:"age_weight_power" hcl:"age_weight_power,optional"`
	FirstHold         *knob `json:"first_hold" hcl:"first_hold,optional"`
	StandInKnee       *knob `json:"stand_in_knee" hcl:"stand_in_knee,optional"`
	MaxNodesPerJob    *knob `json:"max_nodes_per_job" hcl:"max_nodes_per_job,optional"`
	RestartHorizon    *knob `json:"restart_horizon" hcl:"restart_horizon,optional"`
	PenalizeStarts    *bool `json:"penalize_starts" hcl:"penalize_starts,optional"`
	MoveRestoring     *bool `json:"move_restoring" hcl:"move_restoring,optional"`
}

// off is the word that turns a knob off, and offValue its value in
// PolluxKnobs and registry.PolluxConfig.
const (
	off      = "off"
	offValue = -1
)

// knob is a setting written as a number, a duration or the word "off":
// in JSON a number or a string, in HCL either (HCL converts a number to
// its decimal text).
type knob string

// UnmarshalJSON takes a JSON number or string.
func (k *knob) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*k = knob(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("want a number or a string, got %s", truncate(string(b)))
	}
	*k = knob(n)
	return nil
}

// knobNumber parses a number knob; 0 and "off" give offValue when
// zeroOff. lo and hi bound the number (hiOpen: hi excluded).
func knobNumber(field string, k knob, zeroOff bool, lo, hi float64, hiOpen bool) (float64, error) {
	s := strings.TrimSpace(string(k))
	if zeroOff && s == off {
		return offValue, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	want := fmt.Sprintf("a number in [%g, %g]", lo, hi)
	if hiOpen {
		want = fmt.Sprintf("a number in [%g, %g)", lo, hi)
	}
	if zeroOff {
		want += ` or "off"`
	}
	if err != nil || math.IsNaN(v) || v < lo || v > hi || hiOpen && v == hi {
		return 0, fieldError{field: field, err: fmt.Errorf("want %s, got %q", want, truncate(s))}
	}
	if zeroOff && v == 0 {
		return offValue, nil
	}
	return v, nil
}

// knobInt parses a whole-number knob, as knobNumber.
func knobInt(field string, k knob, zeroOff bool, lo, hi int) (int, error) {
	s := strings.TrimSpace(string(k))
	if zeroOff && s == off {
		return offValue, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < lo || v > hi {
		want := fmt.Sprintf("a whole number in [%d, %d]", lo, hi)
		if zeroOff {
			want += ` or "off"`
		}
		return 0, fieldError{field: field, err: fmt.Errorf("want %s, got %q", want, truncate(s))}
	}
	if zeroOff && v == 0 {
		return offValue, nil
	}
	return v, nil
}

// knobDuration parses a duration knob: "off" or a zero duration give
// offValue.
func knobDuration(field string, k knob) (time.Duration, error) {
	s := strings.TrimSpace(string(k))
	if s == off {
		return offValue, nil
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 || v > maxGCGrace {
		return 0, fieldError{field: field, err: fmt.Errorf(`want a duration in [0s, %s] such as "8h", or "off", got %q`, maxGCGrace, truncate(s))}
	}
	if v == 0 {
		return offValue, nil
	}
	return v, nil
}

// merge applies the pollux block and the ga block's Pollux knobs
// of d to k, returning an error per invalid field.
func (k *PolluxKnobs) merge(d *configDoc) []error {
	var errs []error
	num := func(field string, v *knob, dst *float64, zeroOff bool, lo, hi float64, hiOpen bool) {
		if v == nil {
			return
		}
		x, err := knobNumber(field, *v, zeroOff, lo, hi, hiOpen)
		if err != nil {
			errs = append(errs, err)
			return
		}
		*dst = x
	}
	whole := func(field string, v *knob, dst *int, zeroOff bool, lo, hi int) {
		if v == nil {
			return
		}
		x, err := knobInt(field, *v, zeroOff, lo, hi)
		if err != nil {
			errs = append(errs, err)
			return
		}
		*dst = x
	}
	dur := func(field string, v *knob, dst *time.Duration) {
		if v == nil {
			return
		}
		x, err := knobDuration(field, *v)
		if err != nil {
			errs = append(errs, err)
			return
		}
		*dst = x
	}
	if p := d.Pollux; p != nil {
		num("pollux.restart_hysteresis", p.RestartHysteresis, &k.RestartHysteresis, true, 0, 1, true)
		num("pollux.growth_hysteresis", p.GrowthHysteresis, &k.GrowthHysteresis, true, 0, 1, true)
		num("pollux.service_weight", p.ServiceWeight, &k.ServiceWeight, true, 0, 1e9, false)
		dur("pollux.age_weight_scale", p.AgeWeightScale, &k.AgeWeightScale)
		if v := p.AgeWeightPower; v != nil {
			// Positive: a power of 0 would mean the default (1).
			if x, err := strconv.ParseFloat(strings.TrimSpace(string(*v)), 64); err != nil || !(x > 0 && x <= 100) {
				errs = append(errs, fieldError{field: "pollux.age_weight_power", err: fmt.Errorf("want a number in (0, 100], got %q", truncate(string(*v)))})
			} else {
				k.AgeWeightPower = x
			}
		}
		num("pollux.first_hold", p.FirstHold, &k.FirstHold, true, 0, 1000, false)
		whole("pollux.stand_in_knee", p.StandInKnee, &k.StandInKnee, true, 0, maxMetaValue)
		whole("pollux.max_nodes_per_job", p.MaxNodesPerJob, &k.MaxNodesPerJob, false, 1, maxMetaValue)
		dur("pollux.restart_horizon", p.RestartHorizon, &k.RestartHorizon)
		if p.PenalizeStarts != nil {
			k.PenalizeStarts = *p.PenalizeStarts
		}
		if p.MoveRestoring != nil {
			k.MoveRestoring = *p.MoveRestoring
		}
	}
	if g := d.GA; g != nil {
		whole("ga.stall_generations", g.StallGenerations, &k.StallGenerations, true, 0, 100000)
		whole("ga.workers", g.Workers, &k.Workers, false, 0, 1024)
	}
	return errs
}

// PolluxConfig returns the Pollux policy's configuration that c asks for:
// every field the agent's configuration sets, the others 0 (the
// policy's default for the cluster's regime). A restart_penalty of 0
// turns the restart delay of jobs without a measured one off.
func (c Config) PolluxConfig() registry.PolluxConfig {
	k := c.Pollux
	pc := registry.PolluxConfig{
		Population: c.Population, Generations: c.Generations, Seed: c.Seed,
		FairnessP: c.FairnessP, RestartPenalty: c.RestartPenalty.Seconds(),
		DisableInterferenceAvoidance: !c.InterferenceAvoidance,
		RestartHysteresis:            k.RestartHysteresis,
		GrowthHysteresis:             k.GrowthHysteresis,
		ServiceWeight:                k.ServiceWeight,
		AgeWeightScale:               durationKnob(k.AgeWeightScale),
		AgeWeightPower:               k.AgeWeightPower,
		FirstHold:                    k.FirstHold,
		StandInKnee:                  k.StandInKnee,
		MaxNodesPerJob:               k.MaxNodesPerJob,
		RestartHorizon:               max(durationKnob(k.RestartHorizon), 0),
		PenalizeStarts:               k.PenalizeStarts,
		MoveRestoring:                k.MoveRestoring,
		StallGenerations:             k.StallGenerations,
		Workers:                      k.Workers,
	}
	if pc.RestartPenalty == 0 {
		pc.RestartPenalty = offValue
	}
	return pc
}

// durationKnob is a duration knob in seconds, offValue kept.
func durationKnob(d time.Duration) float64 {
	if d < 0 {
		return offValue
	}
	return d.Seconds()
}

// EffectiveSetting is one Pollux setting as the policy runs it on a
// cluster (contract.Setting).
type EffectiveSetting = contract.Setting

// setting is an EffectiveSetting.
func setting(key, value string, set bool) EffectiveSetting {
	return EffectiveSetting{Key: key, Value: value, Set: set}
}

// EffectivePollux returns the settings the Pollux policy runs with under
// c on a cluster of regime r (policy.RegimeOf of the round's nodes), in
// a fixed order, for the status page and pollux status -json.
func (c Config) EffectivePollux(r policy.Regime) []EffectiveSetting {
	asked := c.PolluxConfig()
	eff := asked.Resolve(r)
	number := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	orOff := func(v float64, unit string) string {
		if v < 0 {
			return off
		}
		return number(v) + unit
	}
	intOrOff := func(v int) string {
		if v < 0 {
			return off
		}
		return strconv.Itoa(v)
	}
	seconds := func(v float64) string {
		if v <= 0 {
			return off
		}
		return (time.Duration(v * float64(time.Second))).String()
	}
	return []EffectiveSetting{
		setting("fairness_p", number(eff.FairnessP), asked.FairnessP != 0),
		setting("restart_penalty", seconds(eff.RestartPenalty), true),
		setting("interference_avoidance", strconv.FormatBool(!eff.DisableInterferenceAvoidance), true),
		setting("ga.population", strconv.Itoa(eff.Population), true),
		setting("ga.generations", strconv.Itoa(eff.Generations), true),
		setting("ga.seed", strconv.FormatInt(eff.Seed, 10), true),
		setting("ga.stall_generations", intOrOff(eff.StallGenerations), asked.StallGenerations != 0),
		setting("ga.workers", workers(eff.Workers), asked.Workers != 0),
		setting("pollux.restart_hysteresis", orOff(eff.RestartHysteresis, ""), asked.RestartHysteresis != 0),
		setting("pollux.growth_hysteresis", orOff(eff.GrowthHysteresis, ""), asked.GrowthHysteresis != 0),
		setting("pollux.service_weight", orOff(eff.ServiceWeight, ""), asked.ServiceWeight != 0),
		setting("pollux.age_weight_scale", seconds(eff.AgeWeightScale), asked.AgeWeightScale != 0),
		setting("pollux.age_weight_power", number(eff.AgeWeightPower), asked.AgeWeightPower != 0),
		setting("pollux.first_hold", orOff(eff.FirstHold, ""), asked.FirstHold != 0),
		setting("pollux.stand_in_knee", intOrOff(eff.StandInKnee), asked.StandInKnee != 0),
		setting("pollux.max_nodes_per_job", strconv.Itoa(eff.MaxNodesPerJob), asked.MaxNodesPerJob != 0),
		setting("pollux.restart_horizon", seconds(eff.RestartHorizon), asked.RestartHorizon != 0),
		setting("pollux.penalize_starts", strconv.FormatBool(eff.PenalizeStarts), true),
		setting("pollux.move_restoring", strconv.FormatBool(eff.MoveRestoring), true),
	}
}

// workers is the ga.workers value shown: "auto" for the default (all
// cores for rounds of at least 16 jobs, one below).
func workers(n int) string {
	if n == 0 {
		return "auto"
	}
	return strconv.Itoa(n)
}
