package contract

import "strconv"

// The Consul KV layout (docs/contracts.md §2). Every key is relative to a
// prefix, DefaultPrefix unless configured; the functions here return keys
// without it.

// DefaultPrefix is the KV prefix every key sits under by default.
const DefaultPrefix = "pollux/"

// Controller-wide keys, relative to the prefix.
const (
	// ConfigKey holds the operator's JSON controller configuration.
	ConfigKey = "config"
	// StatusKey holds the Status document of the leader's last round.
	StatusKey = "status"
	// LeaderKey is the Consul lock the controllers elect a leader with.
	LeaderKey = "leader"
	// TermKey names the instance whose leadership term began last.
	TermKey = "term"
)

// StatusShardKey is the key of the i-th shard of the job lines of the
// last round's Status, when it has shards (Status.JobShards).
func StatusShardKey(i int) string { return StatusKey + "/jobs/" + strconv.Itoa(i) }

// Leaves of a job's keys.
const (
	leafMetrics    = "metrics"
	leafDecision   = "decision"
	leafState      = "state"
	leafRendezvous = "rendezvous"
	leafCheckpoint = "checkpoint"
)

// JobPrefix returns the folder of one job's keys, "jobs/<ns>/<id>/". The
// parts are used as they are; the KV adapter rejects a key that is not
// valid.
func JobPrefix(namespace, id string) string {
	return "jobs/" + namespace + "/" + id + "/"
}

// JobsPrefix is the folder of every job's keys.
const JobsPrefix = "jobs/"

// MetricsKey is the key of the job's Metrics document, written by its
// rank-0 worker.
func MetricsKey(namespace, id string) string { return JobPrefix(namespace, id) + leafMetrics }

// DecisionKey is the key of the controller's current Decision for the job,
// refreshed every round so that workers can adopt it without a restart.
func DecisionKey(namespace, id string) string { return JobPrefix(namespace, id) + leafDecision }

// StateKey is the key of the controller's State of the job.
func StateKey(namespace, id string) string { return JobPrefix(namespace, id) + leafState }

// RendezvousKey is the key where the rank-0 group of a job publishes the
// address its workers meet at, for the current allocation round.
func RendezvousKey(namespace, id string) string { return JobPrefix(namespace, id) + leafRendezvous }

// CheckpointKey is the key where the emulated trainer (pollux emulate)
// keeps its progress across restarts.
func CheckpointKey(namespace, id string) string { return JobPrefix(namespace, id) + leafCheckpoint }

// KVPair is one key (relative to the prefix) with its value and Consul
// ModifyIndex, as a listing of a folder returns it.
type KVPair struct {
	Key         string
	Value       []byte
	ModifyIndex uint64
}
