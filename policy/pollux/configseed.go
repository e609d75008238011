package pollux

import (
	"math"
	"slices"
)

// The configuration seed: on a cluster of several GPU types the genetic
// search alone does not scale with the fleet (its budget per job falls as
// jobs grow, and its type moves are blind), so each round also starts it
// from an allocation chosen configuration by configuration, as Sia does
// (Jayaram Subramanya et al., SOSP '23, §4: a job's configuration is a GPU
// type and a count, each job picks one), but scored with Pollux's own
// fitness terms: job j on configuration c = (t, k) contributes
// v_j(c) = w_j·(S_j(c)·d·#nodes·R_j(c) + 1e−3)^p, S_j its goodput
// speedup (batch size and learning rate adapted, the model's), R_j the
// restart factor of a change. For p > 0 the round maximises Σ_j v_j; for
// p < 0 it minimises it (the power mean is monotone in the sum either
// way), so the seed maximises Σ_j sign(p)·v_j.
//
// That sum is separable across jobs but for one capacity per type, so its
// Lagrangian relaxation decomposes: at prices λ_t per GPU of type t, each
// job picks argmax_c sign·v_j(c) − λ_t(c)·k(c) on its own (or nothing).
// configPrices raises each type's price by bisection until that type's
// demand fits its free GPUs, sweeping the types until the prices settle.
// configPack then lays the chosen configurations onto nodes (a job that
// keeps its configuration keeps its nodes; the others best-fit on one
// node, or on whole free nodes when they span several), shrinking to what
// fits where fragmentation leaves no room, and fills what is left.
//
// The seed is one member of the first population: the search keeps it,
// improves it, or beats it, and its fitness decides as for any other.

// configOpt is one configuration of one job.
type configOpt struct {
	t, nn, k int32
	// value is sign(p)·v_j(c) (larger is better); keep marks the job's
	// current allocation, kept on its nodes.
	value float64
	keep  bool
}

// configBisect and configSweeps are the bisection steps per type and the
// sweeps over the types of configPrices.
const (
	configBisect = 40
	configSweeps = 4
)

// configSeed writes the configuration seed into dst and reports whether
// it built one (several types, a fitness exponent other than 0).
func (pr *polluxProblem) configSeed(dst *spState) bool {
	if !pr.typed || pr.p == 0 || pr.rows == 0 {
		return false
	}
	w := pr.workers[0]
	sign := 1.0
	if pr.p < 0 {
		sign = -1
	}
	nt := pr.ntypes
	// Per type: its nodes' largest GPU count and its free GPUs.
	maxG := make([]int32, nt)
	free := make([]int32, nt)
	for t := range nt {
		for _, n := range pr.typeNodes[t] {
			maxG[t] = max(maxG[t], pr.capacity[n])
			free[t] += pr.capacity[n]
		}
	}
	emptyV := sign * polluxPowerTerm(1e-3, pr.p)
	opts := make([][]configOpt, pr.rows)
	for j := range pr.rows {
		jc := &pr.rowConst[j]
		curT, curK, curNN := int32(-1), int32(0), int32(0)
		if row := pr.base.ent[jc.base0:jc.base1]; len(row) > 0 {
			curT = pr.nodeType[spNode(row[0])]
			for _, e := range row {
				if pr.nodeType[spNode(e)] != curT {
					curT = -2 // spans types: never kept as it is
				}
				curK += spGPUs(e)
				curNN++
			}
		}
		var list []configOpt
		for t := range int32(nt) {
			if maxG[t] == 0 {
				continue
			}
			kmax := min(jc.maxRep, free[t])
			if pr.typeCapped {
				kmax = min(kmax, pr.typeMaxRep[j*nt+int(t)])
			}
			kmax = min(kmax, maxG[t]*pr.maxNodes)
			add := func(nn, k int32, keep bool) {
				if k < max(jc.minRep, 1) || k > kmax {
					return
				}
				sp := pr.speedup(w, j, t, nn, k)
				if !(sp > 0) {
					return
				}
				scaled := sp * pr.scale
				if !keep {
					if k > jc.baseSum {
						scaled *= jc.growFactor
					} else {
						scaled *= jc.factor
					}
				}
				list = append(list, configOpt{t: t, nn: nn, k: k, keep: keep,
					value: sign * pr.w(j) * polluxPowerTerm(scaled+1e-3, pr.p)})
			}
			for k := int32(1); k <= min(kmax, maxG[t]); k *= 2 {
				add(1, k, false)
			}
			if maxG[t]&(maxG[t]-1) != 0 && maxG[t] <= kmax {
				add(1, maxG[t], false) // a node whose size is no power of two
			}
			for nn := int32(2); nn*maxG[t] <= kmax; nn++ {
				add(nn, nn*maxG[t], false)
			}
			if t == curT {
				add(curNN, curK, true)
			}
		}
		opts[j] = list
	}

	prices := pr.configPrices(opts, free, emptyV)
	choice := make([]int, pr.rows) // index into opts[j], −1: none
	for j := range pr.rows {
		choice[j] = configBest(opts[j], prices, emptyV, nil)
	}
	pr.configPack(dst, opts, choice, prices, emptyV)
	return true
}

// configBest returns the index of job options' best configuration at
// prices (−1: none beats holding nothing, value emptyV). With room set,
// only configurations of at most room[t] GPUs count.
func configBest(opts []configOpt, prices []float64, emptyV float64, room []int32) int {
	best, bestV := -1, emptyV
	for i, o := range opts {
		if room != nil && o.k > room[o.t] {
			continue
		}
		if v := o.value - prices[o.t]*float64(o.k); v > bestV {
			best, bestV = i, v
		}
	}
	return best
}

// configPrices returns per-type prices at which every type's demand fits
// its free GPUs: each type's smallest such price by bisection, the others
// fixed, swept configSweeps times (a type's price moves demand onto the
// others, whose prices then rise in turn).
func (pr *polluxProblem) configPrices(opts [][]configOpt, free []int32, emptyV float64) []float64 {
	nt := len(free)
	prices := make([]float64, nt)
	// No job gains more per GPU than its best value over nothing.
	hi := 0.0
	for _, l := range opts {
		for _, o := range l {
			hi = max(hi, (o.value-emptyV)/float64(o.k))
		}
	}
	if !(hi > 0) || math.IsInf(hi, 0) {
		return prices
	}
	demand := func(t int) int32 {
		var d int32
		for _, l := range opts {
			if i := configBest(l, prices, emptyV, nil); i >= 0 && int(l[i].t) == t {
				d += l[i].k
			}
		}
		return d
	}
	for range configSweeps {
		moved := false
		for t := range nt {
			old := prices[t]
			prices[t] = 0
			if demand(t) <= free[t] {
				moved = moved || old != 0
				continue
			}
			lo, up := 0.0, hi*2
			for range configBisect {
				prices[t] = (lo + up) / 2
				if demand(t) <= free[t] {
					up = prices[t]
				} else {
					lo = prices[t]
				}
			}
			prices[t] = up
			moved = moved || math.Abs(up-old) > 1e-12*hi
		}
		if !moved {
			break
		}
	}
	return prices
}

// configPack lays the chosen configurations onto nodes and writes the
// state into dst. Jobs keeping their allocation keep their nodes; the
// others, the largest first, take whole free nodes when they span
// several, else the fullest node of their type with room. A job that no
// longer fits takes its best configuration among those that still fit
// (at the same prices); once all are placed, the GPUs left go, job by
// job in priority order, to whoever gains most from a larger
// configuration that fits.
func (pr *polluxProblem) configPack(dst *spState, opts [][]configOpt, choice []int, prices []float64, emptyV float64) {
	cols, rows := pr.cols, pr.rows
	room := slices.Clone(pr.capacity[:cols])
	// dist marks nodes holding a distributed job (interference avoidance:
	// no two share a node), pinned ones included.
	dist := make([]bool, cols)
	for n := range cols {
		dist[n] = len(pr.cnt0) > n && pr.cnt0[n] > 0
	}
	rowsOut := make([][]uint32, rows)
	// 1. Kept allocations.
	for j := range rows {
		if choice[j] < 0 || !opts[j][choice[j]].keep {
			continue
		}
		jc := &pr.rowConst[j]
		row := pr.base.ent[jc.base0:jc.base1]
		fits := true
		for _, e := range row {
			if room[spNode(e)] < spGPUs(e) || (len(row) > 1 && dist[spNode(e)]) {
				fits = false
			}
		}
		if !fits {
			choice[j] = -2 // placed afresh below
			continue
		}
		for _, e := range row {
			room[spNode(e)] -= spGPUs(e)
			if len(row) > 1 {
				dist[spNode(e)] = true
			}
		}
		rowsOut[j] = slices.Clone(row)
	}
	// 2. The others, largest first (priority order on ties).
	var todo []int
	for j := range rows {
		if choice[j] == -2 {
			choice[j] = configBest(opts[j], prices, emptyV, nil)
		}
		if choice[j] >= 0 && rowsOut[j] == nil {
			todo = append(todo, j)
		}
	}
	slices.SortStableFunc(todo, func(a, b int) int {
		return int(opts[b][choice[b]].k - opts[a][choice[a]].k)
	})
	typeRoom := make([]int32, pr.ntypes)
	for _, j := range todo {
		for c := choice[j]; c >= 0; {
			if row := pr.configPlace(opts[j][c], room, dist); row != nil {
				rowsOut[j], choice[j] = row, c
				break
			}
			// It does not fit as chosen: the best of what still fits on
			// one node of each type.
			clear(typeRoom)
			for n := range cols {
				t := pr.nodeType[n]
				typeRoom[t] = max(typeRoom[t], room[n])
			}
			next := configBest(opts[j], prices, emptyV, typeRoom)
			if next == c || next >= 0 && opts[j][next].nn > 1 {
				next = -1
			}
			c = next
			choice[j] = c
		}
	}
	// 3. Fill: a job on one node grows into its node's free GPUs when its
	// value rises, in priority order.
	for j := range rows {
		row := rowsOut[j]
		if len(row) != 1 || choice[j] < 0 {
			continue
		}
		o := opts[j][choice[j]]
		n := spNode(row[0])
		best := -1
		for i, c := range opts[j] {
			if c.t == o.t && c.nn == 1 && c.k > o.k && c.k-o.k <= room[n] && c.value > o.value &&
				(best < 0 || c.value > opts[j][best].value) {
				best = i
			}
		}
		if best >= 0 {
			room[n] -= opts[j][best].k - o.k
			rowsOut[j] = []uint32{spEntry(n, opts[j][best].k)}
			choice[j] = best
		}
	}
	dst.start = gaGrow(dst.start, rows+1)
	dst.ent = dst.ent[:0]
	for j := range rows {
		dst.start[j] = int32(len(dst.ent))
		slices.Sort(rowsOut[j])
		dst.ent = append(dst.ent, rowsOut[j]...)
	}
	dst.start[rows] = int32(len(dst.ent))
}

// configPlace finds nodes for configuration o in room (updated) and
// returns its row, or nil when it does not fit: one node, the fullest of
// the type with room enough (best fit); several, whole free nodes that no
// distributed job uses.
func (pr *polluxProblem) configPlace(o configOpt, room []int32, dist []bool) []uint32 {
	nodes := pr.typeNodes[o.t]
	if o.nn == 1 {
		best := int32(-1)
		for _, n := range nodes {
			if room[n] >= o.k && (best < 0 || room[n] < room[best]) {
				best = n
			}
		}
		if best < 0 {
			return nil
		}
		room[best] -= o.k
		return []uint32{spEntry(best, o.k)}
	}
	var pick []int32
	left := o.k
	for _, n := range nodes {
		if left == 0 {
			break
		}
		if !dist[n] && room[n] == pr.capacity[n] && room[n] > 0 {
			pick = append(pick, n)
			left -= min(left, room[n])
		}
	}
	if left > 0 || int32(len(pick)) > pr.maxNodes {
		return nil
	}
	row := make([]uint32, 0, len(pick))
	left = o.k
	for _, n := range pick {
		v := min(left, room[n])
		room[n] -= v
		dist[n] = true
		left -= v
		row = append(row, spEntry(n, v))
	}
	return row
}
