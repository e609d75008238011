// Package workload owns the job traces that drive the simulator: it reads
// and writes the Pollux artifact's workload CSV files
// (name,time,application,num_replicas,batch_size; docs/contracts.md §6), reads
// the summarised Microsoft Philly trace the workloads were drawn from
// (timestamp,duration,num_gpus,gpu_time,cluster), and generates new
// workloads from that trace in the manner of the artifact's
// simulator/workload.py (Pollux, OSDI '21, §5.3).
//
// Parsing is strict: every error names the source, the line and the
// column, as in "workload-6.csv:12: time: negative value -5", so that the
// command line can report bad input precisely (docs/contracts.md §5, exit
// code 2). Rows keep their file order, because the simulator breaks ties
// between jobs submitted at the same second by that order.
//
// Everything except ParseFile is pure: no file access, no clock, and the
// only randomness is the explicit seed given to Generate.
package workload
