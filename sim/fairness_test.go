package sim_test

import (
	"context"
	"testing"

	"github.com/pollux-nomad/pollux/results"
	"github.com/pollux-nomad/pollux/sim"
	"github.com/pollux-nomad/pollux/workload"
)

// TestFinishTimeFairness: every completed job of every policy gets a
// finish-time fairness ρ, and the summary's worst and share above 1 are
// those of the jobs. A job alone on the cluster (N = 1) under Pollux
// finishes close to its time alone on the whole cluster (ρ near 1: the
// round's wait, the first restart and the exploration of its first
// allocations), and the fixed-size Tiresias, which runs it on the 2 GPUs
// it asked for, is much further from it.
func TestFinishTimeFairness(t *testing.T) {
	for _, p := range sim.PolicyNames {
		r := runSmall(t, p, sim.Config{Nodes: 2, GPUsPerNode: 4})
		worst, above, n := 0.0, 0, 0
		for _, j := range r.Jobs {
			if !j.Completed {
				continue
			}
			if !(j.FTF > 0) {
				t.Errorf("%s: job %s has no finish-time fairness", p, j.Name)
			}
			n++
			worst = max(worst, j.FTF)
			if j.FTF > 1 {
				above++
			}
		}
		s := results.Summarize(r)
		if s.FTFWorst != worst || s.FTFAbove1 != float64(above)/float64(n) {
			t.Errorf("%s: summary ftf_worst %v, share above 1 %v; the jobs give %v and %v", p, s.FTFWorst, s.FTFAbove1, worst, float64(above)/float64(n))
		}
	}
	alone := map[string]float64{}
	for _, p := range []string{"pollux", "tiresias"} {
		pol, err := sim.NewPolicy(p, 7)
		if err != nil {
			t.Fatal(err)
		}
		jobs := []workload.Job{{Name: "cifar10-0", Time: 0, Application: "cifar10", NumReplicas: 2, BatchSize: 128}}
		s, err := sim.New(sim.Config{Nodes: 2, GPUsPerNode: 4}, applications(t), jobs, "alone", pol)
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.Run(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		alone[p] = r.Jobs[0].FTF
		t.Logf("%s: a job alone: JCT %.0f s, ρ %.3f", p, r.Jobs[0].JCT(), r.Jobs[0].FTF)
	}
	if a := alone["pollux"]; a < 0.9 || a > 1.5 {
		t.Errorf("pollux: a job alone on the cluster has ρ %.3f, want within [0.9, 1.5]", a)
	}
	if alone["tiresias"] < 1.5*alone["pollux"] {
		t.Errorf("tiresias' ρ %.3f for the job alone on 2 of 8 GPUs, pollux's %.3f: want tiresias' well above", alone["tiresias"], alone["pollux"])
	}
}
