package contract

// The explanation of a job's allocation, part of the status document
// (docs/contracts.md §2).

// Reasons a job has its allocation or waits (Explanation.Reason). The
// status page, `pollux status` and `pollux plan` all show these words.
const (
	ReasonInvalidMeta = "invalid_meta" // a pollux_* key is malformed: the job is left untouched
	ReasonInvalidSpec = "invalid_spec" // the job's groups or devices cannot be managed
	ReasonReadError   = "read_error"   // Nomad or Consul could not be read: held as it is
	ReasonStopped     = "stopped"      // stopped or dead: ignored
	ReasonConflict    = "conflict"     // an operator edited the job since it was read: their version stays this round
	ReasonHeld        = "held"         // no change this round (Consul down, lock not shown, move deferred)
	ReasonNoMetrics   = "no_metrics"   // no model yet: the initial batch size, speedup unknown
	ReasonBadMetrics  = "bad_metrics"  // the latest metrics document was rejected: the last good model is used
	ReasonCapacity    = "capacity"     // waits or is held back: no GPU is left free
	ReasonFairShare   = "fair_share"   // waits or has fewer GPUs: other jobs gain more from them
	ReasonAtCap       = "at_cap"       // has the most GPUs it may have
	ReasonAtMin       = "at_min"       // has the fewest GPUs it may have
	ReasonGoodput     = "goodput"      // one GPU more or less would not raise the cluster's fitness
)

// Explanation is why a job has its allocation or waits, with the numbers
// behind it. Speedups are relative to the job's fair-share base, the
// goodput it would have on K_f GPUs on N_f nodes (Pollux, OSDI '21, §4.1;
// see pollux.Policy in policy/pollux), as in the policy's fitness.
type Explanation struct {
	// Reason is one of the Reason* codes.
	Reason string `json:"reason"`
	// Message says it in words, with the numbers.
	Message string `json:"message"`
	// Key is the meta key at fault for invalid_meta.
	Key string `json:"key,omitempty"`
	// Speedup is the predicted speedup at the job's allocation; the two
	// others at one GPU less and one more (0: not possible or unknown).
	Speedup     float64 `json:"speedup,omitempty"`
	SpeedupLess float64 `json:"speedup_one_less,omitempty"`
	SpeedupMore float64 `json:"speedup_one_more,omitempty"`
	// Goodput is the predicted goodput at the allocation (examples/s at
	// M0-equivalent progress), and Efficiency the statistical efficiency
	// of the decided batch size.
	Goodput    float64 `json:"goodput,omitempty"`
	Efficiency float64 `json:"efficiency,omitempty"`
	// BaseGoodput is the fair-share base: the goodput on FairShareGPUs GPUs
	// on FairShareNodes nodes.
	BaseGoodput    float64 `json:"base_goodput,omitempty"`
	FairShareGPUs  int     `json:"fair_share_gpus,omitempty"`
	FairShareNodes int     `json:"fair_share_nodes,omitempty"`
	// MinGPUs and MaxGPUs are the job's bounds this round (MaxGPUs after
	// every cap); CapBy names what set MaxGPUs.
	MinGPUs int    `json:"min_gpus,omitempty"`
	MaxGPUs int    `json:"max_gpus,omitempty"`
	CapBy   string `json:"cap_by,omitempty"`
	// InitBatchSize (M0) and Bounds are the job's batch settings, so that
	// a reader with the job's model (its state key) can draw its curves.
	InitBatchSize int          `json:"init_batch_size,omitempty"`
	Bounds        *BatchBounds `json:"bounds,omitempty"`
}

// BatchBounds are a job's batch-size limits in the status document (the
// fields of model.Bounds, with the same JSON).
type BatchBounds struct {
	MaxBatchSize int  `json:"max_batch_size"`
	MinLocalBsz  int  `json:"min_local_bsz"`
	MaxLocalBsz  int  `json:"max_local_bsz"`
	Accumulation bool `json:"accumulation"`
}

// OtherJob is a job Pollux does not manage that holds GPUs on a node.
type OtherJob struct {
	// Job is the job's ID, "namespace/ID" outside the default namespace.
	Job  string `json:"job"`
	GPUs int    `json:"gpus"`
}

// NodeStatus is one node of the cluster map in the status document.
type NodeStatus struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
	// GPUs is the node's healthy GPUs; Other those held by jobs Pollux
	// does not manage.
	GPUs  int `json:"gpus"`
	Other int `json:"other,omitempty"`
	// OtherJobs names the jobs behind Other, by name, GPUs held on this
	// node (their sum is Other); optional.
	OtherJobs []OtherJob `json:"other_jobs,omitempty"`
	// GPUType is the node's GPU type (the profile type its model name
	// maps to); empty when the controller does not tell types apart.
	GPUType string `json:"gpu_type,omitempty"`
}
