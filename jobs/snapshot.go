package jobs

import (
	"context"
	"fmt"
	"sync"
)

// snapshot lists the jobs and nodes, forgets the state of jobs no longer
// listed, reads every job and sorts them into the status: stopped,
// invalid, unreadable, or an entry for the policy.
func (c *Controller) snapshot(ctx context.Context, r *round) error {
	if ts, ok := c.cluster.(GPUTypeSourcer); ok {
		src, _ := ParseGPUTypeSource(r.cfg.GPUTypeSource) // validated with the configuration
		ts.SetGPUTypeSource(src)
	}
	// The jobs first: the Nomad adapter can reuse the list to tell, on the
	// nodes, the controller's jobs from others (ListedNodes).
	refs, _, err := c.cluster.ListJobs(ctx, 0, 0)
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
	read, readErrs := c.readJobs(ctx, refs)
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
func (c *Controller) readJobs(ctx context.Context, refs []JobRef) ([]Job, []error) {
	out := make([]Job, len(refs))
	errs := make([]error, len(refs))
	read := c.cluster.ReadJob
	if lr, ok := c.cluster.(ListedReader); ok {
		read = lr.ReadListed // the round listed the jobs just now
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
