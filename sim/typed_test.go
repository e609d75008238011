package sim_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pollux-nomad/pollux/apps"
	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/results"
	"github.com/pollux-nomad/pollux/sim"
	"github.com/pollux-nomad/pollux/workload"
)

func TestParseCluster(t *testing.T) {
	got, err := sim.ParseCluster(" t4:6x4, rtx2080ti:3x8,a100:2x8")
	if err != nil {
		t.Fatal(err)
	}
	want := []sim.NodeGroup{{Type: "t4", Nodes: 6, GPUsPerNode: 4}, {Type: "rtx2080ti", Nodes: 3, GPUsPerNode: 8}, {Type: "a100", Nodes: 2, GPUsPerNode: 8}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseCluster (-want +got):\n%s", diff)
	}
	if s := sim.FormatCluster(got); s != sim.DefaultHeteroCluster {
		t.Errorf("FormatCluster = %q, want %q", s, sim.DefaultHeteroCluster)
	}
	bad := map[string]string{
		"":                  "empty",
		"t4":                `part 1 "t4": missing ':'`,
		"t4:6x4,a100":       `part 2 "a100": missing ':'`,
		"t4:6x4,t4:2x4":     `GPU type "t4" given twice`,
		"T4:6x4":            "lower-case",
		":6x4":              "empty GPU type",
		"t4:6":              "missing 'x'",
		"t4:0x4":            `nodes "0"`,
		"t4:6x-1":           `GPUs per node "-1"`,
		"t4:6x10":           "at most 9",
		"t4:6x4,a100:2xfoo": `part 2 "a100:2xfoo": GPUs per node "foo"`,
	}
	for spec, msg := range bad {
		_, err := sim.ParseCluster(spec)
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseCluster(%q) = %v, want an error containing %q", spec, err, msg)
		}
	}
	if _, err := sim.ParseRules("gavel"); err == nil {
		t.Error(`ParseRules("gavel") accepted`)
	}
}

func typedApps(t testing.TB, r sim.Rules) map[string]*apps.Application {
	t.Helper()
	a, err := sim.LoadTypedApplications(r)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func runSim(t *testing.T, cfg sim.Config, a map[string]*apps.Application, jobs []workload.Job, pol policy.Policy) results.Run {
	t.Helper()
	s, err := sim.New(cfg, a, jobs, "test", pol)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Run(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestTypedT4ReplaysUntyped: a typed cluster of T4s only, under the Pollux
// rules, replays today's untyped simulation job by job (the Sia artifact's
// aws profiles are the Pollux artifact's).
func TestTypedT4ReplaysUntyped(t *testing.T) {
	jobs, _, err := sim.LoadWorkload("workload-1", applications(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tiresias", "optimus"} {
		p1, _ := sim.NewPolicy(name, 1)
		p2, _ := sim.NewPolicy(name, 1)
		untyped := runSim(t, sim.Config{}, applications(t), jobs, p1)
		typed := runSim(t, sim.Config{Cluster: []sim.NodeGroup{{Type: "t4", Nodes: 16, GPUsPerNode: 4}}}, typedApps(t, sim.RulesPollux), jobs, p2)
		if diff := cmp.Diff(untyped.Jobs, typed.Jobs); diff != "" {
			t.Errorf("%s: typed t4:16x4 differs from untyped (-untyped +typed):\n%s", name, diff)
		}
		if typed.TypeGPUs["t4"] != 64 || untyped.TypeGPUs != nil {
			t.Errorf("%s: TypeGPUs typed %v untyped %v", name, typed.TypeGPUs, untyped.TypeGPUs)
		}
	}
}

// recorder wraps a policy and keeps what it was shown.
type recorder struct {
	policy.Policy
	mu     sync.Mutex
	inputs []policy.Input
}

func (r *recorder) Optimize(ctx context.Context, in policy.Input) (policy.Allocations, error) {
	r.mu.Lock()
	r.inputs = append(r.inputs, in)
	r.mu.Unlock()
	return r.Policy.Optimize(ctx, in)
}

// TestTypedClusterShortRun runs the first 12 jobs of sia-philly-1 on the
// 3-type cluster with pollux and tiresias under both rules: every job
// completes, no type is over-committed, every job holds GPUs of one type
// only, the nodes carry their types, and Pollux is shown fitted models on
// the types a job ran on and bootstrapped ones elsewhere.
func TestTypedClusterShortRun(t *testing.T) {
	groups, err := sim.ParseCluster(sim.DefaultHeteroCluster)
	if err != nil {
		t.Fatal(err)
	}
	for _, rules := range []sim.Rules{sim.RulesPollux, sim.RulesSia} {
		a := typedApps(t, rules)
		jobs, _, err := sim.LoadWorkload("sia-philly-1", a)
		if err != nil {
			t.Fatal(err)
		}
		jobs = jobs[:12]
		for _, name := range []string{"pollux", "tiresias"} {
			t.Run(string(rules)+"/"+name, func(t *testing.T) {
				inner, err := sim.NewPolicy(name, 1)
				if err != nil {
					t.Fatal(err)
				}
				rec := &recorder{Policy: inner}
				r := runSim(t, sim.Config{Cluster: groups, Rules: rules}, a, jobs, rec)
				sum := results.Summarize(r)
				t.Logf("avg JCT %.0f s, restarts/job %.2f, GPU-h/job %.2f, utilisation %v", sum.AvgJCT, sum.RestartsPerJob, sum.GPUHoursPerJob, sum.GPUUtilizationByType)
				if sum.Completed != len(jobs) {
					t.Errorf("%d of %d jobs completed", sum.Completed, len(jobs))
				}
				if len(sum.GPUUtilizationByType) != 3 || sum.GPUHoursPerJob <= 0 {
					t.Errorf("summary: by type %v, GPU-h/job %v", sum.GPUUtilizationByType, sum.GPUHoursPerJob)
				}
				for _, s := range r.Timeline {
					total := 0
					for ty, used := range s.TypeGPUsInUse {
						total += used
						if used > r.TypeGPUs[ty] {
							t.Fatalf("t=%.0f: %d GPUs of %s in use, %d exist", s.Time, used, ty, r.TypeGPUs[ty])
						}
					}
					if total != s.GPUsInUse {
						t.Fatalf("t=%.0f: per-type GPUs %v do not add up to %d: a job spans types", s.Time, s.TypeGPUsInUse, s.GPUsInUse)
					}
				}
				in := rec.inputs[len(rec.inputs)/2]
				if got := policy.GPUTypes(in.Nodes); !cmp.Equal(got, []string{"a100", "rtx2080ti", "t4"}) {
					t.Errorf("node types %v", got)
				}
				// The policy's input: Current holds each job on one type.
				typeOf := map[string]string{}
				for _, n := range in.Nodes {
					typeOf[n.ID] = n.Type
				}
				for id, alloc := range in.Current {
					for _, n := range alloc {
						if typeOf[n] != typeOf[alloc[0]] {
							t.Errorf("job %s holds %v across types", id, alloc)
						}
					}
				}
				// Jobs without a model carry their one-GPU probes per type
				// (Job.ProbeSpeed) for pollux; no other policy gets them, nor
				// a job that has a model.
				probed := 0
				for _, in := range rec.inputs {
					for _, j := range in.Jobs {
						if j.ProbeSpeed == nil {
							continue
						}
						probed++
						if name != "pollux" || j.TypedGoodput != nil || j.Goodput != nil {
							t.Fatalf("job %s (%s): probes %v with models %v", j.ID, name, j.ProbeSpeed, j.TypedGoodput)
						}
						if len(j.ProbeSpeed) != 3 || !(j.ProbeSpeed["a100"] > j.ProbeSpeed["t4"]) {
							t.Fatalf("job %s: probes %v, want 3 types with the A100 faster than the T4", j.ID, j.ProbeSpeed)
						}
					}
				}
				// Job.Held: how long a job holding GPUs has held them
				// (positive, at most its age, one round more each round its
				// allocation stays); 0 for a job holding none.
				prevHeld := map[string]float64{}
				prevAlloc := policy.Allocations{}
				for _, in := range rec.inputs {
					for _, j := range in.Jobs {
						alloc, holds := in.Current[j.ID]
						switch {
						case !holds && j.Held != 0:
							t.Fatalf("t=%.0f: job %s holds no GPUs but Held = %v", in.Now, j.ID, j.Held)
						case holds && !(j.Held > 0 && j.Held <= j.Age):
							t.Fatalf("t=%.0f: job %s of age %.0f s holds %v, Held = %v", in.Now, j.ID, j.Age, alloc, j.Held)
						case holds && policy.Equal(alloc, prevAlloc[j.ID]) && prevHeld[j.ID] > 0 && j.Held != prevHeld[j.ID]+60:
							t.Fatalf("t=%.0f: job %s kept %v, Held %v after %v", in.Now, j.ID, alloc, j.Held, prevHeld[j.ID])
						}
						prevHeld[j.ID], prevAlloc[j.ID] = j.Held, alloc
					}
				}
				if name != "pollux" {
					return
				}
				if probed == 0 {
					t.Error("no job without a model carried its probes")
				}
				fitted, boot := 0, 0
				for _, in := range rec.inputs {
					for _, j := range in.Jobs {
						if j.TypedGoodput == nil {
							continue
						}
						if len(j.TypedGoodput) != 3 {
							t.Fatalf("job %s: typed models for %d types, want 3", j.ID, len(j.TypedGoodput))
						}
						for ty, m := range j.TypedGoodput {
							if b, ok := m.(interface{ Bootstrapped() bool }); ok && b.Bootstrapped() {
								boot++
							} else {
								fitted++
							}
							if g := m.Goodput(1, 1); !(g > 0) {
								t.Fatalf("job %s on %s: goodput at 1 GPU %v", j.ID, ty, g)
							}
						}
					}
				}
				if fitted == 0 || boot == 0 {
					t.Errorf("fitted models %d, bootstrapped %d: want both", fitted, boot)
				}
			})
		}
	}
}

// scripted is a fixed-GPU policy ("tiresias" traits) that gives job "a"
// the allocation of the current step of its script, the last one after.
type scripted struct {
	steps  [][]string
	rounds int
}

func (s *scripted) Name() string        { return "tiresias" }
func (s *scripted) Carry() policy.Carry { return nil }

func (s *scripted) Optimize(_ context.Context, in policy.Input) (policy.Allocations, error) {
	a := s.steps[min(s.rounds, len(s.steps)-1)]
	s.rounds++
	return policy.Allocations{"a": a}, nil
}

// TestSiaRulesRestarts: under the Sia rules a move to other nodes of the
// same shape and type is no restart, a move to another type is; under the
// Pollux rules both are. The Sia rules also charge cifar10's 50 s restart
// and its 1.8 calibration slowdown.
func TestSiaRulesRestarts(t *testing.T) {
	groups, err := sim.ParseCluster("t4:2x4,a100:1x8")
	if err != nil {
		t.Fatal(err)
	}
	jobs := []workload.Job{{Name: "a", Application: "cifar10", NumReplicas: 2, BatchSize: 256}}
	steps := [][]string{{"t4-0", "t4-0"}, {"t4-1", "t4-1"}, {"a100-0", "a100-0"}}
	run := func(r sim.Rules) results.JobResult {
		return runSim(t, sim.Config{Cluster: groups, Rules: r}, typedApps(t, r), jobs, &scripted{steps: steps}).Jobs[0]
	}
	sia, pollux := run(sim.RulesSia), run(sim.RulesPollux)
	if sia.Restarts != 1 || pollux.Restarts != 2 {
		t.Errorf("restarts: sia %d (want 1), pollux %d (want 2)", sia.Restarts, pollux.Restarts)
	}
	if !(sia.JCT() > 1.5*pollux.JCT()) {
		t.Errorf("JCT under Sia's rules %.0f s is not clearly slower than under Pollux's %.0f s (calibration 1.8)", sia.JCT(), pollux.JCT())
	}
}

func TestTypedClusterRejectsBadInput(t *testing.T) {
	a := typedApps(t, sim.RulesPollux)
	jobs := []workload.Job{{Name: "a", Application: "cifar10", NumReplicas: 2, BatchSize: 256}}
	for name, tc := range map[string]struct {
		cfg sim.Config
		msg string
	}{
		"unprofiled type": {sim.Config{Cluster: []sim.NodeGroup{{Type: "h100", Nodes: 1, GPUsPerNode: 8}}}, `no profile for GPU type "h100"`},
		"empty type":      {sim.Config{Cluster: []sim.NodeGroup{{Nodes: 1, GPUsPerNode: 8}}}, "empty GPU type"},
		"twice":           {sim.Config{Cluster: []sim.NodeGroup{{Type: "t4", Nodes: 1, GPUsPerNode: 4}, {Type: "t4", Nodes: 1, GPUsPerNode: 4}}}, "given twice"},
		"ten GPUs":        {sim.Config{Cluster: []sim.NodeGroup{{Type: "t4", Nodes: 1, GPUsPerNode: 10}}}, "1 to 9 GPUs"},
		"bad rules":       {sim.Config{Rules: "gavel"}, "unknown rules"},
	} {
		pol, _ := sim.NewPolicy("tiresias", 1)
		_, err := sim.New(tc.cfg, a, jobs, "bad", pol)
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: New = %v, want an error containing %q", name, err, tc.msg)
		}
	}
}

// typeSpy records, per job and GPU type, the most GPUs a policy gave the
// job, and counts the jobs' inputs that carried a per-type cap
// (Job.TypedMaxReplicas).
type typeSpy struct {
	policy.Policy
	held   map[string]map[string]int
	capped int
}

func (s *typeSpy) Optimize(ctx context.Context, in policy.Input) (policy.Allocations, error) {
	out, err := s.Policy.Optimize(ctx, in)
	typeOf := map[string]string{}
	for _, n := range in.Nodes {
		typeOf[n.ID] = n.Type
	}
	for _, j := range in.Jobs {
		if len(j.TypedMaxReplicas) > 0 {
			s.capped++
		}
		count := map[string]int{}
		for _, n := range out[j.ID] {
			count[typeOf[n]]++
		}
		for t, k := range count {
			if s.held[j.ID] == nil {
				s.held[j.ID] = map[string]int{}
			}
			s.held[j.ID][t] = max(s.held[j.ID][t], k)
		}
	}
	return out, err
}

// TestTypedWithinMeasuredGPUs: on a typed cluster with more GPUs of a type
// than its profiles were measured on (four a100 nodes, 32 GPUs; the Sia
// artifact's a100 profiles end at 16), pollux under Sia's rules gives no
// job more a100s than measured, and the simulation, which has no
// throughput beyond, runs to the end. The jobs' first allocations may have
// up to 32 GPUs (ExploreStart), and a job without a model takes as many as
// it gets.
func TestTypedWithinMeasuredGPUs(t *testing.T) {
	a := typedApps(t, sim.RulesSia)
	cluster, err := sim.ParseCluster("t4:2x4,a100:4x8")
	if err != nil {
		t.Fatal(err)
	}
	var jobs []workload.Job
	for i := range 3 {
		jobs = append(jobs, workload.Job{Name: fmt.Sprintf("cifar10-%d", i), Time: float64(600 * i), Application: "cifar10", NumReplicas: 4, BatchSize: 4096})
	}
	pol, err := sim.NewPolicyFor("pollux", 1, sim.RulesSia)
	if err != nil {
		t.Fatal(err)
	}
	spy := &typeSpy{Policy: pol, held: map[string]map[string]int{}}
	r := runSim(t, sim.Config{Cluster: cluster, Rules: sim.RulesSia, ExploreStart: 32}, a, jobs, spy)
	if s := results.Summarize(r); s.Completed != len(jobs) {
		t.Fatalf("%d of %d jobs completed", s.Completed, len(jobs))
	}
	if spy.capped == 0 {
		t.Error("no job's input capped its a100s below its MaxReplicas: the test cannot tell")
	}
	most := 0
	for id, byType := range spy.held {
		for typ, k := range byType {
			if m := a["cifar10"].MaxReplicasOn(typ); k > m {
				t.Errorf("%s held %d GPUs of %s, measured up to %d", id, k, typ, m)
			}
		}
		most = max(most, byType["a100"])
	}
	if most != 16 {
		t.Errorf("most a100s any job held: %d, want 16 (the measured limit: the jobs want more)", most)
	}
}
