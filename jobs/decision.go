package jobs

import (
	"math"
	"strconv"
	"strings"

	"github.com/pollux-nomad/pollux/model"
	"github.com/pollux-nomad/pollux/policy"
)

// Decision is one job's allocation and training configuration: the output
// meta keys of contracts.md §1 and the JSON of the decision key (§2).
type Decision struct {
	BatchSize   int     `json:"batch_size"`
	LocalBsz    int     `json:"local_bsz"`
	AccumSteps  int     `json:"accum_steps"`
	LR          float64 `json:"lr"`
	NumReplicas int     `json:"num_replicas"`
	NumNodes    int     `json:"num_nodes"`
	// Placement is "node-id:gpus,node-id:gpus,..." in rank order.
	Placement string `json:"placement"`
	Round     int64  `json:"round"`
}

// Meta returns the decision as the controller's output meta keys.
func (d Decision) Meta() map[string]string {
	return map[string]string{
		MetaBatchSize:   strconv.Itoa(d.BatchSize),
		MetaLocalBsz:    strconv.Itoa(d.LocalBsz),
		MetaAccumSteps:  strconv.Itoa(d.AccumSteps),
		MetaLR:          strconv.FormatFloat(d.LR, 'g', 8, 64),
		MetaNumReplicas: strconv.Itoa(d.NumReplicas),
		MetaNumNodes:    strconv.Itoa(d.NumNodes),
		MetaPlacement:   d.Placement,
		MetaRound:       strconv.FormatInt(d.Round, 10),
	}
}

// FormatPlacement renders a placement as "node:gpus,node:gpus".
func FormatPlacement(p []NodeGPUs) string {
	parts := make([]string, len(p))
	for i, n := range p {
		parts[i] = n.Node + ":" + strconv.Itoa(n.GPUs)
	}
	return strings.Join(parts, ",")
}

// PlacementOf groups a policy allocation (a node ID per GPU, in rank
// order) into GPUs per node.
func PlacementOf(alloc []string) []NodeGPUs {
	var out []NodeGPUs
	for i, n := range alloc {
		if i > 0 && alloc[i-1] == n {
			out[len(out)-1].GPUs++
			continue
		}
		out = append(out, NodeGPUs{Node: n, GPUs: 1})
	}
	return out
}

// AllocOf expands a placement into the policy's node-per-GPU form.
func AllocOf(p []NodeGPUs) []string {
	var out []string
	for _, n := range p {
		for range n.GPUs {
			out = append(out, n.Node)
		}
	}
	return out
}

// SamePlacement reports whether two placements are equal.
func SamePlacement(a, b []NodeGPUs) bool {
	return policy.Equal(AllocOf(a), AllocOf(b))
}

// Decide picks the batch size, micro-batch, accumulation steps and
// learning rate for a job on placement p. With a fitted model (f != nil)
// it maximises predicted goodput (Pollux, OSDI '21, §3.3); without one it
// keeps the initial batch size, or the smallest that gives every GPU the
// minimum micro-batch, split as the Pollux artifact does for a job without
// a profile.
func Decide(spec Spec, f *model.GoodputFunc, p []NodeGPUs, round int64) Decision {
	k, nodes := 0, len(p)
	for _, n := range p {
		k += n.GPUs
	}
	d := Decision{NumReplicas: k, NumNodes: nodes, Placement: FormatPlacement(p), Round: round}
	if k == 0 {
		d.LR = spec.InitLR
		return d
	}
	var grad model.GradParams
	if f != nil {
		grad = f.Grad
		c := f.Optimize(nodes, k, spec.Bounds())
		if c.LocalBsz > 0 {
			d.LocalBsz, d.AccumSteps = c.LocalBsz, c.AccumSteps
		}
	}
	if d.LocalBsz == 0 {
		batch := min(max(spec.InitBatchSize, spec.LocalBszMin*k), spec.MaxBatchSize)
		local := ceilDiv(batch, k)
		if spec.Accumulation {
			d.AccumSteps = ceilDiv(local, spec.LocalBszMax) - 1
		} else {
			local = min(local, spec.LocalBszMax)
		}
		d.LocalBsz = ceilDiv(local, d.AccumSteps+1)
	}
	// Never exceed the largest allowed batch.
	d.LocalBsz = max(min(d.LocalBsz, spec.MaxBatchSize/(k*(d.AccumSteps+1))), 1)
	d.BatchSize = d.LocalBsz * k * (d.AccumSteps + 1)
	d.LR = model.ScaleLR(spec.LRScaling, spec.InitLR, grad, float64(spec.InitBatchSize), float64(d.BatchSize))
	if math.IsNaN(d.LR) || math.IsInf(d.LR, 0) || d.LR <= 0 {
		d.LR = spec.InitLR
	}
	return d
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
