package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/pollux-nomad/pollux/contract"
)

// apply executes a plan: it checks the fence, writes the changes in the
// plan's order, stops the jobs to vacate and then places them, and
// publishes every job's decision. Each write is a check-and-set recorded
// write-ahead in the job's state (see write). Whether a change can be
// placed is checked again against what the writes really did: a job whose
// new GPUs are still taken (the plan's vacate jobs, or a job behind a
// write that failed) is set aside and stopped first, as Plan.Vacate says.
// If ctx ends, the writes done are kept and the rest left to the next
// round. The writes that scale jobs to zero are bounded in time (see
// scaleToZero); while jobs Nomad queued are left at their count, no
// other change is written.
func (c *Controller) apply(ctx context.Context, r *round, p Plan) {
	hold := c.fenced(ctx, r, p)
	writes := !p.DryRun && hold == ""
	running := make([][]NodeGPUs, len(r.entries))
	for i, e := range r.entries {
		running[i] = e.job.Running
	}
	free := newOccupancy(r.in.Nodes, running)
	done, left := c.scaleToZero(ctx, r, p, hold, writes, free)
	var changes []*Step
	for i := range p.Steps {
		if c.interrupted(ctx, i, len(p.Steps)) {
			return
		}
		s := &p.Steps[i]
		if done[i] {
			continue
		}
		if writes && s.Change && left > 0 {
			// Rewriting a job that runs frees its GPUs (Nomad replaces
			// its allocations), and Nomad would start a queued job there
			// before the one the policy chose.
			c.deferStep(r.entries[s.Index], s, fmt.Sprintf("deferred: %d jobs Nomad queued are still to be scaled to zero first (Nomad would start them on the GPUs a change frees); decided again next round", left))
			continue
		}
		if writes && s.Change {
			changes = append(changes, s)
			continue
		}
		c.settle(ctx, r, p, r.entries[s.Index], s, hold)
	}
	blocked := c.writeWaves(ctx, r, p, changes, free)
	c.vacateAndPlace(ctx, r, p, blocked, free)
}

// writeWaves writes the changes in waves of parallel writes (at most
// writeConcurrency in flight): each wave takes, in the plan's order, the
// changes whose new GPUs are free now, not counting GPUs that another
// change of the same wave frees (its write may fail), and reserving what
// each takes. The GPUs the wave's writes really freed serve the next
// wave. It returns the changes that never fit (their GPUs are held by a
// job that must be stopped first, or by a job whose write failed).
func (c *Controller) writeWaves(ctx context.Context, r *round, p Plan, changes []*Step, free occupancy) []*Step {
	for len(changes) > 0 {
		if c.interrupted(ctx, 0, len(changes)) {
			return nil
		}
		reserved := maps.Clone(free)
		var wave, rest []*Step
		for _, s := range changes {
			running := r.entries[s.Index].job.Running
			if !reserved.fits(running, s.Placement) {
				rest = append(rest, s)
				continue
			}
			reserved.take(running, s.Placement)
			wave = append(wave, s)
		}
		if len(wave) == 0 {
			return rest
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		sem := make(chan struct{}, writeConcurrency)
		for _, s := range wave {
			e := r.entries[s.Index]
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if ctx.Err() != nil {
					return // interrupted: writes not begun are left
				}
				before := e.job.Running
				c.settle(ctx, r, p, e, s, "")
				if e.st.Applied {
					mu.Lock()
					free.move(before, s.Placement)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		changes = rest
	}
	return nil
}

// scaleToZero writes the changes that give a job no GPUs: they only free
// GPUs, so they neither wait for nor block another step (a first round
// adopting jobs Nomad queued scales every job the policy leaves waiting
// to zero: most of 2,000 jobs). The jobs that hold no GPUs go first
// (while one of them is queued at its author's count, Nomad would start
// it on any GPU another write frees), then those that run. They go in
// chunks: each chunk's intents are saved in batched transactions (the
// write-ahead), then its Nomad writes go out with at most
// zeroConcurrency in flight, then its outcomes are saved in batches. No
// chunk begins once the round has spent c.parkBudget on them; the steps
// left are deferred to the next round. It returns the steps it settled
// or deferred, and how many of the deferred ones hold no GPUs (while
// any is left, the caller defers every other change).
func (c *Controller) scaleToZero(ctx context.Context, r *round, p Plan, hold string, writes bool, free occupancy) (map[int]bool, int) {
	if !writes {
		return nil, 0
	}
	holds := func(i int) bool { return len(r.entries[p.Steps[i].Index].job.Running) > 0 }
	var idx, running []int // the jobs holding no GPUs, then the others
	for i := range p.Steps {
		if s := &p.Steps[i]; s.Change && len(s.Placement) == 0 && !s.Vacate {
			if holds(i) {
				running = append(running, i)
			} else {
				idx = append(idx, i)
			}
		}
	}
	idx = append(idx, running...)
	if len(idx) < 2 {
		return nil, 0
	}
	done := make(map[int]bool, len(idx))
	t0 := time.Now()
	waiting := 0 // jobs written to zero that had no placement (logged)
	var rest []int
	for start := 0; start < len(idx); start += zeroChunkSize {
		if ctx.Err() != nil {
			c.interrupted(ctx, start, len(idx))
			return done, 0 // the caller stops at its next step
		}
		if start > 0 && time.Since(t0) >= c.parkBudget {
			rest = idx[start:]
			break
		}
		waiting += c.zeroChunk(ctx, r, p, idx[start:min(start+zeroChunkSize, len(idx))], done, free)
	}
	if waiting > 0 {
		c.log.Info("scaled waiting jobs to zero until the policy gives them GPUs", "jobs", waiting, "took", time.Since(t0).Round(time.Millisecond))
	}
	left := 0
	for _, i := range rest {
		if !holds(i) {
			left++
		}
		done[i] = true
		s := &p.Steps[i]
		c.deferStep(r.entries[s.Index], s, fmt.Sprintf("deferred: the round's %s for scaling jobs to zero is spent (%d of them left); decided again next round", c.parkBudget, len(rest)))
	}
	if len(rest) > 0 {
		c.log.Info("left jobs to scale to zero to the next round", "left", len(rest), "holding_no_gpus", left, "budget", c.parkBudget)
	}
	return done, left
}

// zeroChunk scales one chunk of jobs to zero (see scaleToZero) and
// returns how many of them had no placement.
func (c *Controller) zeroChunk(ctx context.Context, r *round, p Plan, idx []int, done map[int]bool, free occupancy) int {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), applyTimeout+time.Duration(len(idx)/zeroConcurrency+1)*time.Second)
	defer cancel()
	intents := make([]KVPair, 0, len(idx))
	for _, i := range idx {
		s := &p.Steps[i]
		e := r.entries[s.Index]
		done[i] = true
		c.begin1(e, s)
		c.intend(r, e, s.Alloc, s.Decision)
		raw, _ := json.Marshal(e.state)
		intents = append(intents, KVPair{Key: stateKey(e.job.JobRef), Value: raw})
	}
	failed, err := r.kv.putMany(actx, intents)
	if err != nil && !r.kv.down(err) {
		c.log.Warn("failed to record writes ahead; holding those jobs", "jobs", len(failed), "error", err)
		c.metrics.incError("write_state")
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, zeroConcurrency)
	var outcomes []KVPair
	waiting := 0
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
			before := e.job.Running
			from := contract.FormatPlacement(e.job.Placement)
			idx, ok := c.change(actx, r, e, s.Alloc, s.Decision, s.GPUModels)
			raw, _ := json.Marshal(e.state)
			mu.Lock()
			outcomes = append(outcomes, KVPair{Key: stateKey(e.job.JobRef), Value: raw})
			if ok {
				free.move(before, nil)
			}
			if ok && from == "" {
				waiting++
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
	return waiting
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
// lost the lock) with left of n steps not done: the writes done so far
// are recorded; the rest are left for the next leader's round.
func (c *Controller) interrupted(ctx context.Context, done, n int) bool {
	if ctx.Err() == nil {
		return false
	}
	c.log.Info("round interrupted; leaving the remaining jobs as they are", "applied", done, "left", n-done, "error", ctx.Err())
	return true
}

// vacateAndPlace stops the blocked jobs, then places those it stopped. A
// job that could not be stopped keeps its placement until the next round:
// moving it now would deadlock.
func (c *Controller) vacateAndPlace(ctx context.Context, r *round, p Plan, blocked []*Step, free occupancy) {
	var placeAfter []*Step
	for i, s := range blocked {
		if c.interrupted(ctx, i, len(blocked)) {
			return
		}
		e := r.entries[s.Index]
		if c.vacate(ctx, r, e) {
			free.move(e.job.Running, nil)
			placeAfter = append(placeAfter, s)
			continue
		}
		why := "could not stop it ahead of its move"
		if e.st.Error != "" {
			why += ": " + e.st.Error
		}
		c.settle(ctx, r, p, e, s, why)
	}
	for i, s := range placeAfter {
		if c.interrupted(ctx, i, len(placeAfter)) {
			return
		}
		c.settle(ctx, r, p, r.entries[s.Index], s, "")
	}
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
	e.state.Pending = &PendingApply{Round: r.number, ReadIndex: e.job.JobModifyIndex, Allocation: alloc, Decision: &d, At: c.now()}
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
