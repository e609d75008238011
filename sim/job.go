package sim

import (
	"fmt"
	"math"

	"github.com/pollux-nomad/pollux/apps"
	"github.com/pollux-nomad/pollux/model"
	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/registry"
)

// profileKey identifies one observed configuration of a job on a GPU type.
type profileKey struct {
	gpuType                   string
	nodes, replicas, localBsz int
}

// job is one simulated training job. Its dynamics follow the Pollux
// artifact's simulator (simulator/simulator.py, class Job; reference §4),
// or under RulesSia the Sia artifact's (sia-simulator/job.py, class Job):
// progress is counted in scale-invariant iterations, the true step time and
// gradient statistics come from the application's measured profile on the
// GPU type the job runs on, and the model the scheduler sees is refitted,
// per GPU type, whenever the job runs in a configuration it has not seen
// before.
type job struct {
	name       string
	app        *apps.Application
	submitted  float64
	fixedGPUs  int // Tiresias: requested GPU count (0 = adaptive)
	fixedBatch int // baselines (and NCF under Pollux): fixed total batch size (0 = adaptive)
	traceBatch int // the workload's batch_size (Sia caps the policy's view of the batch size at it)
	fit        bool
	rules      Rules
	calib      float64 // goodput multiplier: 1, or 1/slowdown under RulesSia

	now         float64
	completion  float64 // < 0 while running
	rescaleLeft float64
	gpuType     string // type of the current placement ("" on an untyped cluster or without GPUs)
	placement   []int
	atomicBsz   int
	accumSteps  int
	epoch       int
	progress    float64
	attained    float64
	restarts    int // -1 before the first allocation, as the artifact's None
	reallocs    int
	// lastRealloc is the time of the last reallocation to GPUs.
	lastRealloc float64

	profile map[profileKey]struct{}
	points  map[string][]model.ProfilePoint // per GPU type
	// pool, when not nil, holds the profile points of every job of the
	// simulation keyed by application (Config.ShareProfiles): the job's
	// models are fitted on its application's points.
	pool       *model.ProfilePool
	perf       map[string]*model.PerfParams // per GPU type
	grad       model.GradParams
	haveGrad   bool
	maxProfile map[string]int // per GPU type
	// boot caches the bootstrapped model per type, with the fitted model
	// it was derived from.
	boot map[string]bootEntry
}

// bootEntry is a cached bootstrapped throughput model of one GPU type.
type bootEntry struct {
	src  model.PerfParams
	perf model.PerfParams
	ok   bool
}

func (j *job) done() bool { return j.completion >= 0 }

func (j *job) replicas() int {
	n := 0
	for _, g := range j.placement {
		n += g
	}
	return n
}

// batchSize is the job's current total batch size.
func (j *job) batchSize() int { return j.replicas() * j.atomicBsz * (j.accumSteps + 1) }

// localBounds are the per-GPU micro-batch bounds on GPU type t.
func (j *job) localBounds(t string) (int, int) {
	lo, hi, err := j.app.LocalBszBounds(t)
	if err != nil {
		return j.app.MinLocalBsz, j.app.MaxLocalBsz
	}
	return lo, hi
}

// bounds are the batch-size limits the Pollux job optimises within on GPU
// type t.
func (j *job) bounds(t string) model.Bounds {
	lo, hi := j.localBounds(t)
	return model.Bounds{
		MaxBatchSize: j.app.MaxBatchSize,
		MinLocalBsz:  lo,
		MaxLocalBsz:  hi,
		Accumulation: true,
	}
}

// policyBounds are the bounds of the model the policy sees on type t:
// under RulesSia the largest batch size is the trace's (job.py,
// get_speedup_fn: max_batch_size = target_batch_size).
func (j *job) policyBounds(t string) model.Bounds {
	b := j.bounds(t)
	if j.rules == RulesSia && j.traceBatch > 0 {
		b.MaxBatchSize = j.traceBatch
	}
	return b
}

// goodputFunc is the job's fitted goodput model on type t (perfOn(t) must
// not be nil).
func (j *job) goodputFunc(t string) model.GoodputFunc {
	return model.GoodputFunc{Perf: *j.perfOn(t), Grad: j.grad, InitBatchSize: float64(j.app.InitBatchSize)}
}

// updateLocalBsz picks the micro-batch and accumulation steps for the
// current placement: the goodput-optimal choice for an adaptive job with a
// fitted model on its current type, otherwise the fixed batch size split
// over the GPUs (Pollux simulator.py and Sia job.py, Job.update_local_bsz).
// Under RulesSia the largest micro-batch is the one profiled for this
// placement (applications.py, get_max_local_bsz) and the micro-batch is
// capped at the largest profiled with this many GPUs.
func (j *job) updateLocalBsz() {
	nodes, k := len(j.placement), j.replicas()
	if k == 0 {
		return
	}
	app := j.app
	minLocal, maxLocal := j.localBounds(j.gpuType)
	switch {
	case j.rules == RulesSia:
		if m := app.MaxLocalBszFor(j.gpuType, j.placement); m > 0 {
			maxLocal = m
		}
	case j.gpuType != "":
		// A measured placement of a typed profile may have been measured
		// up to a smaller micro-batch than the type's largest (memory);
		// beyond it the lookup fails, so cap there.
		if m, ok := app.MaxLocalBszMeasured(j.gpuType, j.placement); ok && m < maxLocal {
			maxLocal = max(m, minLocal)
		}
	}
	batch := j.fixedBatch
	if batch == 0 && (j.perfOn(j.gpuType) == nil || !j.haveGrad) {
		batch = max(app.InitBatchSize, minLocal*k)
	}
	if batch == 0 {
		b := j.bounds(j.gpuType)
		b.MaxLocalBsz = maxLocal
		c := j.goodputFunc(j.gpuType).Optimize(nodes, k, b)
		if c.LocalBsz > 0 {
			j.atomicBsz, j.accumSteps = c.LocalBsz, c.AccumSteps
		} else {
			batch = max(app.InitBatchSize, minLocal*k)
		}
	}
	if batch > 0 {
		local := ceilEps(float64(batch) / float64(k))
		j.accumSteps = ceilEps(float64(local)/float64(maxLocal)) - 1
		if k == 1 && batch > app.InitBatchSize {
			j.accumSteps = max(1, j.accumSteps)
		}
		j.atomicBsz = ceilEps(float64(local) / float64(j.accumSteps+1))
	}
	if j.rules == RulesSia {
		if m, ok := app.MaxLocalBszForReplicas(j.gpuType, k); ok {
			j.atomicBsz = min(j.atomicBsz, m)
		}
	}
	count := k * (j.accumSteps + 1)
	j.atomicBsz = min(j.atomicBsz, app.MaxBatchSize/count)
}

// ceilEps is ceil(x − 1e-8), the artifact's guard against float noise.
func ceilEps(x float64) int { return int(math.Ceil(x - 1e-8)) }

// observe records the configuration the job just ran in on its current
// GPU type and refits that type's throughput model when it is new
// (simulator.py, Job.update_params; Sia keeps one profile per type).
func (j *job) observe(nodes, k, m int, step, sync, sqr, variance float64) error {
	j.grad = model.GradParams{Sqr: sqr, Var: variance}
	j.haveGrad = true
	if !j.fit {
		return nil
	}
	key := profileKey{j.gpuType, nodes, k, m}
	if _, ok := j.profile[key]; ok {
		return nil
	}
	j.profile[key] = struct{}{}
	j.maxProfile[j.gpuType] = max(j.maxProfile[j.gpuType], k)
	pt := model.ProfilePoint{
		Nodes: nodes, Replicas: k, LocalBsz: float64(m),
		AccumStepTime: step - sync, OptimStepTime: step,
	}
	j.points[j.gpuType] = append(j.points[j.gpuType], pt)
	j.pool.Add(j.app.Name, j.gpuType, []model.ProfilePoint{pt})
	p, err := model.FitPerfParams(j.points[j.gpuType])
	if err != nil {
		return fmt.Errorf("failed to fit job %s: %w", j.name, err)
	}
	j.perf[j.gpuType] = &p
	return nil
}

// perfOn is the job's throughput model on type t: its application's pooled
// fit where profiles are shared and the pool has one, else its own fit
// (nil without one).
func (j *job) perfOn(t string) *model.PerfParams {
	if j.pool != nil {
		if p, _, ok := j.pool.Fit(j.app.Name, t); ok {
			return &p
		}
	}
	return j.perf[t]
}

// step advances the job by seconds of simulated time with the given
// interference slowdown (simulator.py, Job.step; Sia's job.py, Job.step,
// also multiplies the goodput by the calibration factor).
func (j *job) step(seconds, interference float64) error {
	if len(j.placement) == 0 {
		j.now += seconds
		return nil
	}
	k := j.replicas()
	delay := min(j.rescaleLeft, seconds)
	j.now += delay
	j.attained += delay * float64(k)
	j.rescaleLeft -= delay
	seconds -= delay
	app := j.app
	for seconds > 0 && !j.done() {
		nodes := len(j.placement)
		batch := j.batchSize()
		scale := float64(batch) / float64(app.InitBatchSize)
		step, sync, err := app.ThroughputOn(j.gpuType, j.placement, j.atomicBsz)
		if err != nil {
			return fmt.Errorf("job %s: %w", j.name, err)
		}
		accum := step - sync
		sqr, variance := app.GradStats(float64(batch), j.epoch)
		gain := (variance + sqr) / (variance/scale + sqr)
		if err := j.observe(nodes, k, j.atomicBsz, step, sync, sqr, variance); err != nil {
			return err
		}
		total := step + accum*float64(j.accumSteps)
		goodput := gain / total * (1 - interference)
		if j.calib != 1 {
			goodput *= j.calib
		}
		next := app.Progress(j.epoch + 1)
		if j.progress+goodput*seconds < next {
			j.progress += goodput * seconds
			j.now += seconds
			j.attained += seconds * float64(k)
			seconds = 0
		} else {
			j.epoch++
			// Python's round() rounds half to even.
			delta := math.RoundToEven((next - j.progress) / goodput)
			delta = min(delta, seconds)
			if j.epoch > app.CompletionEpoch() {
				j.completion = j.now + delta
			}
			j.progress = next
			j.now += delta
			j.attained += delta * float64(k)
			seconds -= delta
		}
		j.updateLocalBsz()
	}
	j.now += seconds
	return nil
}

// reallocate moves the job to a new placement (GPUs per node) on GPU type
// gpuType, charging the restart delay; an empty placement suspends it.
func (j *job) reallocate(gpuType string, placement []int, delay float64) {
	if len(placement) == 0 {
		j.placement = nil
		j.atomicBsz = 0
		j.gpuType = ""
		return
	}
	j.gpuType = gpuType
	j.placement = placement
	j.updateLocalBsz()
	j.rescaleLeft = delay
	j.restarts++
	j.reallocs++
	j.lastRealloc = j.now
}

// info builds the policy's view of the job on a cluster of the given GPU
// types ([""] for an untyped cluster).
func (j *job) info(traits registry.Traits, now float64, maxReplicasCap int, explore registry.JobLimits, types []string, proj projector) policy.Job {
	pj := policy.Job{
		ID:              j.name,
		Submitted:       j.submitted,
		Age:             now - j.submitted,
		AttainedService: j.attained,
		NumRestarts:     max(j.restarts, 0),
	}
	app := j.app
	maxReplicas := 0
	for _, t := range types {
		batch := app.MaxBatchSize
		if !traits.AdaptiveBatch {
			batch = j.fixedBatch
		}
		minLocal, _ := j.localBounds(t)
		profiled := j.maxProfile[t]
		if j.rules != RulesSia {
			// One bound for all types: the most GPUs profiled anywhere.
			for _, p := range j.maxProfile {
				profiled = max(profiled, p)
			}
		}
		maxReplicas = max(maxReplicas, traits.MaxReplicas(registry.JobLimits{
			Requested: j.fixedGPUs, Cap: maxReplicasCap, BatchLimit: batch / minLocal,
			Profiled: profiled, Explore: explore.Explore, Start: explore.Start,
		}))
	}
	pj.MaxReplicas = maxReplicas
	if traits.NeedsOracle {
		pj.Oracle = &oracle{j: j}
	}
	if traits.UsesGoodput && j.haveGrad {
		fitted := map[string]policy.GoodputModel{}
		for _, t := range types {
			if j.perfOn(t) != nil {
				fitted[t] = model.NewGoodputCache(j.goodputFunc(t), j.policyBounds(t))
			}
		}
		switch {
		case len(fitted) == 0:
		case len(types) == 1:
			pj.Goodput = fitted[types[0]]
		default:
			pj.TypedGoodput = make(map[string]policy.GoodputModel, len(types))
			for _, t := range types {
				if m, ok := fitted[t]; ok {
					pj.TypedGoodput[t] = m
				} else {
					pj.TypedGoodput[t] = proj(j, t, fitted)
				}
			}
			// A type-unaware policy sees the model of the type the job runs
			// on, else of the first fitted type in cluster order.
			pj.Goodput = fitted[j.gpuType]
			for _, t := range types {
				if pj.Goodput == nil {
					pj.Goodput = fitted[t]
				}
			}
		}
	}
	// A job without a model carries its one-GPU probes per type, taken
	// when it arrived (as the bootstrap's), for the type-aware policies
	// that take bootstrapped models (pollux); sia keeps its artifact's
	// unit value for such jobs.
	if pj.Goodput == nil && pj.TypedGoodput == nil && policy.SeveralTypes(len(types)) && traits.TypeAware && !traits.ProjectedGoodput {
		pj.ProbeSpeed = make(map[string]float64, len(types))
		for _, t := range types {
			pj.ProbeSpeed[t] = app.OneGPUThroughput(t)
		}
	}
	if app.Name == "ncf" {
		// Both artifacts run NCF on one GPU only.
		pj.MaxReplicas = 1
	}
	if traits.TypeAware && policy.SeveralTypes(len(types)) {
		// The profiles of a type end at a number of GPUs (the Sia
		// artifact's at 16 A100s and 24 RTX 2080 Tis, the nodes it had of
		// them), and the simulator has no throughput beyond: a job may
		// hold no more of a type than that, whatever its replica bound,
		// which is one for all types (the most GPUs profiled on any type,
		// as the artifacts share it). A type-unaware policy's allocation
		// is cut to one type by the simulator instead (oneTypeEach).
		for _, t := range types {
			if m := app.MaxReplicasOn(t); m < pj.MaxReplicas {
				if pj.TypedMaxReplicas == nil {
					pj.TypedMaxReplicas = make(map[string]int, len(types))
				}
				pj.TypedMaxReplicas[t] = m
			}
		}
	}
	return pj
}

// projector predicts a job's goodput model on a type it has no fit on from
// its fitted models (not empty), keyed by type.
type projector func(j *job, target string, fitted map[string]policy.GoodputModel) policy.GoodputModel

// oracle gives Optimus the true remaining work and step time of a job.
type oracle struct{ j *job }

// RemainingIterations is the number of optimizer steps left at the job's
// fixed batch size (simulator/optimus.py).
func (o *oracle) RemainingIterations() float64 {
	app, b := o.j.app, float64(o.j.fixedBatch)
	ce := app.CompletionEpoch()
	if ce <= o.j.epoch {
		return 1
	}
	return app.Iteration(b, ce) - app.Iteration(b, o.j.epoch)
}

// StepTime is the true time of one optimizer step on k GPUs packed four to
// a node, including accumulation micro-steps; +Inf where the profile has no
// answer. On a typed cluster it is the time on the job's current type, or
// the default type without one.
func (o *oracle) StepTime(k int) float64 {
	app := o.j.app
	var placement []int
	for left := k; left > 0; left -= 4 {
		placement = append(placement, min(left, 4))
	}
	local := ceilEps(float64(o.j.fixedBatch) / float64(k))
	accum := ceilEps(float64(local)/float64(app.MaxLocalBsz)) - 1
	if k == 1 {
		accum = max(1, accum)
	}
	atomic := ceilEps(float64(local) / float64(accum+1))
	atomic = min(atomic, app.MaxBatchSize/(k*(accum+1)))
	step, sync, err := app.ThroughputOn(o.j.gpuType, placement, atomic)
	if err != nil {
		return math.Inf(1)
	}
	return step + (step-sync)*float64(accum)
}
