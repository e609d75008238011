package report

import (
	"fmt"
	"maps"
	"math"
	"time"

	"github.com/pollux-nomad/pollux/contract"
)

// stats are the running means of one configuration's step timings and
// how many steps they cover.
type stats struct {
	count               int
	compute, step, sync float64
}

// merge returns the count-weighted means of a and b (see weighted); a is
// the older of the two. An empty side returns the other unchanged.
func merge(a, b stats) stats {
	if a.count == 0 {
		return b
	}
	if b.count == 0 {
		return a
	}
	n := a.count + b.count
	return stats{
		count:   n,
		compute: weighted(a.compute, a.count, b.compute, b.count, n),
		step:    weighted(a.step, a.count, b.step, b.count, n),
		sync:    weighted(a.sync, a.count, b.sync, b.count, n),
	}
}

// weighted returns (x·nx + y·ny)/n, each operation rounded to float64 in
// this order (the conversions keep the compiler from fusing a multiply
// and an add), so that the Python reporter computes the same bits. If the
// products overflow, it returns x + (y−x)·(ny/n) instead.
func weighted(x float64, nx int, y float64, ny int, n int) float64 {
	fx, fy, fn := float64(nx), float64(ny), float64(n)
	m := (float64(x*fx) + float64(y*fy)) / fn
	if math.IsInf(m, 0) {
		m = x + float64((y-x)*(fy/fn))
	}
	return m
}

func statsOf(e contract.ProfileEntry) stats {
	return stats{count: e.Count, compute: e.ComputeTime, step: e.StepTime, sync: e.SyncTime}
}

func entryOf(k StepConfig, s stats) contract.ProfileEntry {
	return contract.ProfileEntry{
		NumNodes: k.NumNodes, NumReplicas: k.NumReplicas, LocalBsz: k.LocalBsz, AccumSteps: k.AccumSteps,
		ComputeTime: s.compute, StepTime: s.step, SyncTime: s.sync, Count: s.count, GPUType: k.GPUType,
	}
}

func keyOf(e contract.ProfileEntry) StepConfig {
	return StepConfig{NumNodes: e.NumNodes, NumReplicas: e.NumReplicas, LocalBsz: e.LocalBsz, AccumSteps: e.AccumSteps, GPUType: e.GPUType}
}

// mergeInto merges b into a (a's samples first).
func mergeInto(a, b map[StepConfig]stats) {
	for k, s := range b {
		a[k] = merge(a[k], s)
	}
}

// accumulator is what a Reporter has observed.
type accumulator struct {
	// mine holds everything this process observed.
	mine map[StepConfig]stats
	// pending holds what it observed and has not stored yet.
	pending map[StepConfig]stats
	// grad is the latest (grad_sqr, grad_var), nil before the first.
	grad *[2]float64
	// progress is the latest progress, nil before the first.
	progress *float64
	// batchSize is the latest batch size, 0 before the first.
	batchSize int
	// restart is the last Restarted call's, nil before the first.
	restart *contract.Restart
	// dirty is set by every observation and cleared when a write takes
	// a snapshot.
	dirty bool
}

func newAccumulator() accumulator {
	return accumulator{mine: map[StepConfig]stats{}, pending: map[StepConfig]stats{}}
}

func (a *accumulator) observe(k StepConfig, s stats) {
	a.pending[k] = merge(a.pending[k], s)
	a.mine[k] = merge(a.mine[k], s)
	a.dirty = true
}

// snapshot is what one write stores.
type snapshot struct {
	delta     map[StepConfig]stats // pending, taken out of the accumulator
	mine      map[StepConfig]stats // a copy of mine
	grad      *[2]float64
	progress  *float64
	batchSize int
	restart   *contract.Restart
}

// take returns a snapshot and empties pending.
func (a *accumulator) take() snapshot {
	s := snapshot{delta: a.pending, mine: maps.Clone(a.mine), grad: a.grad, progress: a.progress, batchSize: a.batchSize, restart: a.restart}
	a.pending = map[StepConfig]stats{}
	a.dirty = false
	return s
}

// restore puts back a delta that was not stored, before what was
// observed since.
func (a *accumulator) restore(delta map[StepConfig]stats, dirty bool) {
	if len(delta) > 0 {
		mergeInto(delta, a.pending)
		a.pending = delta
	}
	a.dirty = a.dirty || dirty
}

// lastWrite is what the last successful write of this process stored.
type lastWrite struct {
	// createIndex is the key's CreateIndex, 0 if the write created it.
	createIndex uint64
	// casIndex is the ModifyIndex the write was checked against, 0 if it
	// created the key.
	casIndex uint64
	// counts are the counts of the entries it stored.
	counts map[StepConfig]int
}

// survives reports whether a stored document (stored, nil if it does not
// parse) of a key with the given indexes still holds what w stored: the
// key was not re-created, its index did not go back, and no entry is
// missing or has a smaller count. Merging writers never do any of these.
func (w *lastWrite) survives(createIndex, modifyIndex uint64, stored *contract.Metrics) bool {
	if stored == nil {
		return false
	}
	if w.createIndex != 0 && createIndex != w.createIndex {
		return false
	}
	if modifyIndex <= w.casIndex {
		return false
	}
	have := make(map[StepConfig]int, len(stored.Profile))
	for _, e := range stored.Profile {
		have[keyOf(e)] = e.Count
	}
	for k, n := range w.counts {
		if have[k] < n {
			return false
		}
	}
	return true
}

// build returns the document that merges add into stored (nil if there
// is none) with the snapshot's top-level values (see the package
// documentation). It returns an error wrapping ErrNotReady if the
// document would have no profile entry or no batch size.
func build(stored *contract.Metrics, add map[StepConfig]stats, s snapshot, initBatchSize int, now time.Time) (*contract.Metrics, error) {
	entries := map[StepConfig]stats{}
	d := &contract.Metrics{Version: contract.MetricsVersion, Timestamp: now.UTC()}
	if stored != nil {
		for _, e := range stored.Profile {
			entries[keyOf(e)] = statsOf(e)
		}
		d.BatchSize, d.Progress, d.GradSqr, d.GradVar = stored.BatchSize, stored.Progress, stored.GradSqr, stored.GradVar
		d.Restart = stored.Restart
	}
	mergeInto(entries, add)
	if len(entries) == 0 {
		return nil, fmt.Errorf("%w: no profile entry (call Observe)", ErrNotReady)
	}
	switch {
	case s.batchSize > 0:
		d.BatchSize = float64(s.batchSize)
	case d.BatchSize > 0:
	case initBatchSize > 0:
		d.BatchSize = float64(initBatchSize)
	default:
		return nil, fmt.Errorf("%w: no batch size (call Progress or set Config.InitBatchSize)", ErrNotReady)
	}
	if s.progress != nil {
		d.Progress = *s.progress
	}
	if s.grad != nil {
		d.GradSqr, d.GradVar = s.grad[0], s.grad[1]
	}
	if s.restart != nil {
		d.Restart = s.restart
	}
	d.Profile = make([]contract.ProfileEntry, 0, len(entries))
	for k, e := range entries {
		d.Profile = append(d.Profile, entryOf(k, e))
	}
	return d, nil
}
