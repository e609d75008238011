package sim_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/apps"
	"github.com/pollux-nomad/pollux/results"
	"github.com/pollux-nomad/pollux/sim"
	"github.com/pollux-nomad/pollux/workload"
)

// scaleRow is one cluster size of the scale table: a workload drawn from
// the Philly trace (its window and seed differ from those the policy's
// defaults were chosen on) replayed on nodes nodes of 4 GPUs.
type scaleRow struct {
	nodes, jobs  int
	start, hours float64
	seed         uint64
}

// TestScaleQuality compares Pollux with Tiresias on large, lightly loaded
// clusters (make scale-quality): 256 x 4 GPUs with 640 jobs and 1024 x 4
// GPUs with 2000 jobs, each drawn over 8 hours, and checks that Pollux
// restarts a job at most 3 times on average, that its average JCT is at
// most 0.75x Tiresias' and its median JCT no worse. SCALE_RESTART sets
// every job's restart delay (default the simulator's 30 s) to show the
// policy with expensive restarts (then only the table is printed);
// SCALE_ROWS=256 or 1024 runs one size; SCALE_SIA=1 adds the Sia
// artifact's 2048-GPU scale workload (sia-scale-32x on its 3-type cluster
// times 32, Sia's rules) for pollux, sia and tiresias. The simulations
// run one at a time: about 6 minutes for 256 x 4 and 18 for 1024 x 4
// on a shared 2-core machine.
func TestScaleQuality(t *testing.T) {
	if os.Getenv("POLLUX_SCALE_QUALITY") == "" {
		t.Skip("set POLLUX_SCALE_QUALITY=1 (make scale-quality): simulations of 1024 and 4096 GPUs, over an hour")
	}
	var delay time.Duration
	if s := os.Getenv("SCALE_RESTART"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("SCALE_RESTART=%q: want a positive duration such as 120s", s)
		}
		delay = d
	}
	rows := []scaleRow{
		{nodes: 256, jobs: 640, start: 40, hours: 8, seed: 31},
		{nodes: 1024, jobs: 2000, start: 70, hours: 8, seed: 32},
	}
	if s := os.Getenv("SCALE_ROWS"); s != "" {
		var keep []scaleRow
		for _, r := range rows {
			if strings.Contains(","+s+",", fmt.Sprintf(",%d,", r.nodes)) {
				keep = append(keep, r)
			}
		}
		rows = keep
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%-36s %-9s %8s %8s %8s %8s %8s %9s %9s %7s\n", "workload", "policy", "rst/job", "p50 s", "avg s", "p99 s", "GPU-h/j", "opt ms", "opt p95", "wall s")
	line := func(name, pol string, s results.Summary) {
		fmt.Fprintf(&sb, "%-36s %-9s %8.2f %8.0f %8.0f %8.0f %8.2f %9.1f %9.1f %7.0f\n", name, pol, s.RestartsPerJob, s.P50JCT, s.AvgJCT, s.P99JCT, s.GPUHoursPerJob, s.OptimizeMsMedian, s.OptimizeMsP95, s.WallSeconds)
	}
	for _, r := range rows {
		jobs, _ := generatedN(t, r.jobs, r.start, r.hours, r.seed)
		name := fmt.Sprintf("%dx4-%djobs-start%g-seed%d", r.nodes, r.jobs, r.start, r.seed)
		cfg := sim.Config{Nodes: r.nodes, RestartDelay: delay}
		sums := map[string]results.Summary{}
		for _, p := range []string{"tiresias", "pollux"} {
			sums[p] = scaleRun(t, p, name, cfg, jobs, sim.RulesPollux)
			line(name, p, sums[p])
		}
		if delay != 0 {
			continue
		}
		po, ti := sums["pollux"], sums["tiresias"]
		if po.RestartsPerJob > 3 {
			t.Errorf("%s: Pollux restarts %.2f times per job, want at most 3", name, po.RestartsPerJob)
		}
		if po.AvgJCT > 0.75*ti.AvgJCT {
			t.Errorf("%s: Pollux average JCT %.0f s is %.3fx Tiresias' %.0f s, want at most 0.75x", name, po.AvgJCT, po.AvgJCT/ti.AvgJCT, ti.AvgJCT)
		}
		if po.P50JCT > ti.P50JCT {
			t.Errorf("%s: Pollux median JCT %.0f s is above Tiresias' %.0f s", name, po.P50JCT, ti.P50JCT)
		}
	}
	if os.Getenv("SCALE_SIA") != "" {
		typed, err := sim.LoadTypedApplications(sim.RulesSia)
		if err != nil {
			t.Fatal(err)
		}
		jobs, name, err := sim.LoadWorkload("sia-scale-32x", typed)
		if err != nil {
			t.Fatal(err)
		}
		cluster, err := sim.ParseCluster("t4:192x4,rtx2080ti:96x8,a100:64x8")
		if err != nil {
			t.Fatal(err)
		}
		cfg := sim.Config{Cluster: cluster, Rules: sim.RulesSia, RestartDelay: delay}
		for _, p := range []string{"tiresias", "sia", "pollux"} {
			line(name, p, scaleRunApps(t, p, name, cfg, jobs, sim.RulesSia, typed))
		}
	}
	t.Logf("%s", sb.String())
}

// scaleRun simulates one policy on one workload with the Pollux
// artifact's applications.
func scaleRun(t *testing.T, pol, name string, cfg sim.Config, jobs []workload.Job, rules sim.Rules) results.Summary {
	t.Helper()
	return scaleRunApps(t, pol, name, cfg, jobs, rules, applications(t))
}

func scaleRunApps(t *testing.T, pol, name string, cfg sim.Config, jobs []workload.Job, rules sim.Rules, appsOf map[string]*apps.Application) results.Summary {
	t.Helper()
	p, err := sim.NewPolicyFor(pol, 1, rules)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sim.New(cfg, appsOf, jobs, name, p)
	if err != nil {
		t.Fatalf("%s/%s: %v", name, pol, err)
	}
	r, err := s.Run(context.Background(), nil)
	if err != nil {
		t.Fatalf("%s/%s: %v", name, pol, err)
	}
	sum := results.Summarize(r)
	if sum.Completed != sum.Jobs {
		t.Errorf("%s/%s: %d of %d jobs completed", name, pol, sum.Completed, sum.Jobs)
	}
	t.Logf("%s/%s: reallocations %+v", name, pol, s.Reallocations())
	return sum
}
