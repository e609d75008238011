package sim

import (
	"fmt"

	"github.com/pollux-nomad/pollux/policy"
)

// PolicyNames lists the policies NewPolicy knows.
var PolicyNames = []string{"pollux", "tiresias", "optimus"}

// NewPolicy returns a fresh policy by name with the artifact's settings;
// seed drives the Pollux genetic algorithm.
func NewPolicy(name string, seed int64) (policy.Policy, error) {
	switch name {
	case "pollux":
		return policy.NewPollux(policy.PolluxConfig{Seed: seed})
	case "tiresias":
		return policy.NewTiresias(policy.TiresiasConfig{})
	case "optimus":
		return policy.NewOptimus(), nil
	default:
		return nil, fmt.Errorf("unknown policy %q (want one of pollux, tiresias, optimus)", name)
	}
}
