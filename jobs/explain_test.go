package jobs

import (
	"math"
	"strings"
	"testing"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/model"
)

// testFit is a goodput model of a job that scales well to a few GPUs.
func testFit() *model.GoodputFunc {
	return &model.GoodputFunc{
		Perf:          model.PerfParams{AlphaC: 0.02, BetaC: 0.0008, AlphaN: 0.05, BetaN: 0.01, AlphaR: 0.01, BetaR: 0.002, Gamma: 1.2},
		Grad:          model.GradParams{Sqr: 0.5, Var: 5},
		InitBatchSize: 128,
	}
}

var testBounds = model.Bounds{MaxBatchSize: 4096, MinLocalBsz: 32, MaxLocalBsz: 1024, Accumulation: true}

func TestExplainReasons(t *testing.T) {
	scheduled := func(mut func(*ExplainInput)) ExplainInput {
		in := ExplainInput{State: StateScheduled, Fit: testFit(), Bounds: testBounds, GPUs: 2, Nodes: 1, BatchSize: 512,
			MinGPUs: 1, MaxGPUs: 8, CapBy: "all free GPUs", FreeGPUs: 0, PolicyGPUs: 8, PolicyNodes: 2, PolicyJobs: 4}
		if mut != nil {
			mut(&in)
		}
		return in
	}
	for name, tc := range map[string]struct {
		in      ExplainInput
		reason  string
		key     string
		message []string // substrings
	}{
		"invalid meta names the key": {
			in:     ExplainInput{State: StateInvalid, Error: "pollux_init_lr: must be a positive finite number, got \"x\"\npollux_max_gpus: required"},
			reason: contract.ReasonInvalidMeta, key: "pollux_init_lr", message: []string{"invalid meta pollux_init_lr", `got "x"`},
		},
		"invalid spec": {
			in:     ExplainInput{State: StateInvalid, Error: "several task groups and no pollux_group"},
			reason: contract.ReasonInvalidSpec, message: []string{"several task groups"},
		},
		"read error": {
			in:     ExplainInput{State: StateError, Error: "held: failed to read state: boom"},
			reason: contract.ReasonReadError, message: []string{"failed to read state"},
		},
		"stopped":     {in: ExplainInput{State: StateStopped}, reason: contract.ReasonStopped},
		"no metrics":  {in: scheduled(func(in *ExplainInput) { in.Fit = nil; in.GPUs = 1 }), reason: contract.ReasonNoMetrics, message: []string{"no model yet", "1 GPU"}},
		"bad metrics": {in: scheduled(func(in *ExplainInput) { in.Fit = nil; in.Error = "profile[0].step_time: must be finite" }), reason: contract.ReasonBadMetrics, message: []string{"profile[0].step_time"}},
		"conflict":    {in: scheduled(func(in *ExplainInput) { in.Conflict = true }), reason: contract.ReasonConflict, message: []string{"operator"}},
		"held":        {in: scheduled(func(in *ExplainInput) { in.Error = "held: consul unreachable this round" }), reason: contract.ReasonHeld, message: []string{"consul unreachable"}},
		"deferred": {in: scheduled(func(in *ExplainInput) {
			in.Error = "deferred: 12 jobs Nomad queued are still to be scaled to zero first"
		}), reason: contract.ReasonHeld, message: []string{"no change this round: 12 jobs Nomad queued"}},
		"waits for capacity": {
			in:     scheduled(func(in *ExplainInput) { in.GPUs, in.Nodes, in.BatchSize, in.MinGPUs, in.FreeGPUs = 0, 0, 0, 2, 1 }),
			reason: contract.ReasonCapacity, message: []string{"needs 2 GPUs", "1 GPU free"},
		},
		"waits for fair share": {
			in:     scheduled(func(in *ExplainInput) { in.GPUs, in.Nodes, in.BatchSize, in.FreeGPUs = 0, 0, 0, 3 }),
			reason: contract.ReasonFairShare, message: []string{"waiting", "other jobs"},
		},
		"at its cap": {
			in:     scheduled(func(in *ExplainInput) { in.MaxGPUs, in.CapBy = 2, "pollux_max_gpus" }),
			reason: contract.ReasonAtCap, message: []string{"2 GPUs, its cap (pollux_max_gpus)"},
		},
		"at its minimum": {
			in:     scheduled(func(in *ExplainInput) { in.MinGPUs = 2 }),
			reason: contract.ReasonAtMin, message: []string{"minimum"},
		},
		"would grow, cluster full": {
			in:     scheduled(nil),
			reason: contract.ReasonCapacity, message: []string{"no GPU is free"},
		},
		"would grow, free GPUs given elsewhere": {
			in:     scheduled(func(in *ExplainInput) { in.FreeGPUs = 2 }),
			reason: contract.ReasonFairShare, message: []string{"fitness"},
		},
		"no gain from one more": {
			// A job whose all-reduce dominates: more GPUs do not help.
			in: scheduled(func(in *ExplainInput) {
				f := testFit()
				f.Perf.AlphaN, f.Perf.BetaN, f.Perf.AlphaR, f.Perf.BetaR = 5, 5, 5, 5
				in.Fit, in.Bounds.MaxBatchSize = f, 128
				in.GPUs, in.BatchSize = 1, 128
			}),
			reason: contract.ReasonGoodput, message: []string{"1 GPU: speedup"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			x := Explain(tc.in)
			if x.Reason != tc.reason || x.Key != tc.key {
				t.Fatalf("reason %q key %q, want %q %q (message %q, %+v)", x.Reason, x.Key, tc.reason, tc.key, x.Message, x)
			}
			for _, s := range tc.message {
				if !strings.Contains(x.Message, s) {
					t.Errorf("message %q lacks %q", x.Message, s)
				}
			}
		})
	}
}

// The numbers behind a scheduled job's explanation are the model's: the
// speedups are goodputs over the fair-share base of the policy.
func TestExplainNumbers(t *testing.T) {
	f := testFit()
	in := ExplainInput{State: StateScheduled, Fit: f, Bounds: testBounds, GPUs: 3, Nodes: 2, BatchSize: 768,
		MinGPUs: 1, MaxGPUs: 8, FreeGPUs: 1, PolicyGPUs: 8, PolicyNodes: 2, PolicyJobs: 3}
	x := Explain(in)
	if x.FairShareGPUs != 3 || x.FairShareNodes != 1 {
		t.Fatalf("fair share %d GPUs on %d nodes, want 3 on 1 (ceil(8/3), ceil(2/8))", x.FairShareGPUs, x.FairShareNodes)
	}
	base := f.Optimize(1, 3, testBounds).Goodput
	want := map[string][2]float64{
		"base":       {x.BaseGoodput, base},
		"goodput":    {x.Goodput, f.Optimize(2, 3, testBounds).Goodput},
		"speedup":    {x.Speedup, f.Optimize(2, 3, testBounds).Goodput / base},
		"one less":   {x.SpeedupLess, f.Optimize(2, 2, testBounds).Goodput / base},
		"one more":   {x.SpeedupMore, f.Optimize(2, 4, testBounds).Goodput / base},
		"efficiency": {x.Efficiency, model.Efficiency(f.Grad, 128, 768)},
	}
	for name, v := range want {
		// The explanation keeps 4 significant digits.
		if !(v[1] > 0) || math.Abs(v[0]-v[1]) > 5e-4*v[1] {
			t.Errorf("%s = %g, want %g to 4 digits (positive)", name, v[0], v[1])
		}
	}
	if !(x.SpeedupLess < x.Speedup) {
		t.Errorf("speedup at 2 GPUs %g not below 3 GPUs %g", x.SpeedupLess, x.Speedup)
	}
}

func TestFairShare(t *testing.T) {
	for name, tc := range map[string]struct{ gpus, nodes, jobs, k, n int }{
		"more GPUs than jobs":   {64, 16, 30, 3, 1},
		"more jobs than GPUs":   {8, 2, 20, 1, 1},
		"fewer GPUs than nodes": {2, 4, 1, 2, 2},
		"nothing to share":      {0, 2, 3, 0, 0},
		"no jobs":               {8, 2, 0, 0, 0},
	} {
		t.Run(name, func(t *testing.T) {
			if k, n := FairShare(tc.gpus, tc.nodes, tc.jobs); k != tc.k || n != tc.n {
				t.Errorf("FairShare(%d, %d, %d) = %d, %d, want %d, %d", tc.gpus, tc.nodes, tc.jobs, k, n, tc.k, tc.n)
			}
		})
	}
}

func TestSpeedupCurve(t *testing.T) {
	f := testFit()
	base := f.Optimize(1, 1, testBounds).Goodput
	curve := SpeedupCurve(*f, testBounds, base, 8, 4)
	if len(curve) != 8 {
		t.Fatalf("%d points, want 8", len(curve))
	}
	for i, p := range curve {
		wantNodes := 1
		if p.GPUs > 4 {
			wantNodes = 2
		}
		if p.GPUs != i+1 || p.Nodes != wantNodes {
			t.Errorf("point %d: %d GPUs on %d nodes, want %d on %d", i, p.GPUs, p.Nodes, i+1, wantNodes)
		}
		if g := f.Optimize(p.Nodes, p.GPUs, testBounds).Goodput; p.Goodput != g || math.Abs(p.Speedup-g/base) > 1e-12 {
			t.Errorf("point %d: goodput %g speedup %g, want %g %g", i, p.Goodput, p.Speedup, g, g/base)
		}
	}
	if curve[0].Speedup != 1 {
		t.Errorf("speedup on 1 GPU over the 1-GPU base = %g, want 1", curve[0].Speedup)
	}
	if none := SpeedupCurve(*f, testBounds, 0, 3, 4); none[2].Speedup != 0 || none[2].Goodput == 0 {
		t.Errorf("without a base: %+v, want goodput and no speedup", none[2])
	}
}

// TestCapByExploration names explore_start for a job with no profile and
// explore_factor once it has one.
func TestCapByExploration(t *testing.T) {
	cfg := DefaultConfig()
	e := &entry{spec: Spec{MaxBatchSize: 1024, LocalBszMin: 1}, state: &State{}}
	if got := capBy(cfg, e, 32, 4); got != "explore_start 4 (no profile yet)" {
		t.Errorf("no profile: cap by %q", got)
	}
	e.state.MaxProfiled = 2
	if got := capBy(cfg, e, 32, 8); got != "explore_factor 4 × the 2 GPUs profiled" {
		t.Errorf("profiled on 2: cap by %q", got)
	}
	e.state.MaxProfiled = 1
	cfg.ExploreFactor = 2
	if got := capBy(cfg, e, 32, 4); got != "explore_start 4" {
		t.Errorf("profiled on 1, explore_factor 2: cap by %q", got)
	}
	e.state.MaxProfiled = 0
	cfg.ExploreStart = 1
	if got := capBy(cfg, e, 32, 1); got != "explore_start 1 (no profile yet)" {
		t.Errorf("explore_start 1: cap by %q", got)
	}
}
