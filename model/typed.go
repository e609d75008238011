package model

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// GoodputSource is a goodput model per placement shape, as the policy
// package's GoodputModel (GoodputCache implements it).
type GoodputSource interface {
	Goodput(nodes, replicas int) float64
}

// Projected is Sia's bootstrapped goodput on a GPU type a job has not run
// on: the goodput of a type it has a model on, at the same number of GPUs
// packed on ceil(replicas / SourceGPUsPerNode) nodes of that type, times
// Ratio, the ratio of the application's one-GPU throughputs on the target
// and the source type (Sia SOSP '23; sia-simulator/sia.py,
// SiaPolicy._compute_goodputs_v2 with project_throughputs).
//
// It implements the policy package's GoodputModel; Bootstrapped tells a
// policy that wants to treat projections differently from fitted models.
type Projected struct {
	// Source is the model on the source type.
	Source GoodputSource
	// Ratio multiplies the source's goodput.
	Ratio float64
	// SourceGPUsPerNode is the GPUs per node of the source type.
	SourceGPUsPerNode int
}

// Goodput returns Source's goodput at replicas GPUs on the fewest source
// nodes, times Ratio; 0 for 0 replicas.
func (p *Projected) Goodput(nodes, replicas int) float64 {
	if replicas <= 0 {
		return 0
	}
	n := 1
	if p.SourceGPUsPerNode > 0 {
		n = int(math.Ceil(float64(replicas) / float64(p.SourceGPUsPerNode)))
	}
	return p.Source.Goodput(n, replicas) * p.Ratio
}

// Bootstrapped reports that the model is a prediction for a type the job
// has not run on, not a fit to its own measurements there.
func (p *Projected) Bootstrapped() bool { return true }

// NetworkScale multiplies a source type's synchronisation terms to
// predict them on another GPU type: Inter multiplies α_n and β_n (across
// nodes), Intra α_r and β_r (within a node). A zero field scales by the
// target/source ratio of the compute time at the probes' mean micro-batch
// (the whole step scales like the compute: Sia's assumption); 1 keeps the
// source's terms. NetworkScaleBetween estimates it from other jobs.
type NetworkScale struct {
	Inter, Intra float64
}

// NetworkScaleBetween estimates the NetworkScale from one GPU type to
// another from jobs with a model on both: per job the ratio of the
// predicted all-reduce times, within one node at 4 GPUs (Intra) and
// across two nodes at 8 GPUs (Inter), and over jobs their median (robust
// to one job's poorly determined fit).
// The interconnect is a property of the machines, so jobs that ran on
// both types tell how it differs; pairs holds (source, target) models. An
// empty pairs gives the zero NetworkScale (scale with the compute).
func NetworkScaleBetween(pairs [][2]PerfParams) NetworkScale {
	if len(pairs) == 0 {
		return NetworkScale{}
	}
	inter := make([]float64, len(pairs))
	intra := make([]float64, len(pairs))
	for i, p := range pairs {
		inter[i] = p[1].SyncTime(2, 8) / p[0].SyncTime(2, 8)
		intra[i] = p[1].SyncTime(1, 4) / p[0].SyncTime(1, 4)
	}
	return NetworkScale{Inter: median(inter), Intra: median(intra)}
}

// BootstrapPerf predicts a job's throughput model on a GPU type it has not
// run on, from its model src fitted on another type and probes: profile
// points of the job on one GPU of the target type (Sia profiles each job
// on one GPU of every type when it arrives). With probes at two or more
// distinct micro-batch sizes the compute terms α_c, β_c are the
// least-squares line through their compute times; with one, src's compute
// terms scaled by the probe's time over src's prediction at its
// micro-batch. The synchronisation terms are src's scaled by net; γ is
// src's. Probes on more than one GPU are ignored; it fails without a
// usable probe.
func BootstrapPerf(src PerfParams, probes []ProfilePoint, net NetworkScale) (PerfParams, error) {
	var xs, ys []float64
	for _, p := range probes {
		if p.Replicas == 1 && p.Nodes == 1 && p.LocalBsz > 0 && p.AccumStepTime > 0 && !math.IsInf(p.AccumStepTime, 0) {
			xs = append(xs, p.LocalBsz)
			ys = append(ys, p.AccumStepTime)
		}
	}
	if len(xs) == 0 {
		return PerfParams{}, errors.New("bootstrap: no one-GPU probe with a positive micro-batch and compute time")
	}
	out := src
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx /= float64(len(xs))
	my /= float64(len(xs))
	var sxx, sxy float64
	for i := range xs {
		sxx += (xs[i] - mx) * (xs[i] - mx)
		sxy += (xs[i] - mx) * (ys[i] - my)
	}
	if sxx > 0 {
		beta := math.Max(sxy/sxx, paramFloor)
		out.BetaC = beta
		out.AlphaC = math.Max(my-beta*mx, paramFloor)
	} else {
		r := my / src.AccumStepTime(mx)
		out.AlphaC = math.Max(src.AlphaC*r, paramFloor)
		out.BetaC = math.Max(src.BetaC*r, paramFloor)
	}
	r := out.AccumStepTime(mx) / src.AccumStepTime(mx)
	inter, intra := cmpOr(net.Inter, r), cmpOr(net.Intra, r)
	inter = min(max(inter, r/networkClamp), r*networkClamp)
	intra = min(max(intra, r/networkClamp), r*networkClamp)
	out.AlphaN = math.Max(src.AlphaN*inter, paramFloor)
	out.BetaN = math.Max(src.BetaN*inter, paramFloor)
	out.AlphaR = math.Max(src.AlphaR*intra, paramFloor)
	out.BetaR = math.Max(src.BetaR*intra, paramFloor)
	return out, nil
}

// networkClamp bounds a NetworkScale to within this factor of the compute
// ratio: estimates from other jobs' fits can be far off where those fits
// saw few configurations, and measured interconnects of the Sia profiles
// differ from the compute by less (BootstrapPerf).
const networkClamp = 3.0

// cmpOr returns x if it is positive and finite, else def.
func cmpOr(x, def float64) float64 {
	if x > 0 && !math.IsInf(x, 0) {
		return x
	}
	return def
}

// TypedPerf is a job's throughput model on one GPU type.
type TypedPerf struct {
	// Perf is the model.
	Perf PerfParams
	// Source is "" when Perf was fitted to the job's own points on the
	// type, else the type it was bootstrapped from.
	Source string
}

// FitTyped fits a job's throughput model on every GPU type of types:
// FitPerfParams on the job's own points of the type where it has some,
// else BootstrapPerf from the fitted type with the most points (the first
// in types order on a tie), the type's one-GPU probes and net(source,
// target) (nil: the zero NetworkScale). A type with
// neither points nor probes, or with no fitted type to start from, is
// left out of the result. points and probes are keyed by type. It is pure
// and safe for concurrent use: the controller and the simulator share it.
func FitTyped(points, probes map[string][]ProfilePoint, types []string, net func(src, dst string) NetworkScale) (map[string]TypedPerf, error) {
	out := make(map[string]TypedPerf, len(types))
	best := ""
	for _, t := range types {
		if len(points[t]) == 0 {
			continue
		}
		p, err := FitPerfParams(points[t])
		if err != nil {
			return nil, fmt.Errorf("fit on GPU type %q: %w", t, err)
		}
		out[t] = TypedPerf{Perf: p}
		if best == "" || len(points[t]) > len(points[best]) {
			best = t
		}
	}
	if best == "" {
		return out, nil
	}
	for _, t := range types {
		if _, ok := out[t]; ok || len(probes[t]) == 0 {
			continue
		}
		var ns NetworkScale
		if net != nil {
			ns = net(best, t)
		}
		p, err := BootstrapPerf(out[best].Perf, probes[t], ns)
		if err != nil {
			continue
		}
		out[t] = TypedPerf{Perf: p, Source: best}
	}
	return out, nil
}

// median returns the median of xs (the mean of the two middle values for
// an even count), sorting xs in place.
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// BootstrappedCache is a GoodputCache of a bootstrapped model (a type the
// job has not run on); Bootstrapped tells it from a fitted one.
type BootstrappedCache struct {
	*GoodputCache
}

// Bootstrapped reports that the model is a prediction, not a fit.
func (c *BootstrappedCache) Bootstrapped() bool { return true }
