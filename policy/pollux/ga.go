package pollux

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
)

// This file holds a small NSGA-II engine (Deb et al., "A fast and elitist
// multiobjective genetic algorithm: NSGA-II", IEEE TEC 2002) over states
// stored by the problem (gaOps), shaped after the pymoo 0.4.2 NSGA2 that
// the Pollux artifact runs (simulator/pollux.py: NSGA2(pop_size=100, ...),
// minimize(..., ("n_gen", 100))):
//
//   - the initial population is the seed states, repaired, evaluated and
//     freed of duplicates (it may be smaller than the population size);
//   - each generation makes up to popSize unique offspring: binary
//     tournaments (domination, then crowding distance, then a coin flip)
//     pick parent pairs from concatenated random permutations of the
//     population, crossover is applied to a pair with probability 0.9,
//     mutation to every child, then repair; children equal to a member of
//     the population or to an offspring already accepted are dropped, and
//     mating is repeated (at most 101 times) until popSize are found;
//   - survival merges population and offspring and keeps popSize by
//     non-dominated rank, splitting the last front by crowding distance
//     (largest first, random tie-break);
//   - the generation count includes the initial population, as pymoo's
//     ("n_gen", 100) termination does: 100 generations are the initial
//     population plus 99 rounds of mating.
//
// Everything is preallocated per round; the inner loop does not allocate.

// gaOps are the problem-specific operators of the genetic algorithm. The
// problem owns the storage of the states: the engine names them by slot
// number.
type gaOps interface {
	// ensure makes room for slots 0 ... slots−1.
	ensure(slots int)
	// loadSeed copies the i-th seed state into slot s.
	loadSeed(s int32, i int)
	// repairEval repairs slot s in place into a feasible state and returns
	// its two objectives, both minimised, and a hash of the repaired state
	// (equal states must hash equal; it only speeds up the search for
	// duplicates).
	repairEval(rng *rand.Rand, s int32) (f0, f1 float64, hash uint64)
	// equal reports whether slots s and t hold the same state.
	equal(s, t int32) bool
	// breed makes the children of len(cuts) parent pairs into slots,
	// which holds 2·len(cuts) slots: pair i (parents[2i], parents[2i+1])
	// is crossed over at cuts[i] into slots[i] and slots[len(cuts)+i]
	// (slots[i] takes rows [0, cuts[i]) from the second parent and the
	// rest from the first, slots[len(cuts)+i] the other way round), then
	// every child slots[c] is mutated, repaired
	// and evaluated drawing from a random stream seeded by seeds[c], and
	// its objectives and hash are stored in f0, f1 and hash (indexed by
	// slot). It may use several goroutines; the result must not depend on
	// their number.
	breed(slots, parents, cuts []int32, seeds []uint64, f0, f1 []float64, hash []uint64)
}

// gaParams sizes one run of the engine.
type gaParams struct {
	popSize     int     // survivors per generation and offspring per generation
	generations int     // including the initial population, as pymoo's n_gen
	crossProb   float64 // probability that a parent pair is crossed over
	maxMatings  int     // mating attempts per generation beyond the first
	rows        int     // rows of a state; crossover cuts between rows
	// stall, if > 0, ends the run once the first front's objectives have
	// not changed for stall generations in a row.
	stall int
}

// gaResult summarises one run.
type gaResult struct {
	generations  int  // generations run, the initial population included
	evaluations  int  // states repaired and evaluated
	stoppedEarly bool // a generation produced no unique offspring
	cancelled    bool // the context was done before the last generation
	stalled      bool // the first front stopped changing (gaParams.stall)
}

// gaCrowdingInf stands for an infinite crowding distance (boundary points),
// as pymoo's calc_crowding_distance replaces inf by 1e14.
const gaCrowdingInf = 1e14

// gaEngine runs NSGA-II. Its buffers are reused across runs.
type gaEngine struct {
	p   gaParams
	ops gaOps

	// Per slot; the states themselves are stored by ops.
	f0, f1, crowd []float64
	rank          []int32
	hash          []uint64
	keep          []bool
	free          []int32
	seen          []int32 // hash set of slots, −1 for empty; see duplicate

	pop, off, batch, cuts []int32
	childSeeds            []uint64

	// Scratch.
	perm, parents, order, byFront, fid, frontEnd, uniq, tmp, surv []int32
	frontMin1, frontMin1F0                                        []float64
	keys                                                          []gaKey

	evals int
}

// gaGrow returns s resized to n, reusing its storage when it is large
// enough. The contents are not preserved.
func gaGrow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// reset prepares the engine for a run of ops (which may be nil for tests
// of survival alone) with nSeeds seed states.
func (e *gaEngine) reset(p gaParams, ops gaOps, nSeeds int) {
	e.p = p
	e.ops = ops
	slots := max(p.popSize, nSeeds) + 2*p.popSize + 2
	if ops != nil {
		ops.ensure(slots)
	}
	e.f0 = gaGrow(e.f0, slots)
	e.f1 = gaGrow(e.f1, slots)
	e.crowd = gaGrow(e.crowd, slots)
	e.rank = gaGrow(e.rank, slots)
	e.hash = gaGrow(e.hash, slots)
	e.keep = gaGrow(e.keep, slots)
	// The set holds at most the population and its offspring: at most
	// half full.
	size := 1
	for size < 2*slots {
		size *= 2
	}
	e.seen = gaGrow(e.seen, size)
	e.free = e.free[:0]
	for s := slots - 1; s >= 0; s-- {
		e.free = append(e.free, int32(s))
	}
	e.pop, e.off, e.batch = e.pop[:0], e.off[:0], e.batch[:0]
	e.evals = 0
}

func (e *gaEngine) alloc() int32 {
	s := e.free[len(e.free)-1]
	e.free = e.free[:len(e.free)-1]
	return s
}

func (e *gaEngine) release(s int32) {
	e.free = append(e.free, s)
}

// finish repairs and evaluates slot s.
func (e *gaEngine) finish(rng *rand.Rand, s int32) {
	e.f0[s], e.f1[s], e.hash[s] = e.ops.repairEval(rng, s)
	e.rank[s] = math.MaxInt32
	e.crowd[s] = -1
	e.evals++
}

// The slots of the population and of the offspring accepted so far are
// kept in a hash set (open addressing, linear probing, keyed by the state
// hash), so that finding a duplicate costs a probe or two instead of a
// pass over both lists.

// seenClear empties the set.
func (e *gaEngine) seenClear() {
	for i := range e.seen {
		e.seen[i] = -1
	}
}

// seenAdd adds slot s to the set.
func (e *gaEngine) seenAdd(s int32) {
	mask := uint64(len(e.seen) - 1)
	for i := e.hash[s] & mask; ; i = (i + 1) & mask {
		if e.seen[i] < 0 {
			e.seen[i] = s
			return
		}
	}
}

// duplicate reports whether slot s holds the same state as a slot of the
// set.
func (e *gaEngine) duplicate(s int32) bool {
	h := e.hash[s]
	mask := uint64(len(e.seen) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		t := e.seen[i]
		if t < 0 {
			return false
		}
		if e.hash[t] == h && e.ops.equal(s, t) {
			return true
		}
	}
}

// run executes NSGA-II from the nSeeds seed states of ops, and leaves the final population in e.pop with ranks and crowding
// distances set. It checks ctx between generations and stops early (with
// the population so far) once it is done.
func (e *gaEngine) run(ctx context.Context, rng *rand.Rand, nSeeds int) gaResult {
	e.seenClear()
	for i := range nSeeds {
		s := e.alloc()
		e.ops.loadSeed(s, i)
		e.finish(rng, s)
		if e.duplicate(s) {
			e.release(s)
			continue
		}
		e.pop = append(e.pop, s)
		e.seenAdd(s)
	}
	// pymoo runs survival on the initial population only to set ranks and
	// crowding distances for the first tournaments.
	e.survive(rng, len(e.pop))
	res := gaResult{generations: 1}
	front, same := e.frontDigest(), 0
	for res.generations < e.p.generations {
		if ctx.Err() != nil {
			res.cancelled = true
			break
		}
		e.mate(rng)
		if len(e.off) == 0 {
			res.stoppedEarly = true
			break
		}
		res.generations++
		e.pop = append(e.pop, e.off...)
		e.off = e.off[:0]
		e.survive(rng, e.p.popSize)
		if e.p.stall > 0 {
			if d := e.frontDigest(); d == front {
				if same++; same >= e.p.stall {
					res.stalled = true
					break
				}
			} else {
				front, same = d, 0
			}
		}
	}
	res.evaluations = e.evals
	return res
}

// mate fills e.off with up to popSize unique, repaired and evaluated
// offspring of e.pop.
func (e *gaEngine) mate(rng *rand.Rand) {
	e.off = e.off[:0]
	e.seenClear()
	for _, s := range e.pop {
		e.seenAdd(s)
	}
	for attempt := 0; len(e.off) < e.p.popSize; attempt++ {
		if attempt > e.p.maxMatings {
			break
		}
		nSel := (e.p.popSize - len(e.off) + 1) / 2
		parents := e.selectParents(rng, nSel)
		e.batch = gaGrow(e.batch, 2*nSel)
		for i := range e.batch {
			e.batch[i] = e.alloc()
		}
		// pymoo's Crossover returns the first child of every mating, then
		// the second child of every mating.
		e.cuts = gaGrow(e.cuts, nSel)
		for i := range nSel {
			cross := rng.Float64() < e.p.crossProb
			cut := rng.IntN(e.p.rows)
			if !cross {
				cut = 0
			}
			e.cuts[i] = int32(cut)
		}
		// Each child draws its mutation and repair from its own stream,
		// so that the batch can be bred in parallel.
		e.childSeeds = gaGrow(e.childSeeds, len(e.batch))
		for i := range e.childSeeds {
			e.childSeeds[i] = rng.Uint64()
		}
		e.ops.breed(e.batch, parents, e.cuts, e.childSeeds, e.f0, e.f1, e.hash)
		for _, c := range e.batch {
			e.rank[c] = math.MaxInt32
			e.crowd[c] = -1
			e.evals++
		}
		for _, c := range e.batch {
			if len(e.off) >= e.p.popSize || e.duplicate(c) {
				e.release(c)
				continue
			}
			e.off = append(e.off, c)
			e.seenAdd(c)
		}
	}
}

// selectParents returns 2·nSel parent slots by binary tournament over
// concatenated random permutations of the population (pymoo
// TournamentSelection with pressure 2).
func (e *gaEngine) selectParents(rng *rand.Rand, nSel int) []int32 {
	m := len(e.pop)
	need := nSel * 2 * 2
	e.perm = e.perm[:0]
	for len(e.perm) < need {
		start := len(e.perm)
		for i := range m {
			e.perm = append(e.perm, int32(i))
		}
		p := e.perm[start:]
		rng.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
	}
	e.parents = gaGrow(e.parents, 2*nSel)
	for i := range e.parents {
		a, b := e.pop[e.perm[2*i]], e.pop[e.perm[2*i+1]]
		e.parents[i] = e.tournament(rng, a, b)
	}
	return e.parents
}

// tournament returns the winner of a binary tournament: the dominating
// solution, else the one with the larger crowding distance, else either at
// random (pymoo nsga2.binary_tournament, 'comp_by_dom_and_crowding').
func (e *gaEngine) tournament(rng *rand.Rand, a, b int32) int32 {
	switch {
	case e.dominates(a, b):
		return a
	case e.dominates(b, a):
		return b
	case e.crowd[a] > e.crowd[b]:
		return a
	case e.crowd[b] > e.crowd[a]:
		return b
	case rng.IntN(2) == 0:
		return a
	default:
		return b
	}
}

// dominates reports whether a Pareto-dominates b (both objectives
// minimised).
func (e *gaEngine) dominates(a, b int32) bool {
	return e.f0[a] <= e.f0[b] && e.f1[a] <= e.f1[b] && (e.f0[a] < e.f0[b] || e.f1[a] < e.f1[b])
}

// survive keeps n members of e.pop by non-dominated rank and crowding
// distance (pymoo RankAndCrowdingSurvival), setting rank and crowding of
// every member of the fronts it looks at, and releases the others.
func (e *gaEngine) survive(rng *rand.Rand, n int) {
	m := len(e.pop)
	// Lexicographic order of the objectives, ties in population order (a
	// stable sort, done as an unstable one on keys that end with the
	// position).
	e.keys = gaGrow(e.keys, m)
	for i, s := range e.pop {
		e.keys[i] = gaKey{a: e.f0[s], b: e.f1[s], pos: int32(i), slot: s}
	}
	slices.SortFunc(e.keys, gaCompareKeys)
	e.order = gaGrow(e.order, m)
	for i := range e.keys {
		e.order[i] = e.keys[i].slot
	}

	// Non-dominated sorting for two objectives: in lexicographic order a
	// point belongs to the first front none of whose members dominates it,
	// and the fronts that dominate it form a prefix, so a binary search
	// finds its front. A front's members dominate the point exactly when
	// its smallest f1 is below the point's, or equal with a smaller f0.
	e.fid = gaGrow(e.fid, m)
	e.frontMin1, e.frontMin1F0 = e.frontMin1[:0], e.frontMin1F0[:0]
	for i, s := range e.order {
		f0, f1 := e.f0[s], e.f1[s]
		lo, hi := 0, len(e.frontMin1)
		for lo < hi {
			mid := (lo + hi) / 2
			if m1 := e.frontMin1[mid]; m1 < f1 || (m1 == f1 && e.frontMin1F0[mid] < f0) {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		switch {
		case lo == len(e.frontMin1):
			e.frontMin1 = append(e.frontMin1, f1)
			e.frontMin1F0 = append(e.frontMin1F0, f0)
		case f1 < e.frontMin1[lo]:
			e.frontMin1[lo], e.frontMin1F0[lo] = f1, f0
		}
		e.fid[i] = int32(lo)
	}
	// Group by front, keeping the lexicographic order inside each front.
	nf := len(e.frontMin1)
	e.frontEnd = gaGrow(e.frontEnd, nf+1)
	clear(e.frontEnd)
	for _, k := range e.fid {
		e.frontEnd[k+1]++
	}
	for k := range nf {
		e.frontEnd[k+1] += e.frontEnd[k]
	}
	e.byFront = gaGrow(e.byFront, m)
	e.tmp = gaGrow(e.tmp, nf)
	copy(e.tmp, e.frontEnd[:nf])
	for i, s := range e.order {
		k := e.fid[i]
		e.byFront[e.tmp[k]] = s
		e.tmp[k]++
	}

	e.surv = e.surv[:0]
	for k := 0; k < nf && len(e.surv) < n; k++ {
		members := e.byFront[e.frontEnd[k]:e.frontEnd[k+1]]
		e.crowding(members)
		for _, s := range members {
			e.rank[s] = int32(k)
		}
		if len(e.surv)+len(members) > n {
			// Split front: largest crowding distance first, random
			// tie-break (pymoo randomized_argsort, descending).
			e.tmp = append(e.tmp[:0], members...)
			rng.Shuffle(len(e.tmp), func(i, j int) { e.tmp[i], e.tmp[j] = e.tmp[j], e.tmp[i] })
			e.keys = gaGrow(e.keys, len(e.tmp))
			for i, s := range e.tmp {
				e.keys[i] = gaKey{a: -e.crowd[s], pos: int32(i), slot: s}
			}
			slices.SortFunc(e.keys, gaCompareKeys)
			for i := range e.keys {
				e.tmp[i] = e.keys[i].slot
			}
			members = e.tmp[:n-len(e.surv)]
		}
		e.surv = append(e.surv, members...)
	}
	for _, s := range e.pop {
		e.keep[s] = false
	}
	for _, s := range e.surv {
		e.keep[s] = true
	}
	for _, s := range e.pop {
		if !e.keep[s] {
			e.release(s)
		}
	}
	e.pop = append(e.pop[:0], e.surv...)
}

// gaKey is a sort key: a, then b, then pos, which makes every key
// distinct, so that any sort gives the order of a stable sort on (a, b).
type gaKey struct {
	a, b      float64
	pos, slot int32
}

func gaCompareKeys(x, y gaKey) int {
	switch {
	case x.a < y.a:
		return -1
	case x.a > y.a:
		return 1
	case x.b < y.b:
		return -1
	case x.b > y.b:
		return 1
	}
	return int(x.pos - y.pos)
}

// crowding sets the crowding distance of the members of one front, given
// in lexicographic objective order (pymoo nsga2.calc_crowding_distance):
// fronts of at most two points and the two extreme points get
// gaCrowdingInf; repeated objective vectors count once, their repeats get
// 0; an inner point gets the mean over objectives of the normalised gap
// between its neighbours. In a front of two objectives, distinct points
// sorted by f0 ascending are sorted by f1 descending, which this uses.
func (e *gaEngine) crowding(members []int32) {
	if len(members) <= 2 {
		for _, s := range members {
			e.crowd[s] = gaCrowdingInf
		}
		return
	}
	u := e.uniq[:0]
	for i, s := range members {
		if i > 0 {
			p := members[i-1]
			if e.f0[s] == e.f0[p] && e.f1[s] == e.f1[p] {
				e.crowd[s] = 0
				continue
			}
		}
		u = append(u, s)
	}
	e.uniq = u
	nu := len(u)
	if nu == 1 {
		// pymoo divides by a zero range here and maps the NaN to 0.
		e.crowd[u[0]] = 0
		return
	}
	norm0 := e.f0[u[nu-1]] - e.f0[u[0]]
	norm1 := e.f1[u[0]] - e.f1[u[nu-1]]
	e.crowd[u[0]], e.crowd[u[nu-1]] = gaCrowdingInf, gaCrowdingInf
	for i := 1; i < nu-1; i++ {
		d0 := (e.f0[u[i+1]] - e.f0[u[i-1]]) / norm0
		d1 := (e.f1[u[i-1]] - e.f1[u[i+1]]) / norm1
		e.crowd[u[i]] = (d0 + d1) / 2
	}
}

// gaMix is a 64-bit finaliser (SplitMix64's), used to hash states.
func gaMix(h uint64) uint64 {
	h = (h ^ h>>30) * 0xbf58476d1ce4e5b9
	h = (h ^ h>>27) * 0x94d049bb133111eb
	return h ^ h>>31
}

// gaSkip draws the number of failures before the next success of
// independent Bernoulli trials with success probability p, given
// scale = gaSkipScale(p) = −1/log(1 − p): a geometric variate,
// floor(E·scale) for E exponential with rate 1 (equivalently
// floor(log(U)/log(1 − p)) for U uniform on (0, 1]). Walking an index by
// 1 + gaSkip visits each position with probability p, as one uniform draw
// per position would, with one cheap draw per success instead. scale = 0
// (p = 1) always succeeds; scale = +Inf (p = 0) never does.
func gaSkip(rng *rand.Rand, scale float64) int {
	v := rng.ExpFloat64() * scale
	if v >= math.MaxInt32 {
		return math.MaxInt32
	}
	return int(v)
}

// gaSkipScale returns −1/log(1 − p) for gaSkip.
func gaSkipScale(p float64) float64 {
	if p <= 0 {
		return math.Inf(1)
	}
	if p >= 1 {
		return 0
	}
	return -1 / math.Log1p(-p)
}

// frontDigest hashes the objectives of the population's first front (in
// the order of the first objective), to tell whether a generation
// changed it.
func (e *gaEngine) frontDigest() uint64 {
	var h uint64
	for _, m := range e.pop {
		if e.rank[m] != 0 {
			continue
		}
		// Order-independent: the sum of mixed hashes of the points.
		h += gaMix(math.Float64bits(e.f0[m])*0x9e3779b97f4a7c15 ^ math.Float64bits(e.f1[m]))
	}
	return h
}
