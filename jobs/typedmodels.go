package jobs

// How a round uses GPU types (see gputypes.go for what they are): each
// job's model per type, fitted or predicted, the type chosen for it when
// the policy is not type-aware, and its allocation kept on one type.

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"sort"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/model"
	"github.com/pollux-nomad/pollux/policy"
)

// TypedFit is a job's throughput model fitted on one GPU type.
type TypedFit struct {
	Perf model.PerfParams
	// Points is the number of profile configurations the fit used.
	Points int
}

// TypeHint is what the cluster knows of how throughput changes from one
// GPU type to another.
type TypeHint struct {
	// Speedup is the destination's per-GPU compute speed over the
	// source's: the median, over the jobs fitted on both types, of the
	// ratio of their fitted compute times at hintLocalBsz examples per
	// GPU; without such jobs, the ratio of the gpu_type_speed prior.
	Speedup float64
	// Measured is true when Speedup comes from jobs fitted on both types.
	Measured bool
	// Net scales the synchronisation terms (model.NetworkScaleBetween
	// over the same jobs; zero fields: no estimate).
	Net model.NetworkScale
}

// hintLocalBsz is the micro-batch at which jobs' compute times are
// compared across types.
const hintLocalBsz = 64

// Bootstrapper predicts a job's throughput model on GPU type target, on
// which it has not run, from its fits on the types it has (at least one)
// and what the cluster knows of the types (hint). It is the seam for a
// better predictor.
type Bootstrapper func(fitted map[string]TypedFit, target string, hint func(src, dst string) TypeHint) model.PerfParams

// SpeedRatioBootstrap is the default Bootstrapper. Sia profiles every job
// on one GPU of each type and scales its model from there (Sia, SOSP '23;
// model.BootstrapPerf); the controller has no such probes on a type the
// job has not run on, so it makes them from the hint: the fit with the
// most profile points (ties: the smaller type name) predicts one-GPU
// compute times at two micro-batch sizes, divided by the hint's speedup
// (measured on other jobs, else the prior), and model.BootstrapPerf fits
// the target's compute terms through them. The synchronisation terms are
// scaled by the hint's network estimate, else kept: they model the
// network, not the GPU.
func SpeedRatioBootstrap(fitted map[string]TypedFit, target string, hint func(src, dst string) TypeHint) model.PerfParams {
	src := ""
	for t, f := range fitted {
		if src == "" || f.Points > fitted[src].Points || f.Points == fitted[src].Points && t < src {
			src = t
		}
	}
	p := fitted[src].Perf
	h := hint(src, target)
	if !(h.Speedup > 0) || math.IsInf(h.Speedup, 0) {
		return p
	}
	var probes []model.ProfilePoint
	for _, m := range []float64{32, 64} {
		probes = append(probes, model.ProfilePoint{Nodes: 1, Replicas: 1, LocalBsz: m, AccumStepTime: p.AccumStepTime(m) / h.Speedup})
	}
	ns := model.NetworkScale{Inter: cmp.Or(h.Net.Inter, 1), Intra: cmp.Or(h.Net.Intra, 1)}
	out, err := model.BootstrapPerf(p, probes, ns)
	if err != nil {
		return p
	}
	return out
}

// typeSwitchMargin is how much better (relative predicted goodput) a job's
// best GPU type must be than the type it runs on before the controller
// moves it there for a policy that is not type-aware: a move restarts it.
const typeSwitchMargin = 0.1

// preferredType chooses a job's GPU type for a policy that is not
// type-aware: the type on which its model predicts the highest goodput
// at its current GPU count (at least its minimum; capped by the type's
// GPUs), unless that is within typeSwitchMargin of the type it runs on.
// A job without a model stays on its type ("" if it has none: the
// policy's allocation decides).
func preferredType(pj policy.Job, cur string, capacity map[string]int, maxPerNode map[string]int, k int) string {
	if len(pj.TypedGoodput) == 0 {
		return cur
	}
	k = max(k, pj.MinReplicas, 1)
	value := func(t string) float64 {
		m := pj.TypedGoodput[t]
		kt := min(k, capacity[t])
		if m == nil || kt < max(pj.MinReplicas, 1) {
			return -1
		}
		nodes := (kt + maxPerNode[t] - 1) / max(maxPerNode[t], 1)
		return m.Goodput(nodes, kt)
	}
	types := slices.Sorted(maps.Keys(capacity))
	best, bestV := "", -1.0
	for _, t := range types {
		if v := value(t); v > bestV {
			best, bestV = t, v
		}
	}
	if cur != "" && best != cur {
		if cv := value(cur); cv > 0 && bestV < cv*(1+typeSwitchMargin) {
			return cur
		}
	}
	if bestV <= 0 {
		return cur
	}
	return best
}

// keepOneType makes every job's allocation in r.next lie on one GPU type
// (see the comment at the top of this file). pref is each job's chosen
// type (nil for a type-aware policy).
func (c *Controller) keepOneType(r *round, pref map[string]string) {
	if !r.cfg.typed() || len(r.next) == 0 {
		return
	}
	capacity := map[string]int{}
	typeOfNode := map[string]string{}
	for _, n := range r.in.Nodes {
		capacity[n.ID] = n.GPUs
		typeOfNode[n.ID] = n.Type
	}
	used := r.next.UsedGPUs()
	for _, j := range r.in.Jobs {
		alloc := r.next[j.ID]
		if len(alloc) == 0 {
			continue
		}
		p := PlacementOf(alloc)
		target := pref[j.ID]
		if target == "" {
			target = typeOfPlacement(p, typeOfNode)
		}
		if onType(p, typeOfNode, target) {
			continue
		}
		for _, n := range alloc {
			used[n]--
		}
		var moved []string
		if pref != nil {
			moved = relocate(r.in.Nodes, used, capacity, target, len(alloc), j.MinReplicas)
		}
		if moved == nil {
			// Keep the policy's GPUs of the type that holds most of them.
			keep := typeOfPlacement(p, typeOfNode)
			for _, n := range alloc {
				if typeOfNode[n] == keep {
					moved = append(moved, n)
				}
			}
			if len(moved) < max(j.MinReplicas, 1) {
				moved = nil
			}
		}
		for _, n := range moved {
			used[n]++
		}
		if pref == nil {
			c.log.Warn("the policy split a job across GPU types; keeping one type", "job_id", j.ID, "from", contract.FormatPlacement(p), "to", contract.FormatPlacement(PlacementOf(moved)))
		} else {
			c.log.Debug("kept a job on one GPU type", "job_id", j.ID, "gpu_type", target, "from", contract.FormatPlacement(p), "to", contract.FormatPlacement(PlacementOf(moved)))
		}
		r.next[j.ID] = moved
	}
}

// onType reports whether every GPU of p is of type t.
func onType(p []NodeGPUs, typeOfNode map[string]string, t string) bool {
	for _, n := range p {
		if typeOfNode[n.Node] != t {
			return false
		}
	}
	return true
}

// relocate picks up to k GPUs (at least minK, at least 1) free on nodes
// of type t, on as few nodes as possible (the nodes with the most free
// GPUs first), as an allocation; nil if there are not enough.
func relocate(nodes []policy.Node, used, capacity map[string]int, t string, k, minK int) []string {
	type cand struct {
		id   string
		free int
	}
	var cands []cand
	total := 0
	for _, n := range nodes {
		if n.Type != t {
			continue
		}
		if f := capacity[n.ID] - used[n.ID]; f > 0 {
			cands = append(cands, cand{n.ID, f})
			total += f
		}
	}
	if total < max(minK, 1) {
		return nil
	}
	k = min(k, total)
	sort.SliceStable(cands, func(a, b int) bool {
		return cmp.Or(cmp.Compare(cands[b].free, cands[a].free), cmp.Compare(cands[a].id, cands[b].id)) < 0
	})
	var out []string
	for _, cd := range cands {
		for range min(cd.free, k-len(out)) {
			out = append(out, cd.id)
		}
		if len(out) == k {
			break
		}
	}
	return out
}

// sharedKey is the key under which job e's profile points are pooled
// with those of the other jobs of its model: its pollux_model on a
// cluster of several GPU types when the round's policy wants shared
// profiles, else "" (not pooled). On one type a job's own fit is kept, as
// the simulator does: sharing there was measured slower (sia-philly-1..8
// on t4:16x4 under -rules sia: 6933 -> 7075 s), while on the 3-type
// cluster it is what places jobs right (docs/experiments.md, "Shared profiles").
func (c *Controller) sharedKey(r *round, e *entry) string {
	if !r.traits.SharedProfiles || !SeveralGPUTypes(r.nodeType) {
		return ""
	}
	return e.spec.Model
}

// typeHints returns the round's TypeHint for a pair of GPU types, from
// the jobs fitted on both and the configured speed prior.
func typeHints(cfg Config, entries []*entry) func(src, dst string) TypeHint {
	pairs := map[[2]string][][2]model.PerfParams{}
	for _, e := range entries {
		if e.state == nil {
			continue
		}
		for a, pa := range e.state.Typed {
			for b, pb := range e.state.Typed {
				if a != b {
					pairs[[2]string{a, b}] = append(pairs[[2]string{a, b}], [2]model.PerfParams{model.PerfParams(pa.Perf), model.PerfParams(pb.Perf)})
				}
			}
		}
	}
	cache := map[[2]string]TypeHint{}
	return func(src, dst string) TypeHint {
		k := [2]string{src, dst}
		if h, ok := cache[k]; ok {
			return h
		}
		h := TypeHint{Speedup: cfg.speed(dst) / cfg.speed(src)}
		if ps := pairs[k]; len(ps) > 0 {
			ratios := make([]float64, len(ps))
			for i, p := range ps {
				ratios[i] = p[0].AccumStepTime(hintLocalBsz) / p[1].AccumStepTime(hintLocalBsz)
			}
			slices.Sort(ratios)
			n := len(ratios)
			h.Speedup, h.Measured = (ratios[(n-1)/2]+ratios[n/2])/2, true
			h.Net = model.NetworkScaleBetween(ps)
		}
		cache[k] = h
		return h
	}
}

// typedModels sets the job's model on every GPU type of the cluster:
// its fit where it has one, else a prediction from its fits.
func (c *Controller) typedModels(r *round, e *entry, hint func(src, dst string) TypeHint) {
	if e.state.Grad == nil || len(e.state.Typed) == 0 {
		return
	}
	fitted := map[string]TypedFit{}
	for t, tp := range e.state.Typed {
		fitted[t] = TypedFit{Perf: model.PerfParams(tp.Perf), Points: tp.ProfilePoints}
	}
	// A job of a named model takes, per type, the fit on every point its
	// model's jobs measured there (its own among them).
	shared := map[string]bool{}
	if key := c.sharedKey(r, e); key != "" {
		for _, t := range clusterTypes(r.nodeType) {
			if perf, n, ok := c.profiles.Fit(key, t); ok && perf.Validate() == nil {
				fitted[t] = TypedFit{Perf: perf, Points: n}
				shared[t] = true
			}
		}
	}
	grad := model.GradParams(*e.state.Grad)
	e.typed = map[string]*model.GoodputFunc{}
	e.st.Models = map[string]string{}
	for _, t := range clusterTypes(r.nodeType) {
		perf, source := fitted[t].Perf, "fitted"
		if shared[t] {
			source = "shared"
		}
		if _, ok := fitted[t]; !ok {
			perf, source = c.bootstrap(fitted, t, hint), "predicted"
			if perf.Validate() != nil {
				continue
			}
		}
		e.typed[t] = &model.GoodputFunc{Perf: perf, Grad: grad, InitBatchSize: float64(e.spec.InitBatchSize)}
		e.st.Models[t] = source
	}
}
