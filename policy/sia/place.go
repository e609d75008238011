package sia

import (
	"cmp"
	"slices"

	"github.com/pollux-nomad/pollux/policy"
)

// place turns the chosen configurations into nodes, type by type, largest
// first: a job keeping its configuration keeps its nodes where they are
// free; multi-node configurations take whole free nodes, the others the
// fullest node with room (any node with room fits, as sizes divide each
// other).
func (p *Policy) place(in policy.Input, types []*siaType, nodeType []int, jobs []siaJob, choice []int) policy.Allocations {
	out := policy.Allocations{}
	freeGPUs := make([]int, len(in.Nodes))
	for i, n := range in.Nodes {
		freeGPUs[i] = max(n.GPUs, 0)
	}
	nodeIdx := make(map[string]int, len(in.Nodes))
	for i, n := range in.Nodes {
		nodeIdx[n.ID] = i
	}
	for ti, t := range types {
		var order []int
		for i, c := range choice {
			if c >= 0 && jobs[i].options[c].typ == ti {
				order = append(order, i)
			}
		}
		slices.SortStableFunc(order, func(a, b int) int {
			return cmp.Compare(jobs[b].options[choice[b]].gpus, jobs[a].options[choice[a]].gpus)
		})
		for _, i := range order {
			j := in.Jobs[jobs[i].idx]
			g := jobs[i].options[choice[i]].gpus
			prev := map[int]int{}
			for _, id := range in.Current[j.ID] {
				if n, ok := nodeIdx[id]; ok && nodeType[n] == ti {
					prev[n]++
				}
			}
			var got []int // GPUs per node index
			counts := make([]int, len(in.Nodes))
			if g >= t.size {
				need := g / t.size
				// Previous nodes first, then in node order.
				var cands []int
				for _, n := range t.nodes {
					if prev[n] > 0 {
						cands = append(cands, n)
					}
				}
				for _, n := range t.nodes {
					if prev[n] == 0 {
						cands = append(cands, n)
					}
				}
				for _, n := range cands {
					if need == 0 {
						break
					}
					if in.Nodes[n].GPUs == t.size && freeGPUs[n] == t.size {
						got = append(got, n)
						need--
					}
				}
				if need > 0 {
					got = nil
				}
				for _, n := range got {
					counts[n] = t.size
				}
			} else {
				best := -1
				for _, n := range t.nodes {
					if freeGPUs[n] < g {
						continue
					}
					switch {
					case best < 0:
						best = n
					case (prev[n] >= g) != (prev[best] >= g):
						if prev[n] >= g {
							best = n
						}
					case freeGPUs[n] < freeGPUs[best]:
						best = n
					}
				}
				if best >= 0 {
					got = []int{best}
					counts[best] = g
				}
			}
			if len(got) == 0 {
				p.stats.Unplaced++
				continue
			}
			var alloc []string
			for n := range in.Nodes {
				if counts[n] > 0 {
					freeGPUs[n] -= counts[n]
					for range counts[n] {
						alloc = append(alloc, in.Nodes[n].ID)
					}
				}
			}
			out[j.ID] = alloc
		}
	}
	return out
}
