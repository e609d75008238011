package sim

import (
	"math"
	"slices"
	"sort"

	"github.com/pollux-nomad/pollux/model"
	"github.com/pollux-nomad/pollux/results"
)

// Finish-time fairness (Themis, Mahajan et al., NSDI '20, §3; the metric
// Sia reports, SOSP '23, §6): ρ_j = T_shared / T_share, the job's JCT over
// the time it would take alone on a 1/N_j share of the cluster, N_j the
// mean number of jobs active (submitted, not finished) at the rounds of
// its life. On a cluster of several GPU types the share is 1/N_j of each
// type's GPUs, and the job, which runs on one type at a time, is timed on
// the best of them: max(1, ⌊GPUs_t/N_j⌋) GPUs of type t (at most what its
// profiles were measured on, on as few nodes as hold them).
//
// The reference run is the same for every policy: the job alone from its
// submission, its batch size adapted by its goodput model as Pollux and
// Sia adapt it (the application's profile and calibration, no restart
// delay), so that ρ compares policies on one scale. Runs are cached by
// application, type and GPU count: jobs of one application differ only
// in their arrival.

// shareKey identifies one reference run.
type shareKey struct {
	app, gpuType string
	gpus         int
}

// finishTimeFairness sets run.Jobs[i].FTF for the completed jobs. A
// cluster sized by an autoscaler has no fixed share: nothing is set.
func (s *Simulator) finishTimeFairness(run *results.Run) {
	if s.cloud != nil || len(run.Timeline) == 0 {
		return
	}
	// Jobs active at each round: submitted at or before it, not finished.
	times := make([]float64, len(run.Timeline))
	for k, smp := range run.Timeline {
		times[k] = smp.Time
	}
	subs := make([]float64, 0, len(run.Jobs))
	ends := make([]float64, 0, len(run.Jobs))
	for _, j := range run.Jobs {
		subs = append(subs, j.Submitted)
		if j.Completed {
			ends = append(ends, j.Completion)
		}
	}
	slices.Sort(subs)
	slices.Sort(ends)
	// prefix[k] is the sum of the active counts of rounds 0..k-1.
	prefix := make([]float64, len(times)+1)
	for k, t := range times {
		in := sort.Search(len(subs), func(i int) bool { return subs[i] > t })
		out := sort.Search(len(ends), func(i int) bool { return ends[i] > t })
		prefix[k+1] = prefix[k] + float64(in-out)
	}
	typeGPUs := map[string]int{}
	nodeGPUs := map[string]int{}
	for _, g := range s.cfg.Cluster {
		typeGPUs[g.Type] += g.Nodes * g.GPUsPerNode
		nodeGPUs[g.Type] = max(nodeGPUs[g.Type], g.GPUsPerNode)
	}
	cache := map[shareKey]float64{}
	for i := range run.Jobs {
		r := &run.Jobs[i]
		if !r.Completed {
			continue
		}
		lo := sort.SearchFloat64s(times, r.Submitted)
		hi := sort.Search(len(times), func(k int) bool { return times[k] > r.Completion })
		n := 1.0
		if hi > lo {
			n = max((prefix[hi]-prefix[lo])/float64(hi-lo), 1)
		}
		j := s.jobs[i]
		best := math.Inf(1)
		for t, total := range typeGPUs {
			k := max(int(float64(total)/n), 1)
			if m := j.app.MaxReplicasOn(t); m > 0 {
				k = min(k, m)
			}
			if d := s.aloneOn(cache, j, t, k, nodeGPUs[t]); d > 0 {
				best = min(best, d)
			}
		}
		if !math.IsInf(best, 1) {
			r.FTF = r.JCT() / best
		}
	}
}

// aloneOn returns how long job j takes alone on k GPUs of type t (nodes of
// perNode GPUs, filled in turn), from the cache or by running a fresh
// copy of it; where the profile cannot place k GPUs it tries fewer,
// halving. 0: not measurable on t.
func (s *Simulator) aloneOn(cache map[shareKey]float64, j *job, t string, k, perNode int) float64 {
	for ; k >= 1; k /= 2 {
		key := shareKey{j.app.Name, t, k}
		if d, ok := cache[key]; ok {
			if d > 0 {
				return d
			}
			continue
		}
		var placement []int
		for left := k; left > 0; left -= min(left, perNode) {
			placement = append(placement, min(left, perNode))
		}
		alone := s.freshJob(j)
		alone.reallocate(t, placement, 0)
		d := 0.0
		// One call runs epoch by epoch to the end (job.step).
		if err := alone.step(math.MaxFloat64/4, 0); err == nil && alone.done() {
			d = alone.completion
		}
		cache[key] = d
		if d > 0 {
			return d
		}
	}
	return 0
}

// freshJob returns a copy of j as it was submitted, with its own profile
// and models, adaptive (see finishTimeFairness), at time 0.
func (s *Simulator) freshJob(j *job) *job {
	return &job{
		name: j.name, app: j.app, traceBatch: j.traceBatch, rules: j.rules, calib: j.calib,
		fit: true, completion: -1, restarts: -1,
		profile:    make(map[profileKey]struct{}),
		points:     map[string][]model.ProfilePoint{},
		perf:       map[string]*model.PerfParams{},
		maxProfile: map[string]int{},
	}
}
