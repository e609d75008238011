package contract

// Job meta keys (docs/contracts.md §1). They use "pollux_" and underscores,
// so Nomad exposes them to tasks as NOMAD_META_pollux_* unchanged.
const (
	// Written by the job author.

	// MetaEnabled: "true" opts the job in; anything else leaves it alone.
	MetaEnabled = "pollux_enabled"
	// MetaGroup names the task group that holds the workers (default: the
	// only group).
	MetaGroup = "pollux_group"
	// MetaInitBatchSize is the total batch size M0 the job was tuned for.
	MetaInitBatchSize = "pollux_init_batch_size"
	// MetaInitLR is the learning rate at M0.
	MetaInitLR = "pollux_init_lr"
	// MetaMaxBatchSize is the largest total batch size allowed (default M0).
	MetaMaxBatchSize = "pollux_max_batch_size"
	// MetaLocalBszMin and MetaLocalBszMax bound the per-GPU micro-batch.
	MetaLocalBszMin = "pollux_local_bsz_min"
	MetaLocalBszMax = "pollux_local_bsz_max"
	// MetaAccumulation: "true" (default) allows gradient accumulation.
	MetaAccumulation = "pollux_accumulation"
	// MetaLRScaling is the learning-rate scaling rule: adascale (default),
	// linear, sqrt or none.
	MetaLRScaling = "pollux_lr_scaling"
	// MetaMinGPUs and MetaMaxGPUs bound the job's GPU count.
	MetaMinGPUs = "pollux_min_gpus"
	MetaMaxGPUs = "pollux_max_gpus"
	// MetaModel names the model the job trains (optional; for example
	// "resnet50-imagenet"): on a cluster of several GPU types, jobs that
	// give the same name share their measured throughput profiles per GPU
	// type (model.ProfilePool), so that a job is placed by what every run
	// of its model measured. At most 128 bytes of letters, digits and
	// . _ - : / ; give one name only to jobs that run the same code at the
	// same precision.
	MetaModel = "pollux_model"

	// Written by the controller with every reallocation it applies (the
	// Decision's fields; see Decision.Meta).

	// MetaBatchSize is the total batch size M.
	MetaBatchSize = "pollux_batch_size"
	// MetaLocalBsz is the per-GPU micro-batch.
	MetaLocalBsz = "pollux_local_bsz"
	// MetaAccumSteps is the number of extra accumulation micro-steps per
	// optimizer step (0 = none).
	MetaAccumSteps = "pollux_accum_steps"
	// MetaLR is the learning rate for M.
	MetaLR = "pollux_lr"
	// MetaNumReplicas is the job's total GPUs.
	MetaNumReplicas = "pollux_num_replicas"
	// MetaNumNodes is the number of nodes used.
	MetaNumNodes = "pollux_num_nodes"
	// MetaPlacement is "node-id:gpus,node-id:gpus,..." in rank order.
	MetaPlacement = "pollux_placement"
	// MetaRound is the scheduling round that produced the allocation.
	MetaRound = "pollux_round"
	// MetaTerm is the leadership term of the controller that wrote the
	// job version: the leader lock's acquisition count (Consul's
	// LockIndex), larger for every later term, so that each version says
	// which leader wrote it. The Nomad adapter sets it with each
	// registration under a lease, beside the decision's keys.
	MetaTerm = "pollux_term"
	// MetaWrite marks the registration that wrote the job version:
	// "<term>/<round>/<digest>", the digest a hash of the change (the
	// placement, its GPU models and the decision's meta). Two versions
	// with one marker are one change applied twice. After a write whose
	// answer was lost, the Nomad adapter reads the job back and tells by
	// this marker whether the write landed.
	MetaWrite = "pollux_write"
	// MetaSubmitTime is the job's first submission time, RFC 3339 (job
	// meta, written once, with the first reallocation).
	MetaSubmitTime = "pollux_submit_time"

	// Group meta of the per-node copies of the worker group.

	// MetaRank is a per-node group's rank: 0 for the first node of the
	// placement, 1 for the next, ...
	MetaRank = "pollux_rank"
	// MetaNode is the node ID a per-node group is pinned to.
	MetaNode = "pollux_node"
)

// OwnedMeta lists the job meta keys the controller writes; every other
// key is the author's and is never changed.
var OwnedMeta = []string{
	MetaBatchSize, MetaLocalBsz, MetaAccumSteps, MetaLR, MetaNumReplicas,
	MetaNumNodes, MetaPlacement, MetaRound, MetaSubmitTime, MetaGPUType,
}
