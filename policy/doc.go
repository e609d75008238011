// Package policy decides, every scheduling round, how many GPUs on which
// nodes each job gets. It holds the Pollux policy (a genetic-algorithm
// search maximising the fairness-weighted goodput speedup of all jobs,
// Pollux OSDI '21 §4) and the baselines the paper compares it with,
// Tiresias and Optimus+Oracle, all behind the Policy interface.
//
// The package is pure: it takes a snapshot of jobs and nodes (Input) and
// returns Allocations, with no I/O, clock or global state, so the same code
// runs in the simulator and in the Nomad controller.
package policy
