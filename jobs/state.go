package jobs

import (
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
		if s.Perf == nil {
			return nil
		}
		if err := model.PerfParams(*s.Perf).Validate(); err != nil {
			return fmt.Errorf("perf: %w", err)
		}
		return nil
	})
}
