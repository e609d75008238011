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
	// GPUs is the number of healthy instances of the configured device.
	GPUs int
	// UsedByOthers counts the GPUs held by allocations of jobs the
	// controller does not manage (they are not Pollux's to give).
	UsedByOthers int
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
