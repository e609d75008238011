package contract

import (
	"fmt"
	"strings"
	"time"
)

// Job states in the status document and the metrics.
const (
	StateScheduled = "scheduled" // in the policy's input this round
	StateInvalid   = "invalid"   // malformed meta or job spec: left untouched
	StateStopped   = "stopped"   // stopped or dead: ignored
	StateError     = "error"     // could not be read: held
)

// JobStatus is one job's line in a round's Status.
type JobStatus struct {
	Job   string `json:"job"`
	State string `json:"state"`
	// Error is why the job is invalid, held, or why its metrics were
	// rejected.
	Error    string    `json:"error,omitempty"`
	GPUs     int       `json:"gpus"`
	Decision *Decision `json:"decision,omitempty"`
	Changed  bool      `json:"changed,omitempty"`
	Applied  bool      `json:"applied,omitempty"`
	Conflict bool      `json:"conflict,omitempty"`
	Fitted   bool      `json:"fitted,omitempty"`
	// Explain is why the job has its allocation or waits.
	Explain *Explanation `json:"explain,omitempty"`
	// Running is what Nomad runs for the job, per node.
	Running []NodeGPUs `json:"running,omitempty"`
	// Submitted is when the job was first registered; WaitingSince, for a
	// job with no GPU, since when it has had none.
	Submitted    *time.Time `json:"submitted,omitempty"`
	WaitingSince *time.Time `json:"waiting_since,omitempty"`
	// Restarts counts the job's reallocations after the first.
	Restarts int `json:"restarts,omitempty"`
	// GPUType is the GPU type of the job's decided placement (empty when
	// the controller does not tell types apart or the job has no GPUs).
	GPUType string `json:"gpu_type,omitempty"`
	// Models says, per GPU type of the cluster, where the job's throughput
	// model on that type comes from: "fitted" (from its profile entries of
	// that type), "shared" (fitted on the entries of that type of every
	// job of its pollux_model) or "predicted" (bootstrapped from another
	// type's fit).
	Models map[string]string `json:"models,omitempty"`
}

// Status is the summary of one round, written by the leader at StatusKey.
type Status struct {
	Round    int64     `json:"round"`
	Time     time.Time `json:"time"`
	Instance string    `json:"instance"`
	// Term is the writing leader's term number (the lock's LockIndex,
	// pollux_term in the job versions it writes); optional.
	Term      uint64      `json:"term,omitempty"`
	DryRun    bool        `json:"dry_run"`
	Nodes     int         `json:"nodes"`
	GPUs      int         `json:"gpus"`
	Jobs      []JobStatus `json:"jobs"`
	Conflicts int         `json:"conflicts"`
	Errors    []string    `json:"errors,omitempty"`
	// Timings are the phase durations in milliseconds: snapshot, fit,
	// optimize, apply, total.
	Timings map[string]float64 `json:"timings_ms"`
	// NodeMap lists the nodes with their GPUs.
	NodeMap []NodeStatus `json:"node_map,omitempty"`
	// JobShards, when positive, says that Jobs is empty in this document
	// and the job lines are in JobShards documents at StatusShardKey(0),
	// StatusShardKey(1), ... (a round with more than StatusInlineJobs
	// jobs: one document for 2,000 jobs would pass Consul's 512 KiB value
	// limit). JobCount is then the number of job lines.
	JobShards int `json:"job_shards,omitempty"`
	JobCount  int `json:"job_count,omitempty"`
	// Policy names the round's policy; Settings are its effective
	// settings on this round's cluster (the configuration's values, else
	// the policy's defaults for the cluster's size and GPU types), for
	// the Pollux policy. Both optional.
	Policy   string    `json:"policy,omitempty"`
	Settings []Setting `json:"settings,omitempty"`
	// Autoscaling holds, with autoscaling configured, each node pool's
	// (and GPU type's) desired node count and why; optional.
	Autoscaling []AutoscalePool `json:"autoscaling,omitempty"`
}

// AutoscalePool is one node pool's (and GPU type's) line of the
// autoscaling status: its nodes, the desired count that Pollux publishes
// as pollux_cluster_desired_nodes, the utility at both sizes and the
// reason.
type AutoscalePool struct {
	NodePool       string  `json:"node_pool"`
	GPUType        string  `json:"gpu_type,omitempty"`
	Nodes          int     `json:"nodes"`
	Desired        int     `json:"desired_nodes"`
	UtilityNow     float64 `json:"utility_now"`
	UtilityDesired float64 `json:"utility_desired"`
	Reason         string  `json:"reason"`
	// Emptying names (by node name) the nodes the controller is emptying (no job is
	// placed there) so that the autoscaler removes them empty: the
	// pool's surplus over Desired, those holding the fewest GPUs.
	Emptying []string `json:"emptying,omitempty"`
}

// Setting is one effective policy setting: Key its name in the agent's
// configuration, Value its value ("off" where it is off), Set whether
// the configuration gives it (else it is the default for the cluster).
type Setting struct {
	Key   string `json:"key"`
	Value string `json:"value"`
	Set   bool   `json:"set"`
}

// StatusInlineJobs is the most job lines a Status holds itself; a round
// with more writes them in shards of StatusShardJobs lines.
const (
	StatusInlineJobs = 250
	StatusShardJobs  = 200
)

// StatusShard is one shard of a round's job lines (see Status.JobShards).
// A shard whose lines did not change since the last round is not
// rewritten, so a shard carries no round number.
type StatusShard struct {
	Jobs []JobStatus `json:"jobs"`
}

// String renders the status as a readable table.
func (s *Status) String() string {
	var b strings.Builder
	by := s.Instance
	if s.Term > 0 {
		by += fmt.Sprintf(" (term %d)", s.Term)
	}
	fmt.Fprintf(&b, "round %d at %s by %s (dry run: %v): %d nodes, %d GPUs, %d conflicts\n",
		s.Round, s.Time.Format(time.RFC3339), by, s.DryRun, s.Nodes, s.GPUs, s.Conflicts)
	for _, a := range s.Autoscaling {
		pool := a.NodePool
		if a.GPUType != "" {
			pool += " (" + a.GPUType + ")"
		}
		fmt.Fprintf(&b, "  autoscaling: pool %s: %d nodes, desired %d; utility %.2f now, %.2f at the desired size: %s\n",
			pool, a.Nodes, a.Desired, a.UtilityNow, a.UtilityDesired, a.Reason)
	}
	for _, j := range s.Jobs {
		line := fmt.Sprintf("  %-40s %-10s gpus=%-3d", j.Job, j.State, j.GPUs)
		if j.Decision != nil {
			line += fmt.Sprintf(" batch=%d local=%d accum=%d lr=%.4g placement=%s", j.Decision.BatchSize, j.Decision.LocalBsz, j.Decision.AccumSteps, j.Decision.LR, j.Decision.Placement)
		}
		if j.GPUType != "" {
			line += " type=" + j.GPUType
		}
		if j.Changed {
			line += " [changed]"
		}
		if j.Conflict {
			line += " [conflict]"
		}
		if j.Error != "" {
			line += " error: " + j.Error
		}
		b.WriteString(line + "\n")
	}
	for _, e := range s.Errors {
		b.WriteString("  error: " + e + "\n")
	}
	return b.String()
}
