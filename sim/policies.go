package sim

import "github.com/pollux-nomad/pollux/policy"

// PolicyNames lists the policies NewPolicy knows.
var PolicyNames = policy.Names()

// NewPolicy returns a fresh policy by name with the artifact's settings;
// seed drives the Pollux genetic algorithm.
func NewPolicy(name string, seed int64) (policy.Policy, error) {
	return policy.New(name, policy.Settings{Pollux: policy.PolluxConfig{Seed: seed}})
}
