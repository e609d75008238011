package pollux

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pollux-nomad/pollux/policy"
)

// polluxProblem is one round's optimisation problem of PolluxSched: the
// jobs (rows, in priority order) and nodes (columns, in input order), the
// current allocation, the speedup tables, and the genetic operators that
// act on a jobs × nodes matrix A, A[j][n] = GPUs of job j on node n
// (Pollux, OSDI '21, §4.2; artifact simulator/pollux.py class Problem).
// It implements gaOps and stores the states. Its buffers are reused across
// rounds.
//
// A state is stored sparse (spState): a job rarely spans more than a few
// nodes, so the operators cost O(jobs + non-zero entries + nodes) per
// state instead of O(jobs × nodes): a round at 4,096 GPUs and 2,880 jobs
// takes about 1.5 CPU-seconds instead of 30.
type polluxProblem struct {
	rows, cols int

	capacity []int32   // per node: GPUs
	maxRep   []int32   // per job: MaxReplicas capped at the cluster size
	minRep   []int32   // per job: MinReplicas
	maxNodes int32     // nodes one job may span
	base     spState   // the current allocation
	factor   []float64 // per job: factor of a changed allocation
	// typeMaxRep holds, per job and type (row j*ntypes+t), the most GPUs
	// of type t the job may hold, when typeCapped: on a typed cluster
	// where some job's TypedMaxReplicas is below both its maxRep and the
	// GPUs of the type.
	typeMaxRep []int32
	typeCapped bool
	// Per job: the factor of a changed allocation with more GPUs than the
	// current one (differs from factor by GrowthHysteresis), and the
	// current allocation's GPUs.
	growFactor []float64
	baseSum    []int32
	// rowConst holds, per job, what repairEval reads of the above in
	// one place.
	rowConst []polluxRowConst
	scale    float64 // d·#nodes = #nodes / total GPUs
	p        float64 // power-mean exponent
	avoid    bool    // interference avoidance
	quirk    bool    // keep the artifact's interference quirk

	// GPU types (heterogeneous clusters): ntypes distinct Node.Type
	// values, nodeType the index of each node's type, typeNodes the nodes
	// of each type in node order. typed is ntypes > 1; then a job keeps
	// the GPUs of one type only (repair) and the mutation may move a job
	// to another type. On a cluster of one type nothing of this runs and
	// the search draws the same random numbers as the untyped one.
	ntypes    int
	typed     bool
	nodeType  []int32
	typeNodes [][]int32
	skipMove  float64 // gaSkipScale of the per-job type-move probability
	// typeSpeed is, per type, the mean over jobs with models of their
	// one-GPU goodput on the type over their base (1 where no job has a
	// model): the stand-in speed of a job without a model.
	typeSpeed []float64
	// jobSpeed is, per job and type (row j*ntypes+t), the speed of a job
	// without a model on the type: its probed one-GPU speed relative to
	// its mean over the types (Job.ProbeSpeed), else typeSpeed.
	jobSpeed []float64
	// cnt0 is, per node, the distributed jobs on it outside the problem
	// (pinned while restoring): the start of interference avoidance's
	// count.
	cnt0 []int32
	// wholeNodes gives a job spanning several nodes whole nodes only
	// (Config.WholeNodes).
	wholeNodes bool

	// weight (nil: all 1) weighs each job's term of the fitness; wsum is
	// their sum.
	weight []float64
	wsum   float64

	// Speedup tables: job j's SPEEDUP(nn nodes, k GPUs) on GPU type t has
	// the bits of a float64 in table[tabOff[j·ntypes+t] + nn·tabStride[j]
	// + k], computed on first
	// use (polluxUnset until then). Workers read and write it atomically;
	// modelMu serialises the models, which are not safe for concurrent
	// use.
	models      []policy.GoodputModel // per job and type: models[j·ntypes+t]
	baseGoodput []float64
	// knee is StandInKnee on a typed cluster (0: linear stand-in).
	knee      int
	fairK     float64
	table     []uint64
	tabOff    []int32
	tabStride []int32
	modelMu   sync.Mutex

	// Geometric-skip scales (gaSkipScale) for the mutation.
	skip10   float64   // p = 0.1
	skipJobs float64   // p = 1/#jobs
	skipPres []float64 // p = 1/a, a = 0..#jobs

	// State storage: slot s of the engine is states[s]; seeds holds the
	// nSeeds seed states of the round.
	states []spState
	seeds  []spState

	// workers holds one scratch space per evaluating goroutine; the
	// serial operators use workers[0]. parallel is the number used.
	workers  []*polluxWorker
	parallel int
	// batchDone receives one token per parallel batch, from whoever
	// finishes its last pair.
	batchDone chan struct{}
}

// polluxRowConst is what repairEval reads of job j's constants: the
// factors, the replica bounds and GPUs of the current allocation, and
// where its row of the current allocation lies in base.ent.
type polluxRowConst struct {
	factor, growFactor      float64
	maxRep, minRep, baseSum int32
	base0, base1            int32
}

// polluxWorker is the scratch space of one goroutine evaluating states.
type polluxWorker struct {
	// pcg is the worker's random state, written by every draw: it lives
	// in the worker, away from the other workers' (two PCGs allocated
	// one after the other would share a cache line and slow both
	// goroutines down).
	pcg rand.PCG
	rng *rand.Rand
	tmp spState

	used      []int32
	colsum    []int32
	cnt       []int32
	presStart []int32
	pres      []int32
	hits      []int32
	adds      []uint64
	rowbuf    []uint32
	idx       []int32
	// Per job, the last two (nodes, GPUs) looked up and their speedups
	// (at 2j and 2j+1): rows change little between states, and the full
	// table does not fit in the cache at thousands of jobs.
	lastKey []int64
	lastVal []float64
	// typeGPUs counts a row's GPUs per type (typed clusters).
	typeGPUs []int32
	_        [64]byte // keeps the next allocation off the last cache line
}

// polluxSpin is how long the caller of a parallel batch polls for the
// helpers' last pairs before it sleeps.
const polluxSpin = 5 * time.Microsecond

// polluxUnset marks a speedup not computed yet (a NaN's bits).
const polluxUnset = ^uint64(0)

// resize sizes the worker's scratch for rows jobs and cols nodes.
func (w *polluxWorker) resize(rows, cols int) {
	if w.rng == nil {
		w.rng = rand.New(&w.pcg)
	}
	w.used = gaGrow(w.used, cols)
	w.colsum = gaGrow(w.colsum, cols)
	w.cnt = gaGrow(w.cnt, cols)
	w.presStart = gaGrow(w.presStart, cols+1)
	w.lastKey = gaGrow(w.lastKey, 2*rows)
	for i := range w.lastKey {
		w.lastKey[i] = -1
	}
	w.lastVal = gaGrow(w.lastVal, 2*rows)
}

// spState is one sparse state: row j's non-zero entries are
// ent[start[j]:start[j+1]], each node<<8 | GPUs, in increasing node order.
// After mutation and repair no entry holds 0 GPUs, so equal matrices have
// equal encodings.
type spState struct {
	start []int32
	ent   []uint32
}

// spNode and spGPUs unpack an entry.
func spNode(e uint32) int32 { return int32(e >> 8) }
func spGPUs(e uint32) int32 { return int32(e & 0xff) }

// spEntry packs an entry.
func spEntry(n, v int32) uint32 { return uint32(n)<<8 | uint32(v) }

// row returns row j's entries.
func (s *spState) row(j int) []uint32 { return s.ent[s.start[j]:s.start[j+1]] }

// changes counts the jobs whose row in x differs from the current
// allocation's.
func (pr *polluxProblem) changes(x *spState) int {
	n := 0
	for j := range pr.rows {
		if !slices.Equal(x.row(j), pr.base.row(j)) {
			n++
		}
	}
	return n
}

// copyFrom makes s a copy of o.
func (s *spState) copyFrom(o *spState) {
	s.start = append(s.start[:0], o.start...)
	s.ent = append(s.ent[:0], o.ent...)
}

// pack appends to dst row j of x with its GPUs on as few nodes as the
// other rows of x leave room for (the row's own GPUs count as free), then
// sorted by node as a row is. While no node holds what is left to place,
// it takes the node with the most free GPUs; the rest goes to the node
// whose free GPUs fit it most tightly, so that whole free nodes stay whole
// for the jobs that need them. If the packed row spans several nodes, its
// nodes hold no other distributed job (interference avoidance would take
// the GPUs back). On ties, nodes the row already uses come first, then
// node order. Nodes of another GPU type than the row's first node's are
// not used.
func (pr *polluxProblem) pack(dst []uint32, x *spState, j int) []uint32 {
	free := make([]int32, pr.cols)
	copy(free, pr.capacity[:pr.cols])
	dist := make([]bool, pr.cols)
	for n := range pr.cols {
		dist[n] = pr.avoid && n < len(pr.cnt0) && pr.cnt0[n] > 0
	}
	for k := range pr.rows {
		if k == j {
			continue
		}
		r := x.row(k)
		for _, e := range r {
			free[spNode(e)] -= spGPUs(e)
			if pr.avoid && len(r) > 1 {
				dist[spNode(e)] = true
			}
		}
	}
	row := x.row(j)
	var need int32
	own := make(map[int32]bool, len(row))
	for _, e := range row {
		need += spGPUs(e)
		own[spNode(e)] = true
	}
	typ := pr.nodeType[spNode(row[0])]
	var nodes []int32
	for n := range int32(pr.cols) {
		if free[n] > 0 && (!pr.typed || pr.nodeType[n] == typ) {
			free[n] = min(free[n], polluxMaxNodeGPUs)
			nodes = append(nodes, n)
		}
	}
	// better tells whether node a is a better choice than node b for the
	// next part of the row, need GPUs still to place.
	better := func(a, b int32, need int32) bool {
		fa, fb := free[a] >= need, free[b] >= need
		if fa != fb {
			return fa
		}
		if free[a] != free[b] {
			if fa {
				return free[a] < free[b]
			}
			return free[a] > free[b]
		}
		if own[a] != own[b] {
			return own[a]
		}
		return a < b
	}
	start := len(dst)
	for need > 0 {
		pick := int32(-1)
		for _, n := range nodes {
			if free[n] == 0 {
				continue
			}
			// A part that leaves GPUs to place elsewhere, or the last
			// part of a row already on other nodes, makes the row
			// distributed: nodes with another distributed job are out.
			if dist[n] && (free[n] < need || len(dst) > start) {
				continue
			}
			if pick < 0 || better(n, pick, need) {
				pick = n
			}
		}
		if pick < 0 {
			break
		}
		v := min(free[pick], need)
		dst = append(dst, spEntry(pick, v))
		free[pick] = 0
		need -= v
	}
	if need > 0 {
		// Not placeable without interference: leave the row as it is.
		return append(dst[:start], row...)
	}
	slices.Sort(dst[start:])
	return dst
}

// withRow makes s a copy of src (rows rows) with row j replaced by row.
func (s *spState) withRow(src *spState, j int, row []uint32, rows int) {
	s.start = gaGrow(s.start, rows+1)
	copy(s.start[:j+1], src.start[:j+1])
	s.ent = append(append(s.ent[:0], src.ent[:src.start[j]]...), row...)
	d := int32(len(s.ent)) - src.start[j+1]
	s.ent = append(s.ent, src.ent[src.start[j+1]:src.start[rows]]...)
	for k := j + 1; k <= rows; k++ {
		s.start[k] = src.start[k] + d
	}
}

// equal reports whether s and o encode the same matrix.
func (s *spState) equal(o *spState) bool {
	return slices.Equal(s.start, o.start) && slices.Equal(s.ent, o.ent)
}

// polluxRestartFactor is the restart penalty of Pollux (OSDI '21, §4.2,
// REALLOC_FACTOR; artifact pollux.py _evaluate): a job whose allocation
// changes has its scaled speedup multiplied by max(T − R·δ, 0)/(T + δ),
// with T its age, R its restarts so far and δ the restart delay. With
// T + δ = 0 (δ = 0 for a brand-new job) there is nothing to penalise and
// the factor is 1.
func polluxRestartFactor(age float64, restarts int, delta float64) float64 {
	den := age + delta
	if den <= 0 {
		return 1
	}
	return max(age-float64(restarts)*delta, 0) / den
}

// speedup returns SPEEDUP_j(nn, k) = GOODPUT_j(nn, k)/base_j, with the
// fair-share base (Pollux, OSDI '21, §4.1; artifact speedup.py and
// pollux.py Problem.__init__). SPEEDUP(0, 0) = 0. Jobs without a model get
// the artifact's linear stand-in k/K_f.
func (pr *polluxProblem) speedup(w *polluxWorker, j int, t, nn, k int32) float64 {
	if k == 0 {
		return 0
	}
	key := int64(t)<<40 | int64(nn)<<20 | int64(k)
	if w.lastKey[2*j] == key {
		return w.lastVal[2*j]
	}
	return pr.speedupMiss(w, j, t, nn, k, key)
}

// speedupMiss is speedup past its first cache entry.
func (pr *polluxProblem) speedupMiss(w *polluxWorker, j int, t, nn, k int32, key int64) float64 {
	if w.lastKey[2*j+1] == key {
		return w.lastVal[2*j+1]
	}
	i := pr.tabOff[j*pr.ntypes+int(t)] + nn*pr.tabStride[j] + k
	b := atomic.LoadUint64(&pr.table[i])
	if b == polluxUnset {
		pr.modelMu.Lock()
		if b = atomic.LoadUint64(&pr.table[i]); b == polluxUnset {
			b = math.Float64bits(pr.computeSpeedup(j, int(t), int(nn), int(k)))
			atomic.StoreUint64(&pr.table[i], b)
		}
		pr.modelMu.Unlock()
	}
	v := math.Float64frombits(b)
	// Two entries per job, the older one evicted.
	w.lastKey[2*j+1], w.lastVal[2*j+1] = w.lastKey[2*j], w.lastVal[2*j]
	w.lastKey[2*j], w.lastVal[2*j] = key, v
	return v
}

func (pr *polluxProblem) computeSpeedup(j, t, nn, k int) float64 {
	m := pr.models[j*pr.ntypes+t]
	if m == nil {
		if pr.typed {
			// Linear, at the type's speed relative to the others as
			// measured on the jobs that have models (typeSpeed) or by
			// the job's probes (jobSpeed); past the knee each GPU counts
			// StandInKneeSlope of one.
			kk := float64(k)
			if knee := pr.knee; knee > 0 && k > knee {
				kk = float64(knee) + StandInKneeSlope*float64(k-knee)
			}
			return kk / pr.fairK * pr.jobSpeed[j*pr.ntypes+t]
		}
		return float64(k) / pr.fairK
	}
	g := m.Goodput(nn, k)
	if !(g > 0) || math.IsInf(g, 0) {
		// A model that cannot place the job this way (or misbehaves) gives
		// no speedup, as the artifact's batch-size search scores invalid
		// configurations 0.
		return 0
	}
	return g / pr.baseGoodput[j]
}

// pinnedNodes sets cnt0 from the nodes of the distributed jobs taken out
// of the problem (splitRestoring).
func (pr *polluxProblem) pinnedNodes(in policy.Input, nodes map[string]bool) {
	pr.cnt0 = gaGrow(pr.cnt0, pr.cols)
	for n, node := range in.Nodes {
		pr.cnt0[n] = 0
		if nodes[node.ID] {
			pr.cnt0[n] = 1
		}
	}
}

// ensure makes room for slots states.
func (pr *polluxProblem) ensure(slots int) {
	if len(pr.states) < slots {
		pr.states = append(pr.states, make([]spState, slots-len(pr.states))...)
	}
}

// loadSeed copies seed i into slot s.
func (pr *polluxProblem) loadSeed(s int32, i int) { pr.states[s].copyFrom(&pr.seeds[i]) }

// equal reports whether slots s and t hold the same state.
func (pr *polluxProblem) equal(s, t int32) bool { return pr.states[s].equal(&pr.states[t]) }

// mutate is the mutation of the artifact's Problem._mutation, on one
// state: (1) each job's row is reset to the current allocation with
// probability 0.1; (2) with probability 0.1 per row, each element of the
// row is zeroed with probability 0.1; (3) on every node with at least one
// free GPU after (1)–(2), element (j, n) is redrawn uniformly in
// [A[j][n], capacity(n)] with probability q1 + q2 − q1·q2, where
// q1 = 1/#jobs (every job fits on a node with a free GPU) and
// q2 = 1/#jobs already on node n for those jobs, 0 for the others. The
// Bernoulli trials are drawn with geometric skips (gaSkip), which gives
// every element the same probability as one uniform per element would
// (zeroing a zero element changes nothing, so step (2) visits only the
// non-zero ones); in (3) an element on a node with a jobs is hit by the q2
// walk over those jobs or the q1 walk over all jobs, independently, so
// with probability 1 − (1 − q1)(1 − q2). The result may exceed node
// capacities; repair fixes that.
func (pr *polluxProblem) mutate(rng *rand.Rand, s int32) { pr.mutateWith(pr.workers[0], rng, s) }

func (pr *polluxProblem) mutateWith(w *polluxWorker, rng *rand.Rand, s int32) {
	pr.crossMutate(w, rng, s, s, s, 0)
}

// crossMutate writes into slot s the mutation of the crossover of head
// and tail cut before row cut (rows [0, cut) of head, the others of
// tail; see crossover), without writing the crossover out first. Slot s
// may be head or tail only with cut = 0.
func (pr *polluxProblem) crossMutate(w *polluxWorker, rng *rand.Rand, s, head, tail int32, cut int) {
	rows, cols := pr.rows, pr.cols
	// out is a local copy of slot s's header, stored back at the end:
	// the headers of neighbouring slots, which other workers write, share
	// its cache line.
	outState := pr.states[s]
	out, dst := &outState, &w.tmp
	dst.start = gaGrow(dst.start, rows+1)
	dst.ent = dst.ent[:0]
	// (1) and (2) while copying the source rows into dst; runs of rows
	// that neither step touches are copied at once.
	reset := gaSkip(rng, pr.skip10)
	zero := gaSkip(rng, pr.skip10)
	j := 0
	for j < rows {
		src := &pr.states[tail]
		if j < cut {
			src = &pr.states[head]
		}
		if j != reset && j != zero {
			end := min(reset, zero, rows)
			if j < cut {
				end = min(end, cut)
			}
			delta := int32(len(dst.ent)) - src.start[j]
			for k := j; k < end; k++ {
				dst.start[k] = src.start[k] + delta
			}
			dst.ent = append(dst.ent, src.ent[src.start[j]:src.start[end]]...)
			j = end
			continue
		}
		dst.start[j] = int32(len(dst.ent))
		var r []uint32
		if j == reset {
			r = pr.base.row(j)
			reset += 1 + gaSkip(rng, pr.skip10)
		} else {
			r = src.row(j)
		}
		if j == zero {
			zero += 1 + gaSkip(rng, pr.skip10)
			k := gaSkip(rng, pr.skip10)
			for i, e := range r {
				if i == k {
					k += 1 + gaSkip(rng, pr.skip10)
					continue
				}
				dst.ent = append(dst.ent, e)
			}
		} else {
			dst.ent = append(dst.ent, r...)
		}
		j++
	}
	dst.start[rows] = int32(len(dst.ent))
	// Column sums and, per node, the entries on it in job order.
	colsum, presStart := w.colsum, w.presStart
	clear(colsum)
	clear(presStart)
	for _, e := range dst.ent {
		n := spNode(e)
		colsum[n] += spGPUs(e)
		presStart[n+1]++
	}
	anyFree := false
	for n := range cols {
		presStart[n+1] += presStart[n]
		anyFree = anyFree || pr.capacity[n]-colsum[n] >= 1
	}
	pres := gaGrow(w.pres, len(dst.ent))
	w.pres = pres
	if anyFree { // else step (3) below reads no list
		fill := w.used // scratch: next free position per node
		copy(fill, presStart[:cols])
		for i, e := range dst.ent {
			n := spNode(e)
			pres[fill[n]] = int32(i)
			fill[n]++
		}
	}
	// (3) Increase some elements on nodes with free GPUs.
	adds := w.adds[:0]
	// The q1 walks of all nodes with free GPUs are one walk over the
	// concatenation of their job ranges: the same trials, one draw per hit
	// (plus one) instead of at least one per node.
	q1 := int64(gaSkip(rng, pr.skipJobs))
	var offset int64 // start of the current node's range in the walk
	for n := range int32(cols) {
		limit := pr.capacity[n]
		if limit-colsum[n] < 1 {
			continue
		}
		hits := w.hits[:0]
		on := pres[presStart[n]:presStart[n+1]]
		if a := len(on); a > 0 {
			sc := pr.skipPres[a]
			for i := gaSkip(rng, sc); i < a; i += 1 + gaSkip(rng, sc) {
				ei := on[i]
				// The job of entry ei: the last row starting at or before it.
				row, _ := slices.BinarySearch(dst.start[:rows+1], ei+1)
				hits = append(hits, int32(row-1))
				spRaise(rng, &dst.ent[ei], limit)
			}
		}
		for ; q1 < offset+int64(rows); q1 += 1 + int64(gaSkip(rng, pr.skipJobs)) {
			j := int(q1 - offset)
			if slices.Contains(hits, int32(j)) {
				continue
			}
			found := false
			for i := dst.start[j]; i < dst.start[j+1]; i++ {
				if m := spNode(dst.ent[i]); m >= n {
					if m == n {
						spRaise(rng, &dst.ent[i], limit)
						found = true
					}
					break
				}
			}
			if !found {
				// numpy's randint(0, capacity + 1) on a zero element.
				if v := rng.Int32N(limit + 1); v > 0 {
					adds = append(adds, uint64(j)<<32|uint64(spEntry(n, v)))
				}
			}
		}
		offset += int64(rows)
		w.hits = hits
	}
	w.adds = adds
	if len(adds) == 0 {
		pr.states[s], w.tmp = w.tmp, pr.states[s]
		return
	}
	// Merge the new entries into their rows, writing into slot s.
	slices.Sort(adds)
	out.start = gaGrow(out.start, rows+1)
	out.ent = out.ent[:0]
	copyRows := func(from, to int) { // rows [from, to) of dst, unchanged
		delta := int32(len(out.ent)) - dst.start[from]
		for k := from; k < to; k++ {
			out.start[k] = dst.start[k] + delta
		}
		out.ent = append(out.ent, dst.ent[dst.start[from]:dst.start[to]]...)
	}
	done := 0
	for ai := 0; ai < len(adds); {
		j := int(adds[ai] >> 32)
		copyRows(done, j)
		out.start[j] = int32(len(out.ent))
		r := dst.row(j)
		for ; ai < len(adds) && int(adds[ai]>>32) == j; ai++ {
			e := uint32(adds[ai])
			for len(r) > 0 && r[0] < e {
				out.ent = append(out.ent, r[0])
				r = r[1:]
			}
			out.ent = append(out.ent, e)
		}
		out.ent = append(out.ent, r...)
		done = j + 1
	}
	copyRows(done, rows)
	out.start[rows] = int32(len(out.ent))
	pr.states[s] = outState
}

// breed crosses over, mutates, repairs and evaluates a batch of children
// (gaOps.breed). The unit of work is a parent pair: its crossover writes
// both children, which are then mutated, repaired and evaluated, child c
// with its own random stream PCG(seeds[c], c), so the result does not
// depend on how many goroutines share the work or in which order they
// take it.
//
// With several workers, the calling goroutine takes pairs too, and the
// pairs are handed out one at a time from a shared counter rather than
// split in advance: on a machine whose cores are busy with other work, a
// helper that is not scheduled in time takes fewer pairs (or none)
// instead of holding up the generation, and the caller waits only for
// pairs already taken.
func (pr *polluxProblem) breed(slots, parents, cuts []int32, seeds []uint64, f0, f1 []float64, hash []uint64) {
	n := len(cuts)
	one := func(w *polluxWorker, i int) {
		a, b := parents[2*i], parents[2*i+1]
		for k, c := range [2]int{i, n + i} {
			s := slots[c]
			w.pcg.Seed(seeds[c], uint64(c))
			// The first child takes rows [0, cut) from b, the second
			// from a (crossover).
			if k == 0 {
				pr.crossMutate(w, w.rng, s, b, a, int(cuts[i]))
			} else {
				pr.crossMutate(w, w.rng, s, a, b, int(cuts[i]))
			}
			if pr.typed {
				pr.moveTypes(w, w.rng, s)
			}
			f0[s], f1[s], hash[s] = pr.repairEvalWith(w, w.rng, s)
		}
	}
	nw := min(pr.parallel, n)
	if nw <= 1 {
		for i := range n {
			one(pr.workers[0], i)
		}
		return
	}
	// A helper that starts after the batch is over finds the counter
	// exhausted and leaves without touching its scratch space, so one
	// batch's late helper and the next batch's helper never share it.
	b := &polluxBatch{n: int32(n)}
	work := func(w *polluxWorker) {
		for {
			i := b.next.Add(1) - 1
			if i >= b.n {
				return
			}
			one(w, int(i))
			if b.done.Add(1) == b.n {
				pr.batchDone <- struct{}{}
			}
		}
	}
	for k := 1; k < nw; k++ {
		go work(pr.workers[k])
	}
	work(pr.workers[0])
	// The helpers' last pairs usually end within microseconds, sooner
	// than a sleeping goroutine is woken: spin a little first.
	for t0 := time.Now(); b.done.Load() < b.n && time.Since(t0) < polluxSpin; {
	}
	<-pr.batchDone
}

// polluxBatch hands out the pairs of one parallel batch.
type polluxBatch struct {
	next, done atomic.Int32 // pairs taken and finished
	n          int32
}

// spRaise redraws an entry's GPUs uniformly in [GPUs, limit] (numpy's
// randint(states, max_replicas + 1)); a value already at or above the
// limit is left alone.
func spRaise(rng *rand.Rand, e *uint32, limit int32) {
	cur := spGPUs(*e)
	if cur < limit {
		*e = spEntry(spNode(*e), cur+rng.Int32N(limit-cur+1))
	}
}

// repairEval repairs slot s in place, in the artifact's order (pollux.py
// Problem._repair), and evaluates it (Problem._evaluate):
//
//	(a) interference avoidance, unless disabled: a job is distributed if it
//	    spans more than one node; on each node, counting in job order, the
//	    entry of the second distributed job present is zeroed, and, with
//	    ArtifactInterferenceQuirk, the entries of every job after it too
//	    (pollux.py lines 386–390);
//	(b) at most MaxReplicas GPUs per job (on a typed cluster, at most
//	    its cap on the type it keeps, Job.TypedMaxReplicas), trimming
//	    nodes in random order;
//	(c) at most maxNodes nodes per job (16 in the artifact), in the same
//	    random order, counted after (b);
//	(d) node capacity: in job priority order, each job gets at most what
//	    is left on each node, so lower-priority jobs lose GPUs first;
//	(e) a job left with fewer than MinReplicas GPUs gets none (its GPUs
//	    stay counted in (d) for the jobs after it, as in the artifact).
//
// Steps (a) to (e) for job j depend only on rows ≤ j, so one pass in job
// order does them all, compacting the entries forwards. The hash adds up a
// mix of each allocated row's index and entries. The objectives, both
// minimised, are −FITNESS_p and −UTILITY (Pollux, OSDI '21, §4.2; artifact
// Problem._evaluate and get_cluster_utilities):
//
//	S_j        = SPEEDUP_j(A_j)·d·#nodes, times the restart factor if row j
//	             differs from the current allocation;
//	FITNESS_p  = ((1/J)·Σ_j (S_j + 1e−3)^p)^(1/p), or with
//	             Config.ServiceWeight the weighted power mean
//	             ((Σ_j w_j·(S_j + 1e−3)^p)/Σ_j w_j)^(1/p);
//	UTILITY    = Σ_j SPEEDUP_j(A_j) / (GPUs of the nodes in use).
func (pr *polluxProblem) repairEval(rng *rand.Rand, s int32) (float64, float64, uint64) {
	return pr.repairEvalWith(pr.workers[0], rng, s)
}

func (pr *polluxProblem) repairEvalWith(wk *polluxWorker, rng *rand.Rand, s int32) (float64, float64, uint64) {
	// A local copy of the slot's header: the headers of neighbouring
	// slots, which other workers write, share its cache line.
	st := pr.states[s]
	x := &st
	rows := pr.rows
	avoid, quirk := pr.avoid, pr.quirk
	used, colsum, capacity, cnt := wk.used, wk.colsum, pr.capacity, wk.cnt
	clear(used)
	clear(colsum)
	if avoid {
		clear(cnt)
		copy(cnt, pr.cnt0)
	}
	var acc, util float64
	var hash uint64
	w := int32(0)
	next := x.start[0]
	empty := polluxPowerTerm(1e-3, pr.p) // the term of a job without GPUs
	for j := range rows {
		r0, r1 := next, x.start[j+1]
		next = r1
		x.start[j] = w
		if r0 == r1 {
			acc += pr.w(j) * empty
			continue
		}
		row := x.ent[r0:r1]
		jc := &pr.rowConst[j]
		var sum, nz int32
		rowHash := uint64(j)
		if len(row) == 1 && !pr.typed {
			// The usual row, one node: steps (a) to (d) without the row
			// buffer (trim keeps min(GPUs, MaxReplicas) of a single entry
			// and draws nothing).
			e := row[0]
			n, v := spNode(e), spGPUs(e)
			if avoid && quirk && cnt[n] >= 2 {
				v = 0
			}
			v = min(v, jc.maxRep, capacity[n]-used[n])
			used[n] += v
			if v > 0 {
				colsum[n] += v
				sum, nz = v, 1
				e = spEntry(n, v)
				x.ent[w] = e
				w++
				rowHash = rowHash*0x9e3779b97f4a7c15 + uint64(e)
			}
		} else {
			sum, nz, w, rowHash = pr.repairRow(wk, rng, x, j, row, w, rowHash)
		}
		// (e) Minimum replicas; with WholeNodes, a job on several nodes
		// must hold all of each one's GPUs.
		partial := false
		if pr.wholeNodes && nz > 1 {
			for _, e := range x.ent[w-nz : w] {
				partial = partial || spGPUs(e) != capacity[spNode(e)]
			}
		}
		if sum != 0 && (sum < jc.minRep || partial) {
			for _, e := range x.ent[w-nz : w] {
				colsum[spNode(e)] -= spGPUs(e)
			}
			w -= nz
			sum, nz = 0, 0
		}
		if sum == 0 {
			// SPEEDUP(0, 0) = 0, with or without a restart penalty.
			acc += pr.w(j) * empty
			continue
		}
		hash += gaMix(rowHash)
		t := int32(0)
		if pr.typed {
			t = pr.nodeType[spNode(x.ent[w-nz])]
		}
		// pr.speedup(wk, j, t, nz, sum), its first cache entry inlined.
		var sp float64
		if key := int64(t)<<40 | int64(nz)<<20 | int64(sum); wk.lastKey[2*j] == key {
			sp = wk.lastVal[2*j]
		} else {
			sp = pr.speedupMiss(wk, j, t, nz, sum, key)
		}
		util += sp
		scaled := sp * pr.scale
		if !slices.Equal(x.ent[w-nz:w], pr.base.ent[jc.base0:jc.base1]) {
			if sum > jc.baseSum {
				scaled *= jc.growFactor
			} else {
				scaled *= jc.factor
			}
		}
		acc += pr.w(j) * polluxPowerTerm(scaled+1e-3, pr.p)
	}
	x.start[rows] = w
	x.ent = x.ent[:w]
	pr.states[s] = st
	if pr.weight != nil {
		acc *= float64(rows) / pr.wsum
	}
	fitness := polluxPowerMean(acc, rows, pr.p)
	var occupied int32
	for n, c := range colsum {
		if c > 0 {
			occupied += capacity[n]
		}
	}
	utility := 0.0
	if occupied > 0 {
		utility = util / float64(occupied)
	}
	return -fitness, -utility, hash
}

// repairRow does steps (0) and (a) to (d) of repairEval for row j of x,
// whose entries are row, writing the entries kept at x.ent[w:]; it
// returns the GPUs and entries kept, the next write position and the row
// hash continued from rowHash.
func (pr *polluxProblem) repairRow(wk *polluxWorker, rng *rand.Rand, x *spState, j int, row []uint32, w int32, rowHash uint64) (sum, nz, next int32, hash uint64) {
	avoid, quirk := pr.avoid, pr.quirk
	used, colsum, capacity, cnt := wk.used, wk.colsum, pr.capacity, wk.cnt
	// (0) On a typed cluster, one GPU type per job: the type holding
	// most of the row's GPUs (the first node's type on ties).
	keepType := int32(-1)
	span := len(row)
	if pr.typed {
		keepType, span = pr.rowType(wk, row)
	}
	dist := avoid && span > 1
	// (a) into the row buffer.
	buf := wk.rowbuf[:0]
	var sumA int32
	for _, e := range row {
		if keepType >= 0 && pr.nodeType[spNode(e)] != keepType {
			continue
		}
		if avoid {
			n := spNode(e)
			c := cnt[n]
			if c >= 2 && quirk {
				continue
			}
			if dist {
				cnt[n] = c + 1
				if c+1 >= 2 {
					continue
				}
			}
		}
		buf = append(buf, e)
		sumA += spGPUs(e)
	}
	// (b), (c) Per-job caps; on a typed cluster the cap of the type kept.
	maxRep := pr.maxRep[j]
	if keepType >= 0 && pr.typeCapped {
		maxRep = pr.typeMaxRep[j*pr.ntypes+int(keepType)]
	}
	if sumA > maxRep || int32(len(buf)) > pr.maxNodes {
		buf = wk.trim(rng, buf, maxRep, pr.maxNodes)
	}
	wk.rowbuf = buf
	// (d) Node capacity, cumulative in job order.
	for _, e := range buf {
		n, v := spNode(e), spGPUs(e)
		if room := capacity[n] - used[n]; v > room {
			v = room
		}
		used[n] += v
		if v > 0 {
			colsum[n] += v
			sum += v
			nz++
			e = spEntry(n, v)
			x.ent[w] = e
			w++
			rowHash = rowHash*0x9e3779b97f4a7c15 + uint64(e)
		}
	}
	return sum, nz, w, rowHash
}

// rowType returns the GPU type holding most of a row's GPUs (the type of
// its first node on ties) and the number of the row's nodes of that type.
func (pr *polluxProblem) rowType(w *polluxWorker, row []uint32) (int32, int) {
	w.typeGPUs = gaGrow(w.typeGPUs, pr.ntypes)
	clear(w.typeGPUs)
	best := pr.nodeType[spNode(row[0])]
	for _, e := range row {
		t := pr.nodeType[spNode(e)]
		w.typeGPUs[t] += spGPUs(e)
		if w.typeGPUs[t] > w.typeGPUs[best] {
			best = t
		}
	}
	span := 0
	for _, e := range row {
		if pr.nodeType[spNode(e)] == best {
			span++
		}
	}
	return best, span
}

// moveTypes is the type-move mutation of a typed cluster: each job's row
// is, with probability 1/#jobs (the skipMove walk), moved to another GPU
// type drawn uniformly among the others, keeping its GPU count (at most
// its cap on the new type, typeMaxRep): its GPUs
// are laid out on consecutive nodes of that type from a random one, as
// many per node as the node holds, on at most as many nodes as before
// (repair trims what does not fit). A job without GPUs is left alone:
// step (3) of the mutation starts jobs on any type.
func (pr *polluxProblem) moveTypes(w *polluxWorker, rng *rand.Rand, s int32) {
	x := &pr.states[s]
	rows := pr.rows
	first := true
	dst := &w.tmp
	for j := gaSkip(rng, pr.skipMove); j < rows; j += 1 + gaSkip(rng, pr.skipMove) {
		row := x.row(j)
		if len(row) == 0 {
			continue
		}
		if first {
			first = false
			dst.copyFrom(x)
		}
		from := pr.nodeType[spNode(row[0])]
		to := int32(rng.IntN(pr.ntypes - 1))
		if to >= from {
			to++
		}
		var k int32
		for _, e := range row {
			k += spGPUs(e)
		}
		if pr.typeCapped {
			// Lay out no more than the job may hold of the new type, on
			// whole nodes, rather than leave repair to trim GPUs off
			// random nodes.
			k = min(k, pr.typeMaxRep[j*pr.ntypes+int(to)])
			if k == 0 {
				continue
			}
		}
		nodes := pr.typeNodes[to]
		start := rng.IntN(len(nodes))
		var ent []uint32
		for i := 0; i < len(nodes) && k > 0 && len(ent) < int(pr.maxNodes); i++ {
			n := nodes[(start+i)%len(nodes)]
			v := min(k, pr.capacity[n])
			if v <= 0 {
				continue
			}
			ent = append(ent, spEntry(n, v))
			k -= v
		}
		slices.Sort(ent)
		// Replace row j of dst by ent.
		r0, r1 := dst.start[j], dst.start[j+1]
		delta := int32(len(ent)) - (r1 - r0)
		dst.ent = slices.Replace(dst.ent, int(r0), int(r1), ent...)
		for i := j + 1; i <= rows; i++ {
			dst.start[i] += delta
		}
	}
	if !first {
		pr.states[s], w.tmp = w.tmp, pr.states[s]
	}
}

// polluxPowerTerm returns v^p, with fast paths for the usual exponents.
func polluxPowerTerm(v, p float64) float64 {
	switch p {
	case -1:
		return 1 / v
	case 1:
		return v
	}
	return math.Pow(v, p)
}

// polluxPowerMean returns (sum/n)^(1/p), the power mean of n terms whose
// p-th powers add up to sum.
func polluxPowerMean(sum float64, n int, p float64) float64 {
	m := sum / float64(n)
	switch p {
	case -1:
		return 1 / m
	case 1:
		return m
	}
	return math.Pow(m, 1/p)
}

// trim keeps at most maxRep GPUs on at most maxNodes nodes of one row's
// entries, visiting them in random order (the artifact shuffles all
// nodes; shuffling only the occupied ones gives the same distribution),
// and returns the entries left, in node order.
func (w *polluxWorker) trim(rng *rand.Rand, row []uint32, maxRep, maxNodes int32) []uint32 {
	idx := w.idx[:0]
	for i := range row {
		idx = append(idx, int32(i))
	}
	rng.Shuffle(len(idx), func(a, b int) { idx[a], idx[b] = idx[b], idx[a] })
	left, kept := maxRep, int32(0)
	for _, i := range idx {
		take := min(spGPUs(row[i]), left)
		left -= take
		if take > 0 && kept < maxNodes {
			row[i] = spEntry(spNode(row[i]), take)
			kept++
		} else {
			row[i] = spEntry(spNode(row[i]), 0)
		}
	}
	w.idx = idx
	out := row[:0]
	for _, e := range row {
		if spGPUs(e) != 0 {
			out = append(out, e)
		}
	}
	return out
}

// w returns job j's weight in the fitness.
func (pr *polluxProblem) w(j int) float64 {
	if pr.weight == nil {
		return 1
	}
	return pr.weight[j]
}
