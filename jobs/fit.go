package jobs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
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
func (c *Controller) fitJobs(ctx context.Context, r *round) {
	// The round's listing of keys serves the fit phase only.
	defer r.kv.dropTree()
	pre := c.prefit(r)
	scheduled := r.entries[:0]
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
		c.refit(ctx, r, e, pre[e.job.JobRef])
		if c.dirty {
			r.kv.deferState(e.job.JobRef, e.state)
		}
		e.st.State = StateScheduled
		scheduled = append(scheduled, e)
	}
	r.entries = scheduled
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
	if e.job.JobModifyIndex != p.ReadIndex && SamePlacement(PlacementOf(p.Allocation), e.job.Placement) {
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

// refit reads the job's metrics document and refits the model when the
// document is new. A bad document keeps the previous fit.
// The refit of a job whose metrics document is new, computed by prefit.
type prefitted struct {
	index    uint64
	doc      *contract.Metrics
	parseErr error
	fitted   bool
	points   []model.ProfilePoint
	perf     model.PerfParams
	fitErr   error
}

// fitWorkers bounds the goroutines fitting models in a round.
var fitWorkers = min(runtime.GOMAXPROCS(0), 8)

// prefit parses and fits, on all cores, the new metrics documents of the
// round's listing (models of one GPU type; fitting dominates a round's
// CPU when thousands of workers report). It computes; refit applies.
func (c *Controller) prefit(r *round) map[JobRef]*prefitted {
	if !r.kv.hasListing() || r.cfg.typed() || fitWorkers < 2 {
		return nil
	}
	var todo []*prefitted
	refs := map[JobRef]*prefitted{}
	for _, e := range r.entries {
		ref := e.job.JobRef
		kv, ok := r.kv.listed(metricsKey(ref))
		if !ok {
			continue
		}
		if s, ok := c.states[ref]; ok && s.MetricsIndex == kv.ModifyIndex {
			continue
		} else if _, saved := r.kv.listed(stateKey(ref)); !ok && saved {
			continue // a new leader's: refit sees whether it is new
		}
		p := &prefitted{index: kv.ModifyIndex}
		p.doc, p.parseErr = contract.ParseMetrics(kv.Value)
		refs[ref] = p
		if p.parseErr == nil {
			todo = append(todo, p)
		}
	}
	if len(todo) < 2*fitWorkers {
		return nil // not worth the goroutines; refit does it
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range fitWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(todo)); i = next.Add(1) - 1 {
				p := todo[i]
				p.points = metrics.ProfilePoints(p.doc)
				p.perf, p.fitErr = model.FitPerfParams(p.points)
				p.fitted = true
			}
		}()
	}
	wg.Wait()
	return refs
}

func (c *Controller) refit(ctx context.Context, r *round, e *entry, pre *prefitted) {
	ref := e.job.JobRef
	raw, idx, err := r.kv.get(ctx, metricsKey(ref))
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		c.log.Debug("failed to read metrics; keeping the previous model", "job_id", ref.String(), "error", err)
		c.metrics.incError("read_metrics")
	case idx != e.state.MetricsIndex:
		if pre != nil && pre.index != idx {
			pre = nil
		}
		var doc *contract.Metrics
		var perr error
		if pre != nil {
			doc, perr = pre.doc, pre.parseErr
		} else {
			doc, perr = contract.ParseMetrics(raw)
		}
		if perr == nil {
			c.observeRestart(ref, e.state, doc)
		}
		if perr == nil && r.cfg.typed() {
			perr = c.refitTyped(r, e, doc)
		} else if perr == nil {
			e.state.Typed = nil
			var perf model.PerfParams
			var points []model.ProfilePoint
			if pre != nil && pre.fitted {
				points, perf, perr = pre.points, pre.perf, pre.fitErr
			} else {
				points = metrics.ProfilePoints(doc)
				perf, perr = model.FitPerfParams(points)
			}
			if perr == nil {
				// A fit the state parser would refuse (extreme but finite
				// timings) must not be saved: the next leader would drop
				// the whole state with it.
				if verr := perf.Validate(); verr != nil {
					perr = fmt.Errorf("fitted model out of range: %w", verr)
				}
			}
			if perr == nil {
				grad := metrics.GradParams(doc)
				sp, sg := contract.PerfParams(perf), contract.GradParams(grad)
				e.state.Perf, e.state.Grad = &sp, &sg
				e.state.ProfilePoints = len(points)
				e.state.MaxProfiled = 0
				for _, p := range points {
					e.state.MaxProfiled = max(e.state.MaxProfiled, p.Replicas)
				}
				e.state.MetricsError = ""
				e.st.Fitted = true
			}
		}
		e.state.MetricsIndex = idx
		if perr != nil {
			e.state.MetricsError = perr.Error()
			c.log.Warn("rejected metrics document; keeping the previous model", "job_id", ref.String(), "error", perr)
			c.metrics.incError("bad_metrics")
		}
		r.kv.deferState(ref, e.state)
	}
	e.st.Error = e.state.MetricsError
	if e.state.Perf != nil && e.state.Grad != nil {
		e.fit = &model.GoodputFunc{Perf: model.PerfParams(*e.state.Perf), Grad: model.GradParams(*e.state.Grad), InitBatchSize: float64(e.spec.InitBatchSize)}
	}
}
