// Package jobstest is an in-memory stand-in for the servers the controller
// talks to, so that its behaviours run as unit tests in milliseconds: a
// Nomad-like Cluster (jobs.Cluster and jobs.Placer, with the Nomad
// adapter's fast-path readers; Cluster.Plain hides them), a Consul-like
// KV store (jobs.KV), a Lock (jobs.Leadership) and a Clock that only
// moves when a test advances it.
//
// They follow the servers where the controller relies on them, and
// Conformance checks that the real servers do the same (the e2e package
// runs it against Consul and Nomad):
//
//   - every write bumps a store-wide index (Consul's Raft index, Nomad's
//     JobModifyIndex); a key's ModifyIndex is the index of its last write;
//   - KV check-and-set with index 0 writes only an absent key, with any
//     other index only a key whose ModifyIndex it is;
//   - a blocking read (Watch, ListJobs with a wait index) returns at once
//     when the index is past the wait index (or the wait index is 0), else
//     when it moves past it, or with the same index when the wait elapses
//     on the Clock; a missing key's index is the store's;
//   - Apply is a check-and-set on the job's JobModifyIndex (ErrConflict
//     otherwise); a destructive update keeps the job's old allocation until
//     its new one can be placed (GPUs it asks for are free, or its own on
//     that node), so two jobs swapping nodes wait for each other forever;
//   - a fast-path read (ReadListed, ReadQueued, ReadParked) right after
//     ListJobs agrees with ReadJob on the job's index, placement and meta.
//
// The Cluster places a job all at once or not at all, where Nomad places
// each per-node group on its own; the controller plans per job too.
package jobstest
