package jobs

import (
	"math"
	"testing"

	"github.com/hashicorp/go-hclog"

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
// speed ratio, keeps the synchronisation terms without an estimate and
// scales them by the estimate from jobs fitted on both types.
func TestSpeedRatioBootstrap(t *testing.T) {
	src := model.PerfParams{AlphaC: 0.02, BetaC: 0.001, AlphaN: 0.05, BetaN: 0.01, AlphaR: 0.01, BetaR: 0.002, Gamma: 1.5}
	fitted := map[string]TypedFit{"t4": {Perf: src, Points: 5}, "v100": {Perf: src, Points: 2}}
	speed := DefaultConfig().speed
	got := SpeedRatioBootstrap(fitted, "a100", speed, nil)
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
	if !near(got.AlphaC, src.AlphaC/2) || !near(got.BetaC, src.BetaC/2) {
		t.Errorf("compute terms %g, %g: want the t4 fit's halved (a100 speed 2)", got.AlphaC, got.BetaC)
	}
	if got.AlphaN != src.AlphaN || got.BetaR != src.BetaR || got.Gamma != src.Gamma {
		t.Errorf("sync terms changed without an estimate: %+v", got)
	}
	net := func(s, d string) model.NetworkScale {
		if s == "t4" && d == "a100" {
			return model.NetworkScale{Inter: 0.5, Intra: 0.75}
		}
		return model.NetworkScale{}
	}
	got = SpeedRatioBootstrap(fitted, "a100", speed, net)
	if !near(got.AlphaN, src.AlphaN*0.5) || !near(got.AlphaR, src.AlphaR*0.75) {
		t.Errorf("sync terms %g, %g: want the estimate's 0.5 and 0.75", got.AlphaN, got.AlphaR)
	}
}
