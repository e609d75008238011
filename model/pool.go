package model

import (
	"math"
	"sync"
)

// PoolMaxPoints bounds the profile points a ProfilePool keeps per model
// key and GPU type; points past it are not added (a fit of a few hundred
// configurations already pins the throughput model down, and the bound
// keeps memory and fitting time flat on a long-lived controller).
const PoolMaxPoints = 512

// PoolMaxSets bounds the (model key, GPU type) sets a ProfilePool keeps: a
// new set past it evicts the one least recently added to, so that a
// long-lived controller that has seen many model names keeps memory
// bounded (at most PoolMaxSets × PoolMaxPoints points).
const PoolMaxSets = 4096

// ProfilePool gathers the throughput profile points of jobs that train the
// same model (one key, for example the job's declared model name) per GPU
// type, so that a job's throughput model can be fitted on what every job
// of its model measured instead of its own few configurations. Throughput
// depends on the model, the GPU type, the placement and the micro-batch,
// not on the job: two jobs of one model measure the same curve. A point is
// identified by (nodes, replicas, micro-batch); the first measurement of a
// configuration is kept. It is safe for concurrent use; the zero value is
// ready, and a nil pool holds nothing (Add adds nothing, Fit has none).
type ProfilePool struct {
	mu   sync.Mutex
	sets map[poolKey]*poolSet
	// tick orders the sets by their last addition (for eviction).
	tick uint64
}

type poolKey struct{ model, gpuType string }

type poolConfig struct {
	nodes, replicas int
	localBsz        float64
}

type poolSet struct {
	used   uint64
	seen   map[poolConfig]bool
	points []ProfilePoint
	// fit caches the fit of the first fitN points.
	fitN   int
	fit    PerfParams
	fitErr error
}

// Add records the points a job of model key measured on gpuType ("" on an
// untyped cluster) and returns how many were new. An empty key, or a
// point that is not valid (non-positive or non-finite times, fewer
// replicas than nodes), adds nothing.
func (p *ProfilePool) Add(key, gpuType string, points []ProfilePoint) int {
	if p == nil || key == "" || len(points) == 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sets == nil {
		p.sets = map[poolKey]*poolSet{}
	}
	k := poolKey{key, gpuType}
	s := p.sets[k]
	if s == nil {
		if len(p.sets) >= PoolMaxSets {
			p.evict()
		}
		s = &poolSet{seen: map[poolConfig]bool{}}
		p.sets[k] = s
	}
	p.tick++
	s.used = p.tick
	added := 0
	for _, pt := range points {
		if len(s.points) >= PoolMaxPoints {
			break
		}
		if !validPoolPoint(pt) {
			continue
		}
		c := poolConfig{pt.Nodes, pt.Replicas, pt.LocalBsz}
		if s.seen[c] {
			continue
		}
		s.seen[c] = true
		s.points = append(s.points, pt)
		added++
	}
	return added
}

// evict drops the set least recently added to (p.mu held).
func (p *ProfilePool) evict() {
	var oldest poolKey
	first := true
	for k, s := range p.sets {
		if first || s.used < p.sets[oldest].used {
			oldest, first = k, false
		}
	}
	delete(p.sets, oldest)
}

func validPoolPoint(pt ProfilePoint) bool {
	ok := func(x float64) bool { return x > 0 && !math.IsInf(x, 0) }
	return pt.Nodes >= 1 && pt.Replicas >= pt.Nodes && ok(pt.LocalBsz) && ok(pt.AccumStepTime) && ok(pt.OptimStepTime)
}

// Len returns how many points the pool holds for key on gpuType.
func (p *ProfilePool) Len(key, gpuType string) int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.sets[poolKey{key, gpuType}]; s != nil {
		return len(s.points)
	}
	return 0
}

// Fit returns the throughput model fitted (FitPerfParams) on the pool's
// points of key on gpuType and how many points it used; ok is false when
// the pool has none or the fit failed. The fit is cached until points are
// added.
func (p *ProfilePool) Fit(key, gpuType string) (perf PerfParams, n int, ok bool) {
	if p == nil {
		return PerfParams{}, 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.sets[poolKey{key, gpuType}]
	if s == nil || len(s.points) == 0 {
		return PerfParams{}, 0, false
	}
	if s.fitN != len(s.points) {
		s.fit, s.fitErr = FitPerfParams(s.points)
		s.fitN = len(s.points)
	}
	if s.fitErr != nil {
		return PerfParams{}, s.fitN, false
	}
	return s.fit, s.fitN, true
}
