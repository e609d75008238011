package pollux_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/pollux-nomad/pollux/policy"
	pt "github.com/pollux-nomad/pollux/policy/policytest"
	"github.com/pollux-nomad/pollux/policy/pollux"
)

// TestPolluxTypedOneTypePerJob: on the Sia cluster with random jobs, every
// allocation of the type-aware Pollux stays on one GPU type and passes the
// generic checks, with and without the Sia-style knobs.
func TestPolluxTypedOneTypePerJob(t *testing.T) {
	for _, cfg := range []pollux.Config{{Seed: 3}, {Seed: 3, WholeNodes: true, GrowthLimit: 2}} {
		in := pt.TypedClusterInput(7, pt.SiaCluster(1), 40)
		p, err := pollux.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		typeOf := map[string]string{}
		capOf := map[string]int{}
		for _, n := range in.Nodes {
			typeOf[n.ID], capOf[n.ID] = n.Type, n.GPUs
		}
		out, err := p.Optimize(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		if err := pt.Check(in, out, pt.CheckOptions{NoInterference: true, NodeOrder: true}); err != nil {
			t.Fatal(err)
		}
		held := map[string]int{}
		for id, a := range in.Current {
			held[id] = len(a)
		}
		for id, alloc := range out {
			for _, n := range alloc[1:] {
				if typeOf[n] != typeOf[alloc[0]] {
					t.Fatalf("%+v: job %s on two types: %v", cfg, id, alloc)
				}
			}
			if cfg.GrowthLimit > 0 && held[id] > 0 && len(alloc) > 2*held[id] {
				t.Errorf("%+v: job %s grew from %d to %d GPUs", cfg, id, held[id], len(alloc))
			}
			if cfg.WholeNodes && policy.NumNodes(alloc) > 1 {
				for _, k := range policy.Placement(alloc) {
					if k != capOf[alloc[0]] {
						t.Errorf("%+v: job %s on part of a node while spanning several: %v", cfg, id, alloc)
					}
				}
			}
		}
	}
}

// TestPolluxTypedPrefersFastType: one job alone, linear on every type, is
// placed on the fastest type (a100).
func TestPolluxTypedPrefersFastType(t *testing.T) {
	pools := pt.SiaCluster(1)
	in := policy.Input{Nodes: pt.TypedNodes(pools...), Jobs: []policy.Job{
		{ID: "a", MaxReplicas: 8, Age: 600, TypedGoodput: pt.Typed(pt.Linear(), pools...)},
	}}
	out := optimizeOnce(t, pollux.Config{Seed: 1}, in)
	if a := out["a"]; len(a) != 8 || a[0][:4] != "a100" {
		t.Fatalf("allocation %v, want 8 GPUs of a100", a)
	}
}

// TestPolluxTypedProbeSpeed: a job that has no model yet is placed by its
// one-GPU probes (Job.ProbeSpeed) where it has them: on the a100 when the
// probes say the a100 is faster, on the t4 when they say the t4 is, even
// where the jobs with models find the a100 fastest; without probes it
// follows those jobs (the cluster's typeSpeed).
func TestPolluxTypedProbeSpeed(t *testing.T) {
	pools := []pt.TypedPool{{Type: "t4", Nodes: 1, GPUs: 4, Speed: 1}, {Type: "a100", Nodes: 1, GPUs: 4, Speed: 3}}
	for _, tc := range []struct {
		name  string
		probe map[string]float64
		want  string
	}{
		{"no probes", nil, "a100"},
		{"a100 faster", map[string]float64{"t4": 1, "a100": 4}, "a100"},
		{"t4 faster", map[string]float64{"t4": 4, "a100": 1}, "t4"},
	} {
		in := policy.Input{Now: 1e4, Nodes: pt.TypedNodes(pools...), Current: policy.Allocations{}, Jobs: []policy.Job{
			// A job with models, too small to want more than one GPU.
			{ID: "modelled", MaxReplicas: 1, Age: 600, TypedGoodput: pt.Typed(pt.Linear(), pools...)},
			{ID: "new", MaxReplicas: 3, Age: 10, ProbeSpeed: tc.probe},
		}}
		out := optimizeOnce(t, pollux.Config{Seed: 1}, in)
		if a := out["new"]; len(a) != 3 || a[0][:len(tc.want)] != tc.want {
			t.Errorf("%s: new job got %v, want 3 GPUs of %s", tc.name, a, tc.want)
		}
	}
}

// TestPolluxTypedDefaults: left zero, FairnessP and RestartHysteresis take
// the typed defaults (TypedFairnessP, TypedRestartHysteresis)
// on a cluster of several GPU types and the one-type defaults elsewhere;
// an operator's explicit values hold on both.
func TestPolluxTypedDefaults(t *testing.T) {
	decide := func(cfg pollux.Config, in policy.Input) string { return decideOnce(t, cfg, in) }
	typed := pt.TypedClusterInput(5, pt.SiaCluster(1), 40)
	one := pt.ClusterInput(5, 16, 4, 40)
	zero := pollux.Config{Seed: 2}
	typedDefaults := pollux.Config{Seed: 2, FairnessP: pollux.TypedFairnessP, RestartHysteresis: pollux.TypedRestartHysteresis}
	oneDefaults := pollux.Config{Seed: 2, FairnessP: pollux.DefaultFairnessP, RestartHysteresis: pollux.DefaultRestartHysteresis}
	if a, b := decide(zero, typed), decide(typedDefaults, typed); a != b {
		t.Errorf("typed cluster, zero config:\n%s\nwant the typed defaults':\n%s", a, b)
	}
	if a, b := decide(zero, typed), decide(oneDefaults, typed); a == b {
		t.Errorf("typed cluster: the one-type defaults decide the same (%s): the test cannot tell them apart", a)
	}
	if a, b := decide(zero, one), decide(oneDefaults, one); a != b {
		t.Errorf("one-type cluster, zero config:\n%s\nwant the one-type defaults':\n%s", a, b)
	}
}

// TestPolluxTypedAgeWeights: two pending jobs want the one a100 node; the
// old one gains a little more there. With every job weighing 1
// (AgeWeightScale < 0) the fitness gives it the a100s; with the typed
// default age weights the young job gets them and the old one the t4s.
// On a cluster of one type the zero config keeps every weight at 1.
func TestPolluxTypedAgeWeights(t *testing.T) {
	pools := []pt.TypedPool{{Type: "t4", Nodes: 1, GPUs: 4, Speed: 1}, {Type: "a100", Nodes: 1, GPUs: 4, Speed: 4}}
	models := func(a100 float64) map[string]policy.GoodputModel {
		return map[string]policy.GoodputModel{
			"t4":   pt.Scaled{Model: pt.Linear(), Factor: 1},
			"a100": pt.Scaled{Model: pt.Linear(), Factor: a100},
		}
	}
	in := policy.Input{Now: 20000, Nodes: pt.TypedNodes(pools...), Jobs: []policy.Job{
		{ID: "old", MaxReplicas: 4, Age: 20000, AttainedService: 4e4, TypedGoodput: models(5)},
		{ID: "young", MaxReplicas: 4, Age: 60, TypedGoodput: models(4)},
	}}
	onA100 := func(cfg pollux.Config) string {
		t.Helper()
		out := optimizeOnce(t, cfg, in)
		for id, a := range out {
			if len(a) == 4 && a[0] == "a100-00" {
				return id
			}
		}
		t.Fatalf("%+v: no job holds the a100 node: %v", cfg, out)
		return ""
	}
	if got := onA100(pollux.Config{Seed: 1, AgeWeightScale: -1}); got != "old" {
		t.Errorf("without age weights the a100s go to %q, want old", got)
	}
	if got := onA100(pollux.Config{Seed: 1}); got != "young" {
		t.Errorf("with the typed age weights the a100s go to %q, want young", got)
	}
	one := pt.ClusterInput(5, 16, 4, 40)
	decide := func(cfg pollux.Config) string { return decideOnce(t, cfg, one) }
	if a, b := decide(pollux.Config{Seed: 2}), decide(pollux.Config{Seed: 2, AgeWeightScale: -1}); a != b {
		t.Errorf("one-type cluster: the zero config weighs jobs by age:\n%s\nwant unweighted:\n%s", a, b)
	}
	if a, b := decide(pollux.Config{Seed: 2}), decide(pollux.Config{Seed: 2, AgeWeightScale: 600}); a == b {
		t.Errorf("one-type cluster: explicit age weights decide the same (%s): the test cannot tell them apart", a)
	}
}

// decideOnce returns, as text, the allocation a fresh Pollux policy with
// cfg decides for in.
func decideOnce(t *testing.T, cfg pollux.Config, in policy.Input) string {
	t.Helper()
	return fmt.Sprint(optimizeOnce(t, cfg, in))
}

// optimizeOnce returns the allocation a fresh Pollux policy with cfg
// decides for in.
func optimizeOnce(t *testing.T, cfg pollux.Config, in policy.Input) policy.Allocations {
	t.Helper()
	p, err := pollux.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Optimize(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPolluxFirstHold: a job on its first allocation that scales badly
// and holds the a100s that eight new jobs would rather have keeps them
// while it has held them for less than 1 + FirstHold restart times (the
// typed default 2: 150 s with a 50-s restart), and loses GPUs once it has
// held them longer, after a restart (NumRestarts 1), with the hold off,
// and on a cluster of one type (no hold by default).
func TestPolluxFirstHold(t *testing.T) {
	typed := pt.TypedNodes(pt.TypedPool{Type: "a100", Nodes: 1, GPUs: 4}, pt.TypedPool{Type: "t4", Nodes: 1, GPUs: 4})
	untyped := pt.Nodes(2, 4)
	cases := []struct {
		name     string
		nodes    []policy.Node
		held     float64
		restarts int
		hold     float64
		kept     bool
	}{
		{"typed, held 60 s", typed, 60, 0, 0, true},
		{"typed, held 140 s", typed, 140, 0, 0, true},
		{"typed, held 160 s", typed, 160, 0, 0, false},
		{"typed, held 60 s after a restart", typed, 60, 1, 0, false},
		{"typed, held 60 s, hold off", typed, 60, 0, -1, false},
		{"typed, held 60 s, hold 0.1", typed, 60, 0, 0.1, false},
		{"typed, held unknown", typed, 0, 0, 0, false},
		{"one type, held 60 s", untyped, 60, 0, 0, false},
		{"one type, held 60 s, hold 2", untyped, 60, 0, 2, true},
	}
	for _, c := range cases {
		first := c.nodes[0].ID
		current := policy.Allocations{"first": {first, first, first, first}}
		jobs := []policy.Job{{ID: "first", Age: 1e4, MaxReplicas: 4, NumRestarts: c.restarts, Held: c.held, RestartTime: 50,
			Goodput: pt.Synthetic{Serial: 0.9, Parallel: 0.1}}}
		for i := range 8 {
			jobs = append(jobs, policy.Job{ID: fmt.Sprintf("new-%d", i), Age: 30, MaxReplicas: 4})
		}
		p, err := pollux.New(pollux.Config{Seed: 1, FirstHold: c.hold})
		if err != nil {
			t.Fatal(err)
		}
		in := policy.Input{Now: 1e4, Jobs: jobs, Nodes: c.nodes, Current: current}
		out, err := p.Optimize(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		if err := pt.Check(in, out, pt.CheckOptions{}); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		kept := len(out["first"]) == 4 && out["first"][0] == first && out["first"][3] == first
		if kept != c.kept {
			t.Errorf("%s: the job on its first allocation got %v, want kept %v", c.name, out["first"], c.kept)
		}
	}
}

// TestPolluxTypedMaxReplicas: a job may hold no more GPUs of a type than
// its cap there (Job.TypedMaxReplicas), though its MaxReplicas and its
// model would give it more: alone, linear and fastest on the a100s, it
// gets the cap of them (not the 32 it could use); holding more of them
// than the cap, even while restoring or within its first hold, it is cut
// to the cap; on the t4s, where it has no cap, it may move to the a100s
// only within the cap. Over several rounds, seeds and a busy cluster with
// caps on random jobs, no allocation exceeds a cap.
func TestPolluxTypedMaxReplicas(t *testing.T) {
	pools := []pt.TypedPool{{Type: "t4", Nodes: 2, GPUs: 4, Speed: 1}, {Type: "a100", Nodes: 4, GPUs: 8, Speed: 3.5}}
	nodes := pt.TypedNodes(pools...)
	// onA100 is an allocation of k GPUs on the a100 nodes, filled in order.
	onA100 := func(k int) []string {
		var a []string
		for _, n := range nodes {
			for g := 0; n.Type == "a100" && g < n.GPUs && len(a) < k; g++ {
				a = append(a, n.ID)
			}
		}
		return a
	}
	job := func(cur []string) policy.Job {
		j := policy.Job{ID: "a", MaxReplicas: 32, Age: 3600, NumRestarts: 1, RestartTime: 30,
			TypedMaxReplicas: map[string]int{"a100": 16}, TypedGoodput: pt.Typed(pt.Linear(), pools...)}
		if len(cur) > 0 {
			j.Held = 600
		}
		return j
	}
	for _, tc := range []struct {
		name    string
		current []string
		mod     func(*policy.Job)
	}{
		{"new", nil, nil},
		{"holds 24 a100s", onA100(24), nil},
		{"holds 24 a100s, restoring", onA100(24), func(j *policy.Job) { j.Restoring = true }},
		{"holds 24 a100s, first hold", onA100(24), func(j *policy.Job) { j.NumRestarts, j.Held = 0, 10 }},
		{"holds the t4s", []string{"t4-00", "t4-00", "t4-00", "t4-00", "t4-01", "t4-01", "t4-01", "t4-01"}, nil},
	} {
		for seed := int64(1); seed <= 3; seed++ {
			j := job(tc.current)
			if tc.mod != nil {
				tc.mod(&j)
			}
			in := policy.Input{Now: 3600, Nodes: nodes, Jobs: []policy.Job{j}, Current: policy.Allocations{}}
			if tc.current != nil {
				in.Current["a"] = tc.current
			}
			out := optimizeOnce(t, pollux.Config{Seed: seed}, in)
			if err := pt.Check(in, out, pt.CheckOptions{NoInterference: true, NodeOrder: true}); err != nil {
				t.Errorf("%s, seed %d: %v", tc.name, seed, err)
			}
			if a := out["a"]; len(a) != 16 || a[0][:4] != "a100" {
				t.Errorf("%s, seed %d: allocation %v, want 16 GPUs of a100 (its cap there)", tc.name, seed, policy.Placement(a))
			}
		}
	}

	// One GPU type: the cap bounds the job as MaxReplicas does.
	a100s := []pt.TypedPool{{Type: "a100", Nodes: 4, GPUs: 8, Speed: 1}}
	one := policy.Input{Now: 3600, Nodes: pt.TypedNodes(a100s...), Jobs: []policy.Job{{ID: "a", MaxReplicas: 32, Age: 3600,
		TypedMaxReplicas: map[string]int{"a100": 16}, TypedGoodput: pt.Typed(pt.Linear(), a100s...)}}}
	if a := optimizeOnce(t, pollux.Config{Seed: 1}, one)["a"]; len(a) != 16 {
		t.Errorf("one type: allocation %v, want 16 GPUs (its cap)", policy.Placement(a))
	}

	// A busy cluster: the Sia cluster at 4x (64 a100s), random jobs, a
	// cap of 4 a100s and 8 rtx2080tis on every other job.
	in := pt.TypedClusterInput(11, pt.SiaCluster(4), 60)
	for i := range in.Jobs {
		if i%2 == 0 {
			in.Jobs[i].TypedMaxReplicas = map[string]int{"a100": 4, "rtx2080ti": 8}
		}
	}
	for _, cfg := range []pollux.Config{{Seed: 5}, {Seed: 6, KeepChanges: true}} {
		p, err := pollux.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		round := in
		for r := range 3 {
			out := optimize(t, p, round)
			if err := pt.Check(round, out, pt.CheckOptions{NoInterference: true, NodeOrder: true}); err != nil {
				t.Errorf("busy cluster, seed %d, KeepChanges %v, round %d: %v", cfg.Seed, cfg.KeepChanges, r, err)
			}
			round.Current = out
			round.Now += 60
		}
	}
}

// TestPolluxTypedCapsOutOfReach: caps no smaller than their type's GPUs
// (the simulator's measured limits on the Sia artifact's 3-type cluster:
// 16 a100s, 24 rtx2080tis, 64 t4s) decide exactly as no caps, round after
// round: the search draws the same random numbers.
func TestPolluxTypedCapsOutOfReach(t *testing.T) {
	for _, cfg := range []pollux.Config{{Seed: 4}, {Seed: 7, KeepChanges: true}} {
		decide := func(caps map[string]int) string {
			in := pt.TypedClusterInput(9, pt.SiaCluster(1), 40)
			for i := range in.Jobs {
				in.Jobs[i].TypedMaxReplicas = caps
			}
			p, err := pollux.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var sb strings.Builder
			for range 3 {
				out := optimize(t, p, in)
				fmt.Fprintln(&sb, out, p.LastStats().BestFitness)
				in.Current = out
				in.Now += 60
			}
			return sb.String()
		}
		if a, b := decide(nil), decide(map[string]int{"a100": 16, "rtx2080ti": 24, "t4": 64}); a != b {
			t.Errorf("seed %d: caps out of reach change the decisions:\n%s\nwithout caps:\n%s", cfg.Seed, b, a)
		}
		if a, b := decide(nil), decide(map[string]int{"a100": 8}); a == b {
			t.Errorf("seed %d: a cap of 8 a100s decides as no caps: the test cannot tell", cfg.Seed)
		}
	}
}
