package jobs

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/pollux-nomad/pollux/model"

	"github.com/pollux-nomad/pollux/contract/quote"
)

// stateVersion is the version of the persisted State document.
const stateVersion = 1

// State is what the controller keeps about one job across rounds and
// persists to <prefix>jobs/<namespace>/<job-id>/state, so that a restarted
// or newly elected controller resumes without refitting from nothing.
type State struct {
	Version int `json:"version"`
	// Perf and Grad are the last fitted model (nil before any metrics).
	Perf *model.PerfParams `json:"perf,omitempty"`
	Grad *model.GradParams `json:"grad,omitempty"`
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
	// MetricsError is the reason the latest metrics document was rejected.
	MetricsError string `json:"metrics_error,omitempty"`
	// Pending is a write to the job that was decided and recorded but not
	// yet confirmed: the controller saves it before it rewrites the job and
	// clears it after. A controller that finds it set (the previous leader
	// died, or a write timed out) looks at the job to tell whether the
	// write happened, and completes or drops the bookkeeping.
	Pending *PendingApply `json:"pending,omitempty"`
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
}

// parseState decodes a persisted state, rejecting other versions and
// models with invalid parameters.
func parseState(data []byte) (*State, error) {
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("failed to parse state: %w", quote.JSONError(err, 0, len(data)))
	}
	if s.Version != stateVersion {
		return nil, fmt.Errorf("failed to parse state: version %d, want %d", s.Version, stateVersion)
	}
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("failed to parse state: %w", err)
	}
	return &s, nil
}

// maxAttainedService bounds a persisted attained service (GPU-seconds):
// far above any real value, and far enough below the largest float64
// that adding a round's service keeps it finite.
const maxAttainedService = 1e15

// validate reports every invalid field of a decoded state: the model
// parameters (which the goodput model and the policy would trust) and the
// counters.
func (s *State) validate() error {
	var errs []error
	if s.Perf != nil {
		if err := s.Perf.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("perf: %w", err))
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
		{"max_profiled", s.MaxProfiled, maxMetaValue},
		{"restarts", s.Restarts, math.MaxInt},
	} {
		if f.value < 0 || f.value > f.limit {
			errs = append(errs, fmt.Errorf("%s: must be in [0, %d], got %d", f.name, f.limit, f.value))
		}
	}
	if !(s.AttainedService >= 0 && s.AttainedService <= maxAttainedService) {
		errs = append(errs, fmt.Errorf("attained_service: must be in [0, %g], got %g", maxAttainedService, s.AttainedService))
	}
	return errors.Join(errs...)
}
