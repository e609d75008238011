package sim

import (
	"fmt"
	"math"

	"github.com/pollux-nomad/pollux/apps"
	"github.com/pollux-nomad/pollux/model"
	"github.com/pollux-nomad/pollux/policy"
)

// profileKey identifies one observed configuration of a job.
type profileKey struct{ nodes, replicas, localBsz int }

// job is one simulated training job. Its dynamics follow the Pollux
// artifact's simulator (simulator/simulator.py, class Job; reference §4):
// progress is counted in scale-invariant iterations, the true step time and
// gradient statistics come from the application's measured profile, and the
// model the scheduler sees is refitted whenever the job runs in a
// configuration it has not seen before.
type job struct {
	name       string
	app        *apps.Application
	submitted  float64
	fixedGPUs  int // Tiresias: requested GPU count (0 = adaptive)
	fixedBatch int // baselines (and NCF under Pollux): fixed total batch size (0 = adaptive)
	fit        bool

	now         float64
	completion  float64 // < 0 while running
	rescaleLeft float64
	placement   []int
	atomicBsz   int
	accumSteps  int
	epoch       int
	progress    float64
	attained    float64
	restarts    int // -1 before the first allocation, as the artifact's None
	reallocs    int

	profile    map[profileKey]struct{}
	points     []model.ProfilePoint
	perf       *model.PerfParams
	grad       model.GradParams
	haveGrad   bool
	maxProfile int
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

// bounds are the batch-size limits the Pollux job optimises within.
func (j *job) bounds() model.Bounds {
	return model.Bounds{
		MaxBatchSize: j.app.MaxBatchSize,
		MinLocalBsz:  j.app.MinLocalBsz,
		MaxLocalBsz:  j.app.MaxLocalBsz,
		Accumulation: true,
	}
}

// goodputFunc is the job's current fitted goodput model.
func (j *job) goodputFunc() model.GoodputFunc {
	return model.GoodputFunc{Perf: *j.perf, Grad: j.grad, InitBatchSize: float64(j.app.InitBatchSize)}
}

// updateLocalBsz picks the micro-batch and accumulation steps for the
// current placement: the goodput-optimal choice for an adaptive job with a
// fitted model, otherwise the fixed batch size split over the GPUs
// (simulator.py, Job.update_local_bsz).
func (j *job) updateLocalBsz() {
	nodes, k := len(j.placement), j.replicas()
	if k == 0 {
		return
	}
	app := j.app
	batch := j.fixedBatch
	if batch == 0 && j.perf == nil {
		batch = max(app.InitBatchSize, app.MinLocalBsz*k)
	}
	if batch == 0 {
		c := j.goodputFunc().Optimize(nodes, k, j.bounds())
		if c.LocalBsz > 0 {
			j.atomicBsz, j.accumSteps = c.LocalBsz, c.AccumSteps
		} else {
			batch = max(app.InitBatchSize, app.MinLocalBsz*k)
		}
	}
	if batch > 0 {
		local := ceilEps(float64(batch) / float64(k))
		j.accumSteps = ceilEps(float64(local)/float64(app.MaxLocalBsz)) - 1
		if k == 1 && batch > app.InitBatchSize {
			j.accumSteps = max(1, j.accumSteps)
		}
		j.atomicBsz = ceilEps(float64(local) / float64(j.accumSteps+1))
	}
	count := k * (j.accumSteps + 1)
	j.atomicBsz = min(j.atomicBsz, app.MaxBatchSize/count)
}

// ceilEps is ceil(x − 1e-8), the artifact's guard against float noise.
func ceilEps(x float64) int { return int(math.Ceil(x - 1e-8)) }

// observe records the configuration the job just ran in and refits the
// throughput model when it is new (simulator.py, Job.update_params).
func (j *job) observe(nodes, k, m int, step, sync, sqr, variance float64) error {
	j.grad = model.GradParams{Sqr: sqr, Var: variance}
	j.haveGrad = true
	if !j.fit {
		return nil
	}
	key := profileKey{nodes, k, m}
	if _, ok := j.profile[key]; ok {
		return nil
	}
	j.profile[key] = struct{}{}
	j.maxProfile = max(j.maxProfile, k)
	j.points = append(j.points, model.ProfilePoint{
		Nodes: nodes, Replicas: k, LocalBsz: float64(m),
		AccumStepTime: step - sync, OptimStepTime: step,
	})
	p, err := model.FitPerfParams(j.points)
	if err != nil {
		return fmt.Errorf("failed to fit job %s: %w", j.name, err)
	}
	j.perf = &p
	return nil
}

// step advances the job by seconds of simulated time with the given
// interference slowdown (simulator.py, Job.step).
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
		step, sync, err := app.Throughput(j.placement, j.atomicBsz)
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

// reallocate moves the job to a new placement (GPUs per node), charging
// the restart delay; an empty placement suspends it.
func (j *job) reallocate(placement []int, delay float64) {
	if len(placement) == 0 {
		j.placement = nil
		j.atomicBsz = 0
		return
	}
	j.placement = placement
	j.updateLocalBsz()
	j.rescaleLeft = delay
	j.restarts++
	j.reallocs++
}

// info builds the policy's view of the job.
func (j *job) info(traits policy.Traits, now float64, maxReplicasCap, explore int) policy.Job {
	pj := policy.Job{
		ID:              j.name,
		Submitted:       j.submitted,
		Age:             now - j.submitted,
		AttainedService: j.attained,
		NumRestarts:     max(j.restarts, 0),
	}
	app := j.app
	batch := app.MaxBatchSize
	if !traits.AdaptiveBatch {
		batch = j.fixedBatch
	}
	pj.MaxReplicas = traits.MaxReplicas(policy.JobLimits{
		Requested: j.fixedGPUs, Cap: maxReplicasCap, BatchLimit: batch / app.MinLocalBsz,
		Profiled: j.maxProfile, Explore: explore,
	})
	if traits.NeedsOracle {
		pj.Oracle = &oracle{j: j}
	}
	if traits.UsesGoodput && j.perf != nil && j.haveGrad {
		pj.Goodput = model.NewGoodputCache(j.goodputFunc(), j.bounds())
	}
	if app.Name == "ncf" {
		// The artifact runs NCF on one GPU only (simulator.py).
		pj.MaxReplicas = 1
	}
	return pj
}

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
// answer.
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
	step, sync, err := app.Throughput(placement, atomic)
	if err != nil {
		return math.Inf(1)
	}
	return step + (step-sync)*float64(accum)
}
