package sim_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/pollux-nomad/pollux/apps"
	"github.com/pollux-nomad/pollux/model"
	"github.com/pollux-nomad/pollux/results"
	"github.com/pollux-nomad/pollux/sim"
)

// gpusPerNode of the profiled machines (Sia's simulator_config.py).
var gpusPerNode = map[string]int{"t4": 4, "v100": 8, "a100": 8, "rtx6000": 4, "rtx2080ti": 8}

// bootstrapErrors predicts, for every application and every ordered pair
// of GPU types (source, target), the step time of every measured placement
// row of the target from a model fitted to all the source's measured rows,
// and returns the relative errors |predicted − measured| / measured of
// each method: "sia" (the source model's throughput at the same GPUs on
// the fewest source nodes times the ratio of one-GPU throughputs,
// model.Projected), "keep" and "scale" (model.BootstrapPerf from one-GPU
// probes at the target's smallest and largest micro-batch, network terms
// kept, scaled with the compute, or "learn": scaled as the other
// applications' fits on both types say, model.NetworkScaleBetween, leaving
// this application out), and "own" (a model fitted to the target's own rows: the
// floor).
func bootstrapErrors(t *testing.T, byTarget bool) map[string][]float64 {
	t.Helper()
	all, err := sim.LoadTypedApplications(sim.RulesSia)
	if err != nil {
		t.Fatal(err)
	}
	errs := map[string][]float64{}
	add := func(key string, pred, truth float64) {
		errs[key] = append(errs[key], math.Abs(pred-truth)/truth)
	}
	types := []string{"t4", "v100", "a100", "rtx6000", "rtx2080ti"}
	allFits := map[string]map[string]model.PerfParams{}
	for _, name := range apps.Names() {
		a := all[name]
		fits := map[string]model.PerfParams{}
		allFits[name] = fits
		for _, ty := range types {
			var pts []model.ProfilePoint
			for _, m := range a.Measured(ty) {
				k := 0
				for _, g := range m.Placement {
					k += g
				}
				pts = append(pts, model.ProfilePoint{Nodes: len(m.Placement), Replicas: k, LocalBsz: float64(m.LocalBsz),
					AccumStepTime: math.Max(m.StepTime-m.SyncTime, 1e-6), OptimStepTime: m.StepTime})
			}
			p, err := model.FitPerfParams(pts)
			if err != nil {
				t.Fatalf("%s on %s: %v", name, ty, err)
			}
			fits[ty] = p
		}
	}
	for _, name := range apps.Names() {
		a, fits := all[name], allFits[name]
		for _, tgt := range types {
			lo, hi, _ := a.LocalBszBounds(tgt)
			var probes []model.ProfilePoint
			for _, m := range []int{lo, hi} {
				if mx, ok := a.MaxLocalBszMeasured(tgt, []int{1}); ok {
					m = min(m, mx)
				}
				step, sync, err := a.ThroughputOn(tgt, []int{1}, m)
				if err != nil {
					continue
				}
				probes = append(probes, model.ProfilePoint{Nodes: 1, Replicas: 1, LocalBsz: float64(m), AccumStepTime: step - sync, OptimStepTime: step})
			}
			for _, src := range types {
				if src == tgt {
					continue
				}
				keep, err1 := model.BootstrapPerf(fits[src], probes, model.NetworkScale{Inter: 1, Intra: 1})
				scale, err2 := model.BootstrapPerf(fits[src], probes, model.NetworkScale{})
				// The interconnect from the other applications' fits on
				// both types (leave this one out).
				var pairs [][2]model.PerfParams
				for _, other := range apps.Names() {
					if other != name {
						pairs = append(pairs, [2]model.PerfParams{allFits[other][src], allFits[other][tgt]})
					}
				}
				learned, err3 := model.BootstrapPerf(fits[src], probes, model.NetworkScaleBetween(pairs))
				if err1 != nil || err2 != nil || err3 != nil {
					t.Fatalf("%s %s->%s: %v %v %v", name, src, tgt, err1, err2, err3)
				}
				ratio := a.OneGPUThroughput(tgt) / a.OneGPUThroughput(src)
				suffix := ""
				if byTarget {
					suffix = " " + tgt
				}
				for _, m := range a.Measured(tgt) {
					k := 0
					for _, g := range m.Placement {
						k += g
					}
					n, mb := len(m.Placement), float64(m.LocalBsz)
					nSrc := (k + gpusPerNode[src] - 1) / gpusPerNode[src]
					add("sia"+suffix, fits[src].OptimStepTime(nSrc, k, mb)/ratio, m.StepTime)
					add("keep"+suffix, keep.OptimStepTime(n, k, mb), m.StepTime)
					add("scale"+suffix, scale.OptimStepTime(n, k, mb), m.StepTime)
					add("learn"+suffix, learned.OptimStepTime(n, k, mb), m.StepTime)
					if src == types[0] || (tgt == types[0] && src == types[1]) {
						add("own"+suffix, fits[tgt].OptimStepTime(n, k, mb), m.StepTime)
					}
				}
			}
		}
	}
	return errs
}

// TestBootstrapPredictionError measures the error of the step times a
// job's model predicts on a GPU type it has not run on, against the
// measured profiles, and asserts that the bootstrap (one-GPU probes on the
// target, network terms of the source) is at least as accurate as Sia's
// throughput-ratio projection, in median and at the 90th percentile, and
// within 25% in median.
func TestBootstrapPredictionError(t *testing.T) {
	errs := bootstrapErrors(t, false)
	q := func(k string, p float64) float64 { return results.Quantile(errs[k], p) }
	var b strings.Builder
	for _, k := range []string{"own", "sia", "keep", "scale", "learn"} {
		fmt.Fprintf(&b, "%-6s n=%5d median %5.1f%%  mean %5.1f%%  p90 %5.1f%%\n", k, len(errs[k]), 100*q(k, 0.5), 100*mean(errs[k]), 100*q(k, 0.9))
	}
	per := bootstrapErrors(t, true)
	keys := make([]string, 0, len(per))
	for k := range per {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%-16s median %5.1f%%  p90 %5.1f%%\n", k, 100*results.Quantile(per[k], 0.5), 100*results.Quantile(per[k], 0.9))
	}
	t.Logf("relative step-time error on types not run on:\n%s", b.String())
	if q("learn", 0.5) > q("sia", 0.5) || q("learn", 0.9) > q("sia", 0.9) || mean(errs["learn"]) > mean(errs["sia"]) {
		t.Errorf("bootstrap median %.3f mean %.3f p90 %.3f is worse than Sia's projection %.3f / %.3f / %.3f",
			q("learn", 0.5), mean(errs["learn"]), q("learn", 0.9), q("sia", 0.5), mean(errs["sia"]), q("sia", 0.9))
	}
	if q("learn", 0.5) > 0.25 {
		t.Errorf("bootstrap median error %.3f above 25%%", q("learn", 0.5))
	}
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
