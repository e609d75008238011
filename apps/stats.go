package apps

import (
	"fmt"
	"math"
)

// Configuration is one "TunedJobs" choice of GPUs and batch size with its
// predicted job completion time (artifact applications.py,
// get_configurations).
type Configuration struct {
	Replicas  int     // GPUs
	BatchSize int     // total batch size, a validated one
	JCT       float64 // predicted completion time in seconds
}

// bracket returns the indices of the validated batch sizes just below and
// just above batchSize (equal when it is validated). Outside the validated
// range both are the nearest end, where the artifact
// (_validated_batch_sizes) fails an assertion: the edge run is used as is.
func (a *Application) bracket(batchSize float64) (lo, hi int) {
	n := len(a.validation)
	if batchSize <= float64(a.validation[0].batchSize) {
		return 0, 0
	}
	if batchSize >= float64(a.validation[n-1].batchSize) {
		return n - 1, n - 1
	}
	for i, v := range a.validation {
		b := float64(v.batchSize)
		if b == batchSize {
			return i, i
		}
		if b > batchSize {
			return i - 1, i
		}
	}
	return n - 1, n - 1 // unreachable
}

// between interpolates column col of the runs lo and hi at batchSize, in
// the artifact's form ((M − lo)·y_hi + (hi − M)·y_lo) / (hi − lo).
func (a *Application) between(lo, hi int, batchSize float64, col func(*validationRun) []float64, epoch int) float64 {
	if lo == hi {
		return col(a.validation[lo])[epoch]
	}
	bl, bh := float64(a.validation[lo].batchSize), float64(a.validation[hi].batchSize)
	yl, yh := col(a.validation[lo])[epoch], col(a.validation[hi])[epoch]
	return ((batchSize-bl)*yh + (bh-batchSize)*yl) / (bh - bl)
}

// checkEpoch panics on an epoch outside [0, MaxEpochs): a programmer error.
func (a *Application) checkEpoch(epoch int) {
	if epoch < 0 || epoch >= a.MaxEpochs {
		panic(fmt.Sprintf("apps: %s: epoch %d outside [0, %d)", a.Name, epoch, a.MaxEpochs))
	}
}

// GradStats returns the true gradient statistics (|g|² estimate sqr and
// variance var of a batch of M0) measured during the given epoch (0-based),
// linearly interpolated between the two validated batch sizes that bracket
// batchSize (artifact applications.py, get_grad_stats;
// pollux-reference.md §4). A batch size outside the validated range gets
// the nearest run's values (the artifact asserts instead). It panics if
// epoch is outside [0, MaxEpochs). It computes from immutable tables in a
// handful of operations, cheaper than a memo lookup, and is safe for
// concurrent use.
func (a *Application) GradStats(batchSize float64, epoch int) (sqr, variance float64) {
	a.checkEpoch(epoch)
	lo, hi := a.bracket(batchSize)
	sqr = a.between(lo, hi, batchSize, func(v *validationRun) []float64 { return v.gradSqr }, epoch)
	variance = a.between(lo, hi, batchSize, func(v *validationRun) []float64 { return v.gradVar }, epoch)
	return sqr, variance
}

// Iteration returns the number of optimizer steps after completing the
// given epoch (0-based) at batchSize, linearly interpolated between the
// bracketing validated batch sizes (artifact get_iteration); outside the
// validated range, the nearest run's count. It panics if epoch is outside
// [0, MaxEpochs).
func (a *Application) Iteration(batchSize float64, epoch int) float64 {
	a.checkEpoch(epoch)
	lo, hi := a.bracket(batchSize)
	return a.between(lo, hi, batchSize, func(v *validationRun) []float64 { return v.iteration }, epoch)
}

// Progress returns the statistical progress (scale-invariant iterations)
// at which a job has completed epoch epochs: 0 for epoch 0, else the
// minimum over validated batch sizes of the cumulative progress in row
// epoch−1 of the validation files (artifact get_progress;
// pollux-reference.md §4). A job in epoch e crosses into epoch e+1 at
// Progress(e+1), and its total work is Progress(MaxEpochs). It panics if
// epoch is outside [0, MaxEpochs]. Values are precomputed at Load.
func (a *Application) Progress(epoch int) float64 {
	if epoch < 0 || epoch > a.MaxEpochs {
		panic(fmt.Sprintf("apps: %s: Progress epoch %d outside [0, %d]", a.Name, epoch, a.MaxEpochs))
	}
	return a.progress[epoch]
}

// CompletionEpoch returns the last epoch a job trains: MaxEpochs−1 (the
// artifact's get_completion_epoch without a target metric, which the
// simulator never sets). A job completes when its epoch exceeds it.
func (a *Application) CompletionEpoch() int { return a.MaxEpochs - 1 }

// Configurations returns the "TunedJobs" configurations of the artifact's
// workload generator (applications.py, get_configurations, on a cluster of
// 4-GPU nodes): for each GPU count K in 1, 2, 4, 6, 8, 12, 16, 24, 32, 48
// (stopping once K·MinLocalBsz exceeds MaxBatchSize), placed as full 4-GPU
// nodes plus a remainder, it picks the validated batch size M with the
// shortest predicted JCT = iterations(M, completion epoch) × step time,
// where the local batch ⌈M/K⌉ (skipped below MinLocalBsz) is split into
// s+1 micro-batches of at most MaxLocalBsz and a step costs step_time +
// s·(step_time − sync_time). K > 1 is kept when its JCT is under 12 hours
// and its scaling efficiency JCT(1)/(JCT(K)·K) lies strictly between lo and
// hi; if none is kept, the 1-GPU configuration is returned.
func (a *Application) Configurations(lo, hi float64) ([]Configuration, error) {
	var out []Configuration
	var base Configuration
	epoch := a.CompletionEpoch()
	for _, k := range []int{1, 2, 4, 6, 8, 12, 16, 24, 32, 48} {
		if k*a.MinLocalBsz > a.MaxBatchSize {
			break
		}
		var placement []int
		for left := k; left > 0; left -= min(left, 4) {
			placement = append(placement, min(left, 4))
		}
		best := Configuration{Replicas: k, JCT: math.Inf(1)}
		for _, v := range a.validation {
			local := int(math.Ceil(float64(v.batchSize)/float64(k) - 1e-8))
			if local < a.MinLocalBsz {
				continue
			}
			accum := int(math.Ceil(float64(local)/float64(a.MaxLocalBsz)-1e-8)) - 1
			atomic := int(math.Ceil(float64(local)/float64(accum+1) - 1e-8))
			step, sync, err := a.Throughput(placement, atomic)
			if err != nil {
				return nil, fmt.Errorf("failed to compute configurations of %s: %w", a.Name, err)
			}
			step += float64(accum) * (step - sync)
			if jct := v.iteration[epoch] * step; jct < best.JCT {
				best.JCT, best.BatchSize = jct, v.batchSize
			}
		}
		if k == 1 {
			base = best
			continue
		}
		if eff := base.JCT / best.JCT / float64(k); best.JCT < 12*3600 && lo < eff && eff < hi {
			out = append(out, best)
		}
	}
	if len(out) == 0 {
		out = append(out, base)
	}
	return out, nil
}
