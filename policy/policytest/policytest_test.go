package policytest_test

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/policytest"
)

func TestBuilders(t *testing.T) {
	got := policytest.Job("a").GPUs(1, 8).Goodput(policytest.Linear()).Submitted(5).Age(10).Attained(3).Restarts(2).Build()
	want := policy.Job{ID: "a", MinReplicas: 1, MaxReplicas: 8, Goodput: policytest.Linear(), Submitted: 5, Age: 10, AttainedService: 3, NumRestarts: 2}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Job builder (-want +got):\n%s", diff)
	}
	nodes := policytest.Nodes(3, 4)
	wantNodes := []policy.Node{{ID: "n00", GPUs: 4}, {ID: "n01", GPUs: 4}, {ID: "n02", GPUs: 4}}
	if diff := cmp.Diff(wantNodes, nodes); diff != "" {
		t.Errorf("Nodes (-want +got):\n%s", diff)
	}
	if got := policytest.Nodes(101, 1)[100].ID; got != "n100" {
		t.Errorf("Nodes(101, 1)[100].ID = %q, want n100", got)
	}
	if diff := cmp.Diff([]string{"x", "x", "y"}, policytest.Alloc("x", 2, "y", 1)); diff != "" {
		t.Errorf("Alloc (-want +got):\n%s", diff)
	}
}

func TestSynthetic(t *testing.T) {
	tests := map[string]struct {
		model       policytest.Synthetic
		nodes, gpus int
		want        float64
	}{
		"linear 1 GPU":              {model: policytest.Linear(), nodes: 1, gpus: 1, want: 1},
		"linear 8 GPUs, 2 nodes":    {model: policytest.Linear(), nodes: 2, gpus: 8, want: 8},
		"no GPUs":                   {model: policytest.Typical(), nodes: 0, gpus: 0, want: 0},
		"comm and node penalty":     {model: policytest.Synthetic{Serial: 0.5, Parallel: 1, Comm: 0.25, NodeComm: 0.25}, nodes: 3, gpus: 4, want: 1 / (0.5 + 0.25 + 0.25 + 0.5)},
		"flat gains almost nothing": {model: policytest.Flat(), nodes: 1, gpus: 4, want: 1 / (1 + 0.0025 + 0.05)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.model.Goodput(tc.nodes, tc.gpus); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("Goodput(%d, %d) = %v, want %v (tolerance 1e-12)", tc.nodes, tc.gpus, got, tc.want)
			}
		})
	}
	c := &policytest.Counting{Model: policytest.Linear()}
	c.Goodput(1, 1)
	c.Goodput(1, 2)
	if c.Calls != 2 {
		t.Errorf("Counting.Calls = %d, want 2", c.Calls)
	}
}

func TestCheck(t *testing.T) {
	in := policy.Input{
		Jobs: policytest.Jobs(
			policytest.Job("a").GPUs(1, 4),
			policytest.Job("b").GPUs(2, 4),
			policytest.Job("c").GPUs(0, 8),
		),
		Nodes: policytest.Nodes(3, 2),
	}
	tests := map[string]struct {
		out  policy.Allocations
		opts policytest.CheckOptions
		want []string // substrings; none means valid
	}{
		"valid":              {out: policy.Allocations{"a": {"n00"}, "b": {"n01", "n01"}, "c": {}}, opts: policytest.CheckOptions{NoInterference: true, NodeOrder: true}},
		"unknown job":        {out: policy.Allocations{"zz": {"n00"}}, want: []string{`job "zz" is not in the input`}},
		"unknown node":       {out: policy.Allocations{"a": {"n09"}}, want: []string{`unknown node "n09"`}},
		"below min":          {out: policy.Allocations{"b": {"n00"}}, want: []string{`job "b" holds 1 GPUs, outside [2, 4]`}},
		"above max":          {out: policy.Allocations{"a": {"n00", "n00", "n01", "n01", "n02"}}, want: []string{`job "a" holds 5 GPUs, outside [1, 4]`}},
		"over capacity":      {out: policy.Allocations{"a": {"n00", "n00"}, "c": {"n00"}}, want: []string{`node "n00" holds 3 GPUs, capacity 2`}},
		"order ignored":      {out: policy.Allocations{"a": {"n01", "n00"}}},
		"out of order":       {out: policy.Allocations{"a": {"n01", "n00"}}, opts: policytest.CheckOptions{NodeOrder: true}, want: []string{"not in input order"}},
		"split run":          {out: policy.Allocations{"c": {"n00", "n01", "n00"}}, opts: policytest.CheckOptions{NodeOrder: true}, want: []string{"not in input order"}},
		"interference":       {out: policy.Allocations{"a": {"n00", "n01"}, "c": {"n01", "n02"}}, opts: policytest.CheckOptions{NoInterference: true}, want: []string{`node "n01" is shared by distributed jobs [a c]`}},
		"interference off":   {out: policy.Allocations{"a": {"n00", "n01"}, "c": {"n01", "n02"}}},
		"all errors at once": {out: policy.Allocations{"zz": {"n00"}, "b": {"n00"}}, want: []string{`"zz"`, `job "b" holds 1`}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := policytest.Check(in, tc.out, tc.opts)
			if len(tc.want) == 0 {
				if err != nil {
					t.Errorf("Check = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Check = nil, want errors %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Check = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

// TestCheckTypedMaxReplicas: a job above its cap on one GPU type is
// reported; the same GPUs of a type without a cap are not.
func TestCheckTypedMaxReplicas(t *testing.T) {
	pools := []policytest.TypedPool{{Type: "t4", Nodes: 1, GPUs: 4, Speed: 1}, {Type: "a100", Nodes: 1, GPUs: 4, Speed: 3}}
	in := policy.Input{
		Nodes: policytest.TypedNodes(pools...),
		Jobs:  []policy.Job{{ID: "a", MaxReplicas: 4, TypedMaxReplicas: map[string]int{"a100": 2}}},
	}
	if err := policytest.Check(in, policy.Allocations{"a": {"t4-00", "t4-00", "t4-00"}}, policytest.CheckOptions{}); err != nil {
		t.Errorf("3 GPUs of the uncapped t4: %v", err)
	}
	if err := policytest.Check(in, policy.Allocations{"a": {"a100-00", "a100-00"}}, policytest.CheckOptions{}); err != nil {
		t.Errorf("2 GPUs of a100, capped at 2: %v", err)
	}
	err := policytest.Check(in, policy.Allocations{"a": {"a100-00", "a100-00", "a100-00"}}, policytest.CheckOptions{})
	if err == nil || !strings.Contains(err.Error(), `job "a" holds 3 GPUs of type "a100", at most 2`) {
		t.Errorf("3 GPUs of a100, capped at 2: %v", err)
	}
}

func TestRandomInputsAreValid(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		in := policytest.RandomInput(rng, policytest.RandomOptions{})
		if err := policytest.Check(in, in.Current, policytest.CheckOptions{}); err != nil {
			t.Fatalf("input %d: current allocation invalid: %v", i, err)
		}
	}
	for _, size := range []struct{ nodes, jobs int }{{16, 45}, {64, 180}} {
		in := policytest.ClusterInput(1, size.nodes, 4, size.jobs)
		if len(in.Jobs) != size.jobs || len(in.Nodes) != size.nodes {
			t.Errorf("ClusterInput: %d jobs on %d nodes, want %d on %d", len(in.Jobs), len(in.Nodes), size.jobs, size.nodes)
		}
		if err := policytest.Check(in, in.Current, policytest.CheckOptions{NodeOrder: true}); err != nil {
			t.Errorf("ClusterInput(%d nodes): current allocation invalid: %v", size.nodes, err)
		}
		if diff := cmp.Diff(in, policytest.ClusterInput(1, size.nodes, 4, size.jobs)); diff != "" {
			t.Errorf("ClusterInput is not deterministic (-first +second):\n%s", diff)
		}
	}
}
