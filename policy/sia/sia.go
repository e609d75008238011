package sia

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize/convex/lp"

	"github.com/pollux-nomad/pollux/policy/internal/core"
)

// Defaults of Config: the Sia artifact's settings (siasosp23/artifacts,
// sia-simulator/simulator_config.py and sia.py; Sia, SOSP '23, §3-4).
const (
	// maxNodeGPUs bounds a node's GPUs as Pollux does, so that an input
	// valid for one policy is valid for the other.
	maxNodeGPUs = 255
	// DefaultFairnessP is sia_default_p_val = −0.5.
	DefaultFairnessP = -0.5
	// DefaultLambdaN is sia_default_lambda_n = 1.1, the cost of leaving
	// a job without GPUs (more than the cost 1 of its slowest config).
	DefaultLambdaN = 1.1
	// DefaultRestartPenalty is the restart penalty of a job the
	// artifact's get_restart_penalty does not name: 30 s.
	DefaultRestartPenalty = 30.0
	// DefaultGap is sia_solver_thresh = 1e-4: the integer program is
	// solved to a relative gap of 0.01% (CBC's allowablePercentageGap).
	DefaultGap = 1e-4
	// GoodputClip is sia_goodput_clip_val: a cost above it is clipped.
	GoodputClip = 3000.0
	// siaMaxAbsP bounds |p| so that powers of normalised goodputs stay
	// finite.
	siaMaxAbsP = 100
	// siaDPBudget bounds the work (capacity states × options summed over
	// jobs) of the exact dynamic programme; larger problems go to the
	// branch and bound.
	siaDPBudget = 60_000_000
	// siaDPMaxStates bounds the states of the dynamic programme (memory).
	siaDPMaxStates = 1 << 20
	// siaBBNodeLimit bounds the branch-and-bound nodes of one round; the
	// best allocation found is used when it is reached (Stats.Gap
	// says how far from the bound it may be).
	siaBBNodeLimit = 500_000
	// siaHeuristicPrices is how many of the last prices of Kelley's
	// method the by-type heuristic also tries.
	siaHeuristicPrices = 8
	// siaParallelMinJobs is the fewest jobs for which goodputs are
	// evaluated on several cores.
	siaParallelMinJobs = 128
)

// Config configures the Sia policy. The zero value gives the artifact's
// settings: p = −0.5, λn = 1.1, the Pollux restart factor, gap 1e-4.
//
// The artifact also takes λa (sia_default_lambda_a = 0.01, "penalty for
// change of alloc") but its objective never uses it (sia.py,
// __solve_mip_rescaled computes opt_lambda_alloc_change and drops it), so
// it is not a setting here either.
type Config struct {
	// FairnessP is the exponent p applied to each job's normalised goodput
	// (Sia, §3.3). 0 means −0.5. With p < 0 the programme minimises the
	// sum of powered goodputs (fairer for more negative p); with p > 0 it
	// maximises it. |p| must be at most 100.
	FairnessP float64
	// LambdaN is the cost of a job that gets no GPUs. 0 means 1.1 for
	// p < 0 and −1.1 for p > 0; its sign must be opposite to p's.
	LambdaN float64
	// RestartPenalty is the restart delay, in seconds, of the restart
	// factor max(T − R·δ, 0)/(T + δ) for a job whose RestartTime is 0.
	// 0 means 30.
	RestartPenalty float64
	// ArtifactRestartPenalties takes each job's δ from the artifact's
	// table by application name in the job ID (sia.py,
	// get_restart_penalty: deepspeech 25, imagenet 250, cifar 30, bert
	// 120, yolov3 45, others 30) instead of its RestartTime, as the
	// artifact's policy does in simulation whatever the simulated delay.
	ArtifactRestartPenalties bool
	// Gap is the relative optimality gap at which the integer programme
	// stops. 0 means 1e-4; a negative value means exact.
	Gap float64
	// IgnoreRestoring lets the policy move a job that is still restoring
	// from its last checkpoint. The default (false) keeps its allocation,
	// as the artifact (simulator_config.py, preserve_ckpt_allocs = True).
	IgnoreRestoring bool
	// MaxNodesByType caps the nodes of one job's configuration per GPU
	// type, as "type=nodes,type=nodes" (for example "t4=16,a100=2");
	// types not named are capped by their node count only. The artifact
	// caps each type at the nodes it was profiled on
	// (populate_valid_configs with cluster_max_physical_nnodes), which the
	// simulator passes under -rules sia.
	MaxNodesByType string
	// PreferCurrent breaks ties of the programme (equal costs after the
	// artifact's rounding to hundredths) in favour of a job's current
	// configuration, then its current type. The default (false) is the
	// artifact's: its solver picks any optimum, and the sia-philly
	// workloads come closer to its results that way (restarts per job
	// 4.20 against its 4.33; 4.03 when preferring the current one).
	PreferCurrent bool
	// Workers is the number of goroutines that evaluate goodputs. 0 means
	// GOMAXPROCS for at least 128 jobs and 1 below.
	Workers int
}

func (c Config) withDefaults() Config {
	if c.FairnessP == 0 {
		c.FairnessP = DefaultFairnessP
	}
	if c.LambdaN == 0 {
		c.LambdaN = DefaultLambdaN
		if c.FairnessP > 0 {
			c.LambdaN = -DefaultLambdaN
		}
	}
	if c.RestartPenalty == 0 {
		c.RestartPenalty = DefaultRestartPenalty
	}
	if c.Gap == 0 {
		c.Gap = DefaultGap
	}
	if c.Gap < 0 {
		c.Gap = 0
	}
	return c
}

// Validate reports every invalid field at once (zero fields are valid:
// they take the defaults).
func (c Config) Validate() error {
	var errs []error
	if math.IsNaN(c.FairnessP) || math.Abs(c.FairnessP) > siaMaxAbsP {
		errs = append(errs, fmt.Errorf("fairness p %v is not in [-%d, %d]", c.FairnessP, siaMaxAbsP, siaMaxAbsP))
	}
	d := c.withDefaults()
	if math.IsNaN(c.LambdaN) || math.IsInf(c.LambdaN, 0) {
		errs = append(errs, fmt.Errorf("lambda_n %v is not finite", c.LambdaN))
	} else if d.FairnessP < 0 && d.LambdaN <= 0 || d.FairnessP > 0 && d.LambdaN >= 0 {
		errs = append(errs, fmt.Errorf("lambda_n %v must have the sign opposite to p %v", d.LambdaN, d.FairnessP))
	}
	if math.IsNaN(c.RestartPenalty) || math.IsInf(c.RestartPenalty, 0) || c.RestartPenalty < 0 {
		errs = append(errs, fmt.Errorf("restart penalty %v s is not a finite non-negative number", c.RestartPenalty))
	}
	if math.IsNaN(c.Gap) || math.IsInf(c.Gap, 0) {
		errs = append(errs, fmt.Errorf("gap %v is not finite", c.Gap))
	}
	if c.Workers < 0 {
		errs = append(errs, fmt.Errorf("workers %d is negative", c.Workers))
	}
	if _, err := parseNodeLimits(c.MaxNodesByType); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid sia configuration: %w", err)
	}
	return nil
}

// parseNodeLimits parses MaxNodesByType.
func parseNodeLimits(spec string) (map[string]int, error) {
	out := map[string]int{}
	if strings.TrimSpace(spec) == "" {
		return out, nil
	}
	for _, part := range strings.Split(spec, ",") {
		name, num, ok := strings.Cut(strings.TrimSpace(part), "=")
		n, err := strconv.Atoi(strings.TrimSpace(num))
		if !ok || err != nil || n < 1 {
			return nil, fmt.Errorf("max nodes by type: %q is not type=nodes with nodes ≥ 1", part)
		}
		out[strings.TrimSpace(name)] = n
	}
	return out, nil
}

// Stats describes the last round of the Sia policy.
type Stats struct {
	// Jobs is the number of jobs, Candidates those with at least one
	// configuration worth more than no GPUs, Kept those held to their
	// allocation because they are restoring.
	Jobs, Candidates, Kept int
	// Configs is the size of the configuration space (over all types).
	Configs int
	// Solver is "dp" (exact dynamic programme over the per-type
	// capacities) or "bb" (branch and bound on a Lagrangian bound).
	Solver string
	// Nodes counts branch-and-bound nodes (0 for "dp").
	Nodes int
	// Objective is the artifact's objective of the chosen allocation:
	// Σ A·x + λn·(jobs − allocated), minimised for p < 0.
	Objective float64
	// Gap is an upper bound on the relative distance of Objective from
	// the optimum (0 when proven optimal).
	Gap float64
	// Unplaced counts jobs whose chosen configuration found no nodes (on
	// clusters whose nodes of one type differ in size); they get nothing.
	Unplaced int
}

// Policy is a re-implementation of Sia's policy (Jayaram Subramanya et
// al., SOSP '23; artifact siasosp23/artifacts, sia-simulator/sia.py,
// Policy.optimize_mip and __solve_mip_rescaled), for comparisons:
//
//   - Configurations per GPU type: 1, 2, 4, ... GPUs within one node (the
//     powers of two dividing the node size), then whole nodes (CONFIGS_4GPU
//     and CONFIGS_8GPU of the artifact), within each job's replica bounds.
//   - Each job's goodput on each configuration comes from its model for
//     that type (Job.GoodputOn), divided by its smallest positive goodput
//     over all types' configurations, so that its slowest configuration
//     is worth 1. A job with no model on a type may run there on 1 GPU,
//     worth 1.
//   - A job that holds GPUs has the goodput of every configuration but
//     its current one multiplied by the Pollux restart factor
//     max(T − R·δ, 0)/(T + δ) (1 while T < δ); a job without GPUs pays no
//     factor.
//   - Costs A = round(goodput^p, 2), clipped at 3000; the integer
//     programme picks at most one configuration per job, within each
//     type's GPU count, minimising Σ A·x + λn·(jobs − allocated) for
//     p < 0 (maximising for p > 0). Restoring jobs keep their
//     configuration.
//   - Chosen configurations are placed type by type, largest first:
//     whole free nodes for multi-node configurations, a node with room for
//     the others (the artifact's alloc_to_placement_fast), keeping a job
//     on its nodes where it keeps its configuration.
//
// The growth limit (at most twice the GPUs a job has been profiled on) is
// the runner's MaxReplicas (Traits.Replicas = ExploreReplicas). The integer
// programme is solved exactly by dynamic programming over the per-type
// capacities when that is small (64 GPUs), else by branch and bound on a
// Lagrangian bound to the artifact's gap. It is not safe for concurrent
// use.
type Policy struct {
	cfg   Config
	stats Stats
	// maxNodes is cfg.MaxNodesByType parsed.
	maxNodes map[string]int
	// weight is the score of one hundredth of benefit this round.
	weight int64
}

// New returns a Sia policy, or an error naming every invalid setting.
func New(cfg Config) (*Policy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	limits, _ := parseNodeLimits(cfg.MaxNodesByType)
	return &Policy{cfg: cfg.withDefaults(), maxNodes: limits}, nil
}

// Name returns "sia".
func (p *Policy) Name() string { return "sia" }

// Carry returns nil: Sia decides each round from its input alone.
func (p *Policy) Carry() core.Carry { return nil }

// LastStats returns the statistics of the last Optimize call.
func (p *Policy) LastStats() Stats { return p.stats }

// siaType is one GPU type of the cluster.
type siaType struct {
	name string
	// nodes are indices into Input.Nodes of this type's nodes with GPUs.
	nodes []int
	// size is the largest node's GPU count; full counts nodes of that size.
	size, full int
	// capacity is the type's GPU count.
	capacity int
	// configs are the GPU counts of the type's configurations, ascending.
	configs []int
}

// nodesFor returns the node count of a configuration of g GPUs.
func (t *siaType) nodesFor(g int) int {
	if g <= t.size {
		return 1
	}
	return g / t.size
}

// siaOption is one configuration a job may get.
type siaOption struct {
	typ, gpus int
	// cost is A in hundredths (the artifact rounds A to 2 decimals).
	cost int64
	// score is what the solver maximises: the benefit over no GPUs in
	// hundredths, times a weight, plus a tie-break.
	score int64
}

// siaJob is one job's part of the programme.
type siaJob struct {
	idx     int
	options []siaOption
	// prev is the index in options of the job's current configuration,
	// or −1; keep forces it.
	prev int
	keep bool
}

// siaArtifactPenalty is the artifact's get_restart_penalty (sia.py): by
// substring of the job name, in this order.
var siaArtifactPenalty = []struct {
	sub string
	sec float64
}{{"deepspeech", 25}, {"imagenet", 250}, {"cifar", 30}, {"bert", 120}, {"yolov3", 45}}

func (p *Policy) restartPenalty(j core.Job) float64 {
	if p.cfg.ArtifactRestartPenalties {
		for _, e := range siaArtifactPenalty {
			if strings.Contains(j.ID, e.sub) {
				return e.sec
			}
		}
		return DefaultRestartPenalty
	}
	if j.RestartTime > 0 {
		return j.RestartTime
	}
	return p.cfg.RestartPenalty
}

// reallocFactor is the Pollux restart factor as sia.py computes it
// (sia_use_pollux_realloc_factor = True): 1 while the job is younger than
// its penalty.
func (p *Policy) reallocFactor(j core.Job) float64 {
	d := p.restartPenalty(j)
	if j.Age < d {
		return 1
	}
	return max(j.Age-float64(j.NumRestarts)*d, 0) / (j.Age + d)
}

// Optimize returns the allocation of the round; see Policy. Every job
// gets either no GPUs or one configuration within its replica bounds on
// one GPU type, listed node by node in the order of in.Nodes. It returns an
// error naming the job or node for invalid input, or the context's error
// if it ended before the round.
func (p *Policy) Optimize(ctx context.Context, in core.Input) (core.Allocations, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("failed to optimize allocations: %w", err)
	}
	if err := core.CheckInput(in, maxNodeGPUs); err != nil {
		return nil, fmt.Errorf("failed to optimize allocations: %w", err)
	}
	p.stats = Stats{Jobs: len(in.Jobs)}
	types, nodeType := siaTypes(in.Nodes, p.maxNodes)
	for _, t := range types {
		p.stats.Configs += len(t.configs)
	}
	jobs := p.buildJobs(in, types, nodeType)
	choice := p.solve(ctx, jobs, types, len(in.Jobs))
	return p.place(in, types, nodeType, jobs, choice), nil
}

// siaTypes groups the nodes with GPUs by type, in sorted type order, and
// returns each node's type index (−1 for nodes without GPUs); maxNodes caps
// the nodes of a configuration per type.
func siaTypes(nodes []core.Node, maxNodes map[string]int) ([]*siaType, []int) {
	byName := map[string]*siaType{}
	var types []*siaType
	for _, name := range core.GPUTypes(nodes) {
		t := &siaType{name: name}
		byName[name] = t
		types = append(types, t)
	}
	nodeType := make([]int, len(nodes))
	for i, n := range nodes {
		nodeType[i] = -1
		if n.GPUs <= 0 {
			continue
		}
		t := byName[n.Type]
		t.nodes = append(t.nodes, i)
		t.capacity += n.GPUs
		t.size = max(t.size, n.GPUs)
	}
	out := types[:0]
	for _, t := range types {
		if t.capacity == 0 {
			continue
		}
		for _, i := range t.nodes {
			if nodes[i].GPUs == t.size {
				t.full++
			}
		}
		// Within a node: 1, 2, 4, ... while it divides the node size, so
		// that placing largest first never fragments a node.
		for g := 1; g < t.size && t.size%g == 0; g *= 2 {
			t.configs = append(t.configs, g)
		}
		limit := t.full
		if m, ok := maxNodes[t.name]; ok {
			limit = min(limit, m)
		}
		for k := 1; k <= limit; k++ {
			t.configs = append(t.configs, k*t.size)
		}
		out = append(out, t)
	}
	for ti, t := range out {
		for _, i := range t.nodes {
			nodeType[i] = ti
		}
	}
	return out, nodeType
}

// currentConfig returns the type index and GPU count of a job's current
// allocation, with ok false when it holds nothing; typ is −1 when the
// allocation is not on known nodes of one type.
func currentConfig(alloc []string, nodeIdx map[string]int, nodeType []int) (typ, gpus int, ok bool) {
	if len(alloc) == 0 {
		return -1, 0, false
	}
	typ = -2
	for _, id := range alloc {
		i, found := nodeIdx[id]
		if !found || nodeType[i] < 0 || (typ != -2 && nodeType[i] != typ) {
			return -1, len(alloc), true
		}
		typ = nodeType[i]
	}
	return typ, len(alloc), true
}

// buildJobs computes every job's configurations and their costs.
func (p *Policy) buildJobs(in core.Input, types []*siaType, nodeType []int) []siaJob {
	nodeIdx := make(map[string]int, len(in.Nodes))
	for i, n := range in.Nodes {
		nodeIdx[n.ID] = i
	}
	jobs := make([]siaJob, len(in.Jobs))
	workers := p.cfg.Workers
	if workers == 0 {
		workers = 1
		if len(in.Jobs) >= siaParallelMinJobs {
			workers = runtime.GOMAXPROCS(0)
		}
	}
	var wg sync.WaitGroup
	next := make(chan int, len(in.Jobs))
	for i := range in.Jobs {
		next <- i
	}
	close(next)
	for range min(workers, max(len(in.Jobs), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				jobs[i] = p.buildJob(i, in.Jobs[i], in.Current[in.Jobs[i].ID], types, nodeIdx, nodeType)
			}
		}()
	}
	wg.Wait()
	// The score: benefit over no GPUs, in hundredths, weighted so that
	// the tie-break (PreferCurrent: a job's current configuration, then
	// its current type) never outweighs one hundredth summed over all
	// jobs.
	weight := int64(4 * (len(jobs) + 1))
	p.weight = weight
	lambda := int64(math.RoundToEven(p.cfg.LambdaN * 100))
	for i := range jobs {
		j := &jobs[i]
		kept := j.options[:0]
		prevTyp := -1
		if j.prev >= 0 {
			prevTyp = j.options[j.prev].typ
		}
		newPrev := -1
		for k, o := range j.options {
			benefit := lambda - o.cost
			if p.cfg.FairnessP > 0 {
				benefit = o.cost - lambda
			}
			isPrev := k == j.prev
			if benefit <= 0 && !(isPrev && j.keep) {
				continue
			}
			o.score = benefit * weight
			if isPrev {
				newPrev = len(kept)
			}
			if p.cfg.PreferCurrent {
				if isPrev {
					o.score += 2
				} else if o.typ == prevTyp {
					o.score++
				}
			}
			kept = append(kept, o)
		}
		j.options, j.prev = kept, newPrev
		if j.prev < 0 {
			j.keep = false
		}
	}
	return jobs
}

// buildJob computes one job's configurations (sia.py, optimize_mip).
func (p *Policy) buildJob(idx int, j core.Job, cur []string, types []*siaType, nodeIdx map[string]int, nodeType []int) siaJob {
	sj := siaJob{idx: idx, prev: -1}
	lo, hi := max(1, j.MinReplicas), j.MaxReplicas
	curTyp, curGPUs, holds := currentConfig(cur, nodeIdx, nodeType)
	type cand struct {
		typ, gpus int
		good      float64
		// unit marks the 1-GPU value 1 of a type without a model.
		unit bool
	}
	var cands []cand
	minGood := math.Inf(1)
	for ti, t := range types {
		m := j.GoodputOn(t.name)
		typeHi := min(hi, j.MaxReplicasOn(t.name))
		var valid []int
		for _, g := range t.configs {
			if g >= lo && g <= typeHi {
				valid = append(valid, g)
			}
		}
		if m == nil || len(valid) == 0 {
			// No model on this type (or no configuration within the
			// bounds): its smallest configuration within the bounds is
			// worth 1 after normalisation (the artifact's nnz_speedups,
			// set to the scale unit 1).
			if len(valid) > 0 {
				cands = append(cands, cand{typ: ti, gpus: valid[0], unit: true})
			}
			continue
		}
		for _, g := range valid {
			v := m.Goodput(t.nodesFor(g), g)
			if !(v > 0) || math.IsInf(v, 0) {
				continue
			}
			cands = append(cands, cand{typ: ti, gpus: g, good: v})
			minGood = min(minGood, v)
		}
	}
	if math.IsInf(minGood, 1) {
		minGood = 1
	}
	factor := 1.0
	if holds {
		factor = p.reallocFactor(j)
	}
	for _, c := range cands {
		v := 1.0
		if !c.unit {
			v = c.good / minGood
		}
		isPrev := holds && c.typ == curTyp && c.gpus == curGPUs
		if holds && !isPrev {
			v *= factor
		}
		cost := GoodputClip * 100
		if v > 0 {
			cost = min(math.RoundToEven(100*math.Pow(v, p.cfg.FairnessP)), GoodputClip*100)
		}
		if isPrev {
			sj.prev = len(sj.options)
			sj.keep = j.Restoring && !p.cfg.IgnoreRestoring
		}
		sj.options = append(sj.options, siaOption{typ: c.typ, gpus: c.gpus, cost: int64(cost)})
	}
	return sj
}

// solve returns each job's chosen option index (−1 for none).
func (p *Policy) solve(ctx context.Context, jobs []siaJob, types []*siaType, numJobs int) []int {
	choice := make([]int, len(jobs))
	capacity := make([]int, len(types))
	for t, ty := range types {
		capacity[t] = ty.capacity
	}
	var free []int // jobs the solver decides
	for i := range jobs {
		choice[i] = -1
		j := &jobs[i]
		if j.keep {
			o := j.options[j.prev]
			if capacity[o.typ] >= o.gpus {
				capacity[o.typ] -= o.gpus
				choice[i] = j.prev
				p.stats.Kept++
				continue
			}
		}
		if len(j.options) > 0 {
			free = append(free, i)
		}
	}
	p.stats.Candidates = len(free)
	states, work := 1, 0
	for _, c := range capacity {
		states *= c + 1
		if states > siaDPMaxStates {
			break
		}
	}
	for _, i := range free {
		work += len(jobs[i].options) + 1
	}
	if states <= siaDPMaxStates && states*work <= siaDPBudget {
		p.stats.Solver = "dp"
		siaDP(jobs, free, capacity, choice)
	} else {
		p.stats.Solver = "bb"
		p.stats.Nodes, p.stats.Gap = siaBranchAndBound(ctx, jobs, free, capacity, choice, p.cfg.Gap, p.objectiveUnits(numJobs))
	}
	p.stats.Objective = p.objective(jobs, choice, numJobs)
	return choice
}

// objectiveUnits returns a function giving the artifact's objective, in
// score units, of a total score (benefits in hundredths times the weight,
// plus tie-breaks).
func (p *Policy) objectiveUnits(numJobs int) func(score int64) int64 {
	base := int64(math.RoundToEven(p.cfg.LambdaN*100)) * int64(numJobs) * p.weight
	return func(score int64) int64 {
		// For p < 0: Σ A + λn·unallocated = λn·jobs − Σ(λn − A).
		// For p > 0: Σ A + λn·unallocated = λn·jobs + Σ(A − λn).
		if p.cfg.FairnessP > 0 {
			return base + score
		}
		return base - score
	}
}

func (p *Policy) objective(jobs []siaJob, choice []int, numJobs int) float64 {
	obj := p.cfg.LambdaN * float64(numJobs)
	for i, c := range choice {
		if c >= 0 {
			obj += float64(jobs[i].options[c].cost)/100 - p.cfg.LambdaN
		}
	}
	return obj
}

// siaDP solves the programme exactly: a dynamic programme over jobs whose
// state is the GPUs used of each type (mixed radix), maximising the total
// score.
func siaDP(jobs []siaJob, free []int, capacity []int, choice []int) {
	T := len(capacity)
	stride := make([]int, T)
	states := 1
	for t, c := range capacity {
		stride[t] = states
		states *= c + 1
	}
	// coord[t][s] is the GPUs of type t used in state s.
	coord := make([][]int32, T)
	for t := range coord {
		coord[t] = make([]int32, states)
		for s := range states {
			coord[t][s] = int32((s / stride[t]) % (capacity[t] + 1))
		}
	}
	const none = math.MinInt64
	dp := make([]int64, states)
	next := make([]int64, states)
	for s := range dp {
		dp[s] = none
	}
	dp[0] = 0
	picks := make([][]int8, len(free))
	for k, i := range free {
		opts := jobs[i].options
		copy(next, dp)
		pick := make([]int8, states)
		for s := range pick {
			pick[s] = -1
		}
		for s, v := range dp {
			if v == none {
				continue
			}
			for oi, o := range opts {
				if int(coord[o.typ][s])+o.gpus > capacity[o.typ] {
					continue
				}
				s2 := s + o.gpus*stride[o.typ]
				if c := v + o.score; c > next[s2] {
					next[s2] = c
					pick[s2] = int8(oi)
				}
			}
		}
		picks[k] = pick
		dp, next = next, dp
	}
	best := 0
	for s, v := range dp {
		if v > dp[best] {
			best = s
		}
	}
	s := best
	for k := len(free) - 1; k >= 0; k-- {
		oi := picks[k][s]
		if oi < 0 {
			continue
		}
		i := free[k]
		choice[i] = int(oi)
		o := jobs[i].options[oi]
		s -= o.gpus * stride[o.typ]
	}
}

// siaBranchAndBound solves the programme to the relative gap. Lagrangian
// prices μ per type give the bound Σμ·C + Σ max(0, max(score − μ·gpus));
// each option's loss is how much it lowers that bound. A depth-first
// search, jobs largest first and each job's options by loss, finds a
// first allocation greedily and then proves or improves it, pruning where
// the bound minus the losses taken cannot beat the incumbent by more than
// the gap; jobs with identical options choose in non-decreasing order
// (they are interchangeable). It returns the nodes explored and the
// remaining relative gap of the artifact's objective (0 when proven
// within the requested gap).
func siaBranchAndBound(ctx context.Context, jobs []siaJob, free []int, capacity []int, choice []int, gap float64, objective func(int64) int64) (int, float64) {
	type opt struct {
		o    int // index into options, −1 for none
		loss float64
	}
	type bjob struct {
		i    int
		opts []opt
		// same is true when the job's options equal the previous job's.
		same bool
		size int
		// regret is the loss of the second-best option: jobs that care
		// most come first, indifferent ones fill what is left.
		regret float64
	}
	mu, tried := siaRefinePrices(jobs, free, capacity, siaPrices(jobs, free, capacity))
	build := func(mu []float64) ([]bjob, float64) {
		root := 0.0
		for t := range capacity {
			root += mu[t] * float64(capacity[t])
		}
		bjobs := make([]bjob, 0, len(free))
		for _, i := range free {
			best := 0.0
			for _, o := range jobs[i].options {
				best = max(best, float64(o.score)-mu[o.typ]*float64(o.gpus))
			}
			bj := bjob{i: i, opts: []opt{{o: -1, loss: best}}}
			for oi, o := range jobs[i].options {
				bj.opts = append(bj.opts, opt{o: oi, loss: best - (float64(o.score) - mu[o.typ]*float64(o.gpus))})
			}
			slices.SortStableFunc(bj.opts, func(a, b opt) int { return cmp.Compare(a.loss, b.loss) })
			if bj.opts[0].o >= 0 {
				bj.size = jobs[i].options[bj.opts[0].o].gpus
			}
			if len(bj.opts) > 1 {
				bj.regret = bj.opts[1].loss
			}
			root += best
			bjobs = append(bjobs, bj)
		}
		return bjobs, root
	}
	sameOptions := func(a, b int) bool { return slices.Equal(jobs[a].options, jobs[b].options) }
	order := func(bjobs []bjob) {
		// Jobs with most to lose first, then larger jobs (their
		// choices constrain the rest most), identical jobs adjacent.
		slices.SortStableFunc(bjobs, func(a, b bjob) int {
			if c := cmp.Compare(b.regret, a.regret); c != 0 {
				return c
			}
			if c := cmp.Compare(b.size, a.size); c != 0 {
				return c
			}
			oa, ob := jobs[a.i].options, jobs[b.i].options
			if c := cmp.Compare(len(oa), len(ob)); c != 0 {
				return c
			}
			for k := range oa {
				if c := cmp.Compare(oa[k].score, ob[k].score); c != 0 {
					return c
				}
				if c := cmp.Compare(oa[k].typ, ob[k].typ); c != 0 {
					return c
				}
				if c := cmp.Compare(oa[k].gpus, ob[k].gpus); c != 0 {
					return c
				}
			}
			return 0
		})
		for k := 1; k < len(bjobs); k++ {
			bjobs[k].same = sameOptions(bjobs[k-1].i, bjobs[k].i)
		}
	}
	bjobs, root := build(mu)
	order(bjobs)
	remaining := slices.Clone(capacity)
	cur := make([]int, len(bjobs))      // chosen index into bjobs[k].opts
	bestPick := make([]int, len(bjobs)) // same, of the incumbent
	incumbent := int64(-1)
	var total int64
	nodes, limit := 0, siaBBNodeLimit
	tol := 0.0
	var dfs func(k int, bound float64) bool
	dfs = func(k int, bound float64) bool {
		nodes++
		if nodes > limit || (nodes&1023 == 0 && ctx.Err() != nil) {
			return false
		}
		if k == len(bjobs) {
			if total > incumbent {
				incumbent = total
				copy(bestPick, cur)
				if incumbent >= 0 {
					tol = gap * math.Abs(float64(objective(incumbent)))
				}
			}
			return true
		}
		bj := &bjobs[k]
		first := 0
		if bj.same {
			first = cur[k-1]
		}
		for x := first; x < len(bj.opts); x++ {
			op := bj.opts[x]
			b := bound - op.loss
			if incumbent >= 0 && math.Floor(b+1e-6) <= float64(incumbent)+tol {
				// Options are sorted by loss: the rest are no better.
				break
			}
			cur[k] = x
			if op.o >= 0 {
				o := jobs[bj.i].options[op.o]
				if remaining[o.typ] < o.gpus {
					continue
				}
				remaining[o.typ] -= o.gpus
				total += o.score
				ok := dfs(k+1, b)
				remaining[o.typ] += o.gpus
				total -= o.score
				if !ok {
					return false
				}
			} else if !dfs(k+1, b) {
				return false
			}
		}
		return true
	}
	// Two heuristics give the incumbent: a greedy dive (each job's best
	// option that fits, in the search order) and, per type, the exact
	// programme of the jobs whose best option at the prices is of that
	// type; the better one is kept.
	limit = len(bjobs) + 1
	dfs(0, math.Inf(1))
	// The heuristic at the optimal prices and at the last prices Kelley's
	// method tried (they split tied jobs between types differently).
	for _, m := range append([][]float64{mu}, tried...) {
		pick, score := siaByType(jobs, free, capacity, m)
		if score <= incumbent {
			continue
		}
		incumbent = score
		for k, bj := range bjobs {
			for x, op := range bj.opts {
				if op.o == pick[bj.i] {
					bestPick[k] = x
				}
			}
		}
		tol = gap * math.Abs(float64(objective(incumbent)))
	}
	nodes, limit = 0, siaBBNodeLimit
	complete := dfs(0, root)
	for k, bj := range bjobs {
		choice[bj.i] = -1
		if incumbent >= 0 {
			choice[bj.i] = bj.opts[bestPick[k]].o
		}
	}
	if incumbent < 0 {
		return nodes, 1
	}
	if complete {
		return nodes, 0
	}
	denom := math.Abs(float64(objective(incumbent)))
	if denom == 0 {
		return nodes, 0
	}
	return nodes, max(0, math.Floor(root)-float64(incumbent)) / denom
}

// siaByType is a heuristic: each job goes to the type of its best option
// at prices mu (that of its best option with GPUs if it is best without),
// each type's jobs are then solved exactly by siaDP on that type's
// capacity, and jobs then move alone to better options where GPUs are
// left. It returns each job's option (−1 for none) and the total score.
func siaByType(jobs []siaJob, free []int, capacity []int, mu []float64) (map[int]int, int64) {
	T := len(capacity)
	byType := make([][]int, T)
	// Each job's best reduced value per type; jobs with one best type
	// first, then jobs tied between types go where most GPUs are left
	// (the linear relaxation splits them so).
	left := make([]float64, T)
	for t := range T {
		left[t] = float64(capacity[t])
	}
	type tied struct {
		i     int
		types []int
		gpus  []int
	}
	var ties []tied
	for _, i := range free {
		bestV := make([]float64, T)
		bestG := make([]int, T)
		for t := range T {
			bestV[t] = math.Inf(-1)
		}
		for _, o := range jobs[i].options {
			if v := float64(o.score) - mu[o.typ]*float64(o.gpus); v > bestV[o.typ] {
				bestV[o.typ], bestG[o.typ] = v, o.gpus
			}
		}
		top := slices.Max(bestV)
		var tj tied
		tj.i = i
		for t := range T {
			if bestV[t] >= top-1e-6*max(1, math.Abs(top)) && !math.IsInf(bestV[t], -1) {
				tj.types = append(tj.types, t)
				tj.gpus = append(tj.gpus, bestG[t])
			}
		}
		if len(tj.types) == 1 {
			byType[tj.types[0]] = append(byType[tj.types[0]], i)
			left[tj.types[0]] -= float64(tj.gpus[0])
		} else if len(tj.types) > 1 {
			ties = append(ties, tj)
		}
	}
	for _, tj := range ties {
		k := 0
		for x := range tj.types {
			if left[tj.types[x]]-float64(tj.gpus[x]) > left[tj.types[k]]-float64(tj.gpus[k]) {
				k = x
			}
		}
		byType[tj.types[k]] = append(byType[tj.types[k]], tj.i)
		left[tj.types[k]] -= float64(tj.gpus[k])
	}
	pick := make(map[int]int, len(free))
	used := make([]int, T)
	for t, members := range byType {
		// One-type subproblem: options of type t only, capacity of t.
		sub := make([]siaJob, len(members))
		back := make([][]int, len(members))
		idx := make([]int, len(members))
		for k, i := range members {
			idx[k] = k
			for oi, o := range jobs[i].options {
				if o.typ == t {
					o.typ = 0
					sub[k].options = append(sub[k].options, o)
					back[k] = append(back[k], oi)
				}
			}
		}
		ch := make([]int, len(members))
		for k := range ch {
			ch[k] = -1
		}
		siaDP(sub, idx, []int{capacity[t]}, ch)
		for k, i := range members {
			pick[i] = -1
			if ch[k] >= 0 {
				pick[i] = back[k][ch[k]]
				used[t] += jobs[i].options[pick[i]].gpus
			}
		}
	}
	for _, i := range free {
		if _, ok := pick[i]; !ok {
			pick[i] = -1
		}
	}
	// Fill what is left: a job whose type had no room for it, or that
	// gains from it, takes a better option where GPUs are free, until no
	// job can improve alone.
	for changed := true; changed; {
		changed = false
		for _, i := range free {
			cur, curScore := pick[i], int64(0)
			if cur >= 0 {
				curScore = jobs[i].options[cur].score
			}
			best, bestScore := cur, curScore
			for oi, o := range jobs[i].options {
				room := capacity[o.typ] - used[o.typ]
				if cur >= 0 && jobs[i].options[cur].typ == o.typ {
					room += jobs[i].options[cur].gpus
				}
				if o.gpus <= room && o.score > bestScore {
					best, bestScore = oi, o.score
				}
			}
			if best != cur {
				if cur >= 0 {
					used[jobs[i].options[cur].typ] -= jobs[i].options[cur].gpus
				}
				used[jobs[i].options[best].typ] += jobs[i].options[best].gpus
				pick[i] = best
				changed = true
			}
		}
	}
	var total int64
	for _, i := range free {
		if pick[i] >= 0 {
			total += jobs[i].options[pick[i]].score
		}
	}
	return pick, total
}

// siaBound returns the Lagrangian bound at prices mu and its subgradient
// (each type's capacity minus the GPUs the jobs' best options take).
func siaBound(jobs []siaJob, free []int, capacity []int, mu []float64, sub []float64) float64 {
	l := 0.0
	for t := range capacity {
		l += mu[t] * float64(capacity[t])
		sub[t] = float64(capacity[t])
	}
	for _, i := range free {
		best, bt, bg := 0.0, -1, 0
		for _, o := range jobs[i].options {
			if v := float64(o.score) - mu[o.typ]*float64(o.gpus); v > best {
				best, bt, bg = v, o.typ, o.gpus
			}
		}
		l += best
		if bt >= 0 {
			sub[bt] -= float64(bg)
		}
	}
	return l
}

// siaRefinePrices minimises the bound over the prices by Kelley's
// cutting planes: each evaluation of the bound gives a plane below it
// (value and subgradient), and the next prices minimise the highest of the
// planes (a small linear programme, gonum's Simplex), until the planes'
// minimum comes within a relative 1e-7 of the best bound seen (then the
// prices are optimal: the bound equals the linear relaxation's optimum).
func siaRefinePrices(jobs []siaJob, free []int, capacity []int, mu []float64) ([]float64, [][]float64) {
	T := len(capacity)
	scale := 1.0
	for _, i := range free {
		for _, o := range jobs[i].options {
			scale = max(scale, float64(o.score))
		}
	}
	hi := 0.0
	for _, i := range free {
		for _, o := range jobs[i].options {
			hi = max(hi, float64(o.score)/scale/float64(o.gpus))
		}
	}
	hi++
	type cut struct {
		l   float64
		sub []float64
		mu  []float64
	}
	var cuts []cut
	eval := func(m []float64) float64 {
		sub := make([]float64, T)
		full := make([]float64, T)
		for t := range T {
			full[t] = m[t] * scale
		}
		l := siaBound(jobs, free, capacity, full, sub) / scale
		cuts = append(cuts, cut{l: l, sub: sub, mu: slices.Clone(m)})
		return l
	}
	best := make([]float64, T)
	for t := range T {
		best[t] = min(mu[t]/scale, hi)
	}
	bestL := eval(best)
	for range 200 {
		K := len(cuts)
		rows, cols := K+T, 1+T+K+T
		a := mat.NewDense(rows, cols, nil)
		b := make([]float64, rows)
		c := make([]float64, cols)
		c[0] = 1
		for k, ct := range cuts {
			// z − sub·μ − s_k = l − sub·μ_k (z ≥ the plane).
			a.Set(k, 0, 1)
			rhs := ct.l
			for t := range T {
				a.Set(k, 1+t, -ct.sub[t])
				rhs -= ct.sub[t] * ct.mu[t]
			}
			a.Set(k, 1+T+k, -1)
			b[k] = rhs
		}
		for t := range T {
			a.Set(K+t, 1+t, 1)
			a.Set(K+t, 1+T+K+t, 1)
			b[K+t] = hi
		}
		low, x, err := lp.Simplex(c, a, b, 1e-10, nil)
		if err != nil || low >= bestL-1e-7*max(1, math.Abs(bestL)) {
			break
		}
		next := make([]float64, T)
		for t := range T {
			next[t] = max(0, x[1+t])
		}
		if l := eval(next); l < bestL {
			bestL = l
			copy(best, next)
		}
	}
	for t := range T {
		best[t] *= scale
	}
	// The last few prices tried, for the heuristics.
	var tried [][]float64
	for k := max(0, len(cuts)-siaHeuristicPrices); k < len(cuts); k++ {
		m := make([]float64, T)
		for t := range T {
			m[t] = cuts[k].mu[t] * scale
		}
		tried = append(tried, m)
	}
	return best, tried
}

// siaPrices returns starting Lagrangian prices per type, in score units
// per GPU: coordinate descent, each coordinate set by bisection where the
// demand of the jobs' best options meets the type's capacity.
func siaPrices(jobs []siaJob, free []int, capacity []int) []float64 {
	T := len(capacity)
	mu := make([]float64, T)
	hi := 0.0
	for _, i := range free {
		for _, o := range jobs[i].options {
			hi = max(hi, float64(o.score)/float64(o.gpus))
		}
	}
	hi++
	// demand returns the GPUs of type t the jobs' best options take at
	// prices mu (ties to the cheaper option in GPUs).
	bestOther := make([]float64, len(free))
	demand := func(t int, m float64) int {
		d := 0
		for k, i := range free {
			bv, bg := bestOther[k], 0
			for _, o := range jobs[i].options {
				if o.typ != t {
					continue
				}
				v := float64(o.score) - m*float64(o.gpus)
				if v > bv || (v == bv && bg > 0 && o.gpus < bg) {
					bv, bg = v, o.gpus
				}
			}
			d += bg
		}
		return d
	}
	for range 4 {
		for t := range T {
			for k, i := range free {
				b := 0.0
				for _, o := range jobs[i].options {
					if o.typ != t {
						b = max(b, float64(o.score)-mu[o.typ]*float64(o.gpus))
					}
				}
				bestOther[k] = b
			}
			if demand(t, 0) <= capacity[t] {
				mu[t] = 0
				continue
			}
			lo, h := 0.0, hi
			for range 40 {
				m := (lo + h) / 2
				if demand(t, m) > capacity[t] {
					lo = m
				} else {
					h = m
				}
			}
			mu[t] = h
		}
	}
	return mu
}

// place turns the chosen configurations into nodes, type by type, largest
// first: a job keeping its configuration keeps its nodes where they are
// free; multi-node configurations take whole free nodes, the others the
// fullest node with room (any node with room fits, as sizes divide each
// other).
func (p *Policy) place(in core.Input, types []*siaType, nodeType []int, jobs []siaJob, choice []int) core.Allocations {
	out := core.Allocations{}
	freeGPUs := make([]int, len(in.Nodes))
	for i, n := range in.Nodes {
		freeGPUs[i] = max(n.GPUs, 0)
	}
	nodeIdx := make(map[string]int, len(in.Nodes))
	for i, n := range in.Nodes {
		nodeIdx[n.ID] = i
	}
	for ti, t := range types {
		var order []int
		for i, c := range choice {
			if c >= 0 && jobs[i].options[c].typ == ti {
				order = append(order, i)
			}
		}
		slices.SortStableFunc(order, func(a, b int) int {
			return cmp.Compare(jobs[b].options[choice[b]].gpus, jobs[a].options[choice[a]].gpus)
		})
		for _, i := range order {
			j := in.Jobs[jobs[i].idx]
			g := jobs[i].options[choice[i]].gpus
			prev := map[int]int{}
			for _, id := range in.Current[j.ID] {
				if n, ok := nodeIdx[id]; ok && nodeType[n] == ti {
					prev[n]++
				}
			}
			var got []int // GPUs per node index
			counts := make([]int, len(in.Nodes))
			if g >= t.size {
				need := g / t.size
				// Previous nodes first, then in node order.
				var cands []int
				for _, n := range t.nodes {
					if prev[n] > 0 {
						cands = append(cands, n)
					}
				}
				for _, n := range t.nodes {
					if prev[n] == 0 {
						cands = append(cands, n)
					}
				}
				for _, n := range cands {
					if need == 0 {
						break
					}
					if in.Nodes[n].GPUs == t.size && freeGPUs[n] == t.size {
						got = append(got, n)
						need--
					}
				}
				if need > 0 {
					got = nil
				}
				for _, n := range got {
					counts[n] = t.size
				}
			} else {
				best := -1
				for _, n := range t.nodes {
					if freeGPUs[n] < g {
						continue
					}
					switch {
					case best < 0:
						best = n
					case (prev[n] >= g) != (prev[best] >= g):
						if prev[n] >= g {
							best = n
						}
					case freeGPUs[n] < freeGPUs[best]:
						best = n
					}
				}
				if best >= 0 {
					got = []int{best}
					counts[best] = g
				}
			}
			if len(got) == 0 {
				p.stats.Unplaced++
				continue
			}
			var alloc []string
			for n := range in.Nodes {
				if counts[n] > 0 {
					freeGPUs[n] -= counts[n]
					for range counts[n] {
						alloc = append(alloc, in.Nodes[n].ID)
					}
				}
			}
			out[j.ID] = alloc
		}
	}
	return out
}
