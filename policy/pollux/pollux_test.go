package pollux_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/policytest"
	"github.com/pollux-nomad/pollux/policy/pollux"
)

// Small GA settings keep the property tests fast; the scenario tests use
// the artifact's settings.
var quickConfig = pollux.Config{Population: 20, Generations: 15}

func newPollux(t testing.TB, cfg pollux.Config) *pollux.Policy {
	t.Helper()
	p, err := pollux.New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return p
}

func optimize(t testing.TB, p *pollux.Policy, in policy.Input) policy.Allocations {
	t.Helper()
	out, err := p.Optimize(context.Background(), policytest.Warm(p, in, p.LastStats().Round+1))
	if err != nil {
		t.Fatalf("Optimize: %v", err)
	}
	return out
}

func TestPolluxConfigValidate(t *testing.T) {
	tests := map[string]struct {
		cfg     pollux.Config
		wantErr []string // substrings of the error; none means valid
	}{
		"zero value is valid":           {cfg: pollux.Config{}},
		"explicit artifact settings":    {cfg: pollux.Config{Population: 100, Generations: 100, FairnessP: -1, RestartPenalty: 30, MaxNodesPerJob: 16}},
		"p = +1":                        {cfg: pollux.Config{FairnessP: 1}},
		"p = -10":                       {cfg: pollux.Config{FairnessP: -10}},
		"negative population":           {cfg: pollux.Config{Population: -1}, wantErr: []string{"population -1"}},
		"negative generations":          {cfg: pollux.Config{Generations: -5}, wantErr: []string{"generations -5"}},
		"NaN p":                         {cfg: pollux.Config{FairnessP: math.NaN()}, wantErr: []string{"fairness p NaN"}},
		"p too large":                   {cfg: pollux.Config{FairnessP: -1000}, wantErr: []string{"fairness p -1000"}},
		"restart penalty off":           {cfg: pollux.Config{RestartPenalty: -1}},
		"infinite restart penalty":      {cfg: pollux.Config{RestartPenalty: math.Inf(1)}, wantErr: []string{"restart penalty +Inf"}},
		"negative max nodes":            {cfg: pollux.Config{MaxNodesPerJob: -2}, wantErr: []string{"max nodes per job -2"}},
		"hysteresis off":                {cfg: pollux.Config{RestartHysteresis: -1}},
		"hysteresis of 1":               {cfg: pollux.Config{RestartHysteresis: 1}, wantErr: []string{"restart hysteresis 1 is not below 1"}},
		"NaN horizon":                   {cfg: pollux.Config{RestartHorizon: math.NaN()}, wantErr: []string{"restart horizon NaN"}},
		"service weight NaN":            {cfg: pollux.Config{ServiceWeight: math.NaN()}, wantErr: []string{"service weight NaN"}},
		"growth hysteresis of 1":        {cfg: pollux.Config{GrowthHysteresis: 1}, wantErr: []string{"growth hysteresis 1 is not below 1"}},
		"negative workers":              {cfg: pollux.Config{Workers: -1}, wantErr: []string{"workers -1"}},
		"first hold off":                {cfg: pollux.Config{FirstHold: -1}},
		"infinite first hold":           {cfg: pollux.Config{FirstHold: math.Inf(1)}, wantErr: []string{"first hold +Inf"}},
		"every error reported at once":  {cfg: pollux.Config{Population: -1, Generations: -1, RestartPenalty: math.NaN()}, wantErr: []string{"population -1", "generations -1", "restart penalty NaN"}},
		"error names the configuration": {cfg: pollux.Config{Population: -3}, wantErr: []string{"invalid pollux configuration"}},
		"New refuses what Validate":     {cfg: pollux.Config{Population: -3}, wantErr: []string{"population -3"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.cfg.Validate()
			_, newErr := pollux.New(tc.cfg)
			if len(tc.wantErr) == 0 {
				if err != nil || newErr != nil {
					t.Fatalf("Validate() = %v, New error = %v, want both nil", err, newErr)
				}
				return
			}
			if err == nil || newErr == nil {
				t.Fatalf("Validate() = %v, New error = %v, want both errors", err, newErr)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Validate() = %q, want it to mention %q", err, want)
				}
			}
		})
	}
}

func TestPolluxZeroFairnessMeansMinusOne(t *testing.T) {
	in := policytest.ClusterInput(3, 4, 4, 10)
	zero := optimize(t, newPollux(t, pollux.Config{Seed: 7}), in)
	minusOne := optimize(t, newPollux(t, pollux.Config{Seed: 7, FairnessP: -1}), in)
	if diff := cmp.Diff(minusOne, zero); diff != "" {
		t.Errorf("p = 0 (default) and p = -1 differ (-p=-1 +p=0):\n%s", diff)
	}
}

func TestPolluxSameDecisionsOnAnyWorkerCount(t *testing.T) {
	// 200 jobs on 256 GPUs: above the size where several cores are used
	// by default. Three rounds, each seeded by the last.
	in0 := policytest.ClusterInput(3, 64, 4, 200)
	run := func(workers int) []policy.Allocations {
		p := newPollux(t, pollux.Config{Seed: 9, Workers: workers, Population: 40, Generations: 20})
		var outs []policy.Allocations
		in := in0
		for range 3 {
			out := optimize(t, p, in)
			if err := policytest.Check(in, out, policytest.CheckOptions{NoInterference: true, NodeOrder: true}); err != nil {
				t.Fatalf("workers=%d: %v", workers, err)
			}
			outs = append(outs, out)
			in.Current = out
			in.Now += 60
		}
		return outs
	}
	serial := run(1)
	for _, w := range []int{2, 3} {
		if diff := cmp.Diff(serial, run(w)); diff != "" {
			t.Errorf("%d workers decide differently from 1 (-1 +%d):\n%s", w, w, diff)
		}
	}
}

func TestPolluxDeterministic(t *testing.T) {
	tests := map[string]struct {
		cfg pollux.Config
		in  policy.Input
	}{
		"64 GPUs, 45 jobs, artifact settings": {cfg: pollux.Config{Seed: 42}, in: policytest.ClusterInput(1, 16, 4, 45)},
		"odd cluster, p = +1":                 {cfg: pollux.Config{Seed: -3, FairnessP: 1, Population: 30, Generations: 30}, in: policytest.RandomInput(rand.New(rand.NewPCG(1, 1)), policytest.RandomOptions{Messy: true})},
		"no interference avoidance":           {cfg: pollux.Config{Seed: 5, DisableInterferenceAvoidance: true, Population: 30, Generations: 30}, in: policytest.ClusterInput(2, 8, 4, 20)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			run := func() []policy.Allocations {
				p := newPollux(t, tc.cfg)
				var outs []policy.Allocations
				in := tc.in
				for range 3 {
					out := optimize(t, p, in)
					outs = append(outs, out)
					in.Current = out
					in.Now += 60
				}
				return outs
			}
			first, second := run(), run()
			if diff := cmp.Diff(first, second); diff != "" {
				t.Errorf("two runs with the same seed differ (-first +second):\n%s", diff)
			}
		})
	}
}

func TestPolluxInvariantsOnRandomInputs(t *testing.T) {
	rng := rand.New(rand.NewPCG(2024, 12))
	for trial := range 150 {
		opts := policytest.RandomOptions{Messy: trial%3 == 0}
		in := policytest.RandomInput(rng, opts)
		cfg := quickConfig
		cfg.Seed = int64(trial)
		cfg.DisableInterferenceAvoidance = trial%4 == 0
		cfg.FairnessP = []float64{-1, 1, -10, 0.5}[trial%4]
		cfg.SeedFromWholePopulation = trial%5 == 0
		cfg.MaxNodesPerJob = trial % 3 // 0 (default 16), 1, 2
		p := newPollux(t, cfg)
		check := policytest.CheckOptions{NoInterference: !cfg.DisableInterferenceAvoidance, NodeOrder: true}
		// Several rounds, with jobs and nodes coming and going, to cover
		// seeding from the previous population.
		for round := range 4 {
			out, err := p.Optimize(context.Background(), policytest.Warm(p, in, int64(round+1)))
			if err != nil {
				t.Fatalf("trial %d round %d: Optimize: %v", trial, round, err)
			}
			if err := policytest.Check(in, out, check); err != nil {
				t.Fatalf("trial %d round %d: invalid allocation: %v\ninput: %+v\noutput: %v", trial, round, err, in, out)
			}
			if cfg.MaxNodesPerJob > 0 {
				for id, a := range out {
					if n := policy.NumNodes(a); n > cfg.MaxNodesPerJob {
						t.Fatalf("trial %d round %d: job %s spans %d nodes, max %d", trial, round, id, n, cfg.MaxNodesPerJob)
					}
				}
			}
			next := policytest.RandomInput(rng, opts)
			// Keep some jobs and nodes from this round.
			next.Jobs = append(next.Jobs, in.Jobs[:len(in.Jobs)/2]...)
			for i := range next.Jobs {
				next.Jobs[i].ID = fmt.Sprintf("%s-%d", next.Jobs[i].ID, i)
			}
			next.Current = out
			in = next
		}
	}
}

func TestPolluxKnownOptimum(t *testing.T) {
	// One node of 4 GPUs, two old jobs (no restart penalty to speak of):
	// the near-linear job should get more GPUs than the flat one, and with
	// p = -1 (or p = +1) neither job is starved.
	nodes := policytest.Nodes(1, 4)
	jobs := policytest.Jobs(
		policytest.Job("linear").GPUs(1, 4).Goodput(policytest.Linear()).Age(1e6),
		policytest.Job("flat").GPUs(1, 4).Goodput(policytest.Flat()).Age(1e6).Submitted(1),
	)
	tests := map[string]struct {
		p    float64
		want policy.Allocations
	}{
		"p = -1": {p: -1, want: policy.Allocations{"linear": {"n00", "n00", "n00"}, "flat": {"n00"}}},
		"p = +1": {p: 1, want: policy.Allocations{"linear": {"n00", "n00", "n00"}, "flat": {"n00"}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := newPollux(t, pollux.Config{Seed: 1, FairnessP: tc.p})
			got := optimize(t, p, policy.Input{Now: 1e6, Jobs: jobs, Nodes: nodes})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("allocation (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPolluxFairnessShiftsGPUs(t *testing.T) {
	// Three linear jobs with different caps and one flat job on 8 GPUs:
	// the harmonic mean (p = -1) must give every job a GPU; p = +1 only
	// cares for the sum and may starve the flat job. Under p = -1 the
	// fitness of the choice is at least that of an even split.
	nodes := policytest.Nodes(2, 4)
	jobs := policytest.Jobs(
		policytest.Job("a").GPUs(0, 8).Goodput(policytest.Linear()).Age(1e6),
		policytest.Job("b").GPUs(0, 8).Goodput(policytest.Linear()).Age(1e6).Submitted(1),
		policytest.Job("c").GPUs(0, 8).Goodput(policytest.Linear()).Age(1e6).Submitted(2),
		policytest.Job("flat").GPUs(0, 8).Goodput(policytest.Flat()).Age(1e6).Submitted(3),
	)
	p := newPollux(t, pollux.Config{Seed: 3})
	got := optimize(t, p, policy.Input{Now: 1e6, Jobs: jobs, Nodes: nodes})
	for _, j := range jobs {
		if len(got[j.ID]) == 0 {
			t.Errorf("p = -1 starved job %s: %v", j.ID, got)
		}
	}
	// Even split, 2 GPUs each, one node per pair: linear speedup 2/K_f
	// = 1 with K_f = 2; flat about 1. S = speedup·2/8 = 0.25 each.
	even := 0.25
	if f := p.LastStats().BestFitness; f < even-1e-3 {
		t.Errorf("best fitness %.4f below the even split's %.4f", f, even)
	}
}

func TestPolluxRestartPenalty(t *testing.T) {
	// One job on a 4-GPU node holding 2 GPUs; 4 GPUs would be 5% faster
	// (slow), or 1.9x (fast). Without hysteresis (the artifact's factor)
	// a young job that has restarted is not worth moving, an old one is;
	// the default hysteresis (0.3) keeps even the old job where it is for
	// 5%, but not for 1.9x.
	slow := policytest.Synthetic{Serial: 1, Parallel: 0.21}
	fast := policytest.Linear()
	nodes := policytest.Nodes(1, 4)
	current := policy.Allocations{"j": {"n00", "n00"}}
	two := policy.Allocations{"j": {"n00", "n00"}}
	four := policy.Allocations{"j": {"n00", "n00", "n00", "n00"}}
	tests := map[string]struct {
		age        float64
		restarts   int
		model      policy.GoodputModel
		hysteresis float64
		growth     float64 // GrowthHysteresis
		want       policy.Allocations
	}{
		"artifact: young job keeps its GPUs":                             {age: 90, restarts: 1, model: slow, hysteresis: -1, want: two},
		"artifact: old job grows":                                        {age: 1e6, restarts: 1, model: slow, hysteresis: -1, want: four},
		"default: old job keeps its GPUs for 5%":                         {age: 1e6, restarts: 1, model: slow, want: two},
		"default: old job grows for 1.9x":                                {age: 1e6, restarts: 1, model: fast, want: four},
		"growth hysteresis 0.01: old job grows for 5%":                   {age: 1e6, restarts: 1, model: slow, growth: 0.01, want: four},
		"hysteresis 0.01 on shrinks only: old job keeps its GPUs for 5%": {age: 1e6, restarts: 1, model: slow, hysteresis: 0.01, want: two},
		"growth exempt: old job grows for 5%":                            {age: 1e6, restarts: 1, model: slow, growth: -1, want: four},
		"default: young restarted job stays put":                         {age: 90, restarts: 1, model: fast, want: two},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			jobs := policytest.Jobs(policytest.Job("j").GPUs(1, 4).Goodput(tc.model).Age(tc.age).Restarts(tc.restarts))
			p := newPollux(t, pollux.Config{Seed: 1, RestartHysteresis: tc.hysteresis, GrowthHysteresis: tc.growth})
			got := optimize(t, p, policy.Input{Now: tc.age, Jobs: jobs, Nodes: nodes, Current: current})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("allocation (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPolluxServiceWeight(t *testing.T) {
	// One GPU, held by a job with a lot of attained service; a new job
	// waits. Unweighted, swapping them leaves the fitness as it is, so the
	// old job keeps the GPU; weighted by attained service (the default on
	// one GPU type), the new job counts more and takes it.
	nodes := policytest.Nodes(1, 1)
	jobs := policytest.Jobs(
		policytest.Job("old").GPUs(1, 1).Goodput(policytest.Linear()).Age(1e5).Attained(1e5),
		policytest.Job("new").GPUs(1, 1).Goodput(policytest.Linear()).Age(60).Submitted(1e5-60),
	)
	in := policy.Input{Now: 1e5, Jobs: jobs, Nodes: nodes, Current: policy.Allocations{"old": {"n00"}}}
	for _, tc := range []struct {
		weight float64
		want   string
	}{{-1, "old"}, {0, "new"}, {3600, "new"}} {
		got := optimize(t, newPollux(t, pollux.Config{Seed: 1, ServiceWeight: tc.weight}), in)
		want := policy.Allocations{tc.want: {"n00"}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("service weight %v: allocation (-want +got):\n%s", tc.weight, diff)
		}
	}
}

func TestPolluxRestartTimePerJob(t *testing.T) {
	// Two identical old jobs could each grow from 2 to 4 GPUs (1.9x) on
	// their own node; the one whose restart takes longer than its age
	// allows stays put, the one with the default restart time grows.
	nodes := policytest.Nodes(2, 4)
	jobs := policytest.Jobs(
		policytest.Job("quick").GPUs(1, 4).Goodput(policytest.Linear()).Age(3000).Restarts(1),
		policytest.Job("slow").GPUs(1, 4).Goodput(policytest.Linear()).Age(3000).Restarts(1),
	)
	jobs[1].RestartTime = 1500 // factor max(3000 − 1500, 0)/(3000 + 1500) = 1/3
	current := policy.Allocations{"quick": {"n00", "n00"}, "slow": {"n01", "n01"}}
	p := newPollux(t, pollux.Config{Seed: 1, RestartHysteresis: -1})
	got := optimize(t, p, policy.Input{Now: 3000, Jobs: jobs, Nodes: nodes, Current: current})
	want := policy.Allocations{"quick": {"n00", "n00", "n00", "n00"}, "slow": {"n01", "n01"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("allocation (-want +got):\n%s", diff)
	}
}

func TestPolluxAvoidsInterference(t *testing.T) {
	// Linear jobs that would like to spread over nodes of odd sizes: with
	// avoidance no node holds two distributed jobs; without it, in at
	// least one of the seeds, some node does (so the check can fail).
	nodes := []policy.Node{
		policytest.Node("a").GPUs(3).Build(), policytest.Node("b").GPUs(3).Build(),
		policytest.Node("c").GPUs(3).Build(), policytest.Node("d").GPUs(3).Build(),
	}
	var builders []*policytest.JobBuilder
	for i := range 3 {
		builders = append(builders, policytest.Job(fmt.Sprintf("j%d", i)).GPUs(0, 12).Goodput(policytest.Linear()).Age(1e6).Submitted(float64(i)))
	}
	in := policy.Input{Now: 1e6, Jobs: policytest.Jobs(builders...), Nodes: nodes}
	sharedWithout := 0
	for seed := range int64(5) {
		got := optimize(t, newPollux(t, pollux.Config{Seed: seed}), in)
		if err := policytest.Check(in, got, policytest.CheckOptions{NoInterference: true, NodeOrder: true}); err != nil {
			t.Errorf("seed %d with avoidance: %v (allocation %v)", seed, err, got)
		}
		without := optimize(t, newPollux(t, pollux.Config{Seed: seed, DisableInterferenceAvoidance: true}), in)
		if err := policytest.Check(in, without, policytest.CheckOptions{NodeOrder: true}); err != nil {
			t.Errorf("seed %d without avoidance: %v", seed, err)
		}
		if policytest.Check(in, without, policytest.CheckOptions{NoInterference: true}) != nil {
			sharedWithout++
		}
	}
	if sharedWithout == 0 {
		t.Errorf("without avoidance no seed shared a node between distributed jobs; the scenario does not exercise avoidance")
	}
}

func TestPolluxMinReplicas(t *testing.T) {
	// A job that needs at least 3 GPUs among jobs that need 1 on 4 GPUs:
	// it gets 0 or ≥ 3, never 1 or 2.
	nodes := policytest.Nodes(1, 4)
	jobs := policytest.Jobs(
		policytest.Job("big").GPUs(3, 4).Goodput(policytest.Linear()).Age(1e6),
		policytest.Job("x").GPUs(1, 4).Goodput(policytest.Typical()).Age(1e6).Submitted(1),
		policytest.Job("y").GPUs(1, 4).Goodput(policytest.Typical()).Age(1e6).Submitted(2),
	)
	for seed := range int64(10) {
		got := optimize(t, newPollux(t, pollux.Config{Seed: seed}), policy.Input{Now: 1e6, Jobs: jobs, Nodes: nodes})
		if err := policytest.Check(policy.Input{Jobs: jobs, Nodes: nodes}, got, policytest.CheckOptions{}); err != nil {
			t.Errorf("seed %d: %v", seed, err)
		}
	}
}

func TestPolluxSeedsFromPreviousRound(t *testing.T) {
	// Steady state: the same jobs round after round, each round's output
	// fed back as the current allocation. The allocation settles and the
	// previous round's population carries over (job and node IDs mapped),
	// so later rounds find at least the fitness of the first.
	in := policytest.ClusterInput(9, 4, 4, 8)
	p := newPollux(t, pollux.Config{Seed: 2})
	var outs []policy.Allocations
	var fitness []float64
	for range 4 {
		out := optimize(t, p, in)
		outs = append(outs, out)
		fitness = append(fitness, p.LastStats().BestFitness)
		in.Current = out
		in.Now += 60
		for i := range in.Jobs {
			in.Jobs[i].Age += 60
		}
	}
	if diff := cmp.Diff(outs[2], outs[3]); diff != "" {
		t.Errorf("allocation still changing after three rounds of the same jobs (-round 3 +round 4):\n%s", diff)
	}
	if st := p.LastStats(); st.Seeds < 2 {
		t.Errorf("round 4 seeded with %d states, want the previous front (more than one)", st.Seeds)
	}
	// A job and a node vanish, a new job arrives: the output only names
	// what is in the input.
	in.Jobs = append(in.Jobs[1:], policytest.Job("newcomer").GPUs(0, 4).Build())
	in.Nodes = in.Nodes[1:]
	out := optimize(t, p, in)
	if err := policytest.Check(in, out, policytest.CheckOptions{NoInterference: true, NodeOrder: true}); err != nil {
		t.Errorf("after churn: %v", err)
	}
}

func TestPolluxMemoisesSpeedups(t *testing.T) {
	// The policy calls each job's model at most once per (nodes, GPUs)
	// shape and round, plus once for the fair-share base.
	counter := &policytest.Counting{Model: policytest.Typical()}
	in := policytest.ClusterInput(4, 4, 4, 6)
	in.Jobs[0].Goodput = counter
	in.Jobs[0].MaxReplicas = 8
	p := newPollux(t, pollux.Config{Seed: 1})
	optimize(t, p, in)
	// Shapes: 1..8 GPUs on 1..min(k, 4) nodes = 1+2+3+4·5 = 26, plus base.
	if counter.Calls > 27 || counter.Calls == 0 {
		t.Errorf("model called %d times in a round, want between 1 and 27", counter.Calls)
	}
}

func TestPolluxOutputFormat(t *testing.T) {
	// GPUs are listed node by node in input order, and idle jobs are
	// omitted.
	nodes := []policy.Node{policytest.Node("z").GPUs(2).Build(), policytest.Node("a").GPUs(2).Build()}
	jobs := policytest.Jobs(
		policytest.Job("wide").GPUs(4, 4).Goodput(policytest.Linear()).Age(1e6),
		policytest.Job("idle").GPUs(1, 1).Goodput(policytest.Linear()).Age(1e6).Attained(1e9),
	)
	got := optimize(t, newPollux(t, pollux.Config{Seed: 1}), policy.Input{Now: 1e6, Jobs: jobs, Nodes: nodes})
	want := policy.Allocations{"wide": {"z", "z", "a", "a"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("allocation (-want +got):\n%s", diff)
	}
}

func TestPolluxEmptyInputs(t *testing.T) {
	tests := map[string]policy.Input{
		"no jobs":    {Nodes: policytest.Nodes(2, 4)},
		"no nodes":   {Jobs: policytest.Jobs(policytest.Job("a"))},
		"no GPUs":    {Jobs: policytest.Jobs(policytest.Job("a")), Nodes: policytest.Nodes(2, 0)},
		"everything": {},
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			got := optimize(t, newPollux(t, pollux.Config{}), in)
			if diff := cmp.Diff(policy.Allocations{}, got); diff != "" {
				t.Errorf("allocation (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPolluxRejectsInvalidInput(t *testing.T) {
	good := func() policy.Input {
		return policy.Input{Jobs: policytest.Jobs(policytest.Job("a"), policytest.Job("b")), Nodes: policytest.Nodes(2, 4)}
	}
	tests := map[string]struct {
		edit func(*policy.Input)
		want string
	}{
		"duplicate job":      {edit: func(in *policy.Input) { in.Jobs[1].ID = "a" }, want: `job "a" (index 1): same ID as job index 0`},
		"empty job ID":       {edit: func(in *policy.Input) { in.Jobs[0].ID = "" }, want: `job "" (index 0): empty ID`},
		"max replicas 0":     {edit: func(in *policy.Input) { in.Jobs[0].MaxReplicas = 0 }, want: `job "a" (index 0): max replicas 0 is below 1`},
		"min above max":      {edit: func(in *policy.Input) { in.Jobs[1].MinReplicas = 70 }, want: `job "b" (index 1): min replicas 70 exceed max replicas 64`},
		"negative min":       {edit: func(in *policy.Input) { in.Jobs[1].MinReplicas = -1 }, want: `min replicas -1 is negative`},
		"NaN age":            {edit: func(in *policy.Input) { in.Jobs[0].Age = math.NaN() }, want: `job "a" (index 0): age NaN`},
		"negative service":   {edit: func(in *policy.Input) { in.Jobs[0].AttainedService = -1 }, want: `attained service -1`},
		"negative restarts":  {edit: func(in *policy.Input) { in.Jobs[0].NumRestarts = -1 }, want: `restart count -1`},
		"NaN restart time":   {edit: func(in *policy.Input) { in.Jobs[1].RestartTime = math.NaN() }, want: `job "b" (index 1): restart time NaN`},
		"duplicate node":     {edit: func(in *policy.Input) { in.Nodes[1].ID = in.Nodes[0].ID }, want: `node "n00" (index 1): same ID as node index 0`},
		"node with 300 GPUs": {edit: func(in *policy.Input) { in.Nodes[0].GPUs = 300 }, want: `node "n00" (index 0): 300 GPUs is outside [0, 255]`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			in := good()
			tc.edit(&in)
			_, err := newPollux(t, pollux.Config{}).Optimize(context.Background(), in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Optimize error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// cancelAfter is a context whose Err turns to Canceled after n calls.
type cancelAfter struct {
	context.Context
	n int
}

func (c *cancelAfter) Err() error {
	c.n--
	if c.n < 0 {
		return context.Canceled
	}
	return nil
}

func TestPolluxContext(t *testing.T) {
	in := policytest.ClusterInput(5, 8, 4, 20)
	t.Run("done before the round", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		out, err := newPollux(t, pollux.Config{}).Optimize(ctx, in)
		if !errors.Is(err, context.Canceled) || out != nil {
			t.Errorf("Optimize = %v, %v; want nil, context.Canceled", out, err)
		}
	})
	t.Run("done during the round", func(t *testing.T) {
		p := newPollux(t, pollux.Config{Seed: 1})
		// One Err call before the search, then five generations.
		out, err := p.Optimize(&cancelAfter{Context: context.Background(), n: 6}, in)
		if err != nil {
			t.Fatalf("Optimize: %v", err)
		}
		st := p.LastStats()
		if !st.Cancelled || st.Generations != 6 {
			t.Errorf("stats %+v: want Cancelled after 6 generations", st)
		}
		if err := policytest.Check(in, out, policytest.CheckOptions{NoInterference: true, NodeOrder: true}); err != nil {
			t.Errorf("best-so-far allocation: %v", err)
		}
	})
}

func TestPolluxStats(t *testing.T) {
	in := policytest.ClusterInput(6, 16, 4, 45)
	p := newPollux(t, pollux.Config{Seed: 1})
	optimize(t, p, in)
	st := p.LastStats()
	if st.Round != 1 || st.Jobs != 45 || st.Nodes != 16 || st.Seeds != 1 || st.Generations != 100 {
		t.Errorf("stats %+v: want round 1, 45 jobs, 16 nodes, 1 seed, 100 generations", st)
	}
	// 99 generations of up to 100 offspring, plus the seed.
	if st.Evaluations < 99*100 || st.FrontSize < 1 || !(st.BestFitness > 0) || !(st.BestUtility > 0) {
		t.Errorf("stats %+v: want ≥ 9900 evaluations, a front, positive objectives", st)
	}
	optimize(t, p, in)
	if st := p.LastStats(); st.Round != 2 || st.Seeds < 1 {
		t.Errorf("second round stats %+v: want round 2 seeded from the previous front", st)
	}
}

func ExamplePolicy_Optimize() {
	p, err := pollux.New(pollux.Config{Seed: 1})
	if err != nil {
		panic(err)
	}
	in := policy.Input{
		Now:   1e6,
		Nodes: policytest.Nodes(1, 4),
		Jobs: policytest.Jobs(
			policytest.Job("linear").GPUs(1, 4).Goodput(policytest.Linear()).Age(1e6),
			policytest.Job("flat").GPUs(1, 4).Goodput(policytest.Flat()).Age(1e6).Submitted(1),
		),
	}
	out, err := p.Optimize(context.Background(), in)
	if err != nil {
		panic(err)
	}
	for _, id := range out.JobIDs() {
		fmt.Println(id, out[id])
	}
	fmt.Printf("fitness %.3f\n", p.LastStats().BestFitness)
	// Output:
	// flat [n00]
	// linear [n00 n00 n00]
	// fitness 0.309
}

// strictModel is a goodput model that, like model.GoodputCache, refuses a
// configuration with more nodes than GPUs.
type strictModel struct{ policytest.Synthetic }

func (s strictModel) Goodput(nodes, replicas int) float64 {
	if nodes > replicas {
		panic(fmt.Sprintf("goodput asked for %d nodes holding %d GPUs", nodes, replicas))
	}
	return s.Synthetic.Goodput(nodes, replicas)
}

func TestPolluxFewerFreeGPUsThanNodes(t *testing.T) {
	// Four nodes with one free GPU among them (the rest held by jobs the
	// controller does not schedule): the fair-share base must not ask a
	// model for a configuration spanning more nodes than GPUs.
	nodes := []policy.Node{
		policytest.Node("a").GPUs(1).Build(), policytest.Node("b").GPUs(0).Build(),
		policytest.Node("c").GPUs(0).Build(), policytest.Node("d").GPUs(0).Build(),
	}
	jobs := policytest.Jobs(
		policytest.Job("j1").GPUs(1, 4).Goodput(strictModel{policytest.Linear()}).Age(1e6),
		policytest.Job("j2").GPUs(1, 4).Goodput(strictModel{policytest.Linear()}).Age(1e6).Submitted(1),
	)
	in := policy.Input{Now: 1e6, Jobs: jobs, Nodes: nodes}
	got := optimize(t, newPollux(t, pollux.Config{Seed: 1}), in)
	if err := policytest.Check(in, got, policytest.CheckOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := len(got["j1"]) + len(got["j2"]); n != 1 {
		t.Errorf("allocated %d GPUs, want the one free GPU used: %v", n, got)
	}
}

func TestPolluxKeepsRestoringJob(t *testing.T) {
	// Two identical old jobs could each grow from 2 to 4 GPUs (1.9x); the
	// one still restoring on its current allocation keeps it (by
	// default), the other grows. With MoveRestoring both grow.
	nodes := policytest.Nodes(2, 4)
	jobs := policytest.Jobs(
		policytest.Job("running").GPUs(1, 4).Goodput(policytest.Linear()).Age(1e6).Restarts(1),
		policytest.Job("restoring").GPUs(1, 4).Goodput(policytest.Linear()).Age(1e6).Restarts(1),
	)
	jobs[1].Restoring = true
	current := policy.Allocations{"running": {"n00", "n00"}, "restoring": {"n01", "n01"}}
	for _, move := range []bool{false, true} {
		p := newPollux(t, pollux.Config{Seed: 1, MoveRestoring: move})
		got := optimize(t, p, policy.Input{Now: 1e6, Jobs: jobs, Nodes: nodes, Current: current})
		want := policy.Allocations{"running": {"n00", "n00", "n00", "n00"}, "restoring": {"n01", "n01"}}
		if move {
			want["restoring"] = []string{"n01", "n01", "n01", "n01"}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("MoveRestoring %v: allocation (-want +got):\n%s", move, diff)
		}
	}
}

// TestPolluxKeepsRestoringJobFromPreemption: an old job still restoring on
// its GPUs keeps them even when young waiting jobs would use them better
// (before pinning, the restoring job's speedup only hit the floor when its
// row changed, and being preempted hit the same floor, so it was started,
// preempted before it made progress and started again); and a restoring
// job spanning two nodes keeps other distributed jobs off those nodes.
func TestPolluxKeepsRestoringJobFromPreemption(t *testing.T) {
	nodes := policytest.Nodes(2, 4)
	jobs := []policy.Job{{ID: "old", Age: 1e6, MaxReplicas: 4, NumRestarts: 3, Restoring: true,
		Goodput: policytest.Synthetic{Serial: 0.9, Parallel: 0.1}}}
	for i := range 8 {
		jobs = append(jobs, policy.Job{ID: fmt.Sprintf("young-%d", i), Age: 30, MaxReplicas: 4})
	}
	current := policy.Allocations{"old": {"n00", "n00", "n00", "n00"}}
	for _, move := range []bool{false, true} {
		p := newPollux(t, pollux.Config{Seed: 1, MoveRestoring: move})
		got := optimize(t, p, policy.Input{Now: 1e6, Jobs: jobs, Nodes: nodes, Current: current})
		kept := cmp.Equal(got["old"], current["old"])
		if kept == move {
			t.Errorf("MoveRestoring %v: restoring job got %v, want kept %v", move, got["old"], !move)
		}
	}

	// A distributed restoring job on n00 and n01: a second distributed job
	// may use n02 and n03 only.
	nodes = policytest.Nodes(4, 4)
	jobs = []policy.Job{
		{ID: "dist", Age: 1e4, MaxReplicas: 4, Restoring: true, Goodput: policytest.Linear()},
		{ID: "big", Age: 1e4, MaxReplicas: 16, Goodput: policytest.Linear()},
	}
	current = policy.Allocations{"dist": {"n00", "n00", "n01", "n01"}}
	p := newPollux(t, pollux.Config{Seed: 1})
	in := policy.Input{Now: 1e4, Jobs: jobs, Nodes: nodes, Current: current}
	got := optimize(t, p, in)
	if !cmp.Equal(got["dist"], current["dist"]) {
		t.Errorf("restoring distributed job moved: %v", got["dist"])
	}
	if err := policytest.Check(in, got, policytest.CheckOptions{}); err != nil {
		t.Error(err)
	}
	if len(policy.Placement(got["big"])) > 1 {
		for _, n := range got["big"] {
			if n == "n00" || n == "n01" {
				t.Errorf("distributed job placed on a node of the restoring distributed job: %v", got["big"])
				break
			}
		}
	}
	if len(got["big"]) < 8 {
		t.Errorf("big job got %v, want the 8 GPUs of n02 and n03 at least", got["big"])
	}

	// A restoring job whose bounds an operator lowered below what it holds,
	// and one on a node that has since lost GPUs, are not pinned: the
	// answer respects the bounds and the capacities.
	nodes = []policy.Node{{ID: "n00", GPUs: 4}, {ID: "n01", GPUs: 1}}
	jobs = []policy.Job{
		{ID: "capped", Age: 1e4, MaxReplicas: 1, Restoring: true, Goodput: policytest.Linear()},
		{ID: "shrunk", Age: 1e4, MaxReplicas: 4, Restoring: true, Goodput: policytest.Linear()},
	}
	current = policy.Allocations{"capped": {"n00", "n00", "n00"}, "shrunk": {"n01", "n01", "n01"}}
	in = policy.Input{Now: 1e4, Jobs: jobs, Nodes: nodes, Current: current}
	got = optimize(t, newPollux(t, pollux.Config{Seed: 1}), in)
	if err := policytest.Check(in, got, policytest.CheckOptions{}); err != nil {
		t.Errorf("restoring jobs out of bounds or capacity: %v", err)
	}
}

// TestPolluxStallGenerations: with StallGenerations a warm round ends
// once the first front stops changing, well before Generations; with a
// negative one every generation runs; 0 stalls on a one-type cluster of
// at most 64 GPUs and runs every generation on a larger one. Either way
// the allocation is feasible.
func TestPolluxStallGenerations(t *testing.T) {
	small := policytest.ClusterInput(1, 16, 4, 45)
	large := policytest.ClusterInput(1, 32, 4, 90)
	for _, tc := range []struct {
		name  string
		stall int
		in    policy.Input
		fewer bool
	}{
		{"default, 64 GPUs", 0, small, true},
		{"default, 128 GPUs", 0, large, false},
		{"10, 64 GPUs", 10, small, true},
		{"10, 128 GPUs", 10, large, true},
		{"off, 64 GPUs", -1, small, false},
	} {
		p, err := pollux.New(pollux.Config{Seed: 1, StallGenerations: tc.stall})
		if err != nil {
			t.Fatal(err)
		}
		gens := 100 // fewest over warm rounds, seeded by the previous front
		for round := range 6 {
			out, err := p.Optimize(context.Background(), policytest.Warm(p, tc.in, int64(round+1)))
			if err != nil {
				t.Fatal(err)
			}
			if err := policytest.Check(tc.in, out, policytest.CheckOptions{}); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			gens = min(gens, p.LastStats().Generations)
		}
		if tc.fewer != (gens < 100) {
			t.Errorf("%s: %d generations run", tc.name, gens)
		}
	}
}

// TestPolluxNoSwapsAmongEquals: on a cluster with many more identical
// one-GPU jobs than GPUs, swapping a running job for a waiting one gains
// nothing (the fitness is the same), so the policy must keep the running
// jobs where they are round after round rather than preempt them for
// equals (each swap is a restart on Nomad).
func TestPolluxNoSwapsAmongEquals(t *testing.T) {
	in := policy.Input{Now: 1e5, Nodes: policytest.Nodes(2, 4), Current: policy.Allocations{}}
	for i := range 60 {
		j := policy.Job{ID: fmt.Sprintf("job-%02d", i), Submitted: 0, Age: 1e5, MaxReplicas: 1,
			Goodput: policytest.Synthetic{Serial: 0.05, Parallel: 1, Comm: 0.01, NodeComm: 0.02}}
		in.Jobs = append(in.Jobs, j)
	}
	p := newPollux(t, pollux.Config{Seed: 1})
	in.Current = optimize(t, p, in)
	if len(in.Current) != 8 {
		t.Fatalf("first round: %d jobs got GPUs, want 8: %v", len(in.Current), in.Current)
	}
	for round := 2; round <= 8; round++ {
		in.Now += 60
		out := optimize(t, p, in)
		if diff := cmp.Diff(in.Current, out); diff != "" {
			t.Fatalf("round %d moved jobs among equals (-before +after):\n%s", round, diff)
		}
		in.Current = out
	}
}

// TestPolluxGrowthHysteresis: a running job whose growth would gain
// less than the growth hysteresis asks (1/(1 − 0.3)) stays as it is on a
// one-type cluster of 64 GPUs and of 128 GPUs, and grows where growth is
// exempt (a negative GrowthHysteresis).
func TestPolluxGrowthHysteresis(t *testing.T) {
	for _, tc := range []struct {
		name   string
		nodes  int
		exempt bool
		grows  bool
	}{{"64 GPUs", 16, false, false}, {"128 GPUs", 32, false, false}, {"64 GPUs, GrowthHysteresis -1", 16, true, true}, {"128 GPUs, GrowthHysteresis -1", 32, true, true}} {
		in := policy.Input{Now: 1e5, Nodes: policytest.Nodes(tc.nodes, 4), Current: policy.Allocations{"job": {"n00"}}}
		// Goodput on 1, 2, 4 GPUs: 1, 1.18, 1.29.
		in.Jobs = []policy.Job{{ID: "job", Age: 1e5, MaxReplicas: 4, NumRestarts: 1,
			Goodput: policytest.Synthetic{Serial: 0.7, Parallel: 0.3}}}
		p := newPollux(t, pollux.Config{Seed: 1, GrowthHysteresis: map[bool]float64{true: -1}[tc.exempt]})
		out := optimize(t, p, in)
		if got := len(out["job"]) > 1; got != tc.grows {
			t.Errorf("%s: allocation %v, want growth %v", tc.name, out["job"], tc.grows)
		}
	}
}

// TestPolluxRestoringKeepsRoundAndCarry: while a job is restoring (its
// allocation pinned, the search solving for the others) the round is
// still seeded by the previous round's carry and draws from the input's
// round: the second round starts from the carried front, not from the
// current allocation alone, and two policies given the same input decide
// the same.
func TestPolluxRestoringKeepsRoundAndCarry(t *testing.T) {
	in := policytest.ClusterInput(9, 4, 4, 8)
	p := newPollux(t, pollux.Config{Seed: 2})
	out := optimize(t, p, in)
	in.Current = out
	in.Now += 60
	var restoring string
	for i := range in.Jobs {
		if len(out[in.Jobs[i].ID]) > 0 && restoring == "" {
			in.Jobs[i].Restoring = true
			restoring = in.Jobs[i].ID
		}
	}
	if restoring == "" {
		t.Fatal("no job got GPUs in the first round")
	}
	in = policytest.Warm(p, in, 2)
	first := optimize(t, p, in)
	if st := p.LastStats(); st.Seeds < 2 || st.Round != 2 {
		t.Errorf("round with %s restoring: round %d seeded with %d states, want round 2 seeded by the carried front", restoring, st.Round, st.Seeds)
	}
	again, err := newPollux(t, pollux.Config{Seed: 2}).Optimize(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(first, again); diff != "" {
		t.Errorf("a fresh policy decided the same input differently (-first +fresh):\n%s", diff)
	}
}
