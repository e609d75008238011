package model

import (
	"math"
	"testing"
)

// constGoodput is a goodput model for tests: g(nodes, replicas).
type constGoodput func(nodes, replicas int) float64

func (f constGoodput) Goodput(nodes, replicas int) float64 { return f(nodes, replicas) }

func TestProjected(t *testing.T) {
	var gotNodes int
	src := constGoodput(func(n, k int) float64 { gotNodes = n; return float64(10 * k) })
	p := &Projected{Source: src, Ratio: 2.5, SourceGPUsPerNode: 4}
	if g := p.Goodput(1, 6); g != 150 || gotNodes != 2 {
		t.Errorf("Goodput(1, 6) = %v on %d source nodes, want 150 on 2", g, gotNodes)
	}
	if g := p.Goodput(0, 0); g != 0 {
		t.Errorf("Goodput(0, 0) = %v", g)
	}
	if !p.Bootstrapped() {
		t.Error("Projected is not Bootstrapped")
	}
}

// TestBootstrapPerf: two one-GPU probes on a target that computes twice as
// fast give its compute terms exactly; the network terms follow the
// NetworkScale (kept, learned, clamped, or scaled with the compute).
func TestBootstrapPerf(t *testing.T) {
	src := PerfParams{AlphaC: 0.1, BetaC: 0.01, AlphaN: 0.2, BetaN: 0.02, AlphaR: 0.05, BetaR: 0.005, Gamma: 2}
	tgt := src
	tgt.AlphaC, tgt.BetaC = 0.05, 0.005
	probe := func(m float64) ProfilePoint {
		return ProfilePoint{Nodes: 1, Replicas: 1, LocalBsz: m, AccumStepTime: tgt.AccumStepTime(m), OptimStepTime: tgt.AccumStepTime(m)}
	}
	probes := []ProfilePoint{probe(8), probe(64), {Nodes: 1, Replicas: 4, LocalBsz: 8, AccumStepTime: 9, OptimStepTime: 9}}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) }
	for name, tc := range map[string]struct {
		net          NetworkScale
		inter, intra float64
	}{
		"keep":          {NetworkScale{Inter: 1, Intra: 1}, 1, 1},
		"learned":       {NetworkScale{Inter: 0.5, Intra: 1.2}, 0.5, 1.2},
		"clamped":       {NetworkScale{Inter: 100, Intra: 0.001}, 0.5 * networkClamp, 0.5 / networkClamp},
		"compute ratio": {NetworkScale{}, 0.5, 0.5},
	} {
		got, err := BootstrapPerf(src, probes, tc.net)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !near(got.AlphaC, 0.05) || !near(got.BetaC, 0.005) {
			t.Errorf("%s: compute (%v, %v), want (0.05, 0.005)", name, got.AlphaC, got.BetaC)
		}
		if !near(got.AlphaN, 0.2*tc.inter) || !near(got.BetaN, 0.02*tc.inter) || !near(got.AlphaR, 0.05*tc.intra) || !near(got.BetaR, 0.005*tc.intra) || got.Gamma != 2 {
			t.Errorf("%s: network %+v, want inter x%v intra x%v of the source", name, got, tc.inter, tc.intra)
		}
	}
	// One probe: the source's compute scaled by the measured ratio.
	one, err := BootstrapPerf(src, probes[:1], NetworkScale{Inter: 1, Intra: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r := tgt.AccumStepTime(8) / src.AccumStepTime(8); !near(one.AlphaC, src.AlphaC*r) || !near(one.AccumStepTime(8), tgt.AccumStepTime(8)) {
		t.Errorf("one probe: %+v", one)
	}
	if _, err := BootstrapPerf(src, probes[2:], NetworkScale{}); err == nil {
		t.Error("no one-GPU probe: no error")
	}
}

func TestNetworkScaleBetween(t *testing.T) {
	a := PerfParams{AlphaC: 0.1, BetaC: 0.01, AlphaN: 0.2, BetaN: 0.02, AlphaR: 0.05, BetaR: 0.005, Gamma: 1}
	fast := a
	fast.AlphaN, fast.BetaN, fast.AlphaR, fast.BetaR = 0.1, 0.01, 0.01, 0.001
	odd := a
	odd.AlphaN, odd.BetaN = 20, 2 // one badly determined fit
	got := NetworkScaleBetween([][2]PerfParams{{a, fast}, {a, fast}, {a, odd}})
	if math.Abs(got.Inter-0.5) > 1e-12 || math.Abs(got.Intra-0.2) > 1e-12 {
		t.Errorf("NetworkScaleBetween = %+v, want the median ratios {0.5 0.2}", got)
	}
	if z := NetworkScaleBetween(nil); z != (NetworkScale{}) {
		t.Errorf("no pairs: %+v", z)
	}
}

// TestFitTyped: a type with points is fitted on them, a type with probes
// only is bootstrapped from the type with the most points, a type with
// neither is absent.
func TestFitTyped(t *testing.T) {
	truth := PerfParams{AlphaC: 0.1, BetaC: 0.01, AlphaN: 0.2, BetaN: 0.02, AlphaR: 0.05, BetaR: 0.005, Gamma: 1.5}
	pt := func(p PerfParams, n, k int, m float64) ProfilePoint {
		return ProfilePoint{Nodes: n, Replicas: k, LocalBsz: m, AccumStepTime: p.AccumStepTime(m), OptimStepTime: p.OptimStepTime(n, k, m)}
	}
	points := map[string][]ProfilePoint{
		"t4":   {pt(truth, 1, 1, 16), pt(truth, 1, 2, 16), pt(truth, 1, 4, 32), pt(truth, 2, 8, 32)},
		"v100": {pt(truth, 1, 1, 16)},
	}
	probes := map[string][]ProfilePoint{"a100": {pt(truth, 1, 1, 8), pt(truth, 1, 1, 64)}}
	got, err := FitTyped(points, probes, []string{"v100", "t4", "a100", "rtx6000"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got["t4"].Source != "" || got["v100"].Source != "" || got["a100"].Source != "t4" {
		t.Fatalf("FitTyped = %+v: want t4 and v100 fitted, a100 bootstrapped from t4, no rtx6000", got)
	}
	if err := got["a100"].Perf.Validate(); err != nil {
		t.Error(err)
	}
	if _, err := FitTyped(map[string][]ProfilePoint{"t4": {{Nodes: 0}}}, nil, []string{"t4"}, nil); err == nil {
		t.Error("a bad point: no error")
	}
}
