package jobstest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
)

// Cluster is an in-memory Nomad with GPU nodes and Pollux jobs (see the
// package documentation for what it shares with Nomad). It implements
// jobs.Cluster and jobs.Placer, and the fast paths the Nomad adapter
// offers (jobs.ListedReader, jobs.QueuedReader, jobs.ParkedReader,
// jobs.ListedNodes, jobs.Invalidator, jobs.GPUTypeSourcer), so that a
// controller's unit tests run the reads a real round makes; Plain hides
// them, for the slow path.
type Cluster struct {
	clock *Clock

	mu    sync.Mutex
	index uint64
	nodes []jobs.Node
	// pools are the node pools created without a node (AddNodePool).
	pools []string
	jobs  map[jobs.JobRef]*job
	order []jobs.JobRef
	// changed is closed (and replaced) on every write.
	changed chan struct{}
	hooks   Hooks
	// listed is what the last ListJobs showed of each job (nil after
	// Invalidate); fast counts the reads described from it.
	listed map[jobs.JobRef]listing
	fast   FastReads
	// source is the GPU type source the controller set: without one,
	// nodes report no GPU model, as the Nomad adapter's do.
	source jobs.GPUTypeSource
}

// FastReads counts the reads a Cluster answered from its job list alone.
type FastReads struct {
	// Parked and Queued are the jobs ReadParked and ReadQueued described
	// without reading them; Invalidated counts Invalidate calls.
	Parked, Queued, Invalidated int
}

// listing is what a job list shows of one job.
type listing struct {
	index, createIndex uint64
	meta               map[string]string
	status             string
	stop               bool
	submit             time.Time
	// placed: some of its GPUs run; queued: it is unshaped, asks for
	// GPUs and Nomad placed none of them.
	placed, queued bool
}

// Hooks inject faults around Cluster.Apply.
type Hooks struct {
	// BeforeApply runs before a change is checked; an error is returned
	// and nothing is written. It may edit the cluster (an operator's edit
	// racing the controller's write).
	BeforeApply func(jobs.Change) error
	// AfterApply runs after a change was written; an error is returned
	// in place of the new index (the answer was lost).
	AfterApply func(jobs.Change) error
}

type job struct {
	jobs.Job
	// asks is the GPU count of the worker group as submitted (while
	// Unshaped).
	asks int
	// models is the GPU type constraint of the last change
	// (Change.GPUModels).
	models []string
	// createIndex is the index of its submission.
	createIndex uint64
}

var (
	_ jobs.Cluster        = (*Cluster)(nil)
	_ jobs.Placer         = (*Cluster)(nil)
	_ jobs.ListedReader   = (*Cluster)(nil)
	_ jobs.QueuedReader   = (*Cluster)(nil)
	_ jobs.ParkedReader   = (*Cluster)(nil)
	_ jobs.ListedNodes    = (*Cluster)(nil)
	_ jobs.Invalidator    = (*Cluster)(nil)
	_ jobs.GPUTypeSourcer = (*Cluster)(nil)
)

// NewCluster returns a cluster without nodes or jobs; clock stamps
// submissions and times out blocking reads.
func NewCluster(clock *Clock) *Cluster {
	return &Cluster{clock: clock, index: 1, jobs: map[jobs.JobRef]*job{}, changed: make(chan struct{})}
}

// SetHooks replaces the fault hooks.
func (c *Cluster) SetHooks(h Hooks) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hooks = h
}

// AddNode adds a ready node with gpus GPUs.
func (c *Cluster) AddNode(id string, gpus int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes = append(c.nodes, jobs.Node{ID: id, Name: id, GPUs: gpus})
	c.schedule()
}

// RemoveNode takes a node out of the listing, as Nomad stops listing a
// node that is drained, down or purged (the cloud removed it). The
// allocations on it are not touched.
func (c *Cluster) RemoveNode(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes = slices.DeleteFunc(c.nodes, func(n jobs.Node) bool { return n.ID == id })
}

// AddNodePool creates a node pool (nomad node pool apply), which NodePools
// lists even while no node is in it.
func (c *Cluster) AddNodePool(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pools = append(c.pools, name)
}

// NodePools lists the node pools as Nomad does: "all" and "default", the
// pools created with AddNodePool and those of the nodes.
func (c *Cluster) NodePools(ctx context.Context) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := append([]string{"all", "default"}, c.pools...)
	for _, n := range c.nodes {
		if n.NodePool != "" && !slices.Contains(out, n.NodePool) {
			out = append(out, n.NodePool)
		}
	}
	return out, nil
}

// SetGPUModel sets a node's GPU model name (jobs.Node.GPUModel), as the
// Nomad adapter reads it from the configured GPU type source.
func (c *Cluster) SetGPUModel(id, model string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.nodes {
		if c.nodes[i].ID == id {
			c.nodes[i].GPUModel = model
		}
	}
}

// GPUModels returns the GPU type constraint the last change wrote to a
// job (Change.GPUModels).
func (c *Cluster) GPUModels(ref jobs.JobRef) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if j, ok := c.jobs[ref]; ok {
		return slices.Clone(j.models)
	}
	return nil
}

// Submit registers a job as its author would: meta and one worker group
// asking for gpus GPUs, placed by the scheduler wherever they are free.
func (c *Cluster) Submit(id string, meta map[string]string, gpus int) jobs.JobRef {
	c.mu.Lock()
	defer c.mu.Unlock()
	ref := jobs.JobRef{Namespace: "default", ID: id}
	j := &job{Job: jobs.Job{JobRef: ref, Meta: maps.Clone(meta), SubmitTime: c.clock.Now(), Unshaped: gpus > 0}, asks: gpus}
	c.jobs[ref] = j
	c.order = append(c.order, ref)
	c.bump(j)
	j.createIndex = j.JobModifyIndex
	return ref
}

// Edit changes a job as an operator would (a new version of the job):
// its JobModifyIndex moves.
func (c *Cluster) Edit(ref jobs.JobRef, edit func(*jobs.Job)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	j, ok := c.jobs[ref]
	if !ok {
		return fmt.Errorf("job %s: %w", ref, contract.ErrNotFound)
	}
	edit(&j.Job)
	c.bump(j)
	return nil
}

// Purge removes a job and frees its GPUs, as `nomad job stop -purge`.
func (c *Cluster) Purge(ref jobs.JobRef) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.jobs, ref)
	c.order = slices.DeleteFunc(c.order, func(r jobs.JobRef) bool { return r == ref })
	c.index++
	c.schedule()
	close(c.changed)
	c.changed = make(chan struct{})
}

// Job returns the job as stored.
func (c *Cluster) Job(ref jobs.JobRef) (jobs.Job, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j, ok := c.jobs[ref]
	if !ok {
		return jobs.Job{}, false
	}
	return c.view(j), true
}

// bump records a write of j and lets the scheduler act; c.mu is held.
func (c *Cluster) bump(j *job) {
	c.index++
	j.JobModifyIndex = c.index
	c.schedule()
	close(c.changed)
	c.changed = make(chan struct{})
}

// ListJobs returns the jobs with pollux_enabled = "true", blocking as
// Nomad does when waitIndex > 0 (see KV.Watch).
func (c *Cluster) ListJobs(ctx context.Context, waitIndex uint64, wait time.Duration) ([]jobs.JobRef, uint64, error) {
	if wait <= 0 {
		wait = 5 * time.Minute
	}
	var timeout <-chan time.Time
	for {
		c.mu.Lock()
		refs, idx, changed := c.tagged(), c.index, c.changed
		c.list(refs)
		c.mu.Unlock()
		if waitIndex == 0 || idx > waitIndex {
			return refs, idx, nil
		}
		if timeout == nil {
			timeout = c.clock.After(wait)
		}
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-timeout:
			return refs, idx, nil
		case <-changed:
		}
	}
}

// tagged lists the Pollux jobs in submission order; c.mu is held.
func (c *Cluster) tagged() []jobs.JobRef {
	var out []jobs.JobRef
	for _, ref := range c.order {
		if c.jobs[ref].Meta[contract.MetaEnabled] == "true" {
			out = append(out, ref)
		}
	}
	return out
}

// ReadJob returns a job with its placement and what runs.
func (c *Cluster) ReadJob(ctx context.Context, ref jobs.JobRef) (jobs.Job, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j, ok := c.jobs[ref]
	if !ok {
		return jobs.Job{}, fmt.Errorf("job %s: %w", ref, contract.ErrNotFound)
	}
	return c.view(j), nil
}

// view is a copy of j with its status; c.mu is held.
func (c *Cluster) view(j *job) jobs.Job {
	out := j.Job
	out.Meta = maps.Clone(j.Meta)
	out.Placement = slices.Clone(j.Placement)
	out.Running = slices.Clone(j.Running)
	switch {
	case j.Stopped:
		out.Status = "dead"
	case len(j.Running) > 0:
		out.Status = "running"
	case len(j.Placement) == 0 && !j.Unshaped:
		out.Status = "dead" // a batch job scaled to zero
	default:
		out.Status = "pending"
	}
	return out
}

// Nodes returns the nodes with their GPUs, and their GPU model names
// when a GPU type source is set.
func (c *Cluster) Nodes(ctx context.Context) ([]jobs.Node, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.Clone(c.nodes)
	if c.source.Kind == "" {
		for i := range out {
			out[i].GPUModel = ""
		}
	}
	return out, nil
}

// Apply writes a change with check-and-set on the job's JobModifyIndex.
func (c *Cluster) Apply(ctx context.Context, ch jobs.Change) (uint64, error) {
	c.mu.Lock()
	hooks := c.hooks
	c.mu.Unlock()
	if hooks.BeforeApply != nil {
		if err := hooks.BeforeApply(ch); err != nil {
			return 0, err
		}
	}
	c.mu.Lock()
	j, ok := c.jobs[ch.Job]
	if !ok {
		c.mu.Unlock()
		return 0, fmt.Errorf("job %s: %w", ch.Job, contract.ErrNotFound)
	}
	if j.JobModifyIndex != ch.JobModifyIndex {
		c.mu.Unlock()
		return 0, fmt.Errorf("job %s: modify index is %d, change was read at %d: %w", ch.Job, j.JobModifyIndex, ch.JobModifyIndex, contract.ErrConflict)
	}
	j.Placement, j.Unshaped = slices.Clone(ch.Placement), false
	if _, ok := ch.Meta[contract.MetaGPUType]; !ok {
		delete(j.Meta, contract.MetaGPUType)
	}
	maps.Copy(j.Meta, ch.Meta)
	j.models = slices.Clone(ch.GPUModels)
	c.bump(j)
	idx := j.JobModifyIndex
	c.mu.Unlock()
	if hooks.AfterApply != nil {
		if err := hooks.AfterApply(ch); err != nil {
			return 0, err
		}
	}
	return idx, nil
}

// Placed reports whether the job runs what its spec asks for.
func (c *Cluster) Placed(ctx context.Context, ref jobs.JobRef, sinceIndex uint64) (bool, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j, ok := c.jobs[ref]
	if !ok {
		return false, "", fmt.Errorf("job %s: %w", ref, contract.ErrNotFound)
	}
	if jobs.SamePerNode(j.Placement, j.Running) {
		return true, "", nil
	}
	return false, "blocked: " + contract.FormatPlacement(j.Placement) + " does not fit", nil
}

// schedule places what can be placed until nothing changes, as Nomad's
// scheduler would (the old allocation of a job stays until its new one
// fits); c.mu is held.
func (c *Cluster) schedule() {
	for moved := true; moved; {
		moved = false
		for _, ref := range c.order {
			if c.place(c.jobs[ref]) {
				moved = true
			}
		}
	}
}

// place tries to make j run what it asks for, and reports whether
// anything changed; c.mu is held.
func (c *Cluster) place(j *job) bool {
	want := j.Placement
	switch {
	case j.Stopped:
		want = nil
	case j.Unshaped:
		if total(j.Running) == j.asks {
			return false
		}
		want = c.anywhere(j)
		if want == nil {
			return false
		}
	}
	if jobs.SamePerNode(want, j.Running) {
		return false
	}
	free := c.free()
	for _, r := range j.Running {
		free[r.Node] += r.GPUs // its own GPUs
	}
	for _, w := range want {
		if w.GPUs > free[w.Node] {
			return false // the old allocation stays
		}
	}
	j.Running = slices.Clone(want)
	return true
}

// anywhere picks GPUs for an unshaped job on the nodes with the most
// free GPUs, or nil if they do not suffice; c.mu is held.
func (c *Cluster) anywhere(j *job) []jobs.NodeGPUs {
	free := c.free()
	for _, r := range j.Running {
		free[r.Node] += r.GPUs
	}
	nodes := slices.Clone(c.nodes)
	sort.SliceStable(nodes, func(a, b int) bool { return free[nodes[a].ID] > free[nodes[b].ID] })
	var out []jobs.NodeGPUs
	left := j.asks
	for _, n := range nodes {
		if take := min(left, free[n.ID]); take > 0 {
			out = append(out, jobs.NodeGPUs{Node: n.ID, GPUs: take})
			left -= take
		}
	}
	if left > 0 {
		return nil
	}
	return out
}

// free is each node's GPUs held by no job; c.mu is held.
func (c *Cluster) free() map[string]int {
	out := map[string]int{}
	for _, n := range c.nodes {
		out[n.ID] += n.GPUs - n.UsedByOthers
	}
	for _, j := range c.jobs {
		for _, r := range j.Running {
			out[r.Node] -= r.GPUs
		}
	}
	return out
}

func total(p []jobs.NodeGPUs) int {
	n := 0
	for _, g := range p {
		n += g.GPUs
	}
	return n
}

// list records what a job list shows of refs; c.mu is held.
func (c *Cluster) list(refs []jobs.JobRef) {
	c.listed = make(map[jobs.JobRef]listing, len(refs))
	for _, ref := range refs {
		j := c.jobs[ref]
		v := c.view(j)
		c.listed[ref] = listing{
			index: j.JobModifyIndex, createIndex: j.createIndex, meta: maps.Clone(j.Meta),
			status: v.Status, stop: j.Stopped, submit: j.SubmitTime,
			placed: len(j.Running) > 0, queued: j.Unshaped && j.asks > 0 && len(j.Running) == 0,
		}
	}
}

// ReadListed reads a job right after ListJobs (as ReadJob: the stand-in
// has nothing to reuse).
func (c *Cluster) ReadListed(ctx context.Context, ref jobs.JobRef) (jobs.Job, error) {
	return c.ReadJob(ctx, ref)
}

// ReadParked describes a job from the last ListJobs alone when the list
// shows it at parkedAt (the controller's write that scaled it to zero)
// with none of its GPUs running, as the Nomad adapter does; otherwise it
// reads the job.
func (c *Cluster) ReadParked(ctx context.Context, ref jobs.JobRef, parkedAt uint64) (jobs.Job, error) {
	c.mu.Lock()
	l, ok := c.listed[ref]
	if !ok || parkedAt == 0 || l.index != parkedAt || l.placed || l.meta[contract.MetaEnabled] != "true" {
		c.mu.Unlock()
		return c.ReadJob(ctx, ref)
	}
	c.fast.Parked++
	c.mu.Unlock()
	return jobs.Job{JobRef: ref, Meta: maps.Clone(l.meta), JobModifyIndex: l.index, Status: l.status, Stopped: l.stop, SubmitTime: l.submit}, nil
}

// ReadQueued describes a job from the last ListJobs alone when the list
// shows it as its author submitted it (no write since) with Nomad having
// placed none of the GPUs it asks for, as the Nomad adapter does:
// Unshaped and Listed. Otherwise it reads the job.
func (c *Cluster) ReadQueued(ctx context.Context, ref jobs.JobRef) (jobs.Job, error) {
	c.mu.Lock()
	l, ok := c.listed[ref]
	if !ok || l.stop || l.index != l.createIndex || !l.queued || l.placed || l.meta[contract.MetaEnabled] != "true" {
		c.mu.Unlock()
		return c.ReadJob(ctx, ref)
	}
	c.fast.Queued++
	c.mu.Unlock()
	return jobs.Job{JobRef: ref, Meta: maps.Clone(l.meta), JobModifyIndex: l.index, Status: l.status, SubmitTime: l.submit, Unshaped: true, Listed: true}, nil
}

// NodesFor lists the nodes (as Nodes: the stand-in tells the managed
// jobs' GPUs from others' without the list).
func (c *Cluster) NodesFor(ctx context.Context, managed []jobs.JobRef) ([]jobs.Node, error) {
	return c.Nodes(ctx)
}

// Invalidate forgets the last job list: every job is read again until
// the next ListJobs.
func (c *Cluster) Invalidate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.listed = nil
	c.fast.Invalidated++
}

// SetGPUTypeSource sets the source of the nodes' GPU model names; with
// none, Nodes reports no model.
func (c *Cluster) SetGPUTypeSource(src jobs.GPUTypeSource) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.source = src
}

// FastReads returns the counts of reads answered from the job list.
func (c *Cluster) FastReads() FastReads {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fast
}

// Plain returns c seen as jobs.Cluster and jobs.Placer only: a controller
// given it reads every job with ReadJob and lists the nodes with Nodes
// (the slow path). Its nodes report their GPU model names whenever set.
func (c *Cluster) Plain() jobs.Cluster { return plain{c} }

type plain struct{ c *Cluster }

var _ jobs.Placer = plain{}

func (p plain) ListJobs(ctx context.Context, waitIndex uint64, wait time.Duration) ([]jobs.JobRef, uint64, error) {
	return p.c.ListJobs(ctx, waitIndex, wait)
}

func (p plain) ReadJob(ctx context.Context, ref jobs.JobRef) (jobs.Job, error) {
	return p.c.ReadJob(ctx, ref)
}

func (p plain) Nodes(ctx context.Context) ([]jobs.Node, error) {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	return slices.Clone(p.c.nodes), nil
}

func (p plain) Apply(ctx context.Context, ch jobs.Change) (uint64, error) { return p.c.Apply(ctx, ch) }

func (p plain) Placed(ctx context.Context, ref jobs.JobRef, sinceIndex uint64) (bool, string, error) {
	return p.c.Placed(ctx, ref, sinceIndex)
}
