package policytest

import (
	"fmt"
	"math/rand/v2"

	"github.com/pollux-nomad/pollux/policy"
)

// RandomOptions bounds the inputs RandomInput generates. Zero fields take
// the defaults noted.
type RandomOptions struct {
	// MaxNodes is the largest node count (default 8); at least 1 node.
	MaxNodes int
	// MaxGPUsPerNode is the largest GPU count of a node (default 8); a node
	// has 0..MaxGPUsPerNode GPUs, usually at least 1.
	MaxGPUsPerNode int
	// MaxJobs is the largest job count (default 12); at least 1 job.
	MaxJobs int
	// Messy, when set, also puts allocations in Current that a scheduler
	// never hands out (over node capacity, above a job's bounds, on unknown
	// nodes, for unknown jobs), as a cluster that shrank may show.
	Messy bool
}

func (o RandomOptions) withDefaults() RandomOptions {
	if o.MaxNodes <= 0 {
		o.MaxNodes = 8
	}
	if o.MaxGPUsPerNode <= 0 {
		o.MaxGPUsPerNode = 8
	}
	if o.MaxJobs <= 0 {
		o.MaxJobs = 12
	}
	return o
}

// RandomInput draws a random but valid scheduling input: nodes of assorted
// sizes, jobs with assorted bounds, ages, restarts, attained service and
// models (some nil), and a current allocation within node capacity and job
// bounds (or arbitrary ones with opts.Messy).
func RandomInput(rng *rand.Rand, opts RandomOptions) policy.Input {
	opts = opts.withDefaults()
	nodes := make([]policy.Node, 1+rng.IntN(opts.MaxNodes))
	for i := range nodes {
		g := 1 + rng.IntN(opts.MaxGPUsPerNode)
		if rng.IntN(10) == 0 {
			g = 0
		}
		nodes[i] = policy.Node{ID: fmt.Sprintf("node-%02d", i), GPUs: g}
	}
	jobs := make([]policy.Job, 1+rng.IntN(opts.MaxJobs))
	now := 10000.0
	for i := range jobs {
		lo := rng.IntN(3)
		hi := max(lo, 1) + rng.IntN(12)
		j := policy.Job{
			ID:              fmt.Sprintf("job-%02d", i),
			Submitted:       float64(rng.IntN(10000)),
			AttainedService: float64(rng.IntN(5)) * 3600,
			MinReplicas:     lo,
			MaxReplicas:     hi,
			NumRestarts:     rng.IntN(5),
		}
		j.Age = now - j.Submitted
		switch rng.IntN(4) {
		case 0:
			// No model yet.
		case 1:
			j.Goodput = Linear()
		default:
			j.Goodput = Synthetic{
				Serial:   rng.Float64() * 0.2,
				Parallel: 0.5 + rng.Float64(),
				Comm:     rng.Float64() * 0.1,
				NodeComm: rng.Float64() * 0.2,
			}
		}
		jobs[i] = j
	}
	in := policy.Input{Now: now, Jobs: jobs, Nodes: nodes, Current: policy.Allocations{}}
	free := make([]int, len(nodes))
	for i, n := range nodes {
		free[i] = n.GPUs
	}
	for _, j := range jobs {
		if rng.IntN(3) == 0 {
			continue
		}
		want := j.MinReplicas + rng.IntN(j.MaxReplicas-j.MinReplicas+1)
		var alloc []string
		for n := range nodes {
			if len(alloc) >= want {
				break
			}
			if rng.IntN(2) == 0 {
				continue
			}
			take := min(free[n], want-len(alloc), 1+rng.IntN(4))
			free[n] -= take
			for range take {
				alloc = append(alloc, nodes[n].ID)
			}
		}
		if len(alloc) == 0 || len(alloc) < j.MinReplicas {
			// Give back what was taken: the job stays unallocated.
			for _, id := range alloc {
				for n := range nodes {
					if nodes[n].ID == id {
						free[n]++
					}
				}
			}
			continue
		}
		in.Current[j.ID] = alloc
	}
	if opts.Messy {
		for range 1 + rng.IntN(4) {
			j := jobs[rng.IntN(len(jobs))]
			var alloc []string
			for range 1 + rng.IntN(20) {
				alloc = append(alloc, nodes[rng.IntN(len(nodes))].ID)
			}
			if rng.IntN(3) == 0 {
				alloc = append(alloc, "gone-node")
			}
			in.Current[j.ID] = alloc
		}
		in.Current["finished-job"] = []string{nodes[0].ID}
	}
	return in
}

// ClusterInput builds a benchmark-style input: nodes×gpus GPUs and jobs
// jobs of mixed synthetic models with bounds [0, 2·gpus·4] (capped at the
// cluster size), mixed ages and attained service, about half of them
// holding a valid current allocation. It is deterministic for a seed.
func ClusterInput(seed uint64, nodes, gpus, jobs int) policy.Input {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	// Now follows the last submission (one a minute) for large inputs.
	in := policy.Input{Now: max(1e5, float64(jobs)*60), Nodes: Nodes(nodes, gpus), Current: policy.Allocations{}}
	free := make([]int, nodes)
	for i := range free {
		free[i] = gpus
	}
	total := nodes * gpus
	for i := range jobs {
		j := policy.Job{
			ID:              fmt.Sprintf("job-%04d", i),
			Submitted:       float64(i) * 60,
			AttainedService: float64(rng.IntN(40)) * 1800,
			MaxReplicas:     min(1+rng.IntN(4*gpus*2), total),
			NumRestarts:     rng.IntN(4),
		}
		j.Age = in.Now - j.Submitted
		switch rng.IntN(5) {
		case 0:
		case 1:
			j.Goodput = Flat()
		default:
			j.Goodput = Synthetic{
				Serial:   0.01 + rng.Float64()*0.1,
				Parallel: 0.5 + rng.Float64(),
				Comm:     rng.Float64() * 0.05,
				NodeComm: rng.Float64() * 0.1,
			}
		}
		in.Jobs = append(in.Jobs, j)
		if rng.IntN(2) == 0 {
			continue
		}
		want := 1 + rng.IntN(min(j.MaxReplicas, 2*gpus))
		var alloc []string
		start := rng.IntN(nodes)
		for s := 0; s < nodes && len(alloc) < want; s++ {
			k := (start + s) % nodes
			take := min(free[k], want-len(alloc))
			free[k] -= take
			for range take {
				alloc = append(alloc, in.Nodes[k].ID)
			}
		}
		if len(alloc) > 0 {
			in.Current[j.ID] = sortByNodes(alloc, in.Nodes)
		}
	}
	return in
}

// sortByNodes orders an allocation node by node in the order of nodes.
func sortByNodes(alloc []string, nodes []policy.Node) []string {
	out := make([]string, 0, len(alloc))
	for _, n := range nodes {
		for _, a := range alloc {
			if a == n.ID {
				out = append(out, a)
			}
		}
	}
	return out
}
