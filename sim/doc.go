// Package sim is the trace-driven cluster simulator. It replays a workload
// (package workload) on a simulated cluster of nodes and GPUs, using the
// measured application profiles (package apps) as ground truth for
// throughput and gradient statistics, and asks a policy (package policy)
// for an allocation every round, exactly as the Nomad controller does on a
// real cluster. Its dynamics follow the Pollux artifact's simulator
// (petuum/adaptdl, branch osdi21-artifact, simulator/simulator.py), so its
// results can be compared with the published ones.
//
// With Config.Cloud the cluster is a cloud one (cloud.go): nodes of each
// GPU type's template join after a boot delay when an autoscaler (package
// policy/autoscale) asks for them and leave once drained, and the run
// reports the GPU-hours of the nodes up.
package sim
