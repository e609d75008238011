package pollux

import (
	"errors"
	"fmt"
	"math"

	"github.com/pollux-nomad/pollux/policy"
)

// Defaults of Config, the Pollux artifact's settings (simulator/
// pollux.py; Pollux, OSDI '21, §4.2 and §5).
const (
	// DefaultPopulation is NSGA2(pop_size=100).
	DefaultPopulation = 100
	// DefaultGenerations is minimize(..., ("n_gen", 100)).
	DefaultGenerations = 100
	// DefaultFairnessP is the power-mean exponent p = −1.
	DefaultFairnessP = -1.0
	// DefaultRestartPenalty is the restart delay δ = 30 s.
	DefaultRestartPenalty = 30.0
	// DefaultRestartHysteresis is the default RestartHysteresis
	// (shrinks and moves), DefaultGrowthHysteresis the default
	// GrowthHysteresis on one GPU type with at most SmallClusterGPUs
	// GPUs, and DefaultServiceWeight the default ServiceWeight on
	// one GPU type. Together they lower the average JCT of the artifact's
	// workloads, with its flat restart delays and with Sia's
	// per-application ones, at slightly more restarts per job. A higher
	// growth bar (0.35) restarts less with the flat delays but costs JCT
	// with Sia's, where a job grows at most 2x per step
	// (docs/experiments.md, "Pollux" and "Toward 0.95× the published
	// mean").
	DefaultRestartHysteresis = 0.45
	DefaultGrowthHysteresis  = 0.3
	DefaultServiceWeight     = 14400.0
	// LargeRestartHysteresis is the default RestartHysteresis on one
	// GPU type with more than SmallClusterGPUs GPUs, where the
	// service weight is off by default: there 0.3 without the service
	// weight gives a lower average JCT than 0.45 with it
	// (docs/experiments.md, "Pollux").
	LargeRestartHysteresis = 0.3
	// TypedFairnessP and TypedRestartHysteresis replace the
	// defaults of FairnessP and RestartHysteresis, when those are left
	// zero, on a cluster of several GPU types: under Sia's rules on its
	// artifact's 3-type cluster they lower both the average JCT and the
	// restarts per job, on the workloads they were chosen on and on
	// others (docs/experiments.md, "Pollux").
	TypedFairnessP         = 0.5
	TypedRestartHysteresis = 0.5
	// TypedAgeScale (seconds) and TypedAgePower are the
	// defaults of AgeWeightScale and AgeWeightPower on a cluster of
	// several GPU types: a job of age T weighs 28800/(28800 + T) in the
	// fitness. The scale is long (8 h) because a short one (1 h) starves
	// the long jobs of multi-day workloads (docs/experiments.md, "Pollux"
	// and "Age weights").
	TypedAgeScale = 28800.0
	TypedAgePower = 1.0
	// TypedStandInKnee and StandInKneeSlope are the default
	// StandInKnee and the slope past it, with which a first allocation of
	// up to 16 GPUs (TypedStartReplicas) lowers the average JCT and the
	// restarts per job on a cluster of several GPU types
	// (docs/experiments.md, "Pollux" and "Knee").
	TypedStandInKnee = 4
	StandInKneeSlope = 0.5
	// TypedFirstHold is the default FirstHold on a cluster of
	// several GPU types: of the holds tried, two restart times gives the
	// lowest average JCT (docs/experiments.md, "Pollux" and "First
	// hold").
	TypedFirstHold = 2.0
	// DefaultStallGenerations and SmallClusterGPUs are the
	// size-aware default of StallGenerations: on the artifact's 64-GPU
	// cluster the stall rule halves a warm round's time at the same
	// average JCT, on 1024 GPUs it costs JCT, hence the bound
	// (docs/experiments.md, "Pollux" and "Toward 0.95× the published
	// mean").
	DefaultStallGenerations = 20
	// SmallClusterGPUs bounds the clusters (of one GPU type) where
	// the stall rule and the service weight are on by default and
	// shrinks and moves pay DefaultRestartHysteresis; on larger ones
	// every generation runs and they pay LargeRestartHysteresis.
	SmallClusterGPUs = 64
	// DefaultMaxNodesPerJob is the artifact's max_nodes = 16.
	DefaultMaxNodesPerJob = 16
	// polluxMaxAbsP bounds |p| so that (1e−3)^p stays finite.
	polluxMaxAbsP = 100
)

// Config configures the Pollux policy. The zero value gives the
// artifact's settings except where measured better: restart hysteresis
// (on one GPU type 0.45 on shrinks and moves with at most
// SmallClusterGPUs GPUs, 0.3 with more, and 0.3 on growth), a service
// weight (one GPU type, at most SmallClusterGPUs GPUs), size-aware stall
// rule, starts exempt from the restart factor, interference avoidance
// without the artifact's quirk, the changes of the search's best
// allocation settled (KeepChanges), and the typed defaults on a cluster
// of several GPU types. Resolve gives the values for a cluster.
type Config struct {
	// Population is the number of solutions NSGA-II keeps, and of
	// offspring it makes per generation. 0 means 100.
	Population int
	// Generations is the number of generations, counting the initial
	// population as the first, as pymoo's ("n_gen", N) termination does.
	// 0 means 100 (so 99 rounds of mating).
	Generations int
	// StallGenerations, if > 0, ends a round's search early once the
	// first Pareto front has not changed for that many generations in a
	// row; a negative value always runs Generations. 0 means the
	// size-aware default: DefaultStallGenerations (20) on a cluster
	// of one GPU type with at most SmallClusterGPUs (64) GPUs, where it
	// halves the round's time with the same decisions' quality, and every
	// generation elsewhere (on a large cluster a 20-generation pause is
	// not convergence; docs/experiments.md, "Pollux").
	StallGenerations int
	// Seed seeds the random source where the input sets none: round r
	// (Input.Round) draws from PCG(seed, r), so the same seed and the
	// same input, its Carry included, give the same decision.
	Seed int64
	// FairnessP is the power-mean exponent p of FITNESS_p (Pollux, OSDI
	// '21, §4.2): more negative is fairer, 1 maximises the sum of
	// speedups. 0 means the default −1 (the artifact's value; 0.5,
	// TypedFairnessP, on a cluster of several GPU types), so the
	// geometric mean (p = 0 in the paper) cannot be chosen. |p| must be
	// at most 100.
	FairnessP float64
	// RestartPenalty is the restart delay δ in seconds used in the restart
	// penalty factor max(T − R·δ, 0)/(T + δ), for jobs without their own
	// measured restart time (Job.RestartTime). 0 means 30 (the artifact's
	// value); a negative value turns it off (δ = 0: only measured restart
	// times are penalised).
	RestartPenalty float64
	// RestartHysteresis h < 1 makes a reallocation of a running job pay
	// off only when it gains more than its share: a job holding GPUs
	// whose allocation shrinks or moves has its scaled speedup multiplied
	// by (1 − h) on top of the restart factor, so that small gains (noise
	// of the search, sideways moves, a GPU more or less) do not restart
	// it; growth pays GrowthHysteresis instead. 0 means the default
	// DefaultRestartHysteresis (0.45; LargeRestartHysteresis,
	// 0.3, on one GPU type with more than SmallClusterGPUs GPUs;
	// docs/experiments.md, "Restart hysteresis"); a negative value
	// disables it, as the artifact. On a cluster of several GPU types 0
	// means TypedRestartHysteresis (0.5).
	RestartHysteresis float64
	// GrowthHysteresis is the hysteresis of a job that would get more
	// GPUs than it holds (it pays the restart factor in any case). 0
	// means DefaultGrowthHysteresis (0.3) on one GPU type and none on
	// several: there growth onto freed fast GPUs is where the JCT comes
	// from. On one large GPU type, with the search's changes settled
	// (Config.KeepChanges), it keeps big jobs from growing by a few GPUs
	// into GPUs that the next arrivals take back (docs/experiments.md,
	// "Pollux"). A negative value exempts growth everywhere, a positive
	// one applies everywhere;
	// with a negative RestartHysteresis 0 means negative too (no
	// hysteresis at all, as the artifact).
	// Growth is held back less than shrinks and moves: a lower bar on
	// growth and a higher one on shrinks (0.3 and 0.45) gave a lower
	// average JCT than 0.3 for both, under both simulator rule sets.
	GrowthHysteresis float64
	// ServiceWeight, if positive, weighs each job's term of the power
	// mean by A0/(A0 + its attained service), A0 = ServiceWeight
	// GPU-seconds, so that jobs with little service (likely short, as in
	// Tiresias' least-attained-service order) get GPUs first and more of
	// them. 0 means DefaultServiceWeight (14400 GPU-seconds) on one
	// GPU type with at most SmallClusterGPUs GPUs, off on larger
	// ones and on several types (they weigh jobs by age, AgeWeightScale);
	// a negative value weighs all jobs alike, as Pollux. A0 is four
	// hours, not one, because one hour restarts jobs more and slows some
	// workloads down (docs/experiments.md, "Pollux" and "Toward 0.95× the
	// published mean").
	ServiceWeight float64
	// ServiceWeightExact uses a job's attained service as it is in the
	// service weight. By default it is rounded down to A0/8 times a power
	// of two (0 below A0/8), so that a job's weight changes only when its
	// service doubles and the optimum does not drift (and restart jobs)
	// round after round.
	ServiceWeightExact bool
	// PenalizeStarts applies the restart factor also to a job that holds
	// no GPUs and would start, as the artifact does. The default (false)
	// exempts it: a pending job pays its start-up delay whenever it
	// starts, so delaying it saves nothing (docs/experiments.md,
	// "Pollux").
	PenalizeStarts bool
	// RestartHorizon, if positive, caps the age T in the restart factor
	// at this many seconds, so that old jobs are not restarted for gains
	// a young job would not get. 0 means no cap (the artifact's factor).
	RestartHorizon float64
	// MoveRestoring lets the policy change the allocation of a job that
	// is still restarting on its current one (Job.Restoring) as of any
	// other running job. The default (false) keeps such a job where it is,
	// as Sia's preserve_ckpt_allocs: Optimize takes it out of the round's
	// problem with its GPUs (neither moved nor preempted). Its restart is
	// mostly paid, a move pays a whole one again before it made any
	// progress, and with restart times longer than the round interval the
	// search otherwise moves (or preempts and restarts) the same jobs
	// round after round (docs/experiments.md, "Pollux").
	MoveRestoring bool
	// DisableInterferenceAvoidance turns off the repair step that keeps
	// two distributed jobs off one node. The default (false) avoids
	// interference, as the artifact does.
	DisableInterferenceAvoidance bool
	// ArtifactInterferenceQuirk reproduces a quirk of the artifact's
	// interference avoidance (pollux.py lines 386–390): on a node holding
	// two distributed jobs, single-node jobs ordered after the second one
	// lose their GPUs there too. The default (false) zeroes only the
	// distributed jobs after the first, which is what the paper describes
	// (§4.2, "interference avoidance") and gives shorter JCTs.
	ArtifactInterferenceQuirk bool
	// MaxNodesPerJob is the most nodes one job may span. 0 means 16 (the
	// artifact's max_nodes, a no-op on its 16-node cluster).
	MaxNodesPerJob int
	// Workers is the number of goroutines that cross over, mutate,
	// repair and evaluate offspring. 0 means GOMAXPROCS for problems of
	// at least 16 jobs and 1 below. Decisions do not depend on it: every
	// child draws from its own random stream.
	Workers int
	// SeedFromWholePopulation seeds the next round with the whole final
	// population instead of its first non-dominated front. The default
	// (false) is the artifact's: pymoo's result.X, which Policy saves
	// as the next round's seed, holds only the first front.
	SeedFromWholePopulation bool
	// WholeNodes restricts a job that spans several nodes to whole nodes
	// (every node it uses, all of that node's GPUs), as Sia's
	// configurations do (Sia, SOSP '23, §3.2). The default (false) lets a
	// job take part of several nodes, as Pollux does.
	WholeNodes bool
	// GrowthLimit, if positive, caps the GPUs of a job that holds some at
	// GrowthLimit times what it holds, as Sia grows a job at most 2x per
	// round. 0 means no cap (Pollux's: only MaxReplicas bounds it).
	GrowthLimit int
	// TypeMoveProbability is the probability that the mutation moves a
	// job holding GPUs to another GPU type (typed clusters only). 0 means
	// 1/#jobs.
	TypeMoveProbability float64
	// ConfigSeed starts each round's search also from an allocation
	// chosen configuration by configuration (a GPU type and count per job,
	// at per-type prices that make every type's demand fit; configseed.go).
	// 0 means on with several GPU types and more than SmallClusterGPUs
	// GPUs, else off; 1 on; a negative value off.
	ConfigSeed int
	// AgeWeightScale τ (seconds) and AgeWeightPower a weigh each job's
	// term of the fitness by w_j = (τ/(τ + T_j))^a, T_j its age, so that
	// FITNESS_p = (Σ_j w_j·(S_j + 1e−3)^p / Σ_j w_j)^(1/p). It is the
	// least-attained-service prior of Tiresias (NSDI '19) inside Pollux's
	// objective: in the heavy-tailed job mixes of shared clusters a job
	// that has run long is likely to run long yet, so handing the fast
	// GPUs to young jobs first shortens the average JCT, while old jobs
	// keep a share (the weight falls off slowly and the power mean still
	// rewards every job's speedup). 0 means, on a cluster of several GPU
	// types, TypedAgeScale and TypedAgePower; on a cluster of
	// one type a zero or negative scale, and anywhere a negative one,
	// gives every job weight 1 (the artifact's fitness).
	AgeWeightScale float64
	AgeWeightPower float64
	// StandInKnee K is where the linear stand-in speedup of a job without
	// a model on a cluster of several GPU types bends: past K GPUs each
	// further GPU counts StandInKneeSlope of one, so that a new job
	// given a first allocation of more than K GPUs (the simulator's
	// typed TypedStartReplicas, 16) takes them mostly where nobody else
	// gains as much, and otherwise starts on K and grows once profiled.
	// 0 means TypedStandInKnee (4); a negative value keeps the
	// stand-in linear. One GPU type: always linear (the artifact's).
	StandInKnee int
	// KeepChanges returns the search's best allocation as it is. By
	// default every change of a job's allocation in it is taken back
	// when the round's fitness is as good without it (one job at a time,
	// in priority order), so that no job restarts for a change that does
	// not pay for its restart: near-neutral changes of jobs whose term
	// weighs little in the fitness otherwise survive the search.
	KeepChanges bool
	// FirstHold H keeps a job on its first allocation (NumRestarts 0,
	// holding GPUs) until it has held it (Job.Held) for 1 + H restart
	// times (Job.RestartTime, else RestartPenalty): until then the round
	// leaves it where it is, as a job still restoring (MoveRestoring).
	// A new job is placed by its stand-in or a model fitted on a few
	// seconds of training; without the hold, many new jobs of a busy
	// mixed cluster are shrunk or moved right after their first restore,
	// paying a second restart before they have trained
	// (docs/experiments.md, "Pollux"). 0 means
	// TypedFirstHold (2) on a cluster of several GPU types and no
	// hold on one type; a negative value, no hold.
	FirstHold float64
}

// off is the value a knob takes in a resolved configuration when it is off.
const off = -1

// Resolve returns the configuration Pollux runs with on a cluster of
// regime r: every field that means "the default" when zero set to its
// effective value, so that reading the result needs no regime, and
// resolving it again (on any regime) changes nothing. A knob that is off
// is negative in the result (-1), as in the input. Workers and
// TypeMoveProbability keep 0 (their defaults depend on the round's number
// of jobs), as do RestartHorizon and GrowthLimit (0 is no cap).
//
// The defaults by regime (one GPU type with at most
// SmallClusterGPUs GPUs / one type with more / several types):
// FairnessP -1 / -1 / 0.5; RestartHysteresis 0.45 / 0.3 / 0.5;
// GrowthHysteresis 0.3 / 0.3 / off; ServiceWeight 14400 / off / off;
// AgeWeightScale off / off / 28800 s; StandInKnee off (a linear stand-in)
// / off / 4; FirstHold off / off / 2; StallGenerations 20 / off / off.
// Everywhere: Population 100, Generations 100, RestartPenalty 30 s,
// AgeWeightPower 1, MaxNodesPerJob 16. A negative RestartHysteresis turns
// GrowthHysteresis off too unless that is set.
func (c Config) Resolve(r policy.Regime) Config {
	several := r.SeveralTypes()
	seedDefault := c.ConfigSeed == 0
	large := !several && r.GPUs > SmallClusterGPUs
	// byRegime returns v if set (non-zero), else the default of r.
	byRegime := func(v, small, big, typed float64) float64 {
		switch {
		case v != 0:
			return v
		case several:
			return typed
		case large:
			return big
		}
		return small
	}
	if c.Population == 0 {
		c.Population = DefaultPopulation
	}
	if c.Generations == 0 {
		c.Generations = DefaultGenerations
	}
	c.StallGenerations = int(byRegime(float64(c.StallGenerations), DefaultStallGenerations, off, off))
	c.FairnessP = byRegime(c.FairnessP, DefaultFairnessP, DefaultFairnessP, TypedFairnessP)
	if c.RestartPenalty == 0 {
		c.RestartPenalty = DefaultRestartPenalty
	}
	if c.MaxNodesPerJob == 0 {
		c.MaxNodesPerJob = DefaultMaxNodesPerJob
	}
	if c.RestartHysteresis < 0 && c.GrowthHysteresis == 0 {
		// Hysteresis off, as the artifact: for growth too.
		c.GrowthHysteresis = off
	}
	c.RestartHysteresis = byRegime(c.RestartHysteresis, DefaultRestartHysteresis, LargeRestartHysteresis, TypedRestartHysteresis)
	c.GrowthHysteresis = byRegime(c.GrowthHysteresis, DefaultGrowthHysteresis, DefaultGrowthHysteresis, off)
	c.ServiceWeight = byRegime(c.ServiceWeight, DefaultServiceWeight, off, off)
	c.AgeWeightScale = byRegime(c.AgeWeightScale, off, off, TypedAgeScale)
	c.AgeWeightPower = byRegime(c.AgeWeightPower, 1, 1, TypedAgePower)
	c.StandInKnee = int(byRegime(float64(c.StandInKnee), off, off, TypedStandInKnee))
	if !several {
		c.StandInKnee = off // one GPU type: the artifact's linear stand-in
	}
	c.FirstHold = byRegime(c.FirstHold, off, off, TypedFirstHold)
	// The configuration seed pays where the search's budget per job no
	// longer covers each job's choices: above SmallClusterGPUs. At the
	// 64-GPU scale the search finds as good allocations alone, and the
	// seed only pulls the first population toward the relaxation's
	// (docs/evaluation.md, "Mixed fleets at scale").
	c.ConfigSeed = int(byRegime(float64(c.ConfigSeed), off, off, 1))
	if c.ConfigSeed == 1 && several && r.GPUs <= SmallClusterGPUs && seedDefault {
		c.ConfigSeed = off
	}
	return c
}

// Validate reports every invalid field at once.
func (c Config) Validate() error {
	var errs []error
	if c.Population < 0 {
		errs = append(errs, fmt.Errorf("population %d is negative", c.Population))
	}
	if c.Generations < 0 {
		errs = append(errs, fmt.Errorf("generations %d is negative", c.Generations))
	}
	if math.IsNaN(c.FairnessP) || math.Abs(c.FairnessP) > polluxMaxAbsP {
		errs = append(errs, fmt.Errorf("fairness p %v is not in [-%d, %d]", c.FairnessP, polluxMaxAbsP, polluxMaxAbsP))
	}
	if math.IsNaN(c.RestartPenalty) || math.IsInf(c.RestartPenalty, 0) {
		errs = append(errs, fmt.Errorf("restart penalty %v s is not finite", c.RestartPenalty))
	}
	if c.MaxNodesPerJob < 0 {
		errs = append(errs, fmt.Errorf("max nodes per job %d is negative", c.MaxNodesPerJob))
	}
	if !(c.RestartHysteresis < 1) {
		errs = append(errs, fmt.Errorf("restart hysteresis %v is not below 1", c.RestartHysteresis))
	}
	if math.IsNaN(c.RestartHorizon) || math.IsInf(c.RestartHorizon, 0) || c.RestartHorizon < 0 {
		errs = append(errs, fmt.Errorf("restart horizon %v s is not a finite non-negative number", c.RestartHorizon))
	}
	if !(c.TypeMoveProbability >= 0 && c.TypeMoveProbability <= 1) {
		errs = append(errs, fmt.Errorf("type move probability %v is not in [0, 1]", c.TypeMoveProbability))
	}
	if math.IsNaN(c.AgeWeightScale) || math.IsInf(c.AgeWeightScale, 0) {
		errs = append(errs, fmt.Errorf("age weight scale %v s is not finite", c.AgeWeightScale))
	}
	if math.IsNaN(c.AgeWeightPower) || math.IsInf(c.AgeWeightPower, 0) || c.AgeWeightPower < 0 {
		errs = append(errs, fmt.Errorf("age weight power %v is not a finite non-negative number", c.AgeWeightPower))
	}
	if math.IsNaN(c.ServiceWeight) || math.IsInf(c.ServiceWeight, 0) {
		errs = append(errs, fmt.Errorf("service weight %v GPU-seconds is not finite", c.ServiceWeight))
	}
	if !(c.GrowthHysteresis < 1) {
		errs = append(errs, fmt.Errorf("growth hysteresis %v is not below 1", c.GrowthHysteresis))
	}
	if math.IsNaN(c.FirstHold) || math.IsInf(c.FirstHold, 0) {
		errs = append(errs, fmt.Errorf("first hold %v restart times is not finite", c.FirstHold))
	}
	if c.GrowthLimit < 0 {
		errs = append(errs, fmt.Errorf("growth limit %d is negative", c.GrowthLimit))
	}
	if c.Workers < 0 {
		errs = append(errs, fmt.Errorf("workers %d is negative", c.Workers))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid pollux configuration: %w", err)
	}
	return nil
}
