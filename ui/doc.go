// Package ui serves the operator's status page at /ui on the agent's HTTP
// listener: the cluster map (which job holds which GPU on which node), the
// jobs table with the reason for each allocation, a detail view per job
// (speedup and efficiency curves, the throughput model and its fit error,
// the allocation history) and the last rounds. Pages are rendered on the
// server with html/template (every job-supplied string is escaped), need
// no script (the Content-Security-Policy forbids any), refresh themselves,
// and use only assets embedded in the binary. The data comes from a Source:
// ConsulSource reads the leader's published status from Consul, so every
// instance, leader or follower, serves the same page.
package ui
