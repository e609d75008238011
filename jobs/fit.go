package jobs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/metrics"
	"github.com/pollux-nomad/pollux/model"
)

// fitJobs loads each entry's state, settles a pending write and refits
// its model from new metrics. A job whose state cannot be read is held as
// it is: without it, its restarts, pending write and model are unknown.
// Fitting runs in three passes: read the new metrics documents (in the
// job order), fit them (pure, on all cores when there are many), and
// record the fits in the jobs' states and the profile pool (in the job
// order again, so that a round's outcome does not depend on timing).
func (c *Controller) fitJobs(ctx context.Context, r *round) {
	// The round's listing of keys serves the fit phase only.
	defer r.kv.dropTree()
	scheduled := r.entries[:0]
	var todo []*refit
	for _, e := range r.entries {
		s, err := c.loadState(ctx, r, e.job.JobRef)
		if err != nil {
			r.hold(e.job)
			e.st.State, e.st.Error = StateError, "held: "+err.Error()
			continue
		}
		e.state = s
		c.reconcile(r, e)
		if r.cfg.typed() {
			e.gpuType = cmp.Or(typeOfPlacement(e.job.Running, r.nodeType), typeOfPlacement(e.job.Placement, r.nodeType), s.GPUType)
		}
		if f := c.newMetrics(ctx, r, e); f != nil {
			todo = append(todo, f)
		}
		scheduled = append(scheduled, e)
	}
	r.entries = scheduled
	fitAll(todo)
	for _, f := range todo {
		c.record(r, f)
	}
	for _, e := range r.entries {
		e.st.Error = e.state.MetricsError
		if e.state.Perf != nil && e.state.Grad != nil {
			e.fit = &model.GoodputFunc{Perf: model.PerfParams(*e.state.Perf), Grad: model.GradParams(*e.state.Grad), InitBatchSize: float64(e.spec.InitBatchSize)}
		}
		if c.dirty {
			r.kv.deferState(e.job.JobRef, e.state)
		}
		e.st.State = StateScheduled
	}
	if r.cfg.typed() {
		hint := typeHints(r.cfg, r.entries)
		for _, e := range r.entries {
			c.typedModels(r, e, hint)
		}
	}
	if r.kv.failure() == nil {
		c.dirty = false
	}
}

// accrue adds the GPU-seconds each job held since the last round to its
// attained service (Tiresias orders jobs by it) and saves the state of
// every job that held GPUs, so that a new leader starts from the value
// (one write per running job and round, as the decision's).
func (c *Controller) accrue(ctx context.Context, r *round) {
	if !c.lastTime.IsZero() {
		dt := r.start.Sub(c.lastTime).Seconds()
		for _, e := range r.entries {
			held := 0
			for _, run := range e.job.Running {
				held += run.GPUs
			}
			if held == 0 || dt <= 0 {
				continue
			}
			e.state.AttainedService = min(e.state.AttainedService+float64(held)*dt, maxAttainedService)
			if ctx.Err() == nil {
				r.kv.deferState(e.job.JobRef, e.state)
			}
		}
	}
	c.lastTime = r.start
}

// loadState returns the job's state from memory, else from Consul, else
// (no key, or an unreadable one) a fresh one. It fails only when Consul
// cannot be read: a fresh state then would overwrite the real one.
func (c *Controller) loadState(ctx context.Context, r *round, ref JobRef) (*State, error) {
	if s, ok := c.states[ref]; ok {
		return s, nil
	}
	s := &State{Version: stateVersion}
	raw, _, err := r.kv.get(ctx, stateKey(ref))
	switch {
	case err == nil:
		if loaded, perr := parseState(raw); perr != nil {
			c.log.Warn("ignoring unreadable state", "job_id", ref.String(), "error", perr)
		} else {
			s = loaded
			c.log.Info("resumed job state from consul", "job_id", ref.String(), "profile_points", s.ProfilePoints, "restarts", s.Restarts)
		}
	case errors.Is(err, ErrNotFound):
	default:
		return nil, fmt.Errorf("failed to read state: %w", err)
	}
	c.states[ref] = s
	return s, nil
}

// reconcile settles a write recorded as pending (the controller that made
// it died, or its answer was lost): if the job now has the pending
// placement at a newer index, the write happened and its bookkeeping is
// completed; otherwise it did not, and this round decides afresh.
func (c *Controller) reconcile(r *round, e *entry) {
	p := e.state.Pending
	if p == nil {
		return
	}
	log := c.log.With("job_id", e.job.JobRef.String(), "pending_round", p.Round)
	written := e.job.Meta[contract.MetaTerm]
	if p.Term > 0 && written != "" && written != strconv.FormatUint(p.Term, 10) {
		// Another leader wrote the job's version (one deposed while its
		// write was in flight, or a later one): never adopt it as this
		// write; decide again from what the job is now.
		e.state.Pending = nil
		c.metrics.incError("foreign_write")
		log.Warn("job version written by another term, not this write's; deciding again", "pending_term", p.Term, "job_term", written, "job_modify_index", e.job.JobModifyIndex)
	} else if e.job.JobModifyIndex != p.ReadIndex && SamePlacement(PlacementOf(p.Allocation), e.job.Placement) {
		c.commit(e.state, p.Allocation, p.Decision, e.job.JobModifyIndex, p.At)
		log.Info("completed the bookkeeping of an interrupted write: the job has its new placement", "placement", contract.FormatPlacement(e.job.Placement), "job_modify_index", e.job.JobModifyIndex)
	} else {
		e.state.Pending = nil
		log.Info("an interrupted write did not happen; deciding again", "read_index", p.ReadIndex, "job_modify_index", e.job.JobModifyIndex)
	}
	r.kv.deferState(e.job.JobRef, e.state)
}

// commit records an applied write in a job's state.
func (c *Controller) commit(s *State, alloc []string, d *Decision, index uint64, at time.Time) {
	if len(s.Allocation) > 0 {
		s.Restarts++
	}
	s.Allocation = alloc
	openRestart(s, alloc)
	s.Decision = d
	s.AppliedIndex = index
	s.AppliedAt = at
	s.Pending = nil
	s.GPUType = ""
	if d != nil {
		s.GPUType = d.GPUType
	}
}

// refit is one job's new metrics document on its way to a model: read
// by newMetrics, fitted by fit (pure), recorded by record.
type refit struct {
	e     *entry
	index uint64
	raw   []byte
	// gpuType is the type of the entries without one (the job's); typeOf
	// maps an entry's gpu_type to a type, nil when types are off: every
	// entry is then of one implicit type, "".
	gpuType string
	typeOf  func(string) string

	// doc is the parsed document (nil if it does not parse); err why no
	// model comes of it.
	doc *contract.Metrics
	err error
	// types are the GPU types of the document's entries (sorted), points
	// and perf each one's profile points and fit.
	types  []string
	points map[string][]model.ProfilePoint
	perf   map[string]model.PerfParams
}

// newMetrics reads the job's metrics document and returns it to fit
// when it is new (nil otherwise, or when it cannot be read: the previous
// model stays).
func (c *Controller) newMetrics(ctx context.Context, r *round, e *entry) *refit {
	ref := e.job.JobRef
	raw, idx, err := r.kv.get(ctx, metricsKey(ref))
	switch {
	case errors.Is(err, ErrNotFound):
		return nil
	case err != nil:
		c.log.Debug("failed to read metrics; keeping the previous model", "job_id", ref.String(), "error", err)
		c.metrics.incError("read_metrics")
		return nil
	case idx == e.state.MetricsIndex:
		return nil
	}
	f := &refit{e: e, index: idx, raw: raw, gpuType: e.gpuType}
	if r.cfg.typed() {
		cfg := r.cfg
		f.typeOf = func(name string) string { return c.typer.typeOf(cfg, name) }
	}
	return f
}

// fitWorkers bounds the goroutines fitting models in a round.
var fitWorkers = min(runtime.GOMAXPROCS(0), 8)

// fitAll fits the documents, on all cores when there are enough of them
// to be worth the goroutines (fitting dominates a round's CPU when
// thousands of workers report).
func fitAll(todo []*refit) {
	if fitWorkers < 2 || len(todo) < 2*fitWorkers {
		for _, f := range todo {
			f.fit()
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range fitWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(todo)); i = next.Add(1) - 1 {
				todo[i].fit()
			}
		}()
	}
	wg.Wait()
}

// fit parses the document and fits the job's throughput model on each
// GPU type of its profile entries: each entry counts for its gpu_type, an
// entry without one for the job's type; entries of no known type (an
// untyped entry of a job that runs nowhere) are left out. Without GPU
// types every entry is of the one implicit type. A fit the state parser
// would refuse (extreme but finite timings) is an error: the next leader
// would drop the whole state with it.
func (f *refit) fit() {
	f.doc, f.err = contract.ParseMetrics(f.raw)
	if f.err != nil {
		f.doc = nil
		return
	}
	byType := map[string]*contract.Metrics{}
	if f.typeOf == nil {
		byType[""] = f.doc
	} else {
		for _, pe := range f.doc.Profile {
			t := f.gpuType
			if pe.GPUType != "" {
				t = f.typeOf(pe.GPUType)
			}
			if t == "" {
				continue
			}
			d, ok := byType[t]
			if !ok {
				cp := *f.doc
				cp.Profile = nil
				d = &cp
				byType[t] = d
			}
			d.Profile = append(d.Profile, pe)
		}
		if len(byType) == 0 {
			f.err = fmt.Errorf("no profile entry of a known GPU type (the job runs on no typed node and its entries have no gpu_type)")
			return
		}
		if len(byType) > contract.MaxStateTypes {
			f.err = fmt.Errorf("profile entries of %d GPU types, at most %d", len(byType), contract.MaxStateTypes)
			return
		}
	}
	f.types = slices.Sorted(maps.Keys(byType))
	f.points = map[string][]model.ProfilePoint{}
	f.perf = map[string]model.PerfParams{}
	for _, t := range f.types {
		points := metrics.ProfilePoints(byType[t])
		perf, err := model.FitPerfParams(points)
		if err == nil {
			if verr := perf.Validate(); verr != nil {
				err = fmt.Errorf("fitted model out of range: %w", verr)
			}
		}
		if err != nil {
			if t != "" {
				err = fmt.Errorf("GPU type %s: %w", t, err)
			}
			f.err = err
			return
		}
		f.points[t], f.perf[t] = points, perf
	}
}

// record takes a fitted document into the job's state: its restart
// measurement, its model (state.Perf is the fit of the job's type, else
// of the type with the most profile points; state.Typed every type's
// when types are on), and, when its model's profiles are pooled, its
// points. A rejected document keeps the previous model.
func (c *Controller) record(r *round, f *refit) {
	e, ref := f.e, f.e.job.JobRef
	if f.doc != nil {
		c.observeRestartAt(ref, e.state, f.doc, e.job.Started)
		if f.typeOf == nil {
			e.state.Typed = nil // fits of GPU types no longer told apart
		}
	}
	if f.err == nil {
		typed := map[string]contract.TypedPerf{}
		total, maxProfiled := 0, 0
		for _, t := range f.types {
			tp := contract.TypedPerf{Perf: contract.PerfParams(f.perf[t]), ProfilePoints: len(f.points[t])}
			for _, p := range f.points[t] {
				tp.MaxProfiled = max(tp.MaxProfiled, p.Replicas)
			}
			typed[t] = tp
			total += tp.ProfilePoints
			maxProfiled = max(maxProfiled, tp.MaxProfiled)
		}
		main := e.gpuType
		if _, ok := typed[main]; !ok {
			main = ""
			for _, t := range f.types {
				if main == "" || typed[t].ProfilePoints > typed[main].ProfilePoints {
					main = t
				}
			}
		}
		perf, grad := typed[main].Perf, contract.GradParams(metrics.GradParams(f.doc))
		if f.typeOf == nil {
			typed = nil
		}
		e.state.Perf, e.state.Grad, e.state.Typed = &perf, &grad, typed
		e.state.ProfilePoints, e.state.MaxProfiled = total, maxProfiled
		e.state.MetricsError = ""
		e.st.Fitted = true
		// Only a document whose fits are all valid adds to its model's pool.
		if key := c.sharedKey(r, e); key != "" {
			for _, t := range f.types {
				c.profiles.Add(key, t, f.points[t])
			}
		}
	}
	e.state.MetricsIndex = f.index
	if f.err != nil {
		e.state.MetricsError = f.err.Error()
		c.log.Warn("rejected metrics document; keeping the previous model", "job_id", ref.String(), "error", f.err)
		c.metrics.incError("bad_metrics")
	}
	r.kv.deferState(ref, e.state)
}
