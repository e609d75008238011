package metrics

import (
	"cmp"
	"slices"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/model"
)

// ProfilePoints returns the throughput-model observations of a valid
// document: entries with the same (num_nodes, num_replicas, local_bsz),
// whatever their accum_steps, merged into one point whose times are the
// count-weighted means, with AccumStepTime = compute_time and
// OptimStepTime = step_time (pollux-reference.md §1). Points are sorted
// by (nodes, replicas, local_bsz).
func ProfilePoints(d *contract.Metrics) []model.ProfilePoint {
	type config struct{ nodes, replicas, localBsz int }
	// Running count-weighted means, which cannot overflow.
	type sums struct{ count, compute, step float64 }
	merged := make(map[config]*sums, len(d.Profile))
	var order []config
	for _, e := range d.Profile {
		if e.Count < 1 {
			continue
		}
		c := config{e.NumNodes, e.NumReplicas, e.LocalBsz}
		s, ok := merged[c]
		if !ok {
			s = &sums{}
			merged[c] = s
			order = append(order, c)
		}
		s.count += float64(e.Count)
		f := float64(e.Count) / s.count
		s.compute += (e.ComputeTime - s.compute) * f
		s.step += (e.StepTime - s.step) * f
	}
	slices.SortFunc(order, func(a, b config) int {
		return cmp.Or(cmp.Compare(a.nodes, b.nodes), cmp.Compare(a.replicas, b.replicas), cmp.Compare(a.localBsz, b.localBsz))
	})
	pts := make([]model.ProfilePoint, len(order))
	for i, c := range order {
		s := merged[c]
		pts[i] = model.ProfilePoint{
			Nodes: c.nodes, Replicas: c.replicas, LocalBsz: float64(c.localBsz),
			AccumStepTime: s.compute, OptimStepTime: s.step,
		}
	}
	return pts
}

// GradParams returns the document's gradient statistics for the
// efficiency model.
func GradParams(d *contract.Metrics) model.GradParams {
	return model.GradParams{Sqr: d.GradSqr, Var: d.GradVar}
}
