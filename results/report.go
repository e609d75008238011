package results

import (
	"math"
	"slices"
	"sort"
	"time"

	"github.com/pollux-nomad/pollux/internal/stats"
)

// JobResult is one job's outcome in a run.
type JobResult struct {
	// Name identifies the job (the workload's name column).
	Name string
	// Application names the job's application profile.
	Application string
	// Submitted is the submission time in seconds of simulated (or wall)
	// time from the start of the run.
	Submitted float64
	// Completed reports whether the job finished before the run ended.
	Completed bool
	// Completion is the completion time in seconds on the same clock as
	// Submitted; meaningful only if Completed.
	Completion float64
	// Restarts counts the job's reallocations after its first allocation
	// (the artifact's num_restarts).
	Restarts int
	// GPUSeconds is the GPU time allocated to the job (attained service),
	// restart delays included.
	GPUSeconds float64
	// FinalBatchSize is the total batch size the job used last.
	FinalBatchSize int
	// FTF is the job's finish-time fairness ρ (Themis, Mahajan et al.,
	// NSDI '20; reported by Sia, SOSP '23): its JCT over the time it
	// would take alone on a 1/N share of the cluster, N the mean number of
	// jobs active during its life. ρ ≤ 1: the shared cluster served the
	// job at least as well as its share would have. 0: not computed.
	FTF float64
}

// JCT returns the job completion time Completion − Submitted in seconds,
// the quantity the Pollux evaluation averages (OSDI '21, §5; artifact
// simulator.py "Average JCT"). It is meaningful only if j.Completed.
func (j JobResult) JCT() float64 { return j.Completion - j.Submitted }

// Sample is the cluster state at one round.
type Sample struct {
	// Time is the round's time in seconds on the run's clock.
	Time float64
	// GPUsInUse is the number of GPUs allocated to jobs.
	GPUsInUse int
	// JobGPUs maps a job's name to its GPU count; jobs without GPUs may be
	// missing.
	JobGPUs map[string]int
	// TypeGPUsInUse counts allocated GPUs per GPU type on a typed cluster
	// (nil otherwise).
	TypeGPUsInUse map[string]int
	// GPUsUp is the GPUs of the nodes up (billed) after the round: the
	// cluster's size, which an autoscaler changes.
	GPUsUp int
}

// Run is one simulation's (or closed loop's) raw outcome.
type Run struct {
	// Policy names the scheduling policy (pollux, tiresias, optimus).
	Policy string
	// Workload names the workload (e.g. workload-6).
	Workload string
	// TotalGPUs is the cluster's GPU count.
	TotalGPUs int
	// TypeGPUs is the GPU count per GPU type of a typed cluster (nil for
	// an untyped one).
	TypeGPUs map[string]int
	// Jobs holds one result per job of the workload.
	Jobs []JobResult
	// Timeline holds one sample per scheduling round, in time order.
	Timeline []Sample
	// OptimizeSeconds is the time the policy spent per round, in seconds.
	OptimizeSeconds []float64
	// Wall is the run's elapsed wall-clock time.
	Wall time.Duration
	// GPUHours is the GPU-hours of the nodes up from the first submission
	// to the last completion (a fixed cluster's GPUs times that time);
	// Cost their price where the run had one.
	GPUHours, Cost float64
	// Autoscaled is true when an autoscaler sized the cluster.
	Autoscaled bool
}

// Summary is the JSON object that `pollux simulate -json` prints
// (docs/contracts.md §5). Times are in seconds unless a field name says
// otherwise. When no job completed, the JCT statistics and the makespan
// are 0 (JSON has no NaN); Completed tells the two cases apart.
type Summary struct {
	// Policy and Workload are copied from the Run.
	Policy   string `json:"policy"`
	Workload string `json:"workload"`
	// Jobs is the number of jobs in the run; Completed how many finished.
	Jobs      int `json:"jobs"`
	Completed int `json:"completed"`
	// AvgJCT is the mean job completion time over completed jobs.
	AvgJCT float64 `json:"avg_jct_s"`
	// P50JCT and P99JCT are percentiles of the completion times of
	// completed jobs, interpolated linearly between order statistics
	// (numpy's default; see Quantile).
	P50JCT float64 `json:"p50_jct_s"`
	P99JCT float64 `json:"p99_jct_s"`
	// Makespan is the latest completion time on the workload's clock
	// (which starts at 0), as the artifact's published makespans.
	Makespan float64 `json:"makespan_s"`
	// RestartsPerJob is the mean number of restarts over all jobs.
	RestartsPerJob float64 `json:"restarts_per_job"`
	// GPUUtilization is the mean, over the rounds at which at least one job
	// was active (submitted and not finished), of GPUsInUse / TotalGPUs:
	// a fraction in [0, 1].
	GPUUtilization float64 `json:"gpu_utilization"`
	// GPUUtilizationByType is GPUUtilization per GPU type of a typed
	// cluster (each type's GPUs in use over its GPUs); absent otherwise.
	GPUUtilizationByType map[string]float64 `json:"gpu_utilization_by_type,omitempty"`
	// GPUHoursPerJob is the GPU time allocated to the jobs (restart delays
	// included), in GPU-hours, over the number of jobs.
	GPUHoursPerJob float64 `json:"gpu_hours_per_job"`
	// Rounds is the number of scheduling rounds (timeline samples).
	Rounds int `json:"rounds"`
	// OptimizeMsMedian and OptimizeMsP95 are the median and 95th
	// percentile of the policy's time per round, in milliseconds.
	OptimizeMsMedian float64 `json:"optimize_ms_median"`
	OptimizeMsP95    float64 `json:"optimize_ms_p95"`
	// WallSeconds is the run's wall-clock time in seconds.
	WallSeconds float64 `json:"wall_s"`
	// GPUHours is Run.GPUHours: the GPU-hours of the nodes up from the
	// first submission to the last completion, what a cloud bills.
	GPUHours float64 `json:"gpu_hours"`
	// Cost is Run.Cost, where prices were given.
	Cost float64 `json:"cost,omitempty"`
	// FTFWorst is the largest finish-time fairness ρ (JobResult.FTF) of
	// the completed jobs, FTFAbove1 the share of them with ρ > 1; both 0
	// when the run computed none (a computed ρ is positive).
	FTFWorst  float64 `json:"ftf_worst"`
	FTFAbove1 float64 `json:"ftf_share_above_1"`
}

// Summarize computes a run's summary statistics:
//
//   - avg_jct_s, p50_jct_s, p99_jct_s: mean and percentiles (Quantile,
//     linear interpolation) of Completion − Submitted over completed jobs;
//   - makespan_s: the latest completion time on the workload's clock,
//     which starts at 0 (this reproduces the makespans derived from the
//     artifact's per-job results, e.g. 58642 s for Pollux on workload 6);
//   - restarts_per_job: mean Restarts over all jobs;
//   - gpu_utilization: mean of GPUsInUse / TotalGPUs over the samples at
//     whose time at least one job is active, i.e. Submitted ≤ t and not
//     completed by t (t < Completion); 0 when there is no such sample or
//     TotalGPUs ≤ 0;
//   - gpu_utilization_by_type: the same per GPU type of a typed cluster
//     (TypeGPUs), each type's GPUs in use over its GPUs;
//   - gpu_hours_per_job: the sum of GPUSeconds over all jobs, in hours,
//     divided by the number of jobs;
//   - rounds: len(Timeline); optimize_ms_median and optimize_ms_p95:
//     quantiles 0.5 and 0.95 of OptimizeSeconds, in milliseconds;
//   - wall_s: Wall in seconds.
//
// Statistics of empty sets are 0. Summarize does not modify r.
func Summarize(r Run) Summary {
	s := Summary{
		Policy:      r.Policy,
		Workload:    r.Workload,
		Jobs:        len(r.Jobs),
		Rounds:      len(r.Timeline),
		WallSeconds: r.Wall.Seconds(),
		GPUHours:    r.GPUHours,
		Cost:        r.Cost,
	}

	var jcts []float64
	ftfs, above := 0, 0
	restarts := 0
	gpuSeconds := 0.0
	lastCompletion := math.Inf(-1)
	for _, j := range r.Jobs {
		restarts += j.Restarts
		gpuSeconds += j.GPUSeconds
		if j.Completed {
			jcts = append(jcts, j.JCT())
			lastCompletion = math.Max(lastCompletion, j.Completion)
			if j.FTF > 0 {
				ftfs++
				s.FTFWorst = max(s.FTFWorst, j.FTF)
				if j.FTF > 1 {
					above++
				}
			}
		}
	}
	s.Completed = len(jcts)
	if ftfs > 0 {
		s.FTFAbove1 = float64(above) / float64(ftfs)
	}
	if len(r.Jobs) > 0 {
		s.RestartsPerJob = float64(restarts) / float64(len(r.Jobs))
		s.GPUHoursPerJob = gpuSeconds / 3600 / float64(len(r.Jobs))
	}
	if len(jcts) > 0 {
		s.AvgJCT = mean(jcts)
		slices.Sort(jcts)
		s.P50JCT = stats.QuantileSorted(jcts, 0.5)
		s.P99JCT = stats.QuantileSorted(jcts, 0.99)
		s.Makespan = lastCompletion
	}

	s.GPUUtilization = utilization(r, "")
	if len(r.TypeGPUs) > 0 {
		s.GPUUtilizationByType = make(map[string]float64, len(r.TypeGPUs))
		for t := range r.TypeGPUs {
			s.GPUUtilizationByType[t] = utilization(r, t)
		}
	}

	if len(r.OptimizeSeconds) > 0 {
		ms := make([]float64, len(r.OptimizeSeconds))
		for i, v := range r.OptimizeSeconds {
			ms[i] = v * 1000
		}
		slices.Sort(ms)
		s.OptimizeMsMedian = stats.QuantileSorted(ms, 0.5)
		s.OptimizeMsP95 = stats.QuantileSorted(ms, 0.95)
	}
	return s
}

// utilization is the mean of GPUsInUse/TotalGPUs (for gpuType "") or of
// TypeGPUsInUse[gpuType]/TypeGPUs[gpuType] over the samples with at least
// one active job. A job is active at t if Submitted ≤ t < Completion (or
// it never completed); it runs in O((J + R) log J) by counting
// submissions and completions with binary search.
func utilization(r Run, gpuType string) float64 {
	total := r.TotalGPUs
	if gpuType != "" {
		total = r.TypeGPUs[gpuType]
	}
	if total <= 0 {
		return 0
	}
	submits := make([]float64, 0, len(r.Jobs))
	ends := make([]float64, 0, len(r.Jobs))
	for _, j := range r.Jobs {
		submits = append(submits, j.Submitted)
		if j.Completed {
			// A job that "completes" before its submission is never
			// active; max keeps the two counts consistent.
			ends = append(ends, math.Max(j.Completion, j.Submitted))
		}
	}
	slices.Sort(submits)
	slices.Sort(ends)
	atOrBefore := func(xs []float64, t float64) int {
		return sort.Search(len(xs), func(i int) bool { return xs[i] > t })
	}
	sum, n := 0.0, 0
	for _, smp := range r.Timeline {
		if atOrBefore(submits, smp.Time)-atOrBefore(ends, smp.Time) <= 0 {
			continue
		}
		used := smp.GPUsInUse
		if gpuType != "" {
			used = smp.TypeGPUsInUse[gpuType]
		}
		sum += float64(used) / float64(total)
		n++
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// Quantile returns the q-quantile (0 ≤ q ≤ 1) of xs as stats.Quantile
// does: linear interpolation between the two nearest order statistics
// (numpy's default), NaN for an empty slice, xs left unmodified, a panic
// for q outside [0, 1].
func Quantile(xs []float64, q float64) float64 { return stats.Quantile(xs, q) }

// mean returns the arithmetic mean of a non-empty slice.
func mean(xs []float64) float64 {
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}
