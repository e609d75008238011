package pollux

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"

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
	// one GPU type. Measured on the eight artifact workloads (64 GPUs):
	// with the Pollux artifact's flat 30 s restarts, mean average JCT
	// 2658 -> 2599 s at seed 1 (seeds 1-5 2601 s) with 1.86 -> 2.05
	// restarts per job; with Sia's per-application restart delays
	// (-rules sia) 4453 -> 4400 s, 2.08 -> 2.14 restarts per job. A growth
	// bar of 0.35 cut the restarts further under the flat delays (2610 s,
	// 1.96) but cost 6.6% of JCT under Sia's, where a job grows at most
	// 2x per step (docs/experiments.md, "Toward 0.95× the published mean").
	DefaultRestartHysteresis = 0.45
	DefaultGrowthHysteresis  = 0.3
	DefaultServiceWeight     = 14400.0
	// LargeRestartHysteresis is the default RestartHysteresis on one
	// GPU type with more than SmallClusterGPUs GPUs, where the
	// service weight is off by default: at 1024 GPUs (640 jobs, seed 7)
	// 0.45 with the service weight gave an average JCT of 1611 s against
	// 1540 s with 0.3 and no service weight.
	LargeRestartHysteresis = 0.3
	// TypedFairnessP and TypedRestartHysteresis replace the
	// defaults of FairnessP and RestartHysteresis, when those are left
	// zero, on a cluster of several GPU types. Measured under -rules sia on
	// the Sia artifact's 3-type cluster: sia-philly-1..8 mean average JCT
	// 2408 -> 2339 s and restarts per job 3.62 -> 3.02 (p = 0.5 alone
	// 2348 s, h = 0.5 alone 2365 s, p = 1 2418 s); checked on
	// sia-helios-1..10, not used to choose them: 2690 -> 2661 s, 3.47 ->
	// 2.99 restarts per job.
	TypedFairnessP         = 0.5
	TypedRestartHysteresis = 0.5
	// TypedAgeScale (seconds) and TypedAgePower are the
	// defaults of AgeWeightScale and AgeWeightPower on a cluster of
	// several GPU types: a job of age T weighs 28800/(28800 + T) in the
	// fitness. First chosen as 3600 s on sia-philly-1..8 (-rules sia,
	// the Sia artifact's 3-type cluster; against no weights 2339 -> 2258
	// s, held-out sia-helios-1..10 2661 -> 2595 s). The 48-hour
	// sia-newtrace workloads, not used then, showed that a one-hour scale
	// starves long jobs (sia-newtrace-1 and -2: 1.100x sia, p99 JCT 1.43x
	// sia's); 28800 s (8 h) gives 1.014x there with sia-philly-1..8 at
	// 2219 s against 2206 s and fewer restarts (2.32 against 2.57 per
	// job; 14400 s: 2212 s and 1.035x). docs/experiments.md, "Age weights".
	TypedAgeScale = 28800.0
	TypedAgePower = 1.0
	// TypedStandInKnee and StandInKneeSlope are the default
	// StandInKnee and the slope past it. Measured under -rules sia on the
	// 3-type cluster with a first allocation of up to 16 GPUs (against a
	// linear stand-in and up to 4): sia-philly-1..8 at GA seeds 1, 2, 3
	// 2163, 2189, 2176 -> 2147, 2165, 2160 s (each seed lower) with 2.07
	// -> 1.95 restarts per job; sia-helios-1..10 2515 -> 2485 s;
	// slope 0.3 2153 s, 0.7 2164 s (seed 1). docs/experiments.md, "Knee".
	TypedStandInKnee = 4
	StandInKneeSlope = 0.5
	// TypedFirstHold is the default FirstHold on a cluster of
	// several GPU types. Measured under -rules sia on the 3-type cluster
	// (against none): sia-philly-1..8 at GA seeds 1, 2, 3 2147, 2165, 2160
	// -> 2122, 2125, 2141 s; holds of 1, 3 and 5 restart times 2147,
	// 2171, 2189 s (seed 1). docs/experiments.md, "First hold".
	TypedFirstHold = 2.0
	// DefaultStallGenerations and SmallClusterGPUs are the
	// size-aware default of StallGenerations. Measured on the artifact's
	// 64-GPU cluster: a warm round 24-30 ms -> 13 ms; the eight artifact
	// workloads' mean average JCT over seeds 1-5 2663 -> 2665 s (+0.08%),
	// each of five held-out generated workloads 0.0-2.0% faster; on 1024
	// GPUs (640 jobs) 1621 -> 1677 s, hence the bound (docs/experiments.md, "Toward 0.95× the published mean").
	DefaultStallGenerations = 20
	// SmallClusterGPUs bounds the clusters (of one GPU type) where
	// the stall rule and the service weight are on by default and
	// shrinks and moves pay DefaultRestartHysteresis; on larger ones
	// every generation runs and they pay LargeRestartHysteresis.
	SmallClusterGPUs = 64
	// DefaultMaxNodesPerJob is the artifact's max_nodes = 16.
	DefaultMaxNodesPerJob = 16
	// polluxMaxNodeGPUs bounds a node's GPUs: a state entry stores 8 bits.
	polluxMaxNodeGPUs = 255
	// polluxTieTolerance is the relative difference of fitness below
	// which two solutions are taken as equal when the round's result is
	// chosen (then the one with fewer changes wins).
	polluxTieTolerance = 1e-9
	// polluxMaxAbsP bounds |p| so that (1e−3)^p stays finite.
	polluxMaxAbsP = 100
	// polluxParallelMinJobs is the fewest jobs for which offspring are
	// bred on several cores by default: below, a generation's batch takes
	// a few tens of microseconds, not much more than waking a helper.
	polluxParallelMinJobs = 16
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
	// generation elsewhere (at 1024 GPUs a 20-generation pause is not
	// convergence: average JCT +3.5%; several GPU types not measured).
	StallGenerations int
	// Seed seeds the random source. Round r (the r-th call of Optimize)
	// draws from PCG(Seed, r), so the same seed and the same sequence of
	// inputs give the same decisions.
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
	// before growth had its own bar, one value of 0.3 for every
	// change took restarts per job from 3.45 to 1.86 with a lower average
	// JCT; docs/experiments.md, "Restart hysteresis"); a negative value disables
	// it, as the artifact. On a cluster of several GPU types 0 means
	// TypedRestartHysteresis (0.5).
	RestartHysteresis float64
	// GrowthHysteresis is the hysteresis of a job that would get more
	// GPUs than it holds (it pays the restart factor in any case). 0
	// means DefaultGrowthHysteresis (0.3) on one GPU type and none on
	// several: there growth onto freed fast GPUs is where the JCT comes
	// from (sia-philly-1 under -rules sia: 2401 → 1892 s without it). On
	// one type of 1024 GPUs, with the search's changes settled (Config.
	// KeepChanges), it takes restarts per job from 3.43 to 2.32, as big
	// jobs no longer grow by a few GPUs into GPUs that the next arrivals
	// take back (held-out 640-job workload, Makefile scale-quality). A negative
	// value exempts growth everywhere, a positive one applies everywhere;
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
	// a negative value weighs all jobs alike, as Pollux.
	// Measured on the eight artifact workloads (seed 1, hysteresis 0.3):
	// A0 = 3600 s mean average JCT 2644 -> 2600 s but 1.86 -> 2.46
	// restarts per job and workload-1 +4.4%; A0 = 14400 s 2619 s, 2.24
	// restarts (docs/experiments.md, "Toward 0.95× the published mean").
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
	// starts, so delaying it saves nothing (measured neutral to slightly
	// better on the eight artifact workloads).
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
	// round after round. (Before, a restoring job's speedup was floored
	// when its row changed, which its preemption matched: an old ImageNet
	// job was started and preempted within its 250-s restore several times
	// over. Pinning it: sia-philly-1..8 under -rules sia 2175 -> 2163 s,
	// sia-helios-1..10 2509 -> 2515 s.)
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
	// seconds of training; without the hold, a quarter of the new jobs of
	// a busy mixed cluster were shrunk or moved right after their first
	// restore, paying a second restart before they had trained. 0 means
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

// Stats describes the last round of Policy, for logs and metrics.
// The caller measures the duration.
type Stats struct {
	// Round is the 1-based index of the Optimize call; with the seed it
	// names the round's random stream.
	Round int
	// Jobs and Nodes are the problem size.
	Jobs, Nodes int
	// Seeds is the number of seed states (before duplicates are dropped).
	Seeds int
	// Generations run, the initial population included.
	Generations int
	// Evaluations counts the states repaired and evaluated.
	Evaluations int
	// FrontSize is the size of the final first non-dominated front.
	FrontSize int
	// BestFitness and BestUtility are the objectives of the chosen
	// allocation (FITNESS_p and UTILITY of Pollux, OSDI '21, §4.2).
	BestFitness, BestUtility float64
	// FallbackBases counts jobs whose model gave no positive goodput at
	// the fair share, so the base fell back to 1 GPU (or to linear
	// speedup).
	FallbackBases int
	// StoppedEarly is set when a generation produced no new offspring.
	StoppedEarly bool
	// Cancelled is set when the context ended the search early.
	Cancelled bool
	// Settled counts the changes of the chosen allocation taken back
	// because they did not pay for their restarts (Config.KeepChanges).
	Settled int
}

// Policy is PolluxSched, the cluster-wide scheduling policy of
// Pollux (Qiao et al., "Pollux: Co-adaptive Cluster Scheduling for
// Goodput-Optimized Deep Learning", OSDI '21, §4): a genetic algorithm
// (NSGA-II) searches the jobs × nodes allocation matrices for the one with
// the best power mean of the jobs' speedups, penalising restarts, as the
// artifact's simulator/pollux.py does. It keeps the final population
// between rounds to seed the next one, so it is not safe for concurrent
// use.
type Policy struct {
	cfg   Config
	round int
	stats Stats

	engine gaEngine
	prob   polluxProblem

	prevJobs   []string
	prevNodes  []string
	prevStates []spState
	prevCount  int
}

var _ policy.Policy = (*Policy)(nil)

// New returns a Pollux policy, or an error if cfg is invalid.
func New(cfg Config) (*Policy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("failed to create pollux policy: %w", err)
	}
	return &Policy{cfg: cfg}, nil
}

// Name returns "pollux".
func (p *Policy) Name() string { return "pollux" }

// LastStats returns the statistics of the last Optimize call.
func (p *Policy) LastStats() Stats { return p.stats }

// Optimize returns the allocation of the round: each job's GPUs listed
// node by node in the order of in.Nodes (for example [n1 n1 n3]); jobs
// with no GPUs are omitted. Every returned allocation gives a job either
// no GPUs or between MinReplicas and MaxReplicas (on a typed cluster at
// most its TypedMaxReplicas of the one type it gets), never exceeds a node's
// capacity and, unless interference avoidance is disabled, never puts two
// multi-node jobs on one node.
//
// Jobs are ordered by attained service, then submission time, then ID;
// the order decides who loses GPUs first in repair. Allocations in
// in.Current for unknown jobs or nodes are ignored. The first call seeds
// the search with in.Current; later calls seed it with the previous
// round's final first front, mapped by job and node ID (new jobs start
// with no GPUs, vanished jobs and nodes are dropped).
//
// If ctx is already done, Optimize returns ctx's error. If ctx ends during
// the search, it stops between generations and returns the best
// allocation found so far with a nil error (LastStats().Cancelled is
// set), so a deadline bounds the round's time. It returns an error
// naming the job or node for invalid input.
func (p *Policy) Optimize(ctx context.Context, in policy.Input) (policy.Allocations, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("failed to optimize allocations: %w", err)
	}
	if err := policy.CheckInput(in, polluxMaxNodeGPUs); err != nil {
		return nil, fmt.Errorf("failed to optimize allocations: %w", err)
	}
	p.round++
	p.stats = Stats{Round: p.round, Jobs: len(in.Jobs), Nodes: len(in.Nodes)}
	total := 0
	for _, n := range in.Nodes {
		total += n.GPUs
	}
	if len(in.Jobs) == 0 || total == 0 {
		return policy.Allocations{}, nil
	}

	// A job still restoring on its current allocation keeps it
	// (MoveRestoring), as does a job within its first hold (FirstHold):
	// the round solves for the others, on the GPUs left.
	cfg := p.cfg.Resolve(policy.RegimeOf(in.Nodes))
	var pinned policy.Allocations
	var pinnedNodes map[string]bool
	if !cfg.MoveRestoring {
		in, pinned, pinnedNodes = splitRestoring(in, cfg.FirstHold, max(cfg.RestartPenalty, 0))
		if len(in.Jobs) == 0 {
			return pinned, nil
		}
	}
	order := polluxJobOrder(in.Jobs)
	pr := &p.prob
	p.stats.FallbackBases = pr.setup(in, order, total, cfg)
	pr.pinnedNodes(in, pinnedNodes)
	nSeeds := p.buildSeeds(in, order)
	p.stats.Seeds = nSeeds

	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(p.round)))
	e := &p.engine
	e.reset(gaParams{
		popSize:     cfg.Population,
		generations: cfg.Generations,
		crossProb:   0.9,
		maxMatings:  100,
		rows:        pr.rows,
		stall:       max(cfg.StallGenerations, 0),
	}, pr, nSeeds)
	res := e.run(ctx, rng, nSeeds)
	p.stats.Generations = res.generations
	p.stats.Evaluations = res.evaluations
	p.stats.StoppedEarly = res.stoppedEarly
	p.stats.Cancelled = res.cancelled

	// The artifact picks the solution of the first front with the best
	// FITNESS (np.argmin of −FITNESS; the first one on ties).
	// Among solutions whose fitness equals the best one's (to
	// polluxTieTolerance), the one that changes the fewest jobs' current
	// allocations: with more equal jobs than GPUs, swapping a running job
	// for a waiting one leaves the fitness as it is, and without this the
	// search would preempt running jobs for their equals round after
	// round (each a restart).
	best := int32(-1)
	front := 0
	for _, s := range e.pop {
		if e.rank[s] != 0 {
			continue
		}
		front++
		if best < 0 || e.f0[s] < e.f0[best] {
			best = s
		}
	}
	{
		tol := polluxTieTolerance * math.Abs(e.f0[best])
		fewest := pr.changes(&pr.states[best])
		for _, s := range e.pop {
			if e.rank[s] != 0 || s == best || e.f0[s] > e.f0[best]+tol {
				continue
			}
			if n := pr.changes(&pr.states[s]); n < fewest {
				best, fewest = s, n
			}
		}
		// The current allocation itself may have left the population
		// (many equal solutions crowd each other out of the front).
		if fewest > 0 {
			b := e.alloc()
			pr.states[b].copyFrom(&pr.base)
			f0, f1, _ := pr.repairEval(rng, b)
			if f0 <= e.f0[best]+tol && pr.changes(&pr.states[b]) < fewest {
				e.f0[b], e.f1[b] = f0, f1
				best = b
			}
		}
	}
	if !cfg.KeepChanges {
		p.stats.Settled = p.settle(rng, best)
	}
	p.stats.FrontSize = front
	p.stats.BestFitness = -e.f0[best]
	p.stats.BestUtility = -e.f1[best]
	p.saveStates(in, order, cfg.SeedFromWholePopulation)

	out := policy.Allocations{}
	for id, a := range pinned {
		out[id] = a
	}
	x := &pr.states[best]
	for j, ji := range order {
		var alloc []string
		for _, en := range x.row(j) {
			for range spGPUs(en) {
				alloc = append(alloc, in.Nodes[spNode(en)].ID)
			}
		}
		if len(alloc) > 0 {
			out[in.Jobs[ji].ID] = alloc
		}
	}
	return out, nil
}

// settle takes back, job by job in priority order, the changes of the
// chosen solution (slot best) that do not pay for themselves: a job whose
// allocation the search changed gets its current one back when the
// round's fitness is at least as good with it, and it returns how many
// were taken back. On a large cluster a job's term is a small part of the
// power mean, so the search leaves such rows to drift: a near-neutral
// mutation of a big job (a GPU more, a few less, other nodes) survives in
// the chosen solution alongside the gains elsewhere, and each is a
// restart (at 1024 GPUs, a long job restarted every other round). The
// fitness already charges a change its restart factor and hysteresis, so
// a change kept here gains more than its restart costs.
func (p *Policy) settle(rng *rand.Rand, best int32) int {
	e, pr := &p.engine, &p.prob
	tmp := e.alloc()
	defer e.release(tmp)
	settled := 0
	// try replaces row j of the chosen solution by row when the round's
	// fitness is at least as good with it.
	try := func(j int, row []uint32) bool {
		pr.states[tmp].withRow(&pr.states[best], j, row, pr.rows)
		f0, f1, hash := pr.repairEval(rng, tmp)
		if f0 > e.f0[best]+polluxTieTolerance*math.Abs(e.f0[best]) {
			return false
		}
		pr.states[best], pr.states[tmp] = pr.states[tmp], pr.states[best]
		e.f0[best], e.f1[best], e.hash[best] = f0, f1, hash
		return true
	}
	var packed []uint32
	for j := range pr.rows {
		row := pr.states[best].row(j)
		if slices.Equal(row, pr.base.row(j)) {
			continue
		}
		if try(j, pr.base.row(j)) {
			settled++
			continue
		}
		// A changed allocation spread over more nodes than it needs (the
		// search places GPUs where it finds them) restarts the job now
		// and again when a later round packs it: pack it now.
		if len(row) > 1 {
			packed = pr.pack(packed[:0], &pr.states[best], j)
			if len(packed) < len(row) {
				try(j, packed)
			}
		}
	}
	return settled
}

// splitRestoring takes out of in the jobs still restoring on their
// current allocation (Job.Restoring) or within their first hold (firstHeld
// with hold and the default restart time penalty), with GPUs on known
// nodes, within their replica bounds and the nodes' capacities: it returns
// the input without them and with their GPUs taken off their nodes, their
// allocations, and the nodes of those among them that span several nodes
// (for interference avoidance). Pinning them outright, rather than
// flooring their speedup when their row changes, also keeps them from
// being preempted: a job restoring for longer than a round was otherwise
// started, preempted before it made progress and started again.
func splitRestoring(in policy.Input, hold, penalty float64) (policy.Input, policy.Allocations, map[string]bool) {
	nodeIdx := make(map[string]int, len(in.Nodes))
	for i, n := range in.Nodes {
		nodeIdx[n.ID] = i
	}
	var pinned policy.Allocations
	var nodes []policy.Node
	var multi map[string]bool
	for _, j := range in.Jobs {
		if !j.Restoring && !firstHeld(j, hold, penalty) {
			continue
		}
		var kept []string
		for _, id := range in.Current[j.ID] {
			if _, ok := nodeIdx[id]; ok {
				kept = append(kept, id)
			}
		}
		// A job whose allocation no longer fits its bounds (an operator
		// changed them) or the nodes (a node lost GPUs) is not pinned:
		// the round decides it as any other.
		if len(kept) == 0 || len(kept) < j.MinReplicas || len(kept) > j.MaxReplicas || overTypeCap(j, kept, in.Nodes, nodeIdx) {
			continue
		}
		if nodes == nil {
			nodes = slices.Clone(in.Nodes)
		}
		fits := true
		for _, id := range kept {
			nodes[nodeIdx[id]].GPUs--
			fits = fits && nodes[nodeIdx[id]].GPUs >= 0
		}
		if !fits {
			for _, id := range kept {
				nodes[nodeIdx[id]].GPUs++
			}
			continue
		}
		if pinned == nil {
			pinned = policy.Allocations{}
		}
		pinned[j.ID] = kept
		if len(policy.Placement(kept)) > 1 {
			if multi == nil {
				multi = map[string]bool{}
			}
			for _, id := range kept {
				multi[id] = true
			}
		}
	}
	if pinned == nil {
		return in, nil, nil
	}
	out := policy.Input{Now: in.Now, Nodes: nodes, Current: make(policy.Allocations, len(in.Current))}
	for _, j := range in.Jobs {
		if _, ok := pinned[j.ID]; ok {
			continue
		}
		out.Jobs = append(out.Jobs, j)
		if a, ok := in.Current[j.ID]; ok {
			out.Current[j.ID] = a
		}
	}
	return out, pinned, multi
}

// overTypeCap tells whether alloc holds more GPUs of some type than job j
// may hold of it (Job.TypedMaxReplicas).
func overTypeCap(j policy.Job, alloc []string, nodes []policy.Node, nodeIdx map[string]int) bool {
	if len(j.TypedMaxReplicas) == 0 {
		return false
	}
	count := map[string]int{}
	for _, id := range alloc {
		t := nodes[nodeIdx[id]].Type
		count[t]++
		if count[t] > j.MaxReplicasOn(t) {
			return true
		}
	}
	return false
}

// firstHeld tells whether job j is within its first hold: on its first
// allocation (NumRestarts 0, holding it for Held > 0 seconds) for less
// than 1 + hold restart times (RestartTime, else penalty). hold <= 0 is
// no hold.
func firstHeld(j policy.Job, hold, penalty float64) bool {
	if !(hold > 0) || j.NumRestarts != 0 || !(j.Held > 0) {
		return false
	}
	delta := penalty
	if j.RestartTime > 0 {
		delta = j.RestartTime
	}
	return j.Held < (1+hold)*delta
}

// polluxJobOrder returns the indices of jobs in priority order: attained
// service ascending, then submission time, then ID (artifact pollux.py
// optimize; pinned jobs do not exist here).
func polluxJobOrder(jobs []policy.Job) []int {
	order := make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		ja, jb := &jobs[a], &jobs[b]
		if c := cmp.Compare(ja.AttainedService, jb.AttainedService); c != 0 {
			return c
		}
		if c := cmp.Compare(ja.Submitted, jb.Submitted); c != 0 {
			return c
		}
		return cmp.Compare(ja.ID, jb.ID)
	})
	return order
}

// setup builds the round's problem, reusing buffers, and returns the
// number of jobs whose fair-share base fell back.
//
// The speedup base is the fair-share goodput (Pollux, OSDI '21, §4.1;
// artifact pollux.py Problem.__init__): with d = 1 GPU / total GPUs the
// dominant share of one replica, K_f = ceil(1/(d·J)) GPUs on
// N_f = ceil(#nodes·d) nodes, base_j = GOODPUT_j(N_f, K_f). Where a model
// gives no positive goodput there (possible only far outside the
// artifact's 64-GPU setting, when K_f GPUs exceed the job's batch-size
// limits), the base falls back to GOODPUT_j(1, 1), speedup.py's own base,
// and if that fails too the job is treated as unprofiled (speedup K/K_f).
func (pr *polluxProblem) setup(in policy.Input, order []int, total int, cfg Config) int {
	rows, cols := len(order), len(in.Nodes)
	pr.rows, pr.cols = rows, cols
	pr.p = cfg.FairnessP
	pr.avoid = !cfg.DisableInterferenceAvoidance
	pr.quirk = cfg.ArtifactInterferenceQuirk
	pr.maxNodes = int32(min(cfg.MaxNodesPerJob, cols))
	pr.scale = float64(cols) / float64(total)
	fairK := (total + rows - 1) / rows
	// A job cannot span more nodes than it has GPUs: with fewer free GPUs
	// than nodes, ceil(#nodes·d) exceeds K_f, so N_f is capped at K_f.
	fairN := min((cols+total-1)/total, fairK)
	pr.fairK = float64(fairK)

	pr.capacity = gaGrow(pr.capacity, cols)
	nodeIdx := make(map[string]int, cols)
	for n, node := range in.Nodes {
		pr.capacity[n] = int32(node.GPUs)
		nodeIdx[node.ID] = n
	}
	// GPU types: the share of the cluster's GPUs of each type weighs the
	// per-type fair-share goodputs into one base per job.
	types := policy.GPUTypes(in.Nodes)
	nt := len(types)
	pr.ntypes, pr.typed = nt, policy.SeveralTypes(nt)
	pr.knee = 0
	if pr.typed {
		pr.knee = max(cfg.StandInKnee, 0)
	}
	pr.jobWeights(in, order, cfg.AgeWeightScale, cfg.AgeWeightPower, cfg.ServiceWeight, !cfg.ServiceWeightExact)
	pr.nodeType = gaGrow(pr.nodeType, cols)
	pr.typeNodes = gaGrow(pr.typeNodes, nt)
	for t := range pr.typeNodes {
		pr.typeNodes[t] = pr.typeNodes[t][:0]
	}
	typeShare := make([]float64, nt)
	for n, node := range in.Nodes {
		t, _ := slices.BinarySearch(types, node.Type)
		pr.nodeType[n] = int32(t)
		pr.typeNodes[t] = append(pr.typeNodes[t], int32(n))
		typeShare[t] += float64(node.GPUs) / float64(total)
	}
	pr.skipMove = gaSkipScale(1 / float64(rows))
	if cfg.TypeMoveProbability > 0 {
		pr.skipMove = gaSkipScale(cfg.TypeMoveProbability)
	}
	pr.maxRep = gaGrow(pr.maxRep, rows)
	pr.minRep = gaGrow(pr.minRep, rows)
	pr.factor = gaGrow(pr.factor, rows)
	pr.growFactor = gaGrow(pr.growFactor, rows)
	growCfg := cfg
	growCfg.RestartHysteresis = cfg.GrowthHysteresis
	pr.baseSum = gaGrow(pr.baseSum, rows)
	pr.models = gaGrow(pr.models, rows*nt)
	pr.baseGoodput = gaGrow(pr.baseGoodput, rows)
	pr.tabOff = gaGrow(pr.tabOff, rows*nt)
	pr.tabStride = gaGrow(pr.tabStride, rows)
	pr.base.start = gaGrow(pr.base.start, rows+1)
	pr.base.ent = pr.base.ent[:0]
	var nodes []int32
	fallbacks := 0
	size := int32(0)
	for j, ji := range order {
		job := &in.Jobs[ji]
		maxK := min(job.MaxReplicas, total)
		if !pr.typed {
			// One GPU type: its cap, if any, bounds the job as MaxReplicas
			// does (several types: polluxTypeCaps).
			maxK = min(job.MaxReplicasOn(types[0]), total)
		}
		pr.maxRep[j] = int32(maxK)
		pr.minRep[j] = int32(job.MinReplicas)
		pr.tabStride[j] = int32(maxK + 1)
		for t := range nt {
			pr.tabOff[j*nt+t] = size
			size += int32((min(int(pr.maxNodes), maxK) + 1) * (maxK + 1))
		}
		if !pr.typed {
			pr.models[j] = job.Goodput
			if m := job.Goodput; m != nil {
				b := m.Goodput(fairN, fairK)
				if !(b > 0) || math.IsInf(b, 0) {
					fallbacks++
					b = m.Goodput(1, 1)
					if !(b > 0) || math.IsInf(b, 0) {
						pr.models[j] = nil
					}
				}
				pr.baseGoodput[j] = b
			}
		} else if !polluxTypedBase(pr, j, job, types, typeShare, fairN, fairK) {
			fallbacks++
		}
		// Row j of the current allocation: GPUs per node, in node order.
		pr.base.start[j] = int32(len(pr.base.ent))
		nodes = nodes[:0]
		for _, id := range in.Current[job.ID] {
			if n, ok := nodeIdx[id]; ok {
				nodes = append(nodes, int32(n))
			}
		}
		slices.Sort(nodes)
		for i, n := range nodes {
			if i > 0 && n == nodes[i-1] {
				last := &pr.base.ent[len(pr.base.ent)-1]
				if v := spGPUs(*last); v < polluxMaxNodeGPUs {
					*last = spEntry(n, v+1)
				}
				continue
			}
			pr.base.ent = append(pr.base.ent, spEntry(n, 1))
		}
		running := int(pr.base.start[j]) < len(pr.base.ent)
		pr.factor[j] = polluxJobRestartFactor(job, running, cfg)
		pr.growFactor[j] = polluxJobRestartFactor(job, running, growCfg)
		pr.baseSum[j] = 0
		for _, e := range pr.base.ent[pr.base.start[j]:] {
			pr.baseSum[j] += spGPUs(e)
		}
	}
	pr.base.start[rows] = int32(len(pr.base.ent))
	if pr.typed {
		polluxTypeSpeeds(pr, rows)
		polluxJobSpeeds(pr, in, order, types)
	}
	if cfg.GrowthLimit > 0 {
		for j := range rows {
			if b := pr.baseSum[j]; b > 0 {
				pr.maxRep[j] = max(min(pr.maxRep[j], int32(cfg.GrowthLimit)*b), pr.minRep[j])
			}
		}
	}
	polluxTypeCaps(pr, in, order, types)
	pr.rowConst = gaGrow(pr.rowConst, rows)
	for j := range rows {
		pr.rowConst[j] = polluxRowConst{
			factor: pr.factor[j], growFactor: pr.growFactor[j],
			maxRep: pr.maxRep[j], minRep: pr.minRep[j], baseSum: pr.baseSum[j],
			base0: pr.base.start[j], base1: pr.base.start[j+1],
		}
	}
	pr.wholeNodes = cfg.WholeNodes
	pr.table = gaGrow(pr.table, int(size))
	for i := range pr.table {
		pr.table[i] = polluxUnset
	}
	pr.parallel = 1
	if rows >= polluxParallelMinJobs {
		pr.parallel = runtime.GOMAXPROCS(0)
	}
	if cfg.Workers > 0 {
		pr.parallel = cfg.Workers
	}
	if pr.batchDone == nil {
		pr.batchDone = make(chan struct{}, 1)
	}
	for len(pr.workers) < pr.parallel {
		pr.workers = append(pr.workers, &polluxWorker{})
	}
	for _, w := range pr.workers[:pr.parallel] {
		w.resize(rows, cols)
	}

	pr.skip10 = gaSkipScale(0.1)
	pr.skipJobs = gaSkipScale(1 / float64(rows))
	pr.skipPres = gaGrow(pr.skipPres, rows+1)
	pr.skipPres[0] = gaSkipScale(0)
	for a := 1; a <= rows; a++ {
		pr.skipPres[a] = gaSkipScale(1 / float64(a))
	}
	return fallbacks
}

// jobWeights sets pr.weight, job j's weight in the fitness: the age
// weight (τ/(τ + age))^a (Config.AgeWeightScale) times the service
// weight A0/(A0 + attained service) (Config.ServiceWeight), and
// their sum pr.wsum; nil (every job weight 1) when neither is on.
func (pr *polluxProblem) jobWeights(in policy.Input, order []int, tau, a, a0 float64, steps bool) {
	if !(tau > 0) && !(a0 > 0) {
		pr.weight = nil
		return
	}
	pr.weight = gaGrow(pr.weight, len(order))
	pr.wsum = 0
	for j, ji := range order {
		w := 1.0
		if tau > 0 {
			w = math.Pow(tau/(tau+max(in.Jobs[ji].Age, 0)), a)
		}
		if a0 > 0 {
			w *= a0 / (a0 + serviceStep(in.Jobs[ji].AttainedService, a0, steps))
		}
		pr.weight[j] = w
		pr.wsum += w
	}
}

// serviceStep is the attained service s the service weight uses: s, or
// with steps s rounded down to a0/8 times a power of two (0 below a0/8).
func serviceStep(s, a0 float64, steps bool) float64 {
	if !steps {
		return s
	}
	unit := a0 / 8
	if !(s >= unit) {
		return 0
	}
	return unit * math.Exp2(math.Floor(math.Log2(s/unit)))
}

// polluxTypedBase sets job j's models per GPU type and its speedup base on
// a typed cluster: the fair-share goodputs of the types weighed by their
// shares of the cluster's GPUs (types where the model gives none left
// out), so that a job's speedup on a fast type exceeds its speedup on a
// slow one. Where no type gives a fair-share goodput it falls back to one
// GPU, and then to linear speedup (all models nil), as the untyped base
// does; it returns false on a fallback.
func polluxTypedBase(pr *polluxProblem, j int, job *policy.Job, types []string, share []float64, fairN, fairK int) bool {
	nt := len(types)
	have := false
	for t, name := range types {
		m := job.GoodputOn(name)
		pr.models[j*nt+t] = m
		have = have || m != nil
	}
	if !have {
		return true
	}
	mean := func(nn, k int) float64 {
		var sum, w float64
		for t := range nt {
			m := pr.models[j*nt+t]
			if m == nil {
				continue
			}
			if g := m.Goodput(nn, k); g > 0 && !math.IsInf(g, 0) {
				sum += share[t] * g
				w += share[t]
			}
		}
		if w == 0 {
			return 0
		}
		return sum / w
	}
	b := mean(fairN, fairK)
	ok := b > 0
	if !ok {
		b = mean(1, 1)
	}
	if !(b > 0) {
		for t := range nt {
			pr.models[j*nt+t] = nil
		}
	}
	pr.baseGoodput[j] = b
	return ok
}

// polluxTypeCaps sets pr.typeMaxRep on a typed cluster: per job and
// type, the job's maxRep, or its TypedMaxReplicas on the type where that
// is lower and below the type's GPUs; pr.typeCapped tells whether any
// job has such a cap (otherwise typeMaxRep is not read). A cap the
// type's GPUs cannot reach is left to the capacity step of repair, as a
// MaxReplicas above the cluster's size is, so that such caps change
// nothing of the search.
func polluxTypeCaps(pr *polluxProblem, in policy.Input, order []int, types []string) {
	pr.typeCapped = false
	if !pr.typed {
		return
	}
	nt := pr.ntypes
	gpus := make([]int32, nt)
	for t, nodes := range pr.typeNodes[:nt] {
		for _, n := range nodes {
			gpus[t] += pr.capacity[n]
		}
	}
	// capOf returns job j's cap on type t and whether it binds.
	capOf := func(j, t int) (int32, bool) {
		c := pr.maxRep[j]
		if v, ok := in.Jobs[order[j]].TypedMaxReplicas[types[t]]; ok && int32(v) < min(c, gpus[t]) {
			return max(int32(v), 0), true
		}
		return c, false
	}
	for j := range order {
		for t := range nt {
			if _, ok := capOf(j, t); ok {
				pr.typeCapped = true
			}
		}
	}
	if !pr.typeCapped {
		return
	}
	pr.typeMaxRep = gaGrow(pr.typeMaxRep, len(order)*nt)
	for j := range order {
		for t := range nt {
			pr.typeMaxRep[j*nt+t], _ = capOf(j, t)
		}
	}
}

// polluxTypeSpeeds sets pr.typeSpeed: per type, the mean over the jobs
// with models on every type of their one-GPU goodput there relative to
// their mean over types, so that the speeds average 1 over the types (a
// job without a model keeps, on average, the untyped stand-in k/K_f); 1
// on every type when no job has models.
func polluxTypeSpeeds(pr *polluxProblem, rows int) {
	nt := pr.ntypes
	pr.typeSpeed = gaGrow(pr.typeSpeed, nt)
	sum := make([]float64, nt)
	n := 0
	one := make([]float64, nt)
	for j := range rows {
		ok := true
		for t := range nt {
			m := pr.models[j*nt+t]
			if m == nil {
				ok = false
				break
			}
			one[t] = m.Goodput(1, 1)
			if !(one[t] > 0) || math.IsInf(one[t], 0) {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		mean := 0.0
		for t := range nt {
			mean += one[t]
		}
		mean /= float64(nt)
		for t := range nt {
			sum[t] += one[t] / mean
		}
		n++
	}
	for t := range nt {
		pr.typeSpeed[t] = 1
		if n > 0 {
			pr.typeSpeed[t] = sum[t] / float64(n)
		}
	}
}

// polluxJobSpeeds sets pr.jobSpeed: per job and type, the job's probed
// one-GPU speed (Job.ProbeSpeed) relative to its mean over the types where
// it has a positive probe on every type, else the cluster's typeSpeed.
func polluxJobSpeeds(pr *polluxProblem, in policy.Input, order []int, types []string) {
	nt := pr.ntypes
	pr.jobSpeed = gaGrow(pr.jobSpeed, len(order)*nt)
	for j, ji := range order {
		row := pr.jobSpeed[j*nt : (j+1)*nt]
		copy(row, pr.typeSpeed[:nt])
		ps := in.Jobs[ji].ProbeSpeed
		if len(ps) == 0 {
			continue
		}
		mean := 0.0
		ok := true
		for _, name := range types {
			v := ps[name]
			if !(v > 0) || math.IsInf(v, 0) {
				ok = false
				break
			}
			mean += v
		}
		if !ok {
			continue
		}
		mean /= float64(nt)
		for t, name := range types {
			row[t] = ps[name] / mean
		}
	}
}

// polluxJobRestartFactor is the factor applied to a job's scaled speedup
// when its allocation changes: the restart factor of Pollux with the
// job's own restart time (or the configured one), the age capped at
// RestartHorizon if set, times (1 − RestartHysteresis) for a job that
// holds GPUs; 1 for a job that holds none unless PenalizeStarts.
func polluxJobRestartFactor(job *policy.Job, running bool, cfg Config) float64 {
	if !running && !cfg.PenalizeStarts {
		return 1
	}
	delta := max(cfg.RestartPenalty, 0)
	if job.RestartTime > 0 {
		delta = job.RestartTime
	}
	age := job.Age
	if cfg.RestartHorizon > 0 {
		age = min(age, cfg.RestartHorizon)
	}
	f := polluxRestartFactor(age, job.NumRestarts, delta)
	if running && cfg.RestartHysteresis > 0 {
		f *= 1 - cfg.RestartHysteresis
	}
	return f
}

// buildSeeds writes the seed states into p.prob.seeds and returns their
// count: the current allocation on the first round, else the saved states
// of the previous round mapped by job and node ID (artifact pollux.py
// _adapt_prev_states).
func (p *Policy) buildSeeds(in policy.Input, order []int) int {
	pr := &p.prob
	if p.prevCount == 0 {
		pr.seeds = gaGrow(pr.seeds, 1)
		pr.seeds[0].copyFrom(&pr.base)
		return 1
	}
	prevJob := make(map[string]int, len(p.prevJobs))
	for i, id := range p.prevJobs {
		prevJob[id] = i
	}
	nodeIdx := make(map[string]int32, pr.cols)
	for n, node := range in.Nodes {
		nodeIdx[node.ID] = int32(n)
	}
	// srcNode maps a previous node index to the current one, or −1.
	srcNode := make([]int32, len(p.prevNodes))
	for i, id := range p.prevNodes {
		if n, ok := nodeIdx[id]; ok {
			srcNode[i] = n
		} else {
			srcNode[i] = -1
		}
	}
	srcJob := make([]int, pr.rows)
	for j, ji := range order {
		if i, ok := prevJob[in.Jobs[ji].ID]; ok {
			srcJob[j] = i
		} else {
			srcJob[j] = -1
		}
	}
	if len(pr.seeds) < p.prevCount {
		pr.seeds = append(pr.seeds, make([]spState, p.prevCount-len(pr.seeds))...)
	}
	for k := range p.prevCount {
		src, dst := &p.prevStates[k], &pr.seeds[k]
		dst.start = gaGrow(dst.start, pr.rows+1)
		dst.ent = dst.ent[:0]
		for j, sj := range srcJob {
			dst.start[j] = int32(len(dst.ent))
			if sj < 0 {
				// A job the last round did not see (new, or pinned while
				// restoring) starts from its current allocation.
				dst.ent = append(dst.ent, pr.base.ent[pr.base.start[j]:pr.base.start[j+1]]...)
				continue
			}
			r0 := len(dst.ent)
			for _, e := range src.row(sj) {
				if n := srcNode[spNode(e)]; n >= 0 {
					dst.ent = append(dst.ent, spEntry(n, spGPUs(e)))
				}
			}
			// Nodes may have moved in the order: keep the row sorted.
			slices.Sort(dst.ent[r0:])
		}
		dst.start[pr.rows] = int32(len(dst.ent))
	}
	return p.prevCount
}

// saveStates keeps the final first front (or the whole population) with
// the job and node IDs that index it, to seed the next round.
func (p *Policy) saveStates(in policy.Input, order []int, whole bool) {
	e := &p.engine
	p.prevJobs = p.prevJobs[:0]
	for _, ji := range order {
		p.prevJobs = append(p.prevJobs, in.Jobs[ji].ID)
	}
	p.prevNodes = p.prevNodes[:0]
	for _, n := range in.Nodes {
		p.prevNodes = append(p.prevNodes, n.ID)
	}
	p.prevCount = 0
	for _, s := range e.pop {
		if e.rank[s] == 0 || whole {
			if p.prevCount == len(p.prevStates) {
				p.prevStates = append(p.prevStates, spState{})
			}
			p.prevStates[p.prevCount].copyFrom(&p.prob.states[s])
			p.prevCount++
		}
	}
}
