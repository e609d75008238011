package pollux

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/pollux-nomad/pollux/policy"
)

// Constants of the search.
const (
	// polluxMaxNodeGPUs bounds a node's GPUs: a state entry stores 8 bits.
	polluxMaxNodeGPUs = 255
	// polluxTieTolerance is the relative difference of fitness below
	// which two solutions are taken as equal when the round's result is
	// chosen (then the one with fewer changes wins).
	polluxTieTolerance = 1e-9
)

// Stats describes the last round of Policy, for logs and metrics.
// The caller measures the duration.
type Stats struct {
	// Round is the input's round number; with the seed it names the
	// round's random stream.
	Round int64
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
// artifact's simulator/pollux.py does. It hands the final population to
// the next round as its Carry, to seed that round's search; its decision
// is a function of the input alone. It reuses buffers between calls, so
// it is not safe for concurrent use.
type Policy struct {
	cfg   Config
	stats Stats
	// carry is what the last Optimize handed on.
	carry *Carry

	engine gaEngine
	prob   polluxProblem
}

var _ policy.Policy = (*Policy)(nil)

// Carry is what a Pollux round hands to the next (Input.Carry): the
// final first front, or the whole population under
// SeedFromWholePopulation, with the job and node IDs that index it. The
// next round maps it by ID onto its own jobs and nodes (the artifact's
// pollux.py _adapt_prev_states). It is never changed once returned.
type Carry struct {
	// Jobs are the IDs of the states' rows, in the round's job order.
	Jobs []string `json:"jobs"`
	// Nodes are the IDs the states' node indices refer to.
	Nodes []string `json:"nodes"`
	// States are the saved allocation matrices.
	States []CarryState `json:"states"`
}

// CarryState is one allocation matrix of a Carry in sparse form: row j's
// entries are Ent[Start[j]:Start[j+1]], each a node index (Carry.Nodes)
// times 256 plus the GPUs on it.
type CarryState struct {
	Start []int32  `json:"start"`
	Ent   []uint32 `json:"ent"`
}

// Carry returns what the last Optimize handed on (a *Carry), nil before
// the first call or when the last round had none to hand on.
func (p *Policy) Carry() policy.Carry {
	if p.carry == nil {
		return nil
	}
	return p.carry
}

// DecodeCarry decodes a Carry from its JSON form; null gives nil.
func DecodeCarry(raw []byte) (policy.Carry, error) {
	var c *Carry
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("failed to decode pollux carry: %w", err)
	}
	if c == nil {
		return nil, nil
	}
	for k, st := range c.States {
		if len(st.Start) < len(c.Jobs)+1 {
			return nil, fmt.Errorf("failed to decode pollux carry: state %d has %d row starts for %d jobs", k, len(st.Start), len(c.Jobs))
		}
		for j := range c.Jobs {
			if st.Start[j] < 0 || st.Start[j] > st.Start[j+1] || int(st.Start[j+1]) > len(st.Ent) {
				return nil, fmt.Errorf("failed to decode pollux carry: state %d row %d is out of range", k, j)
			}
		}
		for _, e := range st.Ent {
			if int(spNode(e)) >= len(c.Nodes) {
				return nil, fmt.Errorf("failed to decode pollux carry: state %d names node %d of %d", k, spNode(e), len(c.Nodes))
			}
		}
	}
	return c, nil
}

// carryOf returns in.Carry as a Pollux carry: nil when there is none or
// it is another policy's (a settings change: the search starts afresh).
func carryOf(in policy.Input) *Carry {
	c, _ := in.Carry.(*Carry)
	return c
}

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
// in.Current for unknown jobs or nodes are ignored. Without in.Carry the
// search is seeded with in.Current; with it, with the previous round's
// final first front, mapped by job and node ID (new jobs start from
// their current allocation, vanished jobs and nodes are dropped). The
// random draws come from in.Round and in.Seed (else Config.Seed), so the
// decision is a function of in alone.
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
	p.stats = Stats{Round: in.Round, Jobs: len(in.Jobs), Nodes: len(in.Nodes)}
	// A round with nothing to search hands on what it was given.
	p.carry = carryOf(in)
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
	if cfg.ConfigSeed > 0 {
		if len(pr.seeds) <= nSeeds {
			pr.seeds = append(pr.seeds[:nSeeds], spState{})
		}
		if pr.configSeed(&pr.seeds[nSeeds]) {
			nSeeds++
		}
	}
	p.stats.Seeds = nSeeds

	seed := cfg.Seed
	if in.Seed != 0 {
		seed = in.Seed
	}
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(in.Round)))
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
	p.carry = p.saveStates(in, order, cfg.SeedFromWholePopulation)

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
// restart (docs/experiments.md, "Pollux"). The
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
	out := policy.Input{Now: in.Now, Nodes: nodes, Current: make(policy.Allocations, len(in.Current)), Round: in.Round, Seed: in.Seed, Carry: in.Carry}
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

// buildSeeds writes the seed states into p.prob.seeds and returns their
// count: the current allocation without a carry, else the carried states
// of the previous round mapped by job and node ID (artifact pollux.py
// _adapt_prev_states).
func (p *Policy) buildSeeds(in policy.Input, order []int) int {
	pr := &p.prob
	c := carryOf(in)
	if c == nil || len(c.States) == 0 {
		pr.seeds = gaGrow(pr.seeds, 1)
		pr.seeds[0].copyFrom(&pr.base)
		return 1
	}
	prevJob := make(map[string]int, len(c.Jobs))
	for i, id := range c.Jobs {
		prevJob[id] = i
	}
	nodeIdx := make(map[string]int32, pr.cols)
	for n, node := range in.Nodes {
		nodeIdx[node.ID] = int32(n)
	}
	// srcNode maps a previous node index to the current one, or −1.
	srcNode := make([]int32, len(c.Nodes))
	for i, id := range c.Nodes {
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
	if len(pr.seeds) < len(c.States) {
		pr.seeds = append(pr.seeds, make([]spState, len(c.States)-len(pr.seeds))...)
	}
	for k := range c.States {
		src, dst := spState{start: c.States[k].Start, ent: c.States[k].Ent}, &pr.seeds[k]
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
	return len(c.States)
}

// saveStates returns the final first front (or the whole population)
// with the job and node IDs that index it, to seed the next round.
func (p *Policy) saveStates(in policy.Input, order []int, whole bool) *Carry {
	e := &p.engine
	c := &Carry{Jobs: make([]string, 0, len(order)), Nodes: make([]string, 0, len(in.Nodes))}
	for _, ji := range order {
		c.Jobs = append(c.Jobs, in.Jobs[ji].ID)
	}
	for _, n := range in.Nodes {
		c.Nodes = append(c.Nodes, n.ID)
	}
	for _, s := range e.pop {
		if e.rank[s] == 0 || whole {
			st := &p.prob.states[s]
			c.States = append(c.States, CarryState{Start: slices.Clone(st.start), Ent: slices.Clone(st.ent)})
		}
	}
	return c
}
