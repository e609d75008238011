// Package nomad is the controller's adapter to HashiCorp Nomad: Client
// implements jobs.Cluster with github.com/hashicorp/nomad/api. It is, with
// package consul, the only code that imports a HashiCorp API.
//
// # What it reads
//
// Jobs whose meta has pollux_enabled = "true" (ListJobs, one blocking query
// over every namespace, filtered by the server), each job's spec and
// allocations (ReadJob), and the ready, eligible nodes with their healthy
// instances of the configured device type (Nodes), minus the devices held by
// allocations of jobs Pollux does not manage (Node.UsedByOthers).
//
// # How a placement is expressed in the job
//
// Every allocation of one Nomad task group has identical resources, so "4
// GPUs on node A and 2 on node B" cannot be one group with one device count.
// The adapter therefore gives a job one task group per node, in rank order:
//
//	group "train"    count = 1   constraint ${node.unique.id} = A   device count = 4   meta pollux_rank = "0", pollux_node = A
//	group "train-r1" count = 1   constraint ${node.unique.id} = B   device count = 2   meta pollux_rank = "1", pollux_node = B
//
// The worker group G ("train" above) is the group named by the job's
// pollux_group meta key, or the job's only group. G keeps its name and is
// rank 0; ranks 1, 2, ... are copies of G named G-r1, G-r2, ... (their
// scaling block dropped). In every group the device request of the configured
// type (in every task that has one) is set to that node's GPU count, any
// earlier pin (a group constraint ${node.unique.id} = ...) is replaced, and
// the group meta keys pollux_rank and pollux_node are set, so each worker
// finds its rank in NOMAD_META_pollux_rank. An empty placement sets G's count
// to 0, removes its pin and pollux_node, and removes the G-rN groups. Groups
// named G-rN that carry pollux_rank are the adapter's; an operator's edits to
// them are overwritten by the next apply (edit G instead). A G-rN group is
// recognised by its name and its pollux_rank meta, so other groups of the job
// (a parameter server, a sidecar) are left alone.
//
// ReadJob reads the placement back from these groups (those with count >= 1
// and pollux_node set, by pollux_rank) and what actually runs from the job's
// allocations with client status "running" and desired status "run": per
// node, the number of allocated device IDs of the configured type, nodes
// ordered by their group's rank.
//
// A job's spec is a Problem (ReadJob sets Job.Problem, Apply refuses it) when
// it has several groups, no pollux_group and no group marked by the adapter;
// when pollux_group names a group it does not have; or when the worker group
// has no device request of the configured type.
//
// # How it writes
//
// Apply reads the job fresh, refuses if its JobModifyIndex is not the one
// the change was decided on (contract.ErrConflict, nothing written), rewrites the
// groups as above, sets the change's meta keys (other meta keys are kept) and
// registers the job with EnforceIndex on that JobModifyIndex, so an
// operator's edit made between the read and the write is never overwritten:
// the server answers "conflicting job modify index" and Apply returns
// contract.ErrConflict. It never touches a job without pollux_enabled = "true"
// (ErrNotManaged).
//
// Apply also records the job's first submission time in the meta key
// pollux_submit_time (RFC 3339), once: Nomad's SubmitTime is the time of the
// latest version, and every reallocation makes a new version, while the
// policy needs the job's age. Without the key, ReadJob uses the oldest
// version Nomad still keeps.
//
// Placed tells, after an apply, whether Nomad placed everything: a blocked
// evaluation, an evaluation with failed task-group allocations or queued
// allocations in the job summary mean the reallocation failed (Nomad accepts
// a job whose devices are taken and leaves it pending).
//
// # Device names
//
// Config.Device is "type", "vendor/type" or "vendor/type/name" as in a
// Nomad device block ("nvidia/gpu", "nomad/file/mock"). A job's device
// request matches it when the parts both give are equal ("gpu" and
// "nvidia/gpu/A100" both match "nvidia/gpu"); a node's device group matches
// when it has every part the configuration gives.
package nomad
