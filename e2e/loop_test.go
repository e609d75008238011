package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/demo"
	"github.com/pollux-nomad/pollux/workload"
)

// TestClosedLoopSmall: three jobs of workload 1 as
// emulated trainers at 200x speed, driven by the controller on the real
// cluster: every job finishes, and the controller reallocated jobs while
// they ran, changing their batch size, without any starting over.
func TestClosedLoopSmall(t *testing.T) {
	for _, pol := range []string{"pollux", "tiresias", "optimus"} {
		t.Run(pol, func(t *testing.T) { closedLoop(t, pol) })
	}
}

func closedLoop(t *testing.T, pol string) {
	e := newEnv(t)
	jobsAll := e.workload1(t)
	slice := workload.First(jobsAll, 3)
	for i := range slice {
		slice[i].NumReplicas = min(slice[i].NumReplicas, 8) // the test cluster has 8 GPUs
	}
	run, err := demo.Run(context.Background(), demo.Config{
		Jobs: slice, Workload: "workload-1[:3]", Apps: appsMap, Speedup: 200, Binary: polluxBinary(t),
		Device: e.device, Nomad: e.nomad, Consul: e.consul, Logger: e.log, Timeout: 5 * time.Minute, Policy: pol,
	})
	if err != nil {
		t.Fatal(err)
	}
	if run.Policy != pol {
		t.Errorf("run by %q, want %q", run.Policy, pol)
	}
	if pol != "pollux" {
		// The baselines keep the trace's batch size.
		for i, j := range run.Jobs {
			if j.FinalBatchSize != 0 && j.FinalBatchSize < slice[i].BatchSize {
				t.Errorf("%s: batch %d, want the trace's %d", j.Name, j.FinalBatchSize, slice[i].BatchSize)
			}
		}
		for _, j := range run.Jobs {
			t.Logf("%s: JCT %.0f s, restarts %d, final batch %d", j.Name, j.JCT(), j.Restarts, j.FinalBatchSize)
			if !j.Completed || j.JCT() <= 0 {
				t.Errorf("%s did not complete: %+v", j.Name, j)
			}
		}
		return
	}
	restarted := 0
	for _, j := range run.Jobs {
		t.Logf("%s: JCT %.0f s, restarts %d, final batch %d", j.Name, j.JCT(), j.Restarts, j.FinalBatchSize)
		if !j.Completed || j.JCT() <= 0 {
			t.Errorf("%s did not complete: %+v", j.Name, j)
		}
		if j.Restarts > 0 && j.FinalBatchSize > 0 {
			restarted++
		}
	}
	if restarted == 0 {
		t.Error("no job was reallocated while it ran")
	}
}
