package jobs

import "github.com/pollux-nomad/pollux/contract"

// The round's status document and its job states are the contract's.
type (
	// Status is the summary of one round, written to the status key.
	Status = contract.Status
	// JobStatus is one job's line in a Status.
	JobStatus = contract.JobStatus
	// Explanation is why a job has its allocation or waits.
	Explanation = contract.Explanation
	// BatchBounds are a job's batch-size limits in the status document.
	BatchBounds = contract.BatchBounds
	// NodeStatus is one node of the cluster map in the status document.
	NodeStatus = contract.NodeStatus
)

// Job states in the status document and the metrics.
const (
	StateScheduled = contract.StateScheduled
	StateInvalid   = contract.StateInvalid
	StateStopped   = contract.StateStopped
	StateError     = contract.StateError
)
