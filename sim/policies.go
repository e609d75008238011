package sim

import (
	"fmt"
	"sort"
	"strings"

	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/registry"
)

// PolicyNames lists the policies NewPolicy knows.
var PolicyNames = registry.Names()

// NewPolicy returns a fresh policy by name with the artifact's settings;
// seed drives the Pollux genetic algorithm.
func NewPolicy(name string, seed int64) (policy.Policy, error) {
	return registry.New(name, registry.Settings{Pollux: registry.PolluxConfig{Seed: seed}})
}

// NewPolicyFor is NewPolicy for a simulator with the given rules: under
// RulesSia the sia policy takes its restart penalties from the Sia
// artifact's table (sia.py, get_restart_penalty), as the artifact's policy
// does whatever delays its simulator charges, and caps a configuration's
// nodes per type at SiaMaxPhysicalNodes.
func NewPolicyFor(name string, seed int64, rules Rules) (policy.Policy, error) {
	return NewPolicyWith(name, registry.PolluxConfig{Seed: seed}, rules)
}

// NewPolicyWith is NewPolicyFor with the Pollux policy's settings given.
func NewPolicyWith(name string, pc registry.PolluxConfig, rules Rules) (policy.Policy, error) {
	return registry.New(name, SettingsFor(pc, rules))
}

// SettingsFor returns the policies' settings NewPolicyWith makes a
// policy with (what a round's record names).
func SettingsFor(pc registry.PolluxConfig, rules Rules) registry.Settings {
	s := registry.Settings{Pollux: pc}
	if rules == RulesSia {
		s.Sia.ArtifactRestartPenalties = true
		// The artifact's configurations span at most the nodes each type
		// was profiled on (sia.py, populate_valid_configs).
		var limits []string
		for t, n := range SiaMaxPhysicalNodes {
			limits = append(limits, fmt.Sprintf("%s=%d", t, n))
		}
		sort.Strings(limits)
		s.Sia.MaxNodesByType = strings.Join(limits, ",")
	}
	return s
}
