package model

import (
	"fmt"
	"math"
)

// Constants of the batch-size search (artifact goodput.py,
// GoodputFunction.optimize).
const (
	// numCandidates is the number of total batch sizes tried, geometrically
	// spaced (numpy.geomspace's default count).
	numCandidates = 50
	// roundingTol is the tolerance of the floor and ceiling operations.
	roundingTol = 1e-8
)

// GoodputFunc is a job's goodput model: its throughput model, gradient
// statistics and initial batch size M0 (Pollux, OSDI '21, "Goodput"; artifact
// goodput.py, GoodputFunction):
//
//	GOODPUT(N, K, m, s) = THROUGHPUT(N, K, m, s) · EFFICIENCY(K·m·(s+1))
//
// Goodput is in examples per second at M0-equivalent statistical progress.
type GoodputFunc struct {
	// Perf is the fitted throughput model.
	Perf PerfParams
	// Grad are the job's latest gradient statistics.
	Grad GradParams
	// InitBatchSize is M0, the total batch size the job was tuned for
	// (positive).
	InitBatchSize float64
}

// Throughput is Perf.Throughput: examples per second with replicas GPUs on
// nodes nodes, localBsz examples per micro-step and accumSteps accumulation
// steps.
func (f GoodputFunc) Throughput(nodes, replicas int, localBsz float64, accumSteps int) float64 {
	return f.Perf.Throughput(nodes, replicas, localBsz, accumSteps)
}

// Efficiency is the statistical efficiency of total batch size batch,
// Efficiency(f.Grad, f.InitBatchSize, batch).
func (f GoodputFunc) Efficiency(batch float64) float64 {
	return Efficiency(f.Grad, f.InitBatchSize, batch)
}

// Goodput is THROUGHPUT · EFFICIENCY(K·m·(s+1)) for the given configuration
// (artifact goodput.py, GoodputFunction.evaluate). It is meant for total
// batch sizes of at least M0, as the artifact asserts.
func (f GoodputFunc) Goodput(nodes, replicas int, localBsz float64, accumSteps int) float64 {
	batch := float64(replicas) * localBsz * float64(accumSteps+1)
	return f.Perf.Throughput(nodes, replicas, localBsz, accumSteps) * f.Efficiency(batch)
}

// Bounds are a job's batch-size limits. A zero field takes the artifact's
// default (goodput.py, GoodputFunction.optimize).
type Bounds struct {
	// MaxBatchSize is the largest total batch size M; 0 means M0.
	MaxBatchSize int `json:"max_batch_size"`
	// MinLocalBsz is the smallest per-GPU micro-batch m; 0 means 1.
	MinLocalBsz int `json:"min_local_bsz"`
	// MaxLocalBsz is the largest per-GPU micro-batch m (memory); 0 means
	// the maximum total batch size.
	MaxLocalBsz int `json:"max_local_bsz"`
	// Accumulation allows gradient accumulation (s > 0).
	Accumulation bool `json:"accumulation"`
}

// Choice is the best configuration for one placement shape.
type Choice struct {
	// Goodput is the predicted goodput of the configuration; 0 when no
	// configuration is valid.
	Goodput float64 `json:"goodput"`
	// BatchSize is the total batch size K·m·(s+1).
	BatchSize int `json:"batch_size"`
	// LocalBsz is the per-GPU micro-batch m.
	LocalBsz int `json:"local_bsz"`
	// AccumSteps is the number of accumulation micro-steps s before each
	// synchronising step.
	AccumSteps int `json:"accum_steps"`
}

// Optimize returns the configuration of highest goodput for replicas GPUs on
// nodes nodes, searched as the artifact does (Pollux, OSDI '21, "PolluxAgent";
// artifact goodput.py, GoodputFunction.optimize; pollux-reference.md §2):
//
//  1. 50 total batch sizes M, geometrically spaced from max(M0, minLocal·K)
//     to maxBatch (numpy.geomspace, both ends included; descending if the
//     start exceeds maxBatch, as numpy does);
//  2. local = M/K; with accumulation s = ⌈local/maxLocal − 1e−8⌉ − 1,
//     raised to at least 1 when K = 1 and local > M0 + 1e−8 (so the
//     gradient noise can still be measured); without accumulation s = 0;
//     m = ⌈local/(s+1) − 1e−8⌉;
//  3. a candidate with m outside [minLocal, maxLocal] has goodput 0; the
//     first candidate of highest goodput wins.
//
// If no candidate is valid, or maxBatch < M0 (which the artifact asserts
// against), it returns Choice{}. The caller applies any further clamping,
// such as the simulator's m ← min(m, ⌊maxBatch/(K(s+1))⌋). Optimize does not
// allocate. It panics unless 1 ≤ nodes ≤ replicas.
func (f GoodputFunc) Optimize(nodes, replicas int, b Bounds) Choice {
	if nodes < 1 || replicas < nodes {
		panic(fmt.Sprintf("model: Optimize needs 1 <= nodes <= replicas, got nodes=%d replicas=%d", nodes, replicas))
	}
	m0 := f.InitBatchSize
	maxBatch := float64(b.MaxBatchSize)
	if b.MaxBatchSize <= 0 {
		maxBatch = m0
	}
	minLocal := float64(b.MinLocalBsz)
	if b.MinLocalBsz <= 0 {
		minLocal = 1
	}
	maxLocal := float64(b.MaxLocalBsz)
	if b.MaxLocalBsz <= 0 {
		maxLocal = maxBatch
	}
	if !(maxBatch >= m0) || !(m0 > 0) {
		return Choice{}
	}
	k := float64(replicas)
	minBatch := math.Max(m0, minLocal*k)

	// The network time does not depend on the candidate.
	p := f.Perf
	tSync := p.SyncTime(nodes, replicas)

	// numpy.geomspace: a geometric progression with both ends exact. The
	// running product drifts from numpy's 10^linspace(...) by a few ulps,
	// far inside the 1e−8 rounding tolerance.
	ratio := math.Pow(maxBatch/minBatch, 1.0/(numCandidates-1))

	var best Choice
	prevM, prevS := -1.0, -1.0
	batch := minBatch
	for i := range numCandidates {
		switch i {
		case 0:
		case numCandidates - 1:
			batch = maxBatch
		default:
			batch *= ratio
		}
		local := batch / k
		s := 0.0
		if b.Accumulation {
			s = math.Ceil(local/maxLocal-roundingTol) - 1
			if replicas == 1 && local > m0+roundingTol {
				s = math.Max(s, 1)
			}
			// Only reachable with a huge maxLocal; the artifact would
			// divide by zero below.
			s = math.Max(s, 0)
		}
		m := math.Ceil(local/(s+1) - roundingTol)
		if m < minLocal || m > maxLocal || (m == prevM && s == prevS) {
			continue // invalid, or the same configuration as the last one
		}
		prevM, prevS = m, s
		total := k * m * (s + 1)
		tGrad := p.AccumStepTime(m)
		tIter := s*tGrad + gammaNorm(tGrad, tSync, p.Gamma)
		goodput := total / tIter * f.Efficiency(total)
		if goodput > best.Goodput {
			best = Choice{Goodput: goodput, BatchSize: int(total), LocalBsz: int(m), AccumSteps: int(s)}
		}
	}
	return best
}
