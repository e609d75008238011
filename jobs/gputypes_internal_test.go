package jobs

import (
	"math"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/model"
	"github.com/pollux-nomad/pollux/policy"
)

// TestKeepOneTypeForTypeAwarePolicy: a type-aware policy's allocation is
// kept as it is when it lies on one type, and one that mixes types (a bug
// in the policy) is trimmed to the type holding most of its GPUs.
func TestKeepOneTypeForTypeAwarePolicy(t *testing.T) {
	c := &Controller{log: hclog.NewNullLogger()}
	cfg := DefaultConfig()
	cfg.GPUTypeSource = GPUTypeFromDevice
	r := &round{cfg: cfg, in: policy.Input{
		Nodes: []policy.Node{{ID: "a", GPUs: 4, Type: "t4"}, {ID: "b", GPUs: 4, Type: "a100"}, {ID: "c", GPUs: 4, Type: "a100"}},
		Jobs:  []policy.Job{{ID: "one", MinReplicas: 1}, {ID: "split", MinReplicas: 1}, {ID: "tiny", MinReplicas: 3}},
	}, next: policy.Allocations{
		"one":   {"b", "b", "c"},
		"split": {"a", "b", "b", "c"},
		"tiny":  {"a", "a", "b"},
	}}
	c.keepOneType(r, nil)
	want := map[string][]string{"one": {"b", "b", "c"}, "split": {"b", "b", "c"}, "tiny": nil}
	for id, w := range want {
		if !policy.Equal(r.next[id], w) {
			t.Errorf("%s: %v, want %v", id, r.next[id], w)
		}
	}
}

// TestSpeedRatioBootstrap: the prediction divides the compute terms by the
// hint's speedup and scales the synchronisation terms by its network
// estimate (keeps them without one).
func TestSpeedRatioBootstrap(t *testing.T) {
	src := model.PerfParams{AlphaC: 0.02, BetaC: 0.001, AlphaN: 0.05, BetaN: 0.01, AlphaR: 0.01, BetaR: 0.002, Gamma: 1.5}
	fitted := map[string]TypedFit{"t4": {Perf: src, Points: 5}, "v100": {Perf: src, Points: 2}}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
	var asked [2]string
	prior := func(s, d string) TypeHint { asked = [2]string{s, d}; return TypeHint{Speedup: 2} }
	got := SpeedRatioBootstrap(fitted, "a100", prior)
	if asked != [2]string{"t4", "a100"} {
		t.Errorf("hint asked for %v, want the most profiled type t4 to a100", asked)
	}
	if !near(got.AlphaC, src.AlphaC/2) || !near(got.BetaC, src.BetaC/2) {
		t.Errorf("compute terms %g, %g: want the t4 fit's halved", got.AlphaC, got.BetaC)
	}
	if got.AlphaN != src.AlphaN || got.BetaR != src.BetaR || got.Gamma != src.Gamma {
		t.Errorf("sync terms changed without an estimate: %+v", got)
	}
	got = SpeedRatioBootstrap(fitted, "a100", func(string, string) TypeHint {
		return TypeHint{Speedup: 4, Measured: true, Net: model.NetworkScale{Inter: 0.5, Intra: 0.75}}
	})
	if !near(got.BetaC, src.BetaC/4) || !near(got.AlphaN, src.AlphaN*0.5) || !near(got.AlphaR, src.AlphaR*0.75) {
		t.Errorf("with a measured hint: %+v", got)
	}
}

// TestTypeHints: the speedup between two types is the prior's ratio until
// a job has fits on both, then the median of the jobs' measured ratios.
func TestTypeHints(t *testing.T) {
	cfg := DefaultConfig()
	base := model.PerfParams{AlphaC: 0.02, BetaC: 0.001, AlphaN: 0.05, BetaN: 0.01, AlphaR: 0.01, BetaR: 0.002, Gamma: 1}
	faster := func(x float64) contract.PerfParams {
		p := base
		p.AlphaC, p.BetaC = p.AlphaC/x, p.BetaC/x
		return contract.PerfParams(p)
	}
	job := func(typed map[string]contract.TypedPerf) *entry { return &entry{state: &State{Typed: typed}} }
	h := typeHints(cfg, []*entry{job(map[string]contract.TypedPerf{"t4": {Perf: faster(1)}})})("t4", "a100")
	if h.Measured || h.Speedup != 2 {
		t.Errorf("prior hint %+v, want speedup 2 (a100 2 / t4 1)", h)
	}
	entries := []*entry{
		job(map[string]contract.TypedPerf{"t4": {Perf: faster(1)}, "a100": {Perf: faster(3)}}),
		job(map[string]contract.TypedPerf{"t4": {Perf: faster(1)}, "a100": {Perf: faster(5)}}),
		job(map[string]contract.TypedPerf{"t4": {Perf: faster(1)}, "a100": {Perf: faster(4)}}),
	}
	h = typeHints(cfg, entries)("t4", "a100")
	if !h.Measured || math.Abs(h.Speedup-4) > 1e-9 {
		t.Errorf("measured hint %+v, want the median speedup 4", h)
	}
	if back := typeHints(cfg, entries)("a100", "t4"); math.Abs(back.Speedup-0.25) > 1e-9 {
		t.Errorf("reverse hint %+v, want 0.25", back)
	}
}
