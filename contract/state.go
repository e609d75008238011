package contract

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/pollux-nomad/pollux/contract/quote"
)

// StateVersion is the version of the State document.
const StateVersion = 1

// MaxAttainedService bounds a persisted attained service (GPU-seconds):
// far above any real value, and far enough below the largest float64 that
// adding a round's service keeps it finite.
const MaxAttainedService = 1e15

// State is what the controller keeps about one job across rounds and
// persists at StateKey, so that a restarted or newly elected controller
// resumes without refitting from nothing (docs/contracts.md §2).
type State struct {
	Version int `json:"version"`
	// Perf and Grad are the last fitted model (nil before any metrics).
	Perf *PerfParams `json:"perf,omitempty"`
	Grad *GradParams `json:"grad,omitempty"`
	// MetricsIndex is the Consul ModifyIndex of the metrics document the
	// model was fitted to; a document with the same index is not refitted.
	MetricsIndex uint64 `json:"metrics_index"`
	// ProfilePoints is how many configurations the fit used, and
	// MaxProfiled the most GPUs among them (the exploration cap).
	ProfilePoints int `json:"profile_points"`
	MaxProfiled   int `json:"max_profiled"`
	// Decision is the last decision applied to the job's spec.
	Decision *Decision `json:"decision,omitempty"`
	// Allocation is the last allocation applied (node per GPU).
	Allocation []string `json:"allocation,omitempty"`
	// AppliedIndex is the JobModifyIndex the controller's last write
	// produced; any other index means someone else changed the job.
	AppliedIndex uint64 `json:"applied_index"`
	// AppliedAt is when that write happened.
	AppliedAt time.Time `json:"applied_at"`
	// Restarts counts reallocations after the first; AttainedService is
	// GPU-seconds held.
	Restarts        int     `json:"restarts"`
	AttainedService float64 `json:"attained_service"`
	// Typed holds, on a cluster whose GPU types the controller tells
	// apart, the throughput model fitted to the profile entries of each
	// GPU type the job has run on (types it has not run on are predicted
	// every round, not stored). Perf is then the fit of the job's current
	// type. At most MaxStateTypes entries.
	Typed map[string]TypedPerf `json:"typed,omitempty"`
	// GPUType is the GPU type of the last applied allocation ("" if none
	// or untyped).
	GPUType string `json:"gpu_type,omitempty"`
	// MetricsError is the reason the latest metrics document was rejected.
	MetricsError string `json:"metrics_error,omitempty"`
	// Pending is a write to the job that was decided and recorded but not
	// yet confirmed: the controller saves it before it rewrites the job and
	// clears it after. A controller that finds it set (the previous leader
	// died, or a write timed out) looks at the job to tell whether the
	// write happened, and completes or drops the bookkeeping.
	Pending *PendingApply `json:"pending,omitempty"`
	// RestartSamples are the job's last measured restart times in seconds
	// (at most MaxRestartSamples, oldest first, each in [0,
	// MaxRestoreTime]): from the controller's write of an allocation to
	// the job's first training step on it. Their median is the job's
	// restart time (policy.Job.RestartTime).
	RestartSamples []float64 `json:"restart_samples,omitempty"`
	// RestartOpen is true from the write of an allocation until the
	// restart it causes has been measured.
	RestartOpen bool `json:"restart_open,omitempty"`
	// Progress is the metrics document's progress when last read, and
	// RestartProgress its value at the last write of an allocation: a
	// newer document with another progress has made a step since.
	Progress        float64 `json:"progress,omitempty"`
	RestartProgress float64 `json:"restart_progress,omitempty"`
}

// MaxRestartSamples is the most restart-time samples a state keeps.
const MaxRestartSamples = 5

// PerfParams are the fitted throughput model's seven parameters as the
// state stores them; the fields are model.PerfParams's, so the controller
// converts between the two with a plain type conversion.
type PerfParams struct {
	AlphaC float64 `json:"alpha_c"`
	BetaC  float64 `json:"beta_c"`
	AlphaN float64 `json:"alpha_n"`
	BetaN  float64 `json:"beta_n"`
	AlphaR float64 `json:"alpha_r"`
	BetaR  float64 `json:"beta_r"`
	Gamma  float64 `json:"gamma"`
}

// finite reports the parameters that are not finite, named under name.
func (p *PerfParams) finite(name string) error {
	var errs []error
	for _, f := range []struct {
		name  string
		value float64
	}{
		{"alpha_c", p.AlphaC}, {"beta_c", p.BetaC}, {"alpha_n", p.AlphaN}, {"beta_n", p.BetaN},
		{"alpha_r", p.AlphaR}, {"beta_r", p.BetaR}, {"gamma", p.Gamma},
	} {
		if math.IsNaN(f.value) || math.IsInf(f.value, 0) {
			errs = append(errs, fmt.Errorf("%s: %s: must be finite, got %g", name, f.name, f.value))
		}
	}
	return errors.Join(errs...)
}

// GradParams are the gradient statistics as the state stores them (the
// fields of model.GradParams).
type GradParams struct {
	Sqr float64 `json:"sqr"`
	Var float64 `json:"var"`
}

// MaxStateTypes bounds the GPU types a state keeps a fit for.
const MaxStateTypes = 64

// TypedPerf is a job's throughput model fitted on one GPU type.
type TypedPerf struct {
	Perf PerfParams `json:"perf"`
	// ProfilePoints and MaxProfiled are as State's, for this type's
	// entries.
	ProfilePoints int `json:"profile_points"`
	MaxProfiled   int `json:"max_profiled"`
}

// PendingApply is one recorded, unconfirmed rewrite of a job.
type PendingApply struct {
	// Round is the round that decided it.
	Round int64 `json:"round"`
	// ReadIndex is the JobModifyIndex the job was read at; the write was a
	// check-and-set against it.
	ReadIndex uint64 `json:"read_index"`
	// Allocation and Decision are what the write sets.
	Allocation []string  `json:"allocation"`
	Decision   *Decision `json:"decision"`
	// At is when it was recorded.
	At time.Time `json:"at"`
	// Term is the recording leader's term (the pollux_term its write
	// sets); 0 when unknown. A new leader completes the bookkeeping of the
	// write only if the job's version carries this term: a version of
	// another term is not this write. Optional.
	Term uint64 `json:"term,omitempty"`
}

// ParseState decodes a State document, rejecting other versions and the
// values Validate refuses. check, if not nil, adds the reader's own
// checks (the controller's: the model's bounds on its parameters); every
// problem of both is reported at once, check's first.
func ParseState(data []byte, check func(*State) error) (*State, error) {
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("failed to parse state: %w", quote.JSONError(err, 0, len(data)))
	}
	if s.Version != StateVersion {
		return nil, fmt.Errorf("failed to parse state: version %d, want %d", s.Version, StateVersion)
	}
	var errs []error
	if check != nil {
		errs = append(errs, check(&s))
	}
	errs = append(errs, s.Validate())
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("failed to parse state: %w", err)
	}
	return &s, nil
}

// Validate reports every invalid field of a state at once: model
// parameters that are not finite, negative gradient statistics, and
// counters out of range. (The model's own bounds on its parameters are
// the model's to check.)
func (s *State) Validate() error {
	var errs []error
	if p := s.Perf; p != nil {
		errs = append(errs, p.finite("perf"))
	}
	if len(s.Typed) > MaxStateTypes {
		errs = append(errs, fmt.Errorf("typed: at most %d GPU types, got %d", MaxStateTypes, len(s.Typed)))
	}
	for t, tp := range s.Typed {
		if err := ValidGPUType(t); err != nil {
			errs = append(errs, fmt.Errorf("typed: type %q: %w", quote.Cut(t, 40), err))
			continue
		}
		errs = append(errs, tp.Perf.finite("typed."+t+".perf"))
		if tp.ProfilePoints < 0 || tp.MaxProfiled < 0 || tp.MaxProfiled > MaxMetaValue {
			errs = append(errs, fmt.Errorf("typed.%s: profile_points and max_profiled must be in [0, %d], got %d and %d", t, MaxMetaValue, tp.ProfilePoints, tp.MaxProfiled))
		}
	}
	if s.GPUType != "" {
		if err := ValidGPUType(s.GPUType); err != nil {
			errs = append(errs, fmt.Errorf("gpu_type: %w", err))
		}
	}
	if g := s.Grad; g != nil {
		for _, f := range []struct {
			name  string
			value float64
		}{{"sqr", g.Sqr}, {"var", g.Var}} {
			if !(f.value >= 0) || math.IsInf(f.value, 1) {
				errs = append(errs, fmt.Errorf("grad.%s: must be finite and non-negative, got %g", f.name, f.value))
			}
		}
		if math.IsInf(g.Sqr+g.Var, 1) {
			errs = append(errs, fmt.Errorf("grad: sqr + var overflows: %g + %g", g.Sqr, g.Var))
		}
	}
	for _, f := range []struct {
		name  string
		value int
		limit int
	}{
		{"profile_points", s.ProfilePoints, math.MaxInt},
		{"max_profiled", s.MaxProfiled, MaxMetaValue},
		{"restarts", s.Restarts, math.MaxInt},
	} {
		if f.value < 0 || f.value > f.limit {
			errs = append(errs, fmt.Errorf("%s: must be in [0, %d], got %d", f.name, f.limit, f.value))
		}
	}
	if len(s.RestartSamples) > MaxRestartSamples {
		errs = append(errs, fmt.Errorf("restart_samples: at most %d, got %d", MaxRestartSamples, len(s.RestartSamples)))
	}
	for i, x := range s.RestartSamples {
		if !(x >= 0 && x <= MaxRestoreTime) {
			errs = append(errs, fmt.Errorf("restart_samples[%d]: must be in [0, %d], got %g", i, MaxRestoreTime, x))
		}
	}
	for _, f := range []struct {
		name  string
		value float64
	}{{"progress", s.Progress}, {"restart_progress", s.RestartProgress}} {
		if !(f.value >= 0) || math.IsInf(f.value, 1) {
			errs = append(errs, fmt.Errorf("%s: must be finite and non-negative, got %g", f.name, f.value))
		}
	}
	if !(s.AttainedService >= 0 && s.AttainedService <= MaxAttainedService) {
		errs = append(errs, fmt.Errorf("attained_service: must be in [0, %g], got %g", MaxAttainedService, s.AttainedService))
	}
	return errors.Join(errs...)
}
