package model

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The reference outputs in testdata/artifact-golden.json come from
// testdata/artifact_golden.py, which runs the artifact's fitting recipe
// with SciPy's L-BFGS-B and its batch-size search (see that script).

type goldenFile struct {
	Fits     []goldenFit    `json:"fits"`
	Searches []goldenSearch `json:"searches"`
}

type goldenFit struct {
	App    string       `json:"app"`
	Kind   string       `json:"kind"`
	Points [][5]float64 `json:"points"`
	Params []float64    `json:"params"`
	Loss   float64      `json:"loss"`
}

type goldenSearch struct {
	App          string    `json:"app"`
	Params       []float64 `json:"params"`
	Sqr          float64   `json:"sqr"`
	Var          float64   `json:"var"`
	M0           float64   `json:"m0"`
	MaxBatch     int       `json:"max_batch"`
	MinLocal     int       `json:"min_local"`
	MaxLocal     int       `json:"max_local"`
	Accumulation bool      `json:"accumulation"`
	Nodes        int       `json:"nodes"`
	Replicas     int       `json:"replicas"`
	Goodput      float64   `json:"goodput"`
	LocalBsz     int       `json:"local_bsz"`
	AccumSteps   int       `json:"accum_steps"`
}

func readGolden(t *testing.T) goldenFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "artifact-golden.json"))
	if err != nil {
		t.Fatalf("failed to read golden file: %v", err)
	}
	var g goldenFile
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatalf("failed to decode golden file: %v", err)
	}
	return g
}

// points returns the profile that the fit was made on: the stored points of
// a subset, or those derived from the application's trace rows.
func (gf goldenFit) points(t *testing.T, rows []traceRow) []ProfilePoint {
	t.Helper()
	switch gf.Kind {
	case "all-rows":
		return allPoints(rows)
	case "at-most-8-gpus":
		return firstPoints(slices.DeleteFunc(slices.Clone(rows), func(r traceRow) bool { return r.replicas > 8 }))
	case "subset":
		pts := make([]ProfilePoint, len(gf.Points))
		for i, p := range gf.Points {
			pts[i] = ProfilePoint{Nodes: int(p[0]), Replicas: int(p[1]), LocalBsz: p[2], AccumStepTime: p[3], OptimStepTime: p[4]}
		}
		return pts
	default:
		t.Fatalf("golden fit of unknown kind %q", gf.Kind)
		return nil
	}
}

func paramsOf(v []float64) PerfParams {
	return PerfParams{AlphaC: v[0], BetaC: v[1], AlphaN: v[2], BetaN: v[3], AlphaR: v[4], BetaR: v[5], Gamma: v[6]}
}

// TestOptimizeMatchesArtifact checks the batch-size search against the
// artifact's algorithm on every application's reference parameters: the
// same micro-batch and accumulation steps, and the same goodput to 1e−9
// relative.
func TestOptimizeMatchesArtifact(t *testing.T) {
	const tol = 1e-9
	g := readGolden(t)
	if len(g.Searches) == 0 {
		t.Fatal("golden file has no searches")
	}
	for _, s := range g.Searches {
		f := GoodputFunc{Perf: paramsOf(s.Params), Grad: GradParams{Sqr: s.Sqr, Var: s.Var}, InitBatchSize: s.M0}
		b := Bounds{MaxBatchSize: s.MaxBatch, MinLocalBsz: s.MinLocal, MaxLocalBsz: s.MaxLocal, Accumulation: s.Accumulation}
		got := f.Optimize(s.Nodes, s.Replicas, b)
		want := Choice{Goodput: s.Goodput, LocalBsz: s.LocalBsz, AccumSteps: s.AccumSteps, BatchSize: s.Replicas * s.LocalBsz * (s.AccumSteps + 1)}
		if got.LocalBsz != want.LocalBsz || got.AccumSteps != want.AccumSteps || got.BatchSize != want.BatchSize ||
			math.Abs(got.Goodput-want.Goodput) > tol*want.Goodput {
			t.Errorf("%s N=%d K=%d accumulation=%v: got %+v, want %+v", s.App, s.Nodes, s.Replicas, s.Accumulation, got, want)
		}
	}
}

// TestFitMatchesArtifact compares FitPerfParams with SciPy's fits of the
// same profiles. Both minimise the same loss from the same start; the
// minimisers differ, so the test checks that the loss reached is as low
// (within 1e−3) in at least 95% of the profiles and never above twice the
// artifact's, and logs how far the two models' predictions are apart over
// every configuration of the application.
func TestFitMatchesArtifact(t *testing.T) {
	g := readGolden(t)
	traces := map[string][]traceRow{}
	var worse int
	var diffs []float64
	for i, gf := range g.Fits {
		if traces[gf.App] == nil {
			traces[gf.App] = readPlacements(t, gf.App)
		}
		pts := gf.points(t, traces[gf.App])
		prob := newFitProblem(pts)
		theta, err := prob.solve()
		if err != nil {
			t.Fatalf("fit %d (%s): %v", i, gf.App, err)
		}
		var grad [numParams]float64
		loss := prob.loss(&theta, &grad)
		if loss > gf.Loss+1e-3 {
			worse++
			t.Logf("fit %d (%s, %d points): loss %.5f, artifact %.5f", i, gf.App, len(pts), loss, gf.Loss)
		}
		if loss > 2*gf.Loss+1e-3 {
			t.Errorf("fit %d (%s, %d points): loss %.5f, more than twice the artifact's %.5f", i, gf.App, len(pts), loss, gf.Loss)
		}
		got, err := FitPerfParams(pts)
		if err != nil {
			t.Fatalf("fit %d (%s): %v", i, gf.App, err)
		}
		want := paramsOf(gf.Params)
		d := maxPredictionDiff(got, want, firstPoints(traces[gf.App]))
		diffs = append(diffs, d)
		if gf.Kind != "subset" {
			t.Logf("%s %s: loss %.5f (artifact %.5f); max prediction difference %.1f%%\n  got  %+.4g\n  want %+.4g",
				gf.App, gf.Kind, loss, gf.Loss, 100*d, got, want)
		}
	}
	if limit := len(g.Fits) / 20; worse > limit {
		t.Errorf("%d of %d fits end above the artifact's loss by more than 1e-3, want at most %d", worse, len(g.Fits), limit)
	}
	slices.Sort(diffs)
	q := func(p float64) float64 { return 100 * diffs[int(p*float64(len(diffs)-1))] }
	t.Logf("%d fits, %d above the artifact's loss; max prediction difference per fit: p50 %.2f%%, p75 %.2f%%, p90 %.1f%%, max %.1f%%",
		len(g.Fits), worse, q(0.5), q(0.75), q(0.9), q(1))
}

// maxPredictionDiff is the largest relative difference between the
// iteration times (s = 0) that a and b predict at the points'
// configurations.
func maxPredictionDiff(a, b PerfParams, pts []ProfilePoint) float64 {
	d := 0.0
	for _, p := range pts {
		ta := a.IterTime(p.Nodes, p.Replicas, p.LocalBsz, 0)
		tb := b.IterTime(p.Nodes, p.Replicas, p.LocalBsz, 0)
		d = math.Max(d, math.Abs(ta/tb-1))
	}
	return d
}
