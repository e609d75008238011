package pollux

import (
	"cmp"
	"math"
	"runtime"
	"slices"

	"github.com/pollux-nomad/pollux/policy"
)

// polluxParallelMinJobs is the fewest jobs for which offspring are
// bred on several cores by default: below, a generation's batch takes
// a few tens of microseconds, not much more than waking a helper.
const polluxParallelMinJobs = 16

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
