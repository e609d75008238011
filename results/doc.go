// Package results owns the outcome of a simulation (or of a closed-loop
// run of the controller): the raw per-job results and per-round cluster
// samples (Run), the summary statistics that `pollux simulate -json`
// prints (Summary, docs/contracts.md §5), and the files written by
// `pollux simulate -out DIR`: a per-job CSV, readable text tables, and PNG
// plots drawn with gonum.org/v1/plot.
//
// Definitions follow the Pollux evaluation (OSDI '21, §5: average and
// 99th-percentile job completion time, makespan) and the artifact's
// simulator, which reports the mean of completion − submission over
// completed jobs. Summarize and Quantile are pure; the writers only touch
// the io.Writer or directory they are given.
package results
