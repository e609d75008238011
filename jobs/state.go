package jobs

import (
	"errors"
	"fmt"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/model"
)

// State is the controller's persisted knowledge of one job (the contract's
// state document).
type State = contract.State

// PendingApply is one recorded, unconfirmed rewrite of a job.
type PendingApply = contract.PendingApply

// stateVersion is the version of the persisted State document.
const stateVersion = contract.StateVersion

// maxAttainedService bounds a persisted attained service (GPU-seconds).
const maxAttainedService = contract.MaxAttainedService

// parseState decodes a persisted state as the contract does and also
// refuses a fitted model outside the model's own bounds, which the
// goodput model and the policy would otherwise trust.
func parseState(data []byte) (*State, error) {
	return contract.ParseState(data, func(s *State) error {
		var errs []error
		if s.Perf != nil {
			if err := model.PerfParams(*s.Perf).Validate(); err != nil {
				errs = append(errs, fmt.Errorf("perf: %w", err))
			}
		}
		for t, tp := range s.Typed {
			if err := model.PerfParams(tp.Perf).Validate(); err != nil {
				errs = append(errs, fmt.Errorf("typed.%s.perf: %w", t, err))
			}
		}
		return errors.Join(errs...)
	})
}
