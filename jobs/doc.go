// Package jobs is the Pollux controller: every round it reads the
// Pollux-tagged Nomad jobs and their workers' metrics, fits each job's
// goodput model, runs the policy (package policy, the same code as the
// simulator) and applies the allocations that changed, with check-and-set.
// It declares the small interfaces it needs from Nomad (Cluster) and Consul
// (KV, Leadership); packages nomad and consul implement them.
package jobs
