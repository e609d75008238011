package sim_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pollux-nomad/pollux/results"
	"github.com/pollux-nomad/pollux/sim"
	"github.com/pollux-nomad/pollux/workload"
)

func smallWorkload() []workload.Job {
	return []workload.Job{
		{Name: "cifar10-0", Time: 0, Application: "cifar10", NumReplicas: 2, BatchSize: 512},
		{Name: "ncf-1", Time: 30, Application: "ncf", NumReplicas: 1, BatchSize: 2048},
		{Name: "bert-2", Time: 100, Application: "bert", NumReplicas: 4, BatchSize: 48},
		{Name: "cifar10-3", Time: 200, Application: "cifar10", NumReplicas: 4, BatchSize: 1024},
	}
}

func runSmall(t *testing.T, policyName string, cfg sim.Config) results.Run {
	t.Helper()
	pol, err := sim.NewPolicy(policyName, 7)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sim.New(cfg, applications(t), smallWorkload(), "small", pol)
	if err != nil {
		t.Fatal(err)
	}
	var rounds int
	r, err := s.Run(context.Background(), func(sim.Progress) { rounds++ })
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if rounds != len(r.Timeline) {
		t.Errorf("progress called %d times for %d rounds", rounds, len(r.Timeline))
	}
	return r
}

func TestSimulatorSmallWorkload(t *testing.T) {
	for _, p := range sim.PolicyNames {
		t.Run(p, func(t *testing.T) {
			cfg := sim.Config{Nodes: 2, GPUsPerNode: 4}
			r := runSmall(t, p, cfg)
			if len(r.Jobs) != 4 {
				t.Fatalf("got %d job results, want 4", len(r.Jobs))
			}
			for _, j := range r.Jobs {
				if !j.Completed {
					t.Errorf("%s did not complete", j.Name)
					continue
				}
				// A job cannot finish before it was submitted plus one
				// round and the restart delay.
				if j.JCT() < 30 {
					t.Errorf("%s: JCT %.0f s is shorter than the restart delay", j.Name, j.JCT())
				}
				if j.GPUSeconds <= 0 {
					t.Errorf("%s: no GPU time attained", j.Name)
				}
			}
			for _, s := range r.Timeline {
				if s.GPUsInUse > 8 {
					t.Errorf("t=%.0f: %d GPUs in use on an 8-GPU cluster", s.Time, s.GPUsInUse)
				}
			}
			if p == "tiresias" {
				for _, s := range r.Timeline {
					for id, g := range s.JobGPUs {
						want := map[string]int{"cifar10-0": 2, "ncf-1": 1, "bert-2": 4, "cifar10-3": 4}[id]
						if g != want {
							t.Errorf("t=%.0f: tiresias gave %s %d GPUs, want its fixed %d", s.Time, id, g, want)
						}
					}
				}
			}
		})
	}
}

func TestSimulatorDeterministic(t *testing.T) {
	cfg := sim.Config{Nodes: 2, GPUsPerNode: 4}
	a := runSmall(t, "pollux", cfg)
	b := runSmall(t, "pollux", cfg)
	if diff := cmp.Diff(a.Jobs, b.Jobs); diff != "" {
		t.Errorf("two runs with one seed differ (-first +second):\n%s", diff)
	}
}

// TestExploreStart checks the first allocation of a job with no profile:
// up to ExploreStart GPUs (default 4), one GPU with ExploreStart 1 or
// under Sia's rules.
func TestExploreStart(t *testing.T) {
	first := func(r results.Run, job string) int {
		for _, s := range r.Timeline {
			if g := s.JobGPUs[job]; g > 0 {
				return g
			}
		}
		return 0
	}
	if g := first(runSmall(t, "pollux", sim.Config{Nodes: 2, GPUsPerNode: 4}), "cifar10-0"); g < 2 || g > 4 {
		t.Errorf("default: cifar10-0, alone on 8 GPUs, started on %d GPUs, want 2 to 4", g)
	}
	if g := first(runSmall(t, "pollux", sim.Config{Nodes: 2, GPUsPerNode: 4, ExploreStart: 1}), "cifar10-0"); g != 1 {
		t.Errorf("ExploreStart 1: cifar10-0 started on %d GPUs, want 1", g)
	}
}

func TestSimulatorRejectsBadInput(t *testing.T) {
	tests := map[string]struct {
		cfg  sim.Config
		jobs []workload.Job
	}{
		"unknown application": {jobs: []workload.Job{{Name: "x", Application: "gpt", NumReplicas: 1, BatchSize: 1}}},
		"negative nodes":      {cfg: sim.Config{Nodes: -1}, jobs: smallWorkload()},
		"interference of 1":   {cfg: sim.Config{Interference: 1}, jobs: smallWorkload()},
		"negative start":      {cfg: sim.Config{ExploreStart: -1}, jobs: smallWorkload()},
		"zero batch tiresias": {jobs: []workload.Job{{Name: "x", Application: "bert", NumReplicas: 1}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pol, err := sim.NewPolicy("tiresias", 1)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sim.New(tc.cfg, applications(t), tc.jobs, "bad", pol); err == nil {
				t.Error("New accepted bad input")
			}
		})
	}
}

func TestSimulatorHonoursContext(t *testing.T) {
	pol, err := sim.NewPolicy("tiresias", 1)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sim.New(sim.Config{Interval: time.Minute}, applications(t), smallWorkload(), "small", pol)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Run(ctx, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Run on a cancelled context returned %v, want context.Canceled", err)
	}
}

func TestLoadWorkloadErrors(t *testing.T) {
	a := applications(t)
	if _, _, err := sim.LoadWorkload("/nonexistent/w.csv", a); !errors.Is(err, sim.ErrBadInput) {
		t.Errorf("missing file: got %v, want ErrBadInput", err)
	}
	jobs, name, err := sim.LoadWorkload("workload-3", a)
	if err != nil || name != "workload-3" || len(jobs) != 160 {
		t.Errorf("embedded workload-3: %d jobs, name %q, err %v", len(jobs), name, err)
	}
}

// TestJobRestartDelay: a job's own restart delay replaces the flat one
// for that job only: a long delay of one job lengthens its completion
// time, not the others'.
func TestJobRestartDelay(t *testing.T) {
	flat := runSmall(t, "tiresias", sim.Config{Interval: time.Minute})
	slow := runSmall(t, "tiresias", sim.Config{Interval: time.Minute, JobRestartDelay: map[string]time.Duration{"ncf-1": 10 * time.Minute}})
	jct := func(r results.Run, name string) float64 {
		for _, j := range r.Jobs {
			if j.Name == name {
				return j.JCT()
			}
		}
		t.Fatalf("no job %s", name)
		return 0
	}
	if d := jct(slow, "ncf-1") - jct(flat, "ncf-1"); d < 9*60 {
		t.Errorf("ncf-1 JCT %v with a 10-minute restart, %v with 30 s: want at least 9 minutes more", jct(slow, "ncf-1"), jct(flat, "ncf-1"))
	}
	if jct(slow, "cifar10-0") != jct(flat, "cifar10-0") {
		t.Errorf("cifar10-0 changed with another job's delay: %v vs %v", jct(slow, "cifar10-0"), jct(flat, "cifar10-0"))
	}
	started := runSmall(t, "tiresias", sim.Config{Interval: time.Minute, JobStartDelay: map[string]time.Duration{"ncf-1": 10 * time.Minute}})
	if d := jct(started, "ncf-1") - jct(flat, "ncf-1"); d < 9*60 || jct(started, "cifar10-0") != jct(flat, "cifar10-0") {
		t.Errorf("a 10-minute start delay of ncf-1: JCT %v against %v, cifar10-0 %v against %v", jct(started, "ncf-1"), jct(flat, "ncf-1"), jct(started, "cifar10-0"), jct(flat, "cifar10-0"))
	}
	pol, err := sim.NewPolicy("tiresias", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sim.New(sim.Config{JobRestartDelay: map[string]time.Duration{"x": -time.Second}}, applications(t), smallWorkload(), "bad", pol); err == nil {
		t.Error("a negative job restart delay was accepted")
	}
}
