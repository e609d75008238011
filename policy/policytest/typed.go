package policytest

import (
	"fmt"
	"math/rand/v2"

	"github.com/pollux-nomad/pollux/policy"
)

// Scaled is a goodput model running Factor times faster than Model, as the
// same job on a faster GPU type.
type Scaled struct {
	Model  policy.GoodputModel
	Factor float64
}

// Goodput returns Factor times the wrapped model's goodput.
func (s Scaled) Goodput(nodes, replicas int) float64 {
	return s.Factor * s.Model.Goodput(nodes, replicas)
}

// TypedPool is one GPU type of a typed test cluster: Nodes nodes of GPUs
// GPUs each, Speed times as fast as the slowest type.
type TypedPool struct {
	Type        string
	Nodes, GPUs int
	Speed       float64
}

// TypedNodes returns the nodes of pools, named <type>-00, <type>-01, ...,
// pool by pool.
func TypedNodes(pools ...TypedPool) []policy.Node {
	var out []policy.Node
	for _, p := range pools {
		for i := range p.Nodes {
			out = append(out, policy.Node{ID: fmt.Sprintf("%s-%02d", p.Type, i), GPUs: p.GPUs, Type: p.Type})
		}
	}
	return out
}

// Typed returns a per-type model map: m scaled by each pool's speed.
func Typed(m policy.GoodputModel, pools ...TypedPool) map[string]policy.GoodputModel {
	out := make(map[string]policy.GoodputModel, len(pools))
	for _, p := range pools {
		out[p.Type] = Scaled{Model: m, Factor: p.Speed}
	}
	return out
}

// SiaCluster is the Sia artifact's default heterogeneous cluster, scaled
// k times: t4 6k×4, rtx2080ti 3k×8, a100 2k×8 (64k GPUs), with relative
// speeds of the order the artifact's profiles show.
func SiaCluster(k int) []TypedPool {
	return []TypedPool{
		{Type: "t4", Nodes: 6 * k, GPUs: 4, Speed: 1},
		{Type: "rtx2080ti", Nodes: 3 * k, GPUs: 8, Speed: 1.6},
		{Type: "a100", Nodes: 2 * k, GPUs: 8, Speed: 3.5},
	}
}

// TypedClusterInput builds a benchmark-style input on a typed cluster:
// jobs jobs of mixed synthetic models (each type's model scaled by its
// pool's speed with a per-job jitter; one in five has no model yet),
// bounds [0, 64] capped at twice a profiled count, mixed ages and
// restarts, and about half holding a current allocation of 1, 2, 4 GPUs in
// one node or whole nodes of one type. Deterministic for a seed.
func TypedClusterInput(seed uint64, pools []TypedPool, jobs int) policy.Input {
	rng := rand.New(rand.NewPCG(seed, 0x51a))
	in := policy.Input{Now: max(1e5, float64(jobs)*60), Nodes: TypedNodes(pools...), Current: policy.Allocations{}}
	free := make([]int, len(in.Nodes))
	for i, n := range in.Nodes {
		free[i] = n.GPUs
	}
	for i := range jobs {
		j := policy.Job{
			ID:          fmt.Sprintf("job-%04d", i),
			Submitted:   float64(i) * 60,
			MaxReplicas: min(64, 1<<rng.IntN(7)),
			NumRestarts: rng.IntN(4),
		}
		j.Age = in.Now - j.Submitted
		j.AttainedService = float64(rng.IntN(40)) * 1800
		if rng.IntN(5) != 0 {
			base := Synthetic{
				Serial:   0.01 + rng.Float64()*0.1,
				Parallel: 0.5 + rng.Float64(),
				Comm:     rng.Float64() * 0.05,
				NodeComm: rng.Float64() * 0.1,
			}
			j.TypedGoodput = map[string]policy.GoodputModel{}
			for _, p := range pools {
				j.TypedGoodput[p.Type] = Scaled{Model: base, Factor: p.Speed * (0.8 + 0.4*rng.Float64())}
			}
		}
		in.Jobs = append(in.Jobs, j)
		if rng.IntN(2) == 0 {
			continue
		}
		// A current allocation on one type: g GPUs in one node or whole
		// nodes, where free.
		p := pools[rng.IntN(len(pools))]
		g := min(j.MaxReplicas, 1<<rng.IntN(4))
		var alloc []string
		for n, node := range in.Nodes {
			if node.Type != p.Type {
				continue
			}
			if g < node.GPUs && free[n] >= g {
				free[n] -= g
				for range g {
					alloc = append(alloc, node.ID)
				}
				break
			}
			if g >= node.GPUs && free[n] == node.GPUs && len(alloc) < g {
				free[n] = 0
				for range node.GPUs {
					alloc = append(alloc, node.ID)
				}
			}
		}
		if len(alloc) > 0 && len(alloc) <= j.MaxReplicas {
			in.Current[j.ID] = alloc
		} else {
			for _, id := range alloc {
				for n := range in.Nodes {
					if in.Nodes[n].ID == id {
						free[n]++
					}
				}
			}
		}
	}
	return in
}
