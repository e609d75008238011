package sim

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/registry"
)

func TestOneTypeEach(t *testing.T) {
	s := &Simulator{types: []string{"t4", "a100"}, nodeIdx: map[string]int{}}
	for i, n := range []policy.Node{{ID: "t4-0", Type: "t4"}, {ID: "t4-1", Type: "t4"}, {ID: "a100-0", Type: "a100"}} {
		s.nodes = append(s.nodes, n)
		s.nodeIdx[n.ID] = i
	}
	in := policy.Allocations{
		"same":  {"t4-0", "t4-1"},
		"major": {"a100-0", "t4-0", "t4-0", "t4-1"},
		"tie":   {"a100-0", "t4-1"},
	}
	want := policy.Allocations{
		"same":  {"t4-0", "t4-1"},
		"major": {"t4-0", "t4-0", "t4-1"},
		"tie":   {"a100-0"},
	}
	if diff := cmp.Diff(want, s.oneTypeEach(in)); diff != "" {
		t.Errorf("oneTypeEach (-want +got):\n%s", diff)
	}
	if in["major"][0] != "a100-0" {
		t.Error("oneTypeEach modified its input")
	}
}

func TestSiaPlacement(t *testing.T) {
	tests := []struct {
		typ  string
		in   []int
		want []int
	}{
		{"a100", []int{8, 8}, []int{8, 8}},
		{"a100", []int{8, 8, 4}, []int{10, 10}},
		{"rtx2080ti", []int{8, 8, 8, 3}, []int{9, 9, 9}},
		{"rtx2080ti", []int{2, 2, 2, 2, 1}, []int{3, 3, 3}},
		{"t4", []int{4, 4}, []int{4, 4}},
		{"h100", []int{1, 1, 1, 1, 1}, []int{1, 1, 1, 1, 1}},
	}
	for _, tc := range tests {
		if got := siaPlacement(tc.typ, tc.in); !cmp.Equal(got, tc.want) {
			t.Errorf("siaPlacement(%s, %v) = %v, want %v", tc.typ, tc.in, got, tc.want)
		}
	}
}

// TestExploreStartDefaults: a job with no profile may start on 4 GPUs
// under the Pollux rules; under Sia's on the policy's own first
// allocation (pollux 4, sia 1 as its simulator); a set value holds.
func TestExploreStartDefaults(t *testing.T) {
	tests := []struct {
		rules  Rules
		policy string
		set    int
		want   int
		typed  bool
	}{
		{RulesPollux, "pollux", 0, 4, false},
		{RulesPollux, "sia", 0, 4, false},
		{RulesSia, "pollux", 0, 4, false},
		{RulesSia, "sia", 0, 1, false},
		{RulesSia, "tiresias", 0, 1, false},
		{RulesSia, "sia", 4, 4, false},
		{RulesSia, "pollux", 1, 1, false},
		// Several GPU types: pollux's TypedStartReplicas.
		{RulesSia, "pollux", 0, 16, true},
		{RulesSia, "sia", 0, 1, true},
		{RulesSia, "pollux", 4, 4, true},
	}
	for _, tc := range tests {
		pol, err := registry.New(tc.policy, registry.Settings{})
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{Rules: tc.rules, ExploreStart: tc.set}
		if tc.rules == RulesSia {
			cfg.Cluster = []NodeGroup{{Type: "t4", Nodes: 2, GPUsPerNode: 4}}
			if tc.typed {
				cfg.Cluster = append(cfg.Cluster, NodeGroup{Type: "a100", Nodes: 1, GPUsPerNode: 8})
			}
		}
		apps, err := LoadTypedApplications(tc.rules)
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(cfg, apps, nil, "none", pol)
		if err != nil {
			t.Fatalf("%s rules, %s: %v", tc.rules, tc.policy, err)
		}
		if s.cfg.ExploreStart != tc.want {
			t.Errorf("%s rules, %s, set %d, typed %v: ExploreStart %d, want %d", tc.rules, tc.policy, tc.set, tc.typed, s.cfg.ExploreStart, tc.want)
		}
	}
}
