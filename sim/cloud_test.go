package sim_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/results"
	"github.com/pollux-nomad/pollux/sim"
	"github.com/pollux-nomad/pollux/workload"
)

// burstThenTail: three jobs at once, then a one-GPU job alone.
func burstThenTail() []workload.Job {
	return []workload.Job{
		{Name: "cifar10-0", Time: 0, Application: "cifar10", NumReplicas: 4, BatchSize: 512},
		{Name: "cifar10-1", Time: 0, Application: "cifar10", NumReplicas: 4, BatchSize: 512},
		{Name: "bert-2", Time: 60, Application: "bert", NumReplicas: 4, BatchSize: 48},
		{Name: "ncf-3", Time: 5400, Application: "ncf", NumReplicas: 1, BatchSize: 2048},
	}
}

func runCloud(t *testing.T, policyName string, cfg sim.Config) results.Run {
	t.Helper()
	pol, err := sim.NewPolicy(policyName, 7)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sim.New(cfg, applications(t), burstThenTail(), "burst", pol)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Run(context.Background(), nil)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return r
}

func span(r results.Run) (first, last float64) {
	first, last = math.Inf(1), math.Inf(-1)
	for _, j := range r.Jobs {
		first = math.Min(first, j.Submitted)
		last = math.Max(last, j.Completion)
	}
	return first, last
}

func TestFixedClusterGPUHoursAreItsGPUsTimesTheSpan(t *testing.T) {
	r := runSmall(t, "pollux", sim.Config{Nodes: 2, GPUsPerNode: 4})
	first, last := span(r)
	if want := 8 * (last - first) / 3600; math.Abs(r.GPUHours-want) > 1e-9 {
		t.Errorf("gpu_hours %v, want 8 GPUs x %.0f s = %v", r.GPUHours, last-first, want)
	}
	if s := results.Summarize(r); s.GPUHours != r.GPUHours {
		t.Errorf("summary gpu_hours %v, run %v", s.GPUHours, r.GPUHours)
	}
}

func checkCloudRun(t *testing.T, r results.Run, maxGPUs int, boot time.Duration) {
	t.Helper()
	for _, j := range r.Jobs {
		if !j.Completed {
			t.Errorf("%s did not complete", j.Name)
		}
	}
	grew, shrank := false, false
	prev := 0 // every pool starts at its minimum, 0
	for _, s := range r.Timeline {
		if s.GPUsInUse > s.GPUsUp || s.GPUsUp > maxGPUs {
			t.Errorf("t=%.0f: %d GPUs in use, %d up, at most %d", s.Time, s.GPUsInUse, s.GPUsUp, maxGPUs)
		}
		if s.Time < boot.Seconds()+60 && s.GPUsInUse > 0 {
			t.Errorf("t=%.0f: %d GPUs in use before any node booted (%s)", s.Time, s.GPUsInUse, boot)
		}
		grew = grew || s.GPUsUp > prev
		shrank = shrank || s.GPUsUp < prev
		prev = s.GPUsUp
	}
	if !grew || !shrank {
		t.Errorf("cluster grew %v, shrank %v: want both", grew, shrank)
	}
	first, last := span(r)
	if r.GPUHours <= 0 || r.GPUHours >= float64(maxGPUs)*(last-first)/3600 {
		t.Errorf("gpu_hours %v outside (0, %d GPUs x span)", r.GPUHours, maxGPUs)
	}
	if !r.Autoscaled {
		t.Error("run not marked autoscaled")
	}
}

func TestCloudPolluxGrowsAndShrinks(t *testing.T) {
	boot := 3 * time.Minute
	cfg := sim.Config{GPUsPerNode: 4, Cloud: &sim.Cloud{MinNodes: 0, MaxNodes: 4, Boot: boot, Price: map[string]float64{"": 2}}}
	r := runCloud(t, "pollux", cfg)
	checkCloudRun(t, r, 16, boot)
	if math.Abs(r.Cost-2*r.GPUHours) > 1e-9 {
		t.Errorf("cost %v, want 2 x %v GPU-hours", r.Cost, r.GPUHours)
	}
}

func TestCloudTiresiasQueueGrowsAndShrinks(t *testing.T) {
	boot := 2 * time.Minute
	cfg := sim.Config{GPUsPerNode: 4, Cloud: &sim.Cloud{MinNodes: 0, MaxNodes: 4, Boot: boot, IdleDelay: time.Minute}}
	r := runCloud(t, "tiresias", cfg)
	checkCloudRun(t, r, 16, boot)
	for _, s := range r.Timeline {
		for id, g := range s.JobGPUs {
			want := map[string]int{"cifar10-0": 4, "cifar10-1": 4, "bert-2": 4, "ncf-3": 1}[id]
			if g != 0 && g != want {
				t.Errorf("t=%.0f: %s holds %d GPUs, want its requested %d", s.Time, id, g, want)
			}
		}
	}
}

func TestCloudRejectsBadBounds(t *testing.T) {
	pol, _ := sim.NewPolicy("pollux", 1)
	_, err := sim.New(sim.Config{Cloud: &sim.Cloud{MinNodes: 5, MaxNodes: 2}}, applications(t), smallWorkload(), "small", pol)
	if err == nil {
		t.Fatal("min 5 > max 2 accepted")
	}
}
