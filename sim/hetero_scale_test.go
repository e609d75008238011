package sim_test

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/pollux-nomad/pollux/results"
	"github.com/pollux-nomad/pollux/sim"
)

// TestHeteroScaleHeldOut compares the type-aware pollux with sia under
// -rules sia on mixed fleets of other sizes than Sia's scale series, on
// workloads nobody tuned on: K times the 3-type cluster
// (t4:6x4,rtx2080ti:3x8,a100:2x8) with 160·K jobs drawn from the Philly
// trace (workload.Generate) in an 8-hour window, so that the load per GPU
// is that of the 64-GPU workloads, at windows and seeds used nowhere
// else: K = 4 (256 GPUs), 12 (768) and 32 (2,048). Pollux must finish the
// average job sooner than sia with fewer restarts per job on each. It
// runs only with POLLUX_HETERO_SCALE=1 (`make hetero-scale`): about 15
// minutes on two cores.
func TestHeteroScaleHeldOut(t *testing.T) {
	if os.Getenv("POLLUX_HETERO_SCALE") != "1" {
		t.Skip("set POLLUX_HETERO_SCALE=1 (make hetero-scale): full simulations at up to 2,048 GPUs, about 15 minutes")
	}
	applications, err := sim.LoadTypedApplications(sim.RulesSia)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		k     int
		start float64
		seed  uint64
	}{{4, 30, 51}, {12, 55, 52}, {32, 80, 53}}
	variants := []heteroVariant{{label: "pollux", name: "pollux"}, {label: "sia", name: "sia"}}
	sums := make([][]results.Summary, len(cases))
	errs := make([][]error, len(cases))
	var wg sync.WaitGroup
	slots := make(chan struct{}, max(runtime.NumCPU(), 1))
	names := make([]string, len(cases))
	for i, c := range cases {
		jobs, name := generatedN(t, 160*c.k, c.start, 8, c.seed)
		names[i] = name
		groups, err := sim.ParseCluster(fmt.Sprintf("t4:%dx4,rtx2080ti:%dx8,a100:%dx8", 6*c.k, 3*c.k, 2*c.k))
		if err != nil {
			t.Fatal(err)
		}
		sums[i] = make([]results.Summary, len(variants))
		errs[i] = make([]error, len(variants))
		for v := range variants {
			wg.Add(1)
			go func() {
				defer wg.Done()
				slots <- struct{}{}
				defer func() { <-slots }()
				sums[i][v], errs[i][v] = heteroRun(groups, applications, name, jobs, variants[v])
			}()
		}
	}
	wg.Wait()
	var b strings.Builder
	fmt.Fprintf(&b, "%-5s %-26s %-7s %9s %9s %8s %10s %9s %7s\n", "GPUs", "workload", "policy", "avg JCT s", "p99 JCT s", "rst/job", "makespan s", "GPU-h/job", "ms/rnd")
	for i, c := range cases {
		for v, vr := range variants {
			if errs[i][v] != nil {
				t.Fatalf("%s %s: %v", names[i], vr.label, errs[i][v])
			}
			s := sums[i][v]
			if s.Completed != s.Jobs {
				t.Errorf("%s %s: %d of %d jobs completed", names[i], vr.label, s.Completed, s.Jobs)
			}
			fmt.Fprintf(&b, "%-5d %-26s %-7s %9.0f %9.0f %8.2f %10.0f %9.2f %7.1f\n", 64*c.k, names[i], vr.label,
				s.AvgJCT, s.P99JCT, s.RestartsPerJob, s.Makespan, s.GPUHoursPerJob, s.OptimizeMsMedian)
		}
		p, s := sums[i][0], sums[i][1]
		fmt.Fprintf(&b, "      pollux / sia: %.3fx avg JCT\n", p.AvgJCT/s.AvgJCT)
		if !(p.AvgJCT < s.AvgJCT) {
			t.Errorf("%d GPUs (%s): pollux's average JCT %.0f s, sia's %.0f s: want pollux's lower", 64*c.k, names[i], p.AvgJCT, s.AvgJCT)
		}
		if p.RestartsPerJob > s.RestartsPerJob {
			t.Errorf("%d GPUs (%s): pollux restarts a job %.2f times, sia %.2f: want at most sia's", 64*c.k, names[i], p.RestartsPerJob, s.RestartsPerJob)
		}
	}
	t.Log("\n" + b.String())
}
