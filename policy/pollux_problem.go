package policy

import (
	"math"
	"math/bits"
	"math/rand/v2"
)

// polluxProblem is one round's optimisation problem of PolluxSched: the
// jobs (rows, in priority order) and nodes (columns, in input order), the
// current allocation, the speedup tables, and the genetic operators that
// act on a jobs × nodes matrix A, A[j][n] = GPUs of job j on node n
// (Pollux, OSDI '21, §4.2; artifact simulator/pollux.py class Problem).
// It implements gaOps. Its buffers are reused across rounds.
//
// A state is stored row by row, each row padded with zeros to stride, a
// multiple of 8 columns, so that the operators can scan a row 8 nodes at a
// time and visit only its non-zero entries (gaNonzeroBytes). The padding
// stays zero: no operator writes past column cols.
type polluxProblem struct {
	rows, cols    int
	stride, words int // padded row length in bytes and in 8-byte words

	capacity []int32 // per node: GPUs
	maxRep   []int32 // per job: MaxReplicas capped at the cluster size
	minRep   []int32 // per job: MinReplicas
	maxNodes int32   // nodes one job may span
	base     []uint8 // the current allocation, rows × stride
	factor   []float64
	scale    float64 // d·#nodes = #nodes / total GPUs
	p        float64 // power-mean exponent
	avoid    bool    // interference avoidance
	quirk    bool    // keep the artifact's interference quirk

	// Speedup tables: job j's SPEEDUP(nn nodes, k GPUs) is
	// table[tabOff[j] + nn·tabStride[j] + k], computed on first use (−1
	// until then).
	models      []GoodputModel
	baseGoodput []float64
	fairK       float64
	table       []float64
	tabOff      []int32
	tabStride   []int32

	// Geometric-skip scales (gaSkipScale) for the mutation.
	skip10   float64   // p = 0.1
	skipJobs float64   // p = 1/#jobs
	skipPres []float64 // p = 1/a, a = 0..#jobs

	// Scratch.
	masks   []uint64
	clipped []uint32
	cnt     []int32
	used    []int32
	colsum  []int32
	presLen []int32
	pres    []int32
	hits    []int32
	idx     []int32
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
func (pr *polluxProblem) speedup(j int, nn, k int32) float64 {
	if k == 0 {
		return 0
	}
	i := pr.tabOff[j] + nn*pr.tabStride[j] + k
	v := pr.table[i]
	if v < 0 {
		v = pr.computeSpeedup(j, int(nn), int(k))
		pr.table[i] = v
	}
	return v
}

func (pr *polluxProblem) computeSpeedup(j, nn, k int) float64 {
	m := pr.models[j]
	if m == nil {
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

// mutate is the mutation of the artifact's Problem._mutation, on one
// state: (1) each job's row is reset to the current allocation with
// probability 0.1; (2) with probability 0.1 per row, each element of the
// row is zeroed with probability 0.1; (3) on every node with at least one
// free GPU after (1)–(2), element (j, n) is redrawn uniformly in
// [A[j][n], capacity(n)] with probability q1 + q2 − q1·q2, where
// q1 = 1/#jobs (every job fits on a node with a free GPU) and
// q2 = 1/#jobs already on node n for those jobs, 0 for the others. The
// Bernoulli trials are drawn with geometric skips (gaSkip), which gives
// every element the same probability as one uniform per element would; in
// (3) an element on a node with a jobs is hit by the q2 walk over those
// jobs or the q1 walk over all jobs, independently, so with probability
// 1 − (1 − q1)(1 − q2). The result may exceed node capacities; repair
// fixes that.
func (pr *polluxProblem) mutate(rng *rand.Rand, x []uint8) {
	rows, cols, stride := pr.rows, pr.cols, pr.stride
	// (1) Reset rows to the current allocation.
	for j := gaSkip(rng, pr.skip10); j < rows; j += 1 + gaSkip(rng, pr.skip10) {
		copy(x[j*stride:(j+1)*stride], pr.base[j*stride:(j+1)*stride])
	}
	// (2) Zero some elements of some rows.
	for j := gaSkip(rng, pr.skip10); j < rows; j += 1 + gaSkip(rng, pr.skip10) {
		row := x[j*stride : j*stride+cols]
		for n := gaSkip(rng, pr.skip10); n < cols; n += 1 + gaSkip(rng, pr.skip10) {
			row[n] = 0
		}
	}
	// (3) Increase some elements on nodes with free GPUs.
	colsum, presLen, pres := pr.colsum, pr.presLen, pr.pres
	clear(colsum)
	clear(presLen)
	for j := range rows {
		row := x[j*stride : (j+1)*stride]
		for k := range pr.words {
			for m := gaNonzeroBytes(gaWord(row, k)); m != 0; m &= m - 1 {
				n := 8*k + bits.TrailingZeros64(m)>>3
				colsum[n] += int32(row[n])
				pres[n*rows+int(presLen[n])] = int32(j)
				presLen[n]++
			}
		}
	}
	for n := range cols {
		limit := pr.capacity[n]
		if limit-colsum[n] < 1 {
			continue
		}
		hits := pr.hits[:0]
		if a := int(presLen[n]); a > 0 {
			on := pres[n*rows : n*rows+a]
			sc := pr.skipPres[a]
			for i := gaSkip(rng, sc); i < a; i += 1 + gaSkip(rng, sc) {
				j := int(on[i])
				hits = append(hits, int32(j))
				polluxRaise(rng, x, j*stride+n, limit)
			}
		}
		for j := gaSkip(rng, pr.skipJobs); j < rows; j += 1 + gaSkip(rng, pr.skipJobs) {
			hit := false
			for _, h := range hits {
				if int(h) == j {
					hit = true
					break
				}
			}
			if !hit {
				polluxRaise(rng, x, j*stride+n, limit)
			}
		}
		pr.hits = hits
	}
}

// polluxRaise redraws x[i] uniformly in [x[i], limit] (numpy's
// randint(states, max_replicas + 1)); a value already at or above the
// limit is left alone.
func polluxRaise(rng *rand.Rand, x []uint8, i int, limit int32) {
	cur := int32(x[i])
	if cur < limit {
		x[i] = uint8(cur + rng.Int32N(limit-cur+1))
	}
}

// repairEval repairs a state in place, in the artifact's order
// (pollux.py Problem._repair), and evaluates it (Problem._evaluate):
//
//	(a) interference avoidance, unless disabled: a job is distributed if it
//	    spans more than one node; on each node, counting in job order, the
//	    entry of the second distributed job present and the entries of
//	    every job after it are zeroed. This keeps the artifact's quirk:
//	    single-node jobs ordered after the second distributed job on a
//	    node lose their GPUs there too (pollux.py lines 386–390, the lines
//	    its README comments out for "no avoidance"). The quirk is kept in
//	    the default because the fidelity comparison depends on it;
//	(b) at most MaxReplicas GPUs per job, trimming nodes in random order;
//	(c) at most maxNodes nodes per job (16 in the artifact), in the same
//	    random order, counted after (b);
//	(d) node capacity: in job priority order, each job gets at most what
//	    is left on each node, so lower-priority jobs lose GPUs first;
//	(e) a job left with fewer than MinReplicas GPUs gets none (its GPUs
//	    stay counted in (d) for the jobs after it, as in the artifact).
//
// Steps (a) to (e) for job j depend only on rows ≤ j, so one pass in job
// order does them all, visiting only non-zero entries; (d) is done
// together with (a) and undone when (b) or (c) must trim first. The hash
// adds up a mix of each allocated row's index and non-zero entries. The
// objectives, both minimised, are −FITNESS_p and −UTILITY (Pollux, OSDI
// '21, §4.2; artifact Problem._evaluate and get_cluster_utilities):
//
//	S_j        = SPEEDUP_j(A_j)·d·#nodes, times the restart factor if row j
//	             differs from the current allocation;
//	FITNESS_p  = ((1/J)·Σ_j (S_j + 1e−3)^p)^(1/p);
//	UTILITY    = Σ_j SPEEDUP_j(A_j) / (GPUs of the nodes in use).
func (pr *polluxProblem) repairEval(rng *rand.Rand, x []uint8) (float64, float64, uint64) {
	rows, stride, words := pr.rows, pr.stride, pr.words
	avoid := pr.avoid
	used, colsum, capacity, cnt, masks := pr.used, pr.colsum, pr.capacity, pr.cnt, pr.masks
	clear(used)
	clear(colsum)
	if avoid {
		clear(cnt)
	}
	var acc, util float64
	var hash uint64
	for j := range rows {
		row := x[j*stride : (j+1)*stride : (j+1)*stride]
		// Row j is still as it entered repair: whether the job is
		// distributed is decided here.
		nz0 := 0
		for k := range words {
			m := gaNonzeroBytes(gaWord(row, k))
			masks[k] = m
			nz0 += bits.OnesCount64(m)
		}
		dist := avoid && nz0 > 1
		// (a) and, provisionally, (d) in one pass: (d) is undone in the
		// rare case that (b) or (c) must trim the row first.
		var sumA, nzA, sum, nz int32
		rowHash := uint64(j)
		clipped := pr.clipped[:0]
		for k := range words {
			for m := masks[k]; m != 0; m &= m - 1 {
				n := 8*k + bits.TrailingZeros64(m)>>3
				if avoid {
					c := cnt[n]
					if c >= 2 && pr.quirk {
						row[n] = 0
						continue
					}
					if dist {
						cnt[n] = c + 1
						if c+1 >= 2 {
							row[n] = 0
							continue
						}
					}
				}
				v := int32(row[n])
				sumA += v
				nzA++
				if room := capacity[n] - used[n]; v > room {
					clipped = append(clipped, uint32(n)<<8|uint32(v))
					v = room
					row[n] = uint8(v)
				}
				used[n] += v
				if v != 0 {
					colsum[n] += v
					sum += v
					nz++
					rowHash = rowHash*0x9e3779b97f4a7c15 + uint64(n)<<8 | uint64(v)
				}
			}
		}
		pr.clipped = clipped
		// (b), (c) Per-job caps.
		if sumA > pr.maxRep[j] || nzA > pr.maxNodes {
			for n, v := range row {
				used[n] -= int32(v)
				colsum[n] -= int32(v)
			}
			for _, c := range clipped {
				row[c>>8] = uint8(c)
			}
			pr.trim(rng, row[:pr.cols], pr.maxRep[j], pr.maxNodes)
			// (d) Node capacity, cumulative in job order.
			sum, nz = 0, 0
			rowHash = uint64(j)
			for n, v8 := range row {
				if v8 == 0 {
					continue
				}
				v := int32(v8)
				if room := capacity[n] - used[n]; v > room {
					v = room
					row[n] = uint8(v)
				}
				used[n] += v
				if v != 0 {
					colsum[n] += v
					sum += v
					nz++
					rowHash = rowHash*0x9e3779b97f4a7c15 + uint64(n)<<8 | uint64(v)
				}
			}
		}
		// (e) Minimum replicas.
		if sum != 0 && sum < pr.minRep[j] {
			for n, v := range row {
				colsum[n] -= int32(v)
			}
			clear(row)
			sum, nz = 0, 0
		}
		if sum == 0 {
			// SPEEDUP(0, 0) = 0, with or without a restart penalty.
			acc += polluxPowerTerm(1e-3, pr.p)
			continue
		}
		hash += gaMix(rowHash)
		s := pr.speedup(j, nz, sum)
		util += s
		scaled := s * pr.scale
		base := pr.base[j*stride : (j+1)*stride]
		for k := range words {
			if gaWord(row, k) != gaWord(base, k) {
				scaled *= pr.factor[j]
				break
			}
		}
		acc += polluxPowerTerm(scaled+1e-3, pr.p)
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

// trim keeps at most maxRep GPUs on at most maxNodes nodes of one row,
// visiting its nodes in random order (the artifact shuffles all nodes;
// shuffling only the occupied ones gives the same distribution).
func (pr *polluxProblem) trim(rng *rand.Rand, row []uint8, maxRep, maxNodes int32) {
	idx := pr.idx[:0]
	for n, v := range row {
		if v != 0 {
			idx = append(idx, int32(n))
		}
	}
	rng.Shuffle(len(idx), func(a, b int) { idx[a], idx[b] = idx[b], idx[a] })
	left, kept := maxRep, int32(0)
	for _, n := range idx {
		take := min(int32(row[n]), left)
		left -= take
		if take > 0 && kept < maxNodes {
			row[n] = uint8(take)
			kept++
		} else {
			row[n] = 0
		}
	}
	pr.idx = idx
}
