package sia

import (
	"cmp"
	"context"
	"math"
	"slices"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize/convex/lp"
)

// Limits of the solver.
const (
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
)

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
