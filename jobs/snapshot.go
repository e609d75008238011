package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
)

// snapshot lists the jobs and nodes, waits for the round's listing of
// the jobs' keys (tree is closed once r.kv has it), forgets the state of
// jobs no longer listed, reads every job and sorts them into the status:
// stopped, invalid, unreadable, or an entry for the policy.
func (c *Controller) snapshot(ctx context.Context, r *round, tree <-chan struct{}) (err error) {
	defer func() { <-tree }()
	if ts, ok := c.cluster.(GPUTypeSourcer); ok {
		src, _ := ParseGPUTypeSource(r.cfg.GPUTypeSource) // validated with the configuration
		ts.SetGPUTypeSource(src)
	}
	// The jobs first: the Nomad adapter can reuse the list to tell, on the
	// nodes, the controller's jobs from others (ListedNodes).
	var refs []JobRef
	refs, _, err = c.cluster.ListJobs(ctx, 0, 0)
	if err != nil {
		c.metrics.incError("list_jobs")
		return fmt.Errorf("snapshot: %w", err)
	}
	if ln, ok := c.cluster.(ListedNodes); ok {
		r.nodes, err = ln.NodesFor(ctx, refs)
	} else {
		r.nodes, err = c.cluster.Nodes(ctx)
	}
	if err != nil {
		c.metrics.incError("list_nodes")
		return fmt.Errorf("snapshot: %w", err)
	}
	r.nodeType, r.typeModels = c.typesOf(r.cfg, r.nodes)
	r.severalTypes = SeveralGPUTypes(r.nodeType)
	known := make(map[JobRef]bool, len(refs))
	for _, ref := range refs {
		known[ref] = true
	}
	for ref := range c.states {
		if !known[ref] {
			delete(c.states, ref) // deleted or untagged; its keys in Consul stay
		}
	}
	c.forgetPublished(known)
	<-tree
	read, readErrs := c.readJobs(ctx, r, refs)
	r.read = read
	for i, ref := range refs {
		st := &JobStatus{Job: ref.String()}
		r.stats = append(r.stats, st)
		if e := c.classify(r, st, read[i], readErrs[i]); e != nil {
			r.entries = append(r.entries, e)
		}
	}
	return nil
}

// classify sorts one read job: it returns its entry if the policy
// schedules it, else records in st why not (and, for a job that keeps its
// GPUs, holds them in r.held).
func (c *Controller) classify(r *round, st *JobStatus, job Job, err error) *entry {
	if err != nil {
		st.State, st.Error = StateError, err.Error()
		c.log.Warn("failed to read job", "job_id", st.Job, "error", err)
		c.metrics.incError("read_job")
		return nil
	}
	// Dead is also what Nomad calls a batch job the controller scaled to
	// zero (no groups with a count, no allocations): that one waits for
	// GPUs and stays scheduled.
	scaledToZero := len(job.Placement) == 0 && !job.Unshaped && job.Problem == ""
	if job.Stopped || (job.Status == "dead" && !scaledToZero) {
		r.hold(job)
		st.State = StateStopped
		return nil
	}
	// A tagged job the controller will not schedule keeps whatever GPUs
	// Nomad gave it: they are not the policy's to hand out.
	if job.Problem != "" {
		r.hold(job)
		st.State, st.Error = StateInvalid, job.Problem
		c.log.Warn("job skipped: cannot manage its spec", "job_id", st.Job, "reason", job.Problem)
		return nil
	}
	spec, err := ParseSpec(job.Meta)
	if err != nil {
		r.hold(job)
		st.State, st.Error = StateInvalid, err.Error()
		c.log.Warn("job skipped: invalid pollux meta", "job_id", st.Job, "error", err)
		return nil
	}
	return &entry{job: job, spec: spec, st: st}
}

// hold keeps the GPUs job runs on out of the policy's hands this round.
func (r *round) hold(job Job) {
	for _, run := range job.Running {
		r.held[run.Node] += run.GPUs
	}
}

// readConcurrency bounds the parallel job reads of a round's snapshot.
const readConcurrency = 32

// readJobs reads the jobs concurrently (each read is a few HTTP calls, so
// a round with many jobs is bound by latency, not by CPU), keeping order.
func (c *Controller) readJobs(ctx context.Context, r *round, refs []JobRef) ([]Job, []error) {
	out := make([]Job, len(refs))
	errs := make([]error, len(refs))
	read := c.cluster.ReadJob
	if lr, ok := c.cluster.(ListedReader); ok {
		read = lr.ReadListed // the round listed the jobs just now
	}
	if qr, ok := c.cluster.(QueuedReader); ok {
		read = qr.ReadQueued // it reads as ReadListed unless queued
	}
	if pr, ok := c.cluster.(ParkedReader); ok {
		other := read
		read = func(ctx context.Context, ref JobRef) (Job, error) {
			if at := c.parkedAt(r, ref); at > 0 {
				return pr.ReadParked(ctx, ref, at)
			}
			return other(ctx, ref)
		}
	}
	sem := make(chan struct{}, readConcurrency)
	var wg sync.WaitGroup
	for i, ref := range refs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out[i], errs[i] = read(ctx, ref)
		}()
	}
	wg.Wait()
	return out, errs
}

// parkedAt is the JobModifyIndex the controller's last write to ref gave
// it when that write scaled the job to zero and nothing is pending: the
// job's state in memory, else as the round's listing of keys has it. It
// is 0 when unknown or when the job was left with GPUs.
func (c *Controller) parkedAt(r *round, ref JobRef) uint64 {
	if s, ok := c.states[ref]; ok {
		if s.Pending != nil || len(s.Allocation) > 0 {
			return 0
		}
		return s.AppliedIndex
	}
	p, ok := r.kv.listed(stateKey(ref))
	if !ok {
		return 0
	}
	// Only the three fields: the fit phase parses and checks the whole
	// document.
	var s struct {
		AppliedIndex uint64          `json:"applied_index"`
		Allocation   []string        `json:"allocation"`
		Pending      json.RawMessage `json:"pending"`
	}
	if json.Unmarshal(p.Value, &s) != nil || len(s.Allocation) > 0 || (len(s.Pending) > 0 && string(s.Pending) != "null") {
		return 0
	}
	return s.AppliedIndex
}
