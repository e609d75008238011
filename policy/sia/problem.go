package sia

import (
	"math"
	"runtime"
	"strings"
	"sync"

	"github.com/pollux-nomad/pollux/policy"
)

// siaParallelMinJobs is the fewest jobs for which goodputs are evaluated
// on several cores.
const siaParallelMinJobs = 128

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

func (p *Policy) restartPenalty(j policy.Job) float64 {
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
func (p *Policy) reallocFactor(j policy.Job) float64 {
	d := p.restartPenalty(j)
	if j.Age < d {
		return 1
	}
	return max(j.Age-float64(j.NumRestarts)*d, 0) / (j.Age + d)
}

// siaTypes groups the nodes with GPUs by type, in sorted type order, and
// returns each node's type index (−1 for nodes without GPUs); maxNodes caps
// the nodes of a configuration per type.
func siaTypes(nodes []policy.Node, maxNodes map[string]int) ([]*siaType, []int) {
	byName := map[string]*siaType{}
	var types []*siaType
	for _, name := range policy.GPUTypes(nodes) {
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
func (p *Policy) buildJobs(in policy.Input, types []*siaType, nodeType []int) []siaJob {
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
func (p *Policy) buildJob(idx int, j policy.Job, cur []string, types []*siaType, nodeIdx map[string]int, nodeType []int) siaJob {
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
