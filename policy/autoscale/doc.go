// Package autoscale decides how many nodes each node pool of a cloud
// cluster should run, from the jobs' goodput models: the number Pollux
// hands to a cloud autoscaler (the Nomad Autoscaler's pass-through
// strategy), which then launches, drains and removes the instances.
//
// # Utility
//
// Scaler follows the cluster sizing of AdaptDL's scheduler (petuum/adaptdl,
// sched/adaptdl_sched/policy/pollux.py, PolluxPolicy._desired_nodes and
// Problem.get_cluster_utilities; Qiao et al., OSDI '21, §4.3 "cluster
// autoscaling"): the utility of a cluster is the jobs' share-weighted
// fraction of ideal speedup, Σ_j (k_j/G)·(speedup_j/k_j) = Σ_j speedup_j / G
// for G GPUs and a job j holding k_j of them, where speedup_j is its
// goodput on k_j GPUs over its goodput on one. If the cluster's utility is
// inside the band [Low, High] (AdaptDL: 0.35 to 0.65) its size is kept;
// otherwise the size whose utility lies closest to the middle of the band,
// among those at or above Low, is chosen (the larger on a tie).
//
// Two things differ from AdaptDL, for these reasons:
//
//   - AdaptDL scores the Pareto front of its NSGA-II search over the
//     existing nodes plus as many template nodes. Scaler instead computes
//     the utility of every size from Min to Max nodes in one pass: it
//     hands out the GPUs of the largest size one step at a time, each
//     step to the job with the largest speedup gain per GPU (up to one
//     node's worth of GPUs at a time, so that a node boundary's dip in
//     throughput is stepped over), and reads the utility of size n from
//     the prefix that fills n nodes. Every size is scored, not only those
//     the genetic search happened to keep, the result is deterministic
//     (no random search: the same input gives the same sizes), and it
//     costs O(G·g) goodput evaluations for G GPUs of g per node, small
//     next to the scheduling round. For concave speedups this greedy is
//     the allocation maximising the total speedup at each size.
//   - AdaptDL divides by the GPUs of the nodes its solution uses, so idle
//     nodes cost nothing in its utility. Scaler divides by all GPUs of the
//     candidate size: GPUs the jobs cannot use (their MaxReplicas are
//     reached) lower the utility, so the cluster shrinks where a cloud
//     would bill for idle GPUs.
//
// Scaler also offers, and by default uses, a band on the marginal utility
// (RuleMarginal): the speedup per GPU that the last node of a size adds
// over the size one node smaller. It keeps a size while its last node adds
// at least Low and one more node would add at most High, and otherwise
// takes the largest size whose last node still adds the middle of the
// band. Why: a cloud bills every node alike, so the question for each
// node is whether it does enough useful work, not whether the cluster's
// average does; the average rule pays for nodes of low marginal value as
// long as earlier nodes pull the average into the band. Measured in the
// simulator (make cloud; DefaultMarginalLow documents the numbers) the
// marginal rule spends far fewer GPU-hours for a given completion time.
//
// Growing is immediate; shrinking waits until a smaller size has been
// wanted for ScaleDownDelay without a break and then goes to the largest
// size wanted in that time (hysteresis), so that a short lull between
// arrivals does not drain nodes that a minute later must boot again. The
// band itself is a second hysteresis: a size is kept as long as its
// utility stays in the band.
//
// Queue is the baseline a user of a rigid scheduler would pick: a
// queue-driven autoscaler (the Kubernetes cluster autoscaler's rule, or
// a Nomad Autoscaler policy on pending allocations) that adds nodes for
// the GPU requests that do not fit and removes nodes idle for IdleDelay.
//
// The package is pure: no clock, no I/O; the caller passes the time.
package autoscale
