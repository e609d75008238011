package baseline_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/baseline"
	"github.com/pollux-nomad/pollux/policy/policytest"
)

// fakeOracle has step time Serial + Parallel/k and a fixed remaining work.
type fakeOracle struct {
	Serial, Parallel, Remaining float64
}

func (o fakeOracle) RemainingIterations() float64 { return o.Remaining }
func (o fakeOracle) StepTime(k int) float64       { return o.Serial + o.Parallel/float64(k) }

func fixedJob(id string, gpus int) policy.Job {
	return policy.Job{ID: id, MaxReplicas: gpus}
}

func TestTiresiasQueuesAndPreemption(t *testing.T) {
	nodes := policytest.Nodes(2, 4)
	ids := []string{nodes[0].ID, nodes[1].ID}
	jobs := []policy.Job{fixedJob("a", 4), fixedJob("b", 4), fixedJob("c", 2)}
	// Demote after 240 GPU-seconds: job a (4 GPUs) after one minute.
	pol, err := baseline.NewTiresias(baseline.TiresiasConfig{QueueThreshold: 240})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	in := policy.Input{Now: 60, Jobs: jobs, Nodes: nodes, Current: policy.Allocations{}}
	got, err := pol.Optimize(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	// Round 1: a and b fill the cluster (a on the first node with the most
	// free GPUs), c waits.
	want := policy.Allocations{
		"a": {ids[0], ids[0], ids[0], ids[0]},
		"b": {ids[1], ids[1], ids[1], ids[1]},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("round 1 (-want +got):\n%s", diff)
	}
	// Round 2, one minute later: a and b both reached 240 GPU-seconds and
	// were demoted in order (a, then b), so Q0 = [c], Q1 = [a, b]: c and a
	// run, b (4 GPUs) no longer fits in the 2 GPUs left and is preempted.
	in = policy.Input{Now: 120, Jobs: jobs, Nodes: nodes, Current: got, Round: 2, Carry: pol.Carry()}
	got, err = pol.Optimize(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	want = policy.Allocations{
		"a": {ids[0], ids[0], ids[0], ids[0]},
		"c": {ids[1], ids[1]},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("round 2 (-want +got):\n%s", diff)
	}
	// Round 3: job a finished; b runs again next to c.
	in = policy.Input{Now: 180, Jobs: jobs[1:], Nodes: nodes, Current: got, Round: 3, Carry: pol.Carry()}
	got, err = pol.Optimize(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if len(got["b"]) != 4 || len(got["c"]) != 2 || len(got) != 2 {
		t.Fatalf("round 3: got %v, want b on 4 GPUs and c kept on 2", got)
	}
	if diff := cmp.Diff([]string{ids[1], ids[1]}, got["c"]); diff != "" {
		t.Errorf("round 3: c was moved (-want +got):\n%s", diff)
	}
}

func TestTiresiasSmallJobsPassBlockedLargeOne(t *testing.T) {
	pol, err := baseline.NewTiresias(baseline.TiresiasConfig{})
	if err != nil {
		t.Fatal(err)
	}
	in := policy.Input{
		Now:   60,
		Jobs:  []policy.Job{fixedJob("big", 16), fixedJob("small", 2)},
		Nodes: policytest.Nodes(2, 4),
	}
	got, err := pol.Optimize(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if len(got["big"]) != 0 || len(got["small"]) != 2 {
		t.Errorf("got %v: want big (16 GPUs on an 8-GPU cluster) pending and small running", got)
	}
}

func TestOptimusGivesGPUsToTheBiggestGain(t *testing.T) {
	jobs := []policy.Job{
		{ID: "scales", MaxReplicas: 8, Oracle: fakeOracle{Serial: 0.1, Parallel: 1, Remaining: 1000}},
		{ID: "flat", MaxReplicas: 8, Oracle: fakeOracle{Serial: 1, Parallel: 0.01, Remaining: 1000}},
	}
	got, err := baseline.NewOptimus().Optimize(context.Background(), policy.Input{
		Now: 60, Jobs: jobs, Nodes: policytest.Nodes(2, 4),
	})
	if err != nil {
		t.Fatal(err)
	}
	// Marginal gains: scales (1/k − 1/(k+1))·1000 beats flat's
	// 0.01·(1/k − 1/(k+1))·1000 for every k, so scales takes the rest.
	if len(got["scales"]) != 7 || len(got["flat"]) != 1 {
		t.Errorf("got scales %d GPUs, flat %d; want 7 and 1", len(got["scales"]), len(got["flat"]))
	}
}

func TestOptimusNeedsOracle(t *testing.T) {
	_, err := baseline.NewOptimus().Optimize(context.Background(), policy.Input{
		Jobs: []policy.Job{{ID: "x", MaxReplicas: 1}}, Nodes: policytest.Nodes(1, 4),
	})
	if err == nil {
		t.Error("Optimize accepted a job without an oracle")
	}
}

// TestBaselinesRespectInvariants: on random clusters, jobs and (also
// messy) current allocations, both baselines only return allocations
// within node capacities and job bounds, round after round.
func TestBaselinesRespectInvariants(t *testing.T) {
	for _, name := range []string{"tiresias", "optimus"} {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(42, 7))
			for trial := range 200 {
				in := policytest.RandomInput(rng, policytest.RandomOptions{Messy: trial%2 == 1})
				for i := range in.Jobs {
					in.Jobs[i].Oracle = fakeOracle{Serial: rng.Float64(), Parallel: rng.Float64(), Remaining: 1 + rng.Float64()*1000}
					if name == "tiresias" {
						in.Jobs[i].MinReplicas = 0
					}
				}
				var pol policy.Policy
				if name == "tiresias" {
					pol, _ = baseline.NewTiresias(baseline.TiresiasConfig{QueueThreshold: 1000})
				} else {
					pol = baseline.NewOptimus()
				}
				for round := range 4 {
					out, err := pol.Optimize(context.Background(), policytest.Warm(pol, in, int64(round+1)))
					if err != nil {
						t.Fatalf("trial %d round %d: %v", trial, round, err)
					}
					if err := policytest.Check(in, out, policytest.CheckOptions{}); err != nil {
						t.Fatalf("trial %d round %d: %v", trial, round, err)
					}
					in.Current = out
					in.Now += 60
				}
			}
		})
	}
}
