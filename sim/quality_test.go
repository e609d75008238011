package sim_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/pollux-nomad/pollux/data"
	"github.com/pollux-nomad/pollux/results"
	"github.com/pollux-nomad/pollux/workload"
)

// generated draws a 160-job workload from the Philly trace like the
// artifact's workload generator, at another window and seed than the eight
// published workloads.
func generated(t *testing.T, startHours float64, seed uint64) ([]workload.Job, string) {
	t.Helper()
	return generatedN(t, 160, startHours, 8, seed)
}

// generatedN draws n jobs from the Philly trace over a window of
// durationHours hours starting at startHours.
func generatedN(t *testing.T, n int, startHours, durationHours float64, seed uint64) ([]workload.Job, string) {
	t.Helper()
	f, err := data.Traces().Open("philly.csv")
	if err != nil {
		t.Fatalf("open philly.csv: %v", err)
	}
	defer f.Close()
	philly, err := workload.ParsePhilly(f, "philly.csv")
	if err != nil {
		t.Fatalf("parse philly.csv: %v", err)
	}
	a := applications(t)
	configs := func(app string) []workload.Config {
		var out []workload.Config
		cs, err := a[app].Configurations(0.5, 0.8)
		if err != nil {
			t.Errorf("configurations of %s: %v", app, err)
		}
		for _, c := range cs {
			out = append(out, workload.Config{Replicas: c.Replicas, BatchSize: c.BatchSize})
		}
		return out
	}
	jobs, err := workload.Generate(philly, configs, n, startHours, durationHours, seed)
	if err != nil {
		t.Fatalf("generate workload: %v", err)
	}
	return jobs, fmt.Sprintf("philly-start%g-seed%d", startHours, seed)
}

// TestQuality checks Pollux against the published Pollux results on the
// eight artifact workloads and against Tiresias on workloads drawn from the
// Philly trace that the published study did not use.
func TestQuality(t *testing.T) {
	if testing.Short() {
		t.Skip("quality runs 8+ full Pollux simulations; run without -short")
	}
	ref := published(t)
	var mu sync.Mutex
	sums := map[string]results.Summary{}
	type gen struct {
		start float64
		seed  uint64
	}
	gens := []gen{{start: 30, seed: 11}, {start: 100, seed: 12}}
	t.Run("runs", func(t *testing.T) {
		for i := 1; i <= 8; i++ {
			t.Run(fmt.Sprintf("pollux/workload-%d", i), func(t *testing.T) {
				t.Parallel()
				jobs, name := artifactWorkload(t, i)
				s := simulate(t, "pollux", name, jobs)
				mu.Lock()
				sums["pollux/"+name] = s
				mu.Unlock()
			})
		}
		for _, g := range gens {
			for _, p := range []string{"pollux", "tiresias"} {
				t.Run(fmt.Sprintf("%s/philly-%g-%d", p, g.start, g.seed), func(t *testing.T) {
					t.Parallel()
					jobs, name := generated(t, g.start, g.seed)
					s := simulate(t, p, name, jobs)
					mu.Lock()
					sums[p+"/"+name] = s
					mu.Unlock()
				})
			}
		}
	})
	if t.Failed() {
		return
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%-28s %9s %9s %9s %10s %8s %11s %9s\n", "run", "avg s", "publ. s", "p99 s", "makespan s", "rst/job", "min/restart", "opt ms")
	var total float64
	for i := 1; i <= 8; i++ {
		name := fmt.Sprintf("workload-%d", i)
		s := sums["pollux/"+name]
		total += s.AvgJCT
		// Job-minutes between restarts: total JCT over total restarts.
		fmt.Fprintf(&sb, "%-28s %9.1f %9.1f %9.0f %10.0f %8.2f %11.1f %9.1f\n", "pollux/"+name, s.AvgJCT, ref["pollux"][name], s.P99JCT, s.Makespan, s.RestartsPerJob, s.AvgJCT/max(s.RestartsPerJob, 1e-9)/60, s.OptimizeMsMedian)
		if s.Completed != s.Jobs {
			t.Errorf("%s: %d of %d jobs completed", name, s.Completed, s.Jobs)
		}
	}
	mean := total / 8
	fmt.Fprintf(&sb, "%-28s %9.1f %9.1f (%+.1f%%)\n", "pollux/mean-of-8", mean, ref["pollux"]["mean"], 100*(mean-ref["pollux"]["mean"])/ref["pollux"]["mean"])
	if mean > ref["pollux"]["mean"] {
		t.Errorf("Pollux mean average JCT %.1f s is above the published %.1f s", mean, ref["pollux"]["mean"])
	}
	for _, g := range gens {
		name := fmt.Sprintf("philly-start%g-seed%d", g.start, g.seed)
		p, ti := sums["pollux/"+name], sums["tiresias/"+name]
		ratio := p.AvgJCT / ti.AvgJCT
		fmt.Fprintf(&sb, "%-28s %9.1f  tiresias %9.1f  ratio %.3f  p99 %.0f/%.0f  restarts/job %.2f\n", name, p.AvgJCT, ti.AvgJCT, ratio, p.P99JCT, ti.P99JCT, p.RestartsPerJob)
		if ratio > 0.75 {
			t.Errorf("%s: Pollux avg JCT %.1f s is %.2fx Tiresias' %.1f s (want ≤ 0.75x)", name, p.AvgJCT, ratio, ti.AvgJCT)
		}
	}
	t.Log(sb.String())
}
