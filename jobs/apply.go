package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pollux-nomad/pollux/contract"
)

// apply runs a plan's ops in order (see Op): it checks the fence first,
// and asks MakePlan again with what it observed (in.Observed) when a
// write fails, when the fence refuses (in.Hold), and when the round has
// spent c.parkBudget on park ops before one begins. Each write is a
// check-and-set recorded write-ahead in the job's state (see write). If
// ctx ends, the writes done are kept and the rest left to the next
// round.
func (c *Controller) apply(ctx context.Context, r *round, in PlanInput, p Plan) {
	if hold := c.fenced(ctx, r, p); hold != p.Hold {
		in.Hold = hold
		p = MakePlan(in)
	}
	x := &applying{obs: NewObserved()}
	for i := 0; i < len(p.Ops); i++ {
		op := p.Ops[i]
		if c.interrupted(ctx, len(x.obs.Done), len(p.Steps)) {
			return
		}
		if op.Kind == OpPark && x.parks > 0 && time.Since(x.parkStart) >= c.parkBudget {
			x.obs.BudgetSpent = true
			in.Observed = x.obs
			p, i = MakePlan(in), -1
			continue
		}
		if ok := c.run(ctx, r, p, op, x); !ok && ctx.Err() == nil {
			in.Observed = x.obs
			p, i = MakePlan(in), -1
		}
	}
	if x.parked > 0 {
		c.log.Info("scaled waiting jobs to zero until the policy gives them GPUs", "jobs", x.parked, "took", time.Since(x.parkStart).Round(time.Millisecond))
	}
}

// applying is what apply has done so far in a round.
type applying struct {
	obs *Observed
	// parks counts the park ops run, since parkStart; parked the jobs
	// they scaled to zero that had no placement (logged).
	parks     int
	parkStart time.Time
	parked    int
}

// run carries out one op of plan p and records in x what it did. It
// reports false when a write failed (the plan's assumption that every
// write succeeds no longer holds).
func (c *Controller) run(ctx context.Context, r *round, p Plan, op Op, x *applying) bool {
	ok := true
	switch op.Kind {
	case OpSettle:
		for _, i := range op.Steps {
			s := &p.Steps[i]
			c.settle(ctx, r, p, r.entries[s.Index], s, op.Why)
			x.obs.Done[s.Job] = true
		}
	case OpDefer:
		for _, i := range op.Steps {
			s := &p.Steps[i]
			c.deferStep(r.entries[s.Index], s, op.Why)
			x.obs.Done[s.Job] = true
		}
		c.log.Info("left changes to the next round", "jobs", len(op.Steps), "reason", op.Why)
	case OpPark:
		if x.parks == 0 {
			x.parkStart = time.Now()
		}
		x.parks++
		ok = c.zeroChunk(ctx, r, p, op.Steps, x)
	case OpWrite:
		ok = c.wave(ctx, r, p, op.Steps, x.obs)
	case OpVacate:
		for _, i := range op.Steps {
			s := &p.Steps[i]
			e := r.entries[s.Index]
			if c.vacate(ctx, r, e) {
				x.obs.Vacated[s.Job] = true
				continue
			}
			// Moving it now would deadlock: it keeps its placement
			// until the next round.
			why := "could not stop it ahead of its move"
			if e.st.Error != "" {
				why += ": " + e.st.Error
			}
			c.settle(ctx, r, p, e, s, why)
			x.obs.Done[s.Job], ok = true, false
		}
	case OpPlace:
		for _, i := range op.Steps {
			s := &p.Steps[i]
			c.settle(ctx, r, p, r.entries[s.Index], s, "")
			x.obs.Done[s.Job] = true
			x.obs.Moved[s.Job] = r.entries[s.Index].st.Applied
		}
	}
	return ok
}

// wave writes a write op's changes in parallel (at most
// writeConcurrency in flight) and reports whether all succeeded.
func (c *Controller) wave(ctx context.Context, r *round, p Plan, steps []int, obs *Observed) bool {
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, writeConcurrency)
	ok := true
	for _, i := range steps {
		s := &p.Steps[i]
		e := r.entries[s.Index]
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if ctx.Err() != nil {
				return // interrupted: writes not begun are left
			}
			c.settle(ctx, r, p, e, s, "")
			mu.Lock()
			defer mu.Unlock()
			obs.Done[s.Job] = true
			obs.Moved[s.Job] = e.st.Applied
			ok = ok && e.st.Applied
		}()
	}
	wg.Wait()
	return ok
}

// zeroChunk runs one park op (see OpPark) and reports whether every job
// of it was scaled to zero.
func (c *Controller) zeroChunk(ctx context.Context, r *round, p Plan, idx []int, x *applying) bool {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), applyTimeout+time.Duration(len(idx)/zeroConcurrency+1)*time.Second)
	defer cancel()
	failed := c.intendAll(actx, r, p, idx, x.obs)
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, zeroConcurrency)
	var outcomes []KVPair
	all := len(failed) == 0
	for _, i := range idx {
		s := &p.Steps[i]
		e := r.entries[s.Index]
		if failed[stateKey(e.job.JobRef)] {
			c.unrecorded(e)
			continue
		}
		if ctx.Err() != nil {
			// Recorded but not made: the next round's reconcile sees the
			// job unchanged and decides again.
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			from := contract.FormatPlacement(e.job.Placement)
			idx, ok := c.change(actx, r, e, s.Alloc, s.Decision, s.GPUModels)
			raw, _ := json.Marshal(e.state)
			mu.Lock()
			outcomes = append(outcomes, KVPair{Key: stateKey(e.job.JobRef), Value: raw})
			x.obs.Moved[s.Job] = ok
			if !ok {
				// Refused, or its outcome unknown: no second write of
				// the job this round (the next round's reconcile tells).
				x.obs.Done[s.Job] = true
			}
			all = all && ok
			if ok && from == "" {
				x.parked++
			}
			mu.Unlock()
			if ok {
				c.applied(r, e, s, from, idx, from != "")
			}
		}()
	}
	wg.Wait()
	if failed, err := r.kv.putMany(actx, outcomes); err != nil && !r.kv.down(err) {
		// The intents stay recorded; the next round's reconcile completes them.
		c.log.Warn("failed to record the outcome of writes", "jobs", len(failed), "error", err)
		c.metrics.incError("write_state")
	}
	return all
}

// intendAll records the intents of a park op's writes (write-ahead) in
// batched transactions and returns the state keys it failed to write.
func (c *Controller) intendAll(ctx context.Context, r *round, p Plan, idx []int, obs *Observed) map[string]bool {
	intents := make([]KVPair, 0, len(idx))
	for _, i := range idx {
		s := &p.Steps[i]
		e := r.entries[s.Index]
		obs.Done[s.Job] = true
		c.begin1(e, s)
		c.intend(r, e, s.Alloc, s.Decision)
		raw, _ := json.Marshal(e.state)
		intents = append(intents, KVPair{Key: stateKey(e.job.JobRef), Value: raw})
	}
	failed, err := r.kv.putMany(ctx, intents)
	if err != nil && !r.kv.down(err) {
		c.log.Warn("failed to record writes ahead; holding those jobs", "jobs", len(failed), "error", err)
		c.metrics.incError("write_state")
	}
	return failed
}

// deferStep records a step's decision in the job's status without
// writing it: why says what it waits for. Nothing is recorded in the
// job's state; the next round decides again.
func (c *Controller) deferStep(e *entry, s *Step, why string) {
	c.begin1(e, s)
	e.st.Error = why
}

// fenced returns why no job may change this round: Consul failed during
// it (the plan's hold), or the fence (the leader lock's check) refused.
// Change nothing that cannot be vouched for.
func (c *Controller) fenced(ctx context.Context, r *round, p Plan) string {
	hold := p.Hold
	if hold == "" && c.fence != nil && !p.DryRun {
		if err := c.fence(ctx); err != nil {
			hold = err.Error()
			c.metrics.incError("fence")
		}
	}
	if hold != "" {
		r.status.Errors = append(r.status.Errors, "no job changed this round: "+hold)
		c.log.Warn("holding every job this round", "reason", hold)
	}
	return hold
}

// interrupted reports whether the round's context ended (shutting down or
// lost the lock) with done of n steps carried out: the writes done so far
// are recorded; the rest are left for the next leader's round.
func (c *Controller) interrupted(ctx context.Context, done, n int) bool {
	if ctx.Err() == nil {
		return false
	}
	c.log.Info("round interrupted; leaving the remaining jobs as they are", "applied", done, "left", n-done, "error", ctx.Err())
	return true
}

// settle carries out one step: it records the job's decision, writes a
// change with check-and-set unless dry-run or held (hold says why), and
// publishes the decision of a job whose spec has it.
func (c *Controller) settle(ctx context.Context, r *round, p Plan, e *entry, s *Step, hold string) {
	ref := e.job.JobRef
	log := c.log.With("job_id", ref.String())
	d := s.Decision
	c.begin1(e, s)
	if !s.Change {
		c.checkPlaced(ctx, e)
		c.publish(r, ref, d)
		return
	}
	if p.DryRun {
		log.Info("would reallocate (dry run)", "from", contract.FormatPlacement(e.job.Placement), "to", d.Placement, "batch_size", d.BatchSize)
		return
	}
	if hold != "" {
		e.st.Error = "held: " + hold
		return
	}
	from := contract.FormatPlacement(e.job.Placement)
	idx, ok := c.write(ctx, r, e, s.Alloc, d, s.GPUModels)
	if ok {
		c.applied(r, e, s, from, idx, true)
	}
}

// begin1 records a step's decision in the job's status and metrics.
func (c *Controller) begin1(e *entry, s *Step) {
	d := s.Decision
	e.st.Decision, e.st.GPUs, e.st.GPUType = &d, d.NumReplicas, d.GPUType
	e.st.Changed = s.Change
	c.metrics.setJobGPUs(e.job.JobRef.String(), d.NumReplicas)
}

// applied records a step written to Nomad: status, published decision,
// log (at info level, else debug).
func (c *Controller) applied(r *round, e *entry, s *Step, from string, idx uint64, info bool) {
	d := s.Decision
	e.st.Applied = true
	c.publish(r, e.job.JobRef, d)
	logf := c.log.Debug
	if info {
		logf = c.log.Info
	}
	logf("reallocated", "job_id", e.job.JobRef.String(), "from", from, "to", d.Placement, "gpu_type", d.GPUType, "batch_size", d.BatchSize,
		"local_bsz", d.LocalBsz, "accum_steps", d.AccumSteps, "lr", d.LR, "job_modify_index", idx)
}

// vacate scales a job to zero ahead of its new placement (see
// Plan.Vacate: a swap of GPUs between jobs). The job is consistent
// meanwhile: no groups and the meta of a zero-GPU decision. It reports
// whether the write happened.
func (c *Controller) vacate(ctx context.Context, r *round, e *entry) bool {
	d := Decide(e.spec, nil, nil, r.number)
	from := contract.FormatPlacement(e.job.Placement)
	idx, ok := c.write(ctx, r, e, nil, d, nil)
	if ok {
		c.log.Info("stopped the job first: its new GPUs are held by a job that moves away in the same round", "job_id", e.job.JobRef.String(), "from", from, "job_modify_index", idx)
	}
	return ok
}

// write applies one decision to the job with check-and-set and records it
// in the job's state (write-ahead: the intent is saved first). On success
// the entry describes the job as written. It returns the job's new
// JobModifyIndex and whether the write happened; a refused or failed write
// is recorded in the job's status.
func (c *Controller) write(ctx context.Context, r *round, e *entry, alloc []string, d Decision, models []string) (uint64, bool) {
	// A write that has begun is finished and recorded even if the round is
	// cancelled (SIGTERM, lost lock) meanwhile: a request cut off half-way
	// would leave the outcome unknown. The check-and-set keeps it safe.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), applyTimeout)
	defer cancel()
	// Write-ahead: record the intent, so that whoever runs the next round
	// can tell whether this write happened if this process dies during it.
	c.intend(r, e, alloc, d)
	if !r.kv.saveState(actx, e.job.JobRef, e.state) {
		c.unrecorded(e)
		return 0, false
	}
	idx, ok := c.change(actx, r, e, alloc, d, models)
	r.kv.saveState(actx, e.job.JobRef, e.state)
	return idx, ok
}

// intend records in the job's state (in memory) the write about to be
// made; it must be saved before the write (write-ahead).
func (c *Controller) intend(r *round, e *entry, alloc []string, d Decision) {
	e.state.Pending = &PendingApply{Round: r.number, ReadIndex: e.job.JobModifyIndex, Allocation: alloc, Decision: &d, At: c.now(), Term: r.status.Term}
}

// unrecorded holds a job whose intent could not be saved: no write
// without its record.
func (c *Controller) unrecorded(e *entry) {
	e.state.Pending = nil
	e.st.Error = "held: cannot record the write in consul first"
}

// change makes the write whose intent is recorded: the check-and-set on
// Nomad, then the outcome in the job's state in memory (the caller saves
// it). It returns the job's new JobModifyIndex and whether the write
// happened; a refused or failed write is recorded in the job's status.
func (c *Controller) change(ctx context.Context, r *round, e *entry, alloc []string, d Decision, models []string) (uint64, bool) {
	ref := e.job.JobRef
	log := c.log.With("job_id", ref.String())
	want := PlacementOf(alloc)
	idx, err := c.cluster.Apply(ctx, Change{Job: ref, JobModifyIndex: e.job.JobModifyIndex, Placement: want, Meta: d.Meta(), GPUModels: models})
	switch {
	case errors.Is(err, ErrConflict):
		e.st.Conflict = true
		r.conflict()
		c.metrics.incConflict()
		e.state.Pending = nil
		log.Warn("job changed since it was read; keeping the operator's version and deciding again next round", "read_index", e.job.JobModifyIndex)
		return 0, false
	case err != nil:
		// Pending stays: the write may have happened (a timeout), and the
		// next round's reconcile tells.
		e.st.Error = err.Error()
		r.addError(fmt.Sprintf("%s: %v", ref, err))
		c.metrics.incError("apply")
		log.Error("failed to apply allocation", "error", err)
		return 0, false
	}
	c.commit(e.state, alloc, &d, idx, c.now())
	e.job.JobModifyIndex, e.job.Placement, e.job.Unshaped = idx, want, false
	return idx, true
}

// applyTimeout bounds one job's write with its bookkeeping.
const applyTimeout = 30 * time.Second

// placementGrace is how long after an apply a job may still wait for
// Nomad to place it before the controller reports it.
const placementGrace = 30 * time.Second

// checkPlaced reports a job whose spec asks for a placement that Nomad has
// not run. Right after an apply a blocked evaluation is normal (another
// job of the same round still holds the GPUs, and Nomad retries when they
// free up), so it is only reported placementGrace after the apply, with
// Nomad's reason when the cluster can tell.
func (c *Controller) checkPlaced(ctx context.Context, e *entry) {
	if len(e.job.Placement) == 0 || SamePerNode(e.job.Placement, e.job.Running) {
		return
	}
	if c.now().Sub(e.state.AppliedAt) < placementGrace {
		return // Nomad is still moving allocations around
	}
	reason := "nomad runs " + contract.FormatPlacement(e.job.Running) + ", spec asks for " + contract.FormatPlacement(e.job.Placement)
	if placer, ok := c.cluster.(Placer); ok {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		placed, why, err := placer.Placed(pctx, e.job.JobRef, e.job.JobModifyIndex)
		cancel()
		if err == nil && placed {
			return // placed, allocations still starting
		}
		if why != "" {
			reason = why
		}
	}
	e.st.Error = "not placed: " + reason
	c.metrics.incError("unplaced")
	c.log.Warn("nomad has not placed the job as decided", "job_id", e.job.JobRef.String(), "reason", reason)
}

// SamePerNode compares placements as GPUs per node, ignoring rank order.
func SamePerNode(a, b []NodeGPUs) bool {
	m := map[string]int{}
	for _, n := range a {
		m[n.Node] += n.GPUs
	}
	for _, n := range b {
		m[n.Node] -= n.GPUs
	}
	for _, v := range m {
		if v != 0 {
			return false
		}
	}
	return true
}

// publish queues the decision key's write (when the decision changed), so
// that workers can adopt it without a restart; the round writes the
// queue after its apply phase (flushDecisions).
func (c *Controller) publish(r *round, ref JobRef, d Decision) {
	c.queueDecision(r, ref, d)
}
