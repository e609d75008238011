// Package policy decides, every scheduling round, how many GPUs on which
// nodes each job gets. It defines what every policy shares: the Policy
// interface, its Input (Job, Node, the Allocations in force) and its
// result, the regime of a cluster (Regime, RegimeOf, SeveralTypes), the
// helpers on allocations and the check of an Input (CheckInput). The
// policies live in sub-packages that import it: policy/pollux (Pollux, a
// genetic-algorithm search maximising the fairness-weighted goodput
// speedup of all jobs, OSDI '21 §4), policy/sia (Sia, SOSP '23) and
// policy/baseline (Tiresias and Optimus+Oracle, the baselines of the
// Pollux paper); policy/registry makes one by name and says what each
// needs from its runner.
//
// The packages are pure: a policy takes a snapshot of jobs and nodes
// (Input) and returns Allocations, with no I/O, clock or global state, so
// the same code runs in the simulator and in the Nomad controller.
package policy
