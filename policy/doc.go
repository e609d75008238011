// Package policy decides, every scheduling round, how many GPUs on which
// nodes each job gets. It is the registry of the policies: New makes one
// by name from Settings, TraitsOf says what each needs from its runner,
// and the shared types (Job, Node, Input, Allocations, the Policy
// interface, Regime) are read under its names. The policies live in
// sub-packages: policy/pollux (Pollux, a genetic-algorithm search
// maximising the fairness-weighted goodput speedup of all jobs, OSDI '21
// §4), policy/sia (Sia, SOSP '23) and policy/baseline (Tiresias and
// Optimus+Oracle, the baselines of the Pollux paper).
//
// The packages are pure: a policy takes a snapshot of jobs and nodes
// (Input) and returns Allocations, with no I/O, clock or global state, so
// the same code runs in the simulator and in the Nomad controller.
package policy
