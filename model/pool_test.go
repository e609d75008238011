package model

import (
	"fmt"
	"math"
	"sync"
	"testing"
)

// truePoint is the step time of a known throughput model at a
// configuration, as a worker would report it.
func truePoint(p PerfParams, nodes, k int, m float64) ProfilePoint {
	return ProfilePoint{Nodes: nodes, Replicas: k, LocalBsz: m,
		AccumStepTime: p.AccumStepTime(m), OptimStepTime: p.OptimStepTime(nodes, k, m)}
}

func TestProfilePoolAddDedup(t *testing.T) {
	var pool ProfilePool
	p := PerfParams{AlphaC: 0.01, BetaC: 0.002, AlphaN: 0.05, BetaN: 0.001, AlphaR: 0.01, BetaR: 0.0005, Gamma: 1.5}
	pts := []ProfilePoint{truePoint(p, 1, 1, 32), truePoint(p, 1, 4, 32)}
	if n := pool.Add("resnet", "a100", pts); n != 2 {
		t.Errorf("first Add = %d, want 2", n)
	}
	// The same configurations from another job add nothing; a new one does.
	again := append(pts, truePoint(p, 2, 8, 32))
	if n := pool.Add("resnet", "a100", again); n != 1 {
		t.Errorf("second Add = %d, want 1 (two seen configurations)", n)
	}
	if n := pool.Len("resnet", "a100"); n != 3 {
		t.Errorf("Len = %d, want 3", n)
	}
	// Keys and types are separate sets; an empty key and invalid points
	// add nothing.
	if pool.Len("resnet", "t4") != 0 || pool.Len("bert", "a100") != 0 {
		t.Error("points leaked into another type or key")
	}
	if n := pool.Add("", "a100", pts); n != 0 {
		t.Errorf("Add with an empty key = %d, want 0", n)
	}
	bad := []ProfilePoint{
		{Nodes: 1, Replicas: 1, LocalBsz: 16, AccumStepTime: 0, OptimStepTime: 1},
		{Nodes: 2, Replicas: 1, LocalBsz: 16, AccumStepTime: 1, OptimStepTime: 1},
		{Nodes: 1, Replicas: 1, LocalBsz: 16, AccumStepTime: 1, OptimStepTime: math.Inf(1)},
		{Nodes: 1, Replicas: 1, LocalBsz: math.NaN(), AccumStepTime: 1, OptimStepTime: 1},
	}
	if n := pool.Add("resnet", "t4", bad); n != 0 || pool.Len("resnet", "t4") != 0 {
		t.Errorf("Add of invalid points = %d, want 0", n)
	}
	// A nil pool holds nothing.
	var none *ProfilePool
	if none.Add("resnet", "a100", pts) != 0 || none.Len("resnet", "a100") != 0 {
		t.Error("nil pool is not empty")
	}
	if _, _, ok := none.Fit("resnet", "a100"); ok {
		t.Error("nil pool fitted")
	}
	if _, _, ok := pool.Fit("bert", "a100"); ok {
		t.Error("Fit of a key without points succeeded")
	}
}

func TestProfilePoolBound(t *testing.T) {
	var pool ProfilePool
	p := PerfParams{AlphaC: 0.01, BetaC: 0.002, AlphaN: 0.05, BetaN: 0.001, AlphaR: 0.01, BetaR: 0.0005, Gamma: 1.5}
	var pts []ProfilePoint
	for m := 1; m <= PoolMaxPoints+10; m++ {
		pts = append(pts, truePoint(p, 1, 1, float64(m)))
	}
	if n := pool.Add("k", "", pts); n != PoolMaxPoints {
		t.Errorf("Add = %d, want the bound %d", n, PoolMaxPoints)
	}
}

func TestProfilePoolEvictsLeastRecent(t *testing.T) {
	var pool ProfilePool
	pt := []ProfilePoint{{Nodes: 1, Replicas: 1, LocalBsz: 16, AccumStepTime: 0.1, OptimStepTime: 0.1}}
	for i := range PoolMaxSets {
		pool.Add(fmt.Sprint("m", i), "t4", pt)
	}
	// m0 is used again; the next new set evicts m1, the least recent.
	pool.Add("m0", "t4", []ProfilePoint{{Nodes: 1, Replicas: 2, LocalBsz: 16, AccumStepTime: 0.1, OptimStepTime: 0.2}})
	pool.Add("new", "t4", pt)
	if pool.Len("m0", "t4") != 2 || pool.Len("new", "t4") != 1 || pool.Len("m1", "t4") != 0 || pool.Len("m2", "t4") != 1 {
		t.Errorf("after eviction: m0 %d, new %d, m1 %d, m2 %d points; want 2, 1, 0 (evicted), 1",
			pool.Len("m0", "t4"), pool.Len("new", "t4"), pool.Len("m1", "t4"), pool.Len("m2", "t4"))
	}
}

// TestProfilePoolFit: two jobs of one model measured different
// configurations (one on a single node, one across nodes); the pooled fit
// predicts the cross-node step times the first job never measured far
// better than its own fit does, and the fit is cached until points are
// added.
func TestProfilePoolFit(t *testing.T) {
	truth := PerfParams{AlphaC: 0.02, BetaC: 0.004, AlphaN: 0.15, BetaN: 0.004, AlphaR: 0.01, BetaR: 0.0008, Gamma: 1.8}
	var own, other []ProfilePoint
	for _, k := range []int{1, 2, 4} {
		for _, m := range []float64{16, 64} {
			own = append(own, truePoint(truth, 1, k, m))
		}
	}
	for _, c := range [][2]int{{2, 8}, {4, 16}} {
		for _, m := range []float64{16, 64} {
			other = append(other, truePoint(truth, c[0], c[1], m))
		}
	}
	ownFit, err := FitPerfParams(own)
	if err != nil {
		t.Fatal(err)
	}
	var pool ProfilePool
	pool.Add("m", "v100", own)
	pool.Add("m", "v100", other)
	pooled, n, ok := pool.Fit("m", "v100")
	if !ok || n != len(own)+len(other) {
		t.Fatalf("Fit = %v, %d points; want ok with %d", ok, n, len(own)+len(other))
	}
	relErr := func(p PerfParams) float64 {
		worst := 0.0
		for _, c := range [][2]int{{2, 8}, {4, 16}, {8, 32}} {
			want := truth.OptimStepTime(c[0], c[1], 32)
			worst = max(worst, math.Abs(p.OptimStepTime(c[0], c[1], 32)-want)/want)
		}
		return worst
	}
	if e := relErr(pooled); e > 0.05 {
		t.Errorf("pooled fit's cross-node error %.3f, want within 5%%", e)
	}
	if relErr(pooled) >= relErr(ownFit) {
		t.Errorf("pooled fit (error %.3f) is no better than the job's own (%.3f)", relErr(pooled), relErr(ownFit))
	}
	again, _, _ := pool.Fit("m", "v100")
	if again != pooled {
		t.Error("a second Fit without new points gave another model")
	}
}

func TestProfilePoolConcurrent(t *testing.T) {
	var pool ProfilePool
	p := PerfParams{AlphaC: 0.01, BetaC: 0.002, AlphaN: 0.05, BetaN: 0.001, AlphaR: 0.01, BetaR: 0.0005, Gamma: 1.5}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 1; k <= 8; k++ {
				pool.Add("m", "t4", []ProfilePoint{truePoint(p, 1, k, float64(16*(w+1)))})
				pool.Fit("m", "t4")
			}
		}()
	}
	wg.Wait()
	if n := pool.Len("m", "t4"); n != 64 {
		t.Errorf("Len = %d after 64 distinct concurrent points", n)
	}
}
