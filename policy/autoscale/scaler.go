package autoscale

import (
	"cmp"
	"container/heap"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/pollux-nomad/pollux/policy"
)

// Defaults of Config.
const (
	// DefaultLow and DefaultHigh are the band of RuleAverage: AdaptDL's
	// (sched/adaptdl_sched/policy/pollux.py, _min_util and _max_util).
	DefaultLow  = 0.35
	DefaultHigh = 0.65
	// DefaultMarginalLow and DefaultMarginalHigh are the band of
	// RuleMarginal. On the eight artifact workloads and three held-out
	// generated ones (make cloud, 0..32 x 4 nodes) it gave 0.79x the
	// average JCT of the fixed 16 x 4 cluster at 1.06x its GPU-hours,
	// and beat the queue-driven autoscaler of rigid jobs on both on every
	// workload; AdaptDL's band on the average utility gave 0.65x the JCT
	// at 1.27x the GPU-hours, as many GPU-hours as that baseline, and
	// the band 0.65..0.9 0.91x the JCT at 1.01x the GPU-hours.
	DefaultMarginalLow  = 0.5
	DefaultMarginalHigh = 0.8
	// DefaultScaleDownDelay is how long, in seconds, a smaller size must be
	// wanted before the pool shrinks: the Kubernetes cluster autoscaler's
	// scale-down-unneeded-time (10 minutes).
	DefaultScaleDownDelay = 600
)

// Template describes the nodes a pool can add: all of one GPU type with
// the same GPU count.
type Template struct {
	// GPUsPerNode is the GPUs of each node (at least 1).
	GPUsPerNode int
	// Type is the GPU type of the nodes ("" on a cluster of one type), as
	// policy.Node.Type.
	Type string
}

// Pool is one node pool the autoscaler sizes.
type Pool struct {
	// Name is the pool's name (a Nomad node pool); unique.
	Name string
	// Template is the pool's node.
	Template Template
	// MinNodes and MaxNodes bound the pool's desired count.
	MinNodes, MaxNodes int
}

// Config configures a Scaler. Zero values take the defaults.
type Config struct {
	// Pools are the pools to size, in preference order: a job that has
	// not run yet and has no speed estimate is counted in the first.
	Pools []Pool
	// Low and High bound the utility band (0 < Low < High < 1; defaults
	// DefaultMarginalLow and DefaultMarginalHigh under RuleMarginal,
	// DefaultLow and DefaultHigh under RuleAverage).
	Low, High float64
	// ScaleDownDelay is how long, in seconds, a smaller size must be
	// wanted before a pool shrinks (default DefaultScaleDownDelay; a
	// negative value shrinks at once).
	ScaleDownDelay float64
	// ScaleUpCooldown is the least time, in seconds, between two
	// increases of a pool (default 0: grow at every round that asks).
	ScaleUpCooldown float64
	// Rule is what the band bounds: RuleMarginal (default) or
	// RuleAverage.
	Rule string
}

// Rules of Config.Rule.
const (
	// RuleAverage bounds the cluster's utility, the jobs' average
	// fraction of ideal speedup (AdaptDL).
	RuleAverage = "average"
	// RuleMarginal bounds the speedup per GPU that the last node adds
	// (see MarginalUtilities).
	RuleMarginal = "marginal"
)

func (c Config) withDefaults() Config {
	if c.Rule == "" {
		c.Rule = RuleMarginal
	}
	lo, hi := DefaultMarginalLow, DefaultMarginalHigh
	if c.Rule == RuleAverage {
		lo, hi = DefaultLow, DefaultHigh
	}
	if c.Low == 0 {
		c.Low = lo
	}
	if c.High == 0 {
		c.High = hi
	}
	if c.ScaleDownDelay == 0 {
		c.ScaleDownDelay = DefaultScaleDownDelay
	}
	c.ScaleDownDelay = max(c.ScaleDownDelay, 0)
	return c
}

// Validate reports every invalid field at once, naming it.
func (c Config) Validate() error {
	var errs []error
	c = c.withDefaults()
	if !(c.Low > 0 && c.Low < 1) {
		errs = append(errs, fmt.Errorf("low: utility band bound %v is outside (0, 1)", c.Low))
	}
	if !(c.High > 0 && c.High < 1) {
		errs = append(errs, fmt.Errorf("high: utility band bound %v is outside (0, 1)", c.High))
	}
	if c.Low >= c.High {
		errs = append(errs, fmt.Errorf("low %v must be below high %v", c.Low, c.High))
	}
	if math.IsNaN(c.ScaleDownDelay) || math.IsInf(c.ScaleDownDelay, 0) {
		errs = append(errs, fmt.Errorf("scale_down_delay: %v is not a finite number of seconds", c.ScaleDownDelay))
	}
	if !(c.ScaleUpCooldown >= 0) || math.IsInf(c.ScaleUpCooldown, 0) {
		errs = append(errs, fmt.Errorf("scale_up_cooldown: %v is not a finite non-negative number of seconds", c.ScaleUpCooldown))
	}
	if c.Rule != RuleAverage && c.Rule != RuleMarginal {
		errs = append(errs, fmt.Errorf("rule: unknown %q (want %s or %s)", c.Rule, RuleAverage, RuleMarginal))
	}
	if len(c.Pools) == 0 {
		errs = append(errs, errors.New("pools: at least one pool is needed"))
	}
	seen := map[string]int{}
	for i, p := range c.Pools {
		where := fmt.Sprintf("pool %d (%q)", i+1, p.Name)
		if p.Name == "" {
			errs = append(errs, fmt.Errorf("%s: empty name", where))
		} else if k, dup := seen[p.Name]; dup {
			errs = append(errs, fmt.Errorf("%s: same name as pool %d", where, k))
		} else {
			seen[p.Name] = i + 1
		}
		if p.Template.GPUsPerNode < 1 {
			errs = append(errs, fmt.Errorf("%s: gpus_per_node %d is below 1", where, p.Template.GPUsPerNode))
		}
		if p.MinNodes < 0 {
			errs = append(errs, fmt.Errorf("%s: min_nodes %d is negative", where, p.MinNodes))
		}
		if p.MaxNodes < 1 {
			errs = append(errs, fmt.Errorf("%s: max_nodes %d is below 1", where, p.MaxNodes))
		}
		if p.MinNodes > p.MaxNodes {
			errs = append(errs, fmt.Errorf("%s: min_nodes %d exceeds max_nodes %d", where, p.MinNodes, p.MaxNodes))
		}
	}
	return errors.Join(errs...)
}

// Input is what a Scaler sees in one round.
type Input struct {
	// Now is the time in seconds.
	Now float64
	// Jobs are the submitted, unfinished jobs, as the policy sees them.
	Jobs []policy.Job
	// Nodes is each pool's node count now (ready or booting), by pool
	// name. It is the starting size of a pool the Scaler has not decided
	// before; later the Scaler's own last decision is the current size,
	// since nodes it asked for may still be booting.
	Nodes map[string]int
	// JobPool names the pool a job runs on now, by job ID; a job absent
	// (or naming an unknown pool) is counted in the pool where its
	// one-GPU goodput is highest.
	JobPool map[string]string
}

// Decision is a pool's desired size and why.
type Decision struct {
	// Pool is the pool's name; Type its GPU type.
	Pool, Type string
	// Current is the pool's size before this decision; Desired after it.
	Current, Desired int
	// Wanted is the size the utility asks for now, before the
	// scale-down delay; Desired equals it unless the pool is waiting to
	// shrink.
	Wanted int
	// UtilityNow is the utility at Current, UtilityDesired at Desired.
	UtilityNow, UtilityDesired float64
	// Jobs counts the jobs counted in this pool.
	Jobs int
	// Reason says in a few words why Desired is what it is.
	Reason string
}

// Scaler decides each pool's desired node count round after round. It
// keeps the state of its hysteresis and is not safe for concurrent use.
type Scaler struct {
	cfg   Config
	state map[string]*poolState
}

type poolState struct {
	decided   bool
	size      int
	lastUp    float64
	downSince float64 // < 0: not waiting to shrink
	downMax   int
}

// NewScaler returns a Scaler, or the configuration's errors.
func NewScaler(cfg Config) (*Scaler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid autoscaling config: %w", err)
	}
	s := &Scaler{cfg: cfg.withDefaults(), state: map[string]*poolState{}}
	for _, p := range cfg.Pools {
		s.state[p.Name] = &poolState{downSince: -1, lastUp: math.Inf(-1)}
	}
	return s, nil
}

// Config returns the configuration with its defaults filled in.
func (s *Scaler) Config() Config { return s.cfg }

// Decide returns each pool's decision, in Config.Pools order.
func (s *Scaler) Decide(in Input) []Decision {
	byPool := s.assign(in)
	out := make([]Decision, 0, len(s.cfg.Pools))
	for i, p := range s.cfg.Pools {
		st := s.state[p.Name]
		cur := in.Nodes[p.Name]
		if st.decided {
			cur = st.size
		}
		jobs := byPool[i]
		util := Utilities(jobs, p.Template, p.MaxNodes)
		wanted, reason := s.choose(util, cur, p, len(jobs))
		d := Decision{Pool: p.Name, Type: p.Template.Type, Current: cur, Wanted: wanted, Jobs: len(jobs), UtilityNow: util[min(cur, p.MaxNodes)]}
		switch {
		case wanted > cur:
			st.downSince = -1
			if in.Now-st.lastUp >= s.cfg.ScaleUpCooldown {
				d.Desired = wanted
				st.lastUp = in.Now
			} else {
				d.Desired = cur
				reason = fmt.Sprintf("%s; waiting for the scale-up cooldown", reason)
			}
		case wanted < cur:
			if st.downSince < 0 {
				st.downSince, st.downMax = in.Now, wanted
			}
			st.downMax = max(st.downMax, wanted)
			if in.Now-st.downSince >= s.cfg.ScaleDownDelay {
				d.Desired = st.downMax
				st.downSince = -1
			} else {
				d.Desired = cur
				reason = fmt.Sprintf("%s; shrinking to %d once wanted for %.0fs (since %.0fs)", reason, st.downMax, s.cfg.ScaleDownDelay, in.Now-st.downSince)
			}
		default:
			st.downSince = -1
			d.Desired = cur
		}
		d.UtilityDesired = util[d.Desired]
		d.Reason = reason
		st.decided, st.size = true, d.Desired
		out = append(out, d)
	}
	return out
}

// choose is AdaptDL's rule (PolluxPolicy._desired_nodes) on the utilities
// of sizes 0..MaxNodes, clamped to [MinNodes, MaxNodes].
func (s *Scaler) choose(util []float64, cur int, p Pool, jobs int) (int, string) {
	lo, hi := s.cfg.Low, s.cfg.High
	if jobs == 0 {
		return p.MinNodes, "no jobs"
	}
	if s.cfg.Rule == RuleMarginal {
		return chooseMarginal(util, cur, p, lo, hi)
	}
	// Sizes past the one where the jobs are saturated (each at its
	// MaxReplicas or gaining nothing more) only add idle nodes, as in
	// AdaptDL, whose candidate sizes end at the last node a solution uses.
	top := saturation(util, p.MaxNodes)
	if cur >= max(p.MinNodes, 1) && cur <= max(top, p.MinNodes) && util[cur] >= lo && util[cur] <= hi {
		return cur, fmt.Sprintf("utility %.2f at %d nodes is in the band", util[cur], cur)
	}
	target := (lo + hi) / 2
	best, bestN := math.Inf(1), -1
	for n := max(p.MinNodes, 1); n <= max(top, p.MinNodes); n++ {
		if util[n] < lo {
			continue
		}
		d := math.Abs(util[n] - target)
		if d < best || d <= best+1e-9 && n > bestN {
			best, bestN = math.Min(d, best), n
		}
	}
	if bestN >= 0 {
		return bestN, fmt.Sprintf("utility %.2f at %d nodes is closest to %.2f", util[bestN], bestN, target)
	}
	// Every size is below the band: the jobs cannot use even the smallest
	// well. Take the size of highest utility (the smallest on a tie).
	bestN = max(p.MinNodes, 1)
	for n := bestN + 1; n <= top; n++ {
		if util[n] > util[bestN]+1e-9 {
			bestN = n
		}
	}
	return bestN, fmt.Sprintf("every size is below the band; highest utility %.2f at %d nodes", util[bestN], bestN)
}

// chooseMarginal keeps the current size while its last node adds at
// least Low and one more node would add at most High speedup per GPU;
// otherwise it takes the largest size whose last node adds at least the
// middle of the band, clamped to the pool's bounds (at least one node).
func chooseMarginal(util []float64, cur int, p Pool, lo, hi float64) (int, string) {
	m := marginal(util)
	floor := max(p.MinNodes, 1)
	if cur >= floor && cur <= p.MaxNodes {
		next := 0.0
		if cur < p.MaxNodes {
			next = m[cur+1]
		}
		if m[cur] >= lo && next <= hi {
			return cur, fmt.Sprintf("node %d adds %.2f, node %d would add %.2f: in the band", cur, m[cur], cur+1, next)
		}
	}
	target := (lo + hi) / 2
	best := floor
	for n := floor; n <= p.MaxNodes; n++ {
		if m[n] >= target {
			best = n
		}
	}
	return best, fmt.Sprintf("node %d adds %.2f speedup per GPU (target %.2f)", best, m[best], target)
}

// marginal turns utilities into the speedup per GPU that each size's last
// node adds over the size one smaller (index 0: 0).
func marginal(util []float64) []float64 {
	m := make([]float64, len(util))
	for n := 1; n < len(util); n++ {
		m[n] = util[n]*float64(n) - util[n-1]*float64(n-1)
	}
	return m
}

// saturation is the smallest node count whose total speedup (utility
// times size) equals that of maxNodes: the size at which the jobs can use
// no more GPUs.
func saturation(util []float64, maxNodes int) int {
	full := util[maxNodes] * float64(maxNodes)
	for n := 1; n < maxNodes; n++ {
		if util[n]*float64(n) >= full*(1-1e-9) {
			return n
		}
	}
	return maxNodes
}

// assign counts each job in one pool (index into Config.Pools).
func (s *Scaler) assign(in Input) [][]policy.Job {
	out := make([][]policy.Job, len(s.cfg.Pools))
	index := map[string]int{}
	for i, p := range s.cfg.Pools {
		index[p.Name] = i
	}
	for _, j := range in.Jobs {
		if i, ok := index[in.JobPool[j.ID]]; ok {
			out[i] = append(out[i], j)
			continue
		}
		best, bestSpeed := 0, math.Inf(-1)
		for i, p := range s.cfg.Pools {
			v := math.NaN()
			if m := j.GoodputOn(p.Template.Type); m != nil {
				v = m.Goodput(1, 1)
			} else if sp, ok := j.ProbeSpeed[p.Template.Type]; ok {
				v = sp
			}
			if v > bestSpeed {
				best, bestSpeed = i, v
			}
		}
		out[best] = append(out[best], j)
	}
	return out
}

// Utilities returns the utility of clusters of 0..maxNodes nodes of
// template t for jobs (index n is the utility of n nodes; index 0 is 0):
// the total speedup of the jobs under a greedy allocation of the n·g GPUs
// over n·g (see the package comment). A job without a goodput model on
// t's type is assumed to speed up linearly up to its MaxReplicas, as the
// policy assumes.
func Utilities(jobs []policy.Job, t Template, maxNodes int) []float64 {
	g := max(t.GPUsPerNode, 1)
	maxNodes = max(maxNodes, 0)
	total := make([]float64, maxNodes+1)
	util := make([]float64, maxNodes+1)
	capGPUs := maxNodes * g
	h := &gainHeap{}
	states := make([]jobState, len(jobs))
	for i, j := range jobs {
		states[i] = jobState{job: j, m: j.GoodputOn(t.Type), g: g}
		states[i].base = states[i].rawGoodput(max(j.MinReplicas, 1))
		if st := &states[i]; st.advance() {
			heap.Push(h, gainItem{i: i, gain: st.gain})
		}
	}
	used, sum := 0, 0.0
	next := 1 // next node count whose utility is not recorded
	record := func(upTo int) {
		for ; next <= maxNodes && next*g < upTo; next++ {
			total[next] = sum
		}
	}
	for h.Len() > 0 {
		it := heap.Pop(h).(gainItem)
		st := &states[it.i]
		step := st.nextK - st.k
		if used+step > capGPUs {
			continue
		}
		// The sizes that fill up before this step see the sum so far.
		record(used + step)
		used += step
		sum += st.nextS - st.s
		st.k, st.s = st.nextK, st.nextS
		if st.advance() {
			heap.Push(h, gainItem{i: it.i, gain: st.gain})
		}
	}
	for ; next <= maxNodes; next++ {
		total[next] = sum
	}
	for n := 1; n <= maxNodes; n++ {
		util[n] = total[n] / float64(n*g)
	}
	return util
}

// jobState is one job's place in the greedy allocation.
type jobState struct {
	job  policy.Job
	m    policy.GoodputModel
	g    int
	base float64 // goodput at the job's smallest allocation
	k    int     // GPUs held
	s    float64 // speedup at k
	// The best next step: to nextK GPUs, speedup nextS, gain per GPU.
	nextK int
	nextS float64
	gain  float64
}

func (st *jobState) rawGoodput(k int) float64 {
	if st.m == nil {
		return float64(k)
	}
	v := st.m.Goodput((k+st.g-1)/st.g, k)
	if !(v > 0) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

// speedup is the job's goodput on k GPUs packed on ceil(k/g) nodes over
// its goodput on its smallest allocation, times that allocation's GPUs.
func (st *jobState) speedup(k int) float64 {
	if k <= 0 || !(st.base > 0) {
		return 0
	}
	k0 := max(st.job.MinReplicas, 1)
	return float64(k0) * st.rawGoodput(k) / st.base
}

// advance finds the job's best next step of at most one node's GPUs
// (from none: to its MinReplicas up to one node more) and reports whether
// it has one with a positive gain.
func (st *jobState) advance() bool {
	lo := max(st.k+1, st.job.MinReplicas, 1)
	hi := min(st.job.MaxReplicas, max(lo, st.k+st.g))
	st.gain = 0
	for k := lo; k <= hi; k++ {
		s := st.speedup(k)
		if gain := (s - st.s) / float64(k-st.k); gain > st.gain+1e-12 {
			st.gain, st.nextK, st.nextS = gain, k, s
		}
	}
	return st.gain > 0
}

type gainItem struct {
	i    int
	gain float64
}

// gainHeap pops the largest gain first, the lower job index on a tie.
type gainHeap []gainItem

func (h gainHeap) Len() int { return len(h) }
func (h gainHeap) Less(a, b int) bool {
	if h[a].gain != h[b].gain {
		return h[a].gain > h[b].gain
	}
	return h[a].i < h[b].i
}
func (h gainHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *gainHeap) Push(x any)   { *h = append(*h, x.(gainItem)) }
func (h *gainHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Surplus picks the nodes of a pool to empty when its desired count is
// below its size: len(ids)-desired of them (none if desired is not
// below), those holding the fewest GPUs in use (used, by node ID), ties
// broken by the larger ID, so that the same input gives the same nodes
// and nodes already emptied stay chosen. The controller places nothing on
// them, so that the cloud autoscaler, picking empty nodes, removes them
// without stopping a job.
func Surplus(ids []string, used map[string]int, desired int) []string {
	k := len(ids) - max(desired, 0)
	if k <= 0 {
		return nil
	}
	order := slices.Clone(ids)
	slices.SortFunc(order, func(a, b string) int {
		if c := cmp.Compare(used[a], used[b]); c != 0 {
			return c
		}
		return cmp.Compare(b, a)
	})
	out := order[:k]
	slices.Sort(out)
	return out
}
