// Package model owns the Pollux goodput model: the throughput model of one
// distributed data-parallel job (PerfParams, fitted to profiled step times
// by FitPerfParams), its statistical-efficiency model (GradParams, Gain,
// Efficiency, ScaleLR), their product (GoodputFunc), the batch-size search
// that picks the best batch size, micro-batch and accumulation steps for a
// placement shape (GoodputFunc.Optimize), and a memo of that search per
// shape (GoodputCache) for the scheduling policies.
//
// Everything follows Pollux (Aurick Qiao et al., "Pollux: Co-adaptive
// Cluster Scheduling for Goodput-Optimized Deep Learning", OSDI '21),
// sections 3.1 and 4.1, as coded in its artifact (petuum/adaptdl, branch
// osdi21-artifact, files adaptdl/adaptdl/goodput.py, simulator/goodput.py
// and simulator/speedup.py); the project's specification of those files is
// shared/design/pollux-reference.md, sections 1 and 2.
//
// The package is pure: no I/O, no clock, no randomness, no mutable global
// state. Its values are safe for concurrent use except GoodputCache, which
// is documented as such.
package model
