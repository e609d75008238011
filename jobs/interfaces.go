package jobs

import (
	"context"
	"time"

	"github.com/pollux-nomad/pollux/contract"
)

// The contract's sentinel errors, under the names the controller's
// callers have used.
var (
	ErrConflict         = contract.ErrConflict
	ErrNotFound         = contract.ErrNotFound
	ErrPermissionDenied = contract.ErrPermissionDenied
)

// JobRef names a Nomad job.
type JobRef struct {
	Namespace string
	ID        string
}

// String returns "namespace/id".
func (r JobRef) String() string { return r.Namespace + "/" + r.ID }

// NodeGPUs is a number of GPUs on one node.
type NodeGPUs = contract.NodeGPUs

// Job is what the controller needs to know of one Pollux-tagged Nomad job.
type Job struct {
	JobRef
	// Meta is the job's meta block (the author's pollux_* keys and the
	// controller's output keys).
	Meta map[string]string
	// JobModifyIndex is the index every write is checked against.
	JobModifyIndex uint64
	// SubmitTime is when the job was first registered.
	SubmitTime time.Time
	// Status is Nomad's job status: pending, running or dead.
	Status string
	// Stopped is true when an operator stopped the job.
	Stopped bool
	// Placement is the per-node GPU layout the job spec currently asks for
	// (from the controller's per-node groups), in rank order; empty for a
	// job the controller has not shaped yet or scaled to zero.
	Placement []NodeGPUs
	// Unshaped is true while the worker group is still as its author
	// submitted it (no per-node groups written yet) and asks for GPUs
	// (count of at least 1). Placement is then empty, but Nomad runs or
	// queues the job on its own: a decision of zero GPUs must still be
	// written (count = 0), or the job would hold GPUs the policy gave to
	// others.
	Unshaped bool
	// Running is what Nomad actually placed: the GPUs held by the job's
	// pending or running allocations, per node, in rank order.
	Running []NodeGPUs
	// Started is when the newest of the allocations in Running was created
	// by the scheduler (zero if none, or if the cluster does not say): the
	// start of a restart the controller measures, independent of when the
	// controller itself recorded or made the write.
	Started time.Time
	// Problem, if not empty, says why the job's spec cannot be managed
	// (no worker group, several groups and no pollux_group, no device
	// request of the configured type, ...). The controller skips the job.
	Problem string
	// Listed is true when the job was described from the cluster's job
	// list without reading its spec (QueuedReader): a problem in the spec
	// is then unknown until a write reads it.
	Listed bool
}

// Node is a schedulable Nomad node and its GPUs.
type Node struct {
	// ID is the Nomad node ID.
	ID string
	// Name is the node's name, for logs.
	Name string
	// NodePool is the node's Nomad node pool ("" where the cluster does
	// not say; the autoscaler then counts it in Config.NodePool, else in
	// "default").
	NodePool string
	// GPUs is the number of healthy instances of the configured device.
	GPUs int
	// UsedByOthers counts the GPUs held by allocations of jobs the
	// controller does not manage (they are not Pollux's to give).
	UsedByOthers int
	// OtherJobs names the jobs behind UsedByOthers, sorted by name (the
	// status page shows who holds the GPUs Pollux cannot give).
	OtherJobs []contract.OtherJob
	// GPUModel is the node's GPU model name from the configured GPU type
	// source (the device's name, or a node meta key or attribute); empty
	// when GPU types are off or the node has none.
	GPUModel string
}

// Change is one job rewrite: the new placement and the output meta keys.
type Change struct {
	Job JobRef
	// JobModifyIndex is the index the job was read at; the write must fail
	// with ErrConflict if the job changed since.
	JobModifyIndex uint64
	// Placement is the new per-node layout in rank order; empty scales the
	// job's workers to zero.
	Placement []NodeGPUs
	// Meta holds the output keys to set (pollux_batch_size, ...); other
	// meta keys are left as they are, except that pollux_gpu_type is
	// removed when Meta has none.
	Meta map[string]string
	// GPUModels, if not empty, are the GPU model names (Node.GPUModel) of
	// the placement's GPU type: the adapter constrains every per-node
	// group to nodes with one of them, so that Nomad never runs the job
	// on another type. Empty: no type constraint.
	GPUModels []string
}

// Cluster is the controller's view of Nomad. nomad.Client implements it.
type Cluster interface {
	// ListJobs returns the Pollux-tagged jobs of every namespace the token
	// may read. With waitIndex > 0 it blocks (a Nomad blocking query)
	// until the jobs list changes past waitIndex or wait elapses, and
	// returns the new index.
	ListJobs(ctx context.Context, waitIndex uint64, wait time.Duration) ([]JobRef, uint64, error)
	// ReadJob reads one job with its current and running placement.
	ReadJob(ctx context.Context, ref JobRef) (Job, error)
	// Nodes returns the ready, eligible nodes with their GPUs of the
	// configured device type.
	Nodes(ctx context.Context) ([]Node, error)
	// Apply rewrites one job as Change says, with check-and-set on its
	// JobModifyIndex. It returns the job's new JobModifyIndex.
	Apply(ctx context.Context, c Change) (uint64, error)
}

// KV is the controller's view of Consul's key/value store, under the
// configured prefix. consul.Client implements it. Keys are relative to the
// prefix ("jobs/default/train/metrics").
type KV interface {
	// Get returns a key's value and ModifyIndex, or ErrNotFound.
	Get(ctx context.Context, key string) ([]byte, uint64, error)
	// Put writes a key unconditionally.
	Put(ctx context.Context, key string, value []byte) error
	// CAS writes a key only if its ModifyIndex is still index (0: only if
	// absent); it returns ErrConflict otherwise.
	CAS(ctx context.Context, key string, value []byte, index uint64) error
	// Watch blocks until the key's ModifyIndex passes index or wait
	// elapses, and returns its value (nil if absent) and index.
	Watch(ctx context.Context, key string, index uint64, wait time.Duration) ([]byte, uint64, error)
	// Delete removes a key (and everything under it if recurse).
	Delete(ctx context.Context, key string, recurse bool) error
}

// Leadership elects one controller among several.
type Leadership interface {
	// Acquire blocks until this instance holds the lock, or ctx ends. The
	// returned channel is closed when leadership is lost (session expired,
	// lock deleted, Consul unreachable for longer than the session TTL).
	Acquire(ctx context.Context) (<-chan struct{}, error)
	// Release gives the lock up (on shutdown).
	Release(ctx context.Context) error
}

// GPUTypeSourcer is implemented by a Cluster that can read nodes' GPU
// model names (nomad.Client). The controller sets the configured source
// (Config.GPUTypeSource, parsed) before each round's Nodes call.
type GPUTypeSourcer interface {
	SetGPUTypeSource(src GPUTypeSource)
}

// Placer is optionally implemented by a Cluster that can tell whether the
// scheduler placed everything an Apply asked for. nomad.Client implements
// it: a blocked evaluation or queued allocations mean the reallocation
// failed (for example, GPUs held by a job outside Pollux's view).
type Placer interface {
	Placed(ctx context.Context, ref JobRef, sinceIndex uint64) (ok bool, reason string, err error)
}

// ListedReader is implemented by a Cluster that can read a job more
// cheaply right after ListJobs (nomad.Client: it reuses the spec read at
// the JobModifyIndex the list shows and one allocation listing for all
// jobs). A round's snapshot uses it when there.
type ListedReader interface {
	ReadListed(ctx context.Context, ref JobRef) (Job, error)
}

// ParkedReader is implemented by a ListedReader that can describe from
// its job list alone a job the controller scaled to zero (nomad.Client):
// Nomad moves a job's JobModifyIndex on every change of its spec, so
// while the list shows the index the controller's own write to zero
// produced (parkedAt, from the job's state), the spec is the one written
// and asks for no GPUs, and the list's meta, index and status are all a
// round needs. It reads the job as ReadListed does when the list shows
// another index or the job holds GPUs. A new leader's first round at
// thousands of waiting jobs then reads only the specs of the jobs that
// run, not one per job.
type ParkedReader interface {
	ReadParked(ctx context.Context, ref JobRef, parkedAt uint64) (Job, error)
}

// QueuedReader is implemented by a ListedReader that can describe from
// its job list alone a job its author submitted, nobody changed since,
// and Nomad queued without placing any of it (nomad.Client): such a job
// holds no GPUs and asks for at least one, which is all the policy needs
// besides its meta; its spec is read when a write needs it. It reads the
// job as ReadListed does otherwise. A controller adopting thousands of
// queued jobs then reads only the specs of the jobs that run.
type QueuedReader interface {
	ReadQueued(ctx context.Context, ref JobRef) (Job, error)
}

// ListedNodes is implemented by a Cluster that can list the nodes more
// cheaply given the jobs the round just listed (nomad.Client: it tells
// the GPUs those jobs hold from the GPUs of other jobs without listing
// every job again). A round's snapshot uses it when there.
type ListedNodes interface {
	NodesFor(ctx context.Context, managed []JobRef) ([]Node, error)
}

// Invalidator is implemented by a Cluster that caches what it read
// (nomad.Client): Invalidate makes the next round read everything again.
// The controller calls it when it forgets its own memory (a new term
// after someone else led).
type Invalidator interface {
	Invalidate()
}

// NodePoolLister is optionally implemented by a Cluster (nomad.Client)
// that can list the cluster's node pools; with it, CheckConfig refuses an
// autoscaling pool Nomad does not know.
type NodePoolLister interface {
	NodePools(ctx context.Context) ([]string, error)
}
