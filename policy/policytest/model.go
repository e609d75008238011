package policytest

import "github.com/pollux-nomad/pollux/policy"

// Synthetic is an Amdahl-style goodput model for tests and benchmarks: one
// optimizer step over a fixed total batch takes
//
//	T(N, K) = Serial + Parallel/K + Comm·[K > 1] + NodeComm·(N − 1)
//
// seconds on N nodes holding K GPUs, and the goodput is 1/T steps per
// second. Serial is the part that does not scale, Comm the cost of an
// all-reduce inside a node and NodeComm the extra cost per additional node.
// With only Parallel set the speedup is linear in K. It satisfies
// policy.GoodputModel and is safe for concurrent use (it has no state).
type Synthetic struct {
	Serial, Parallel, Comm, NodeComm float64
}

// Goodput returns 1/T(nodes, replicas), and 0 for replicas ≤ 0.
func (s Synthetic) Goodput(nodes, replicas int) float64 {
	if replicas <= 0 {
		return 0
	}
	t := s.Serial + s.Parallel/float64(replicas)
	if replicas > 1 {
		t += s.Comm
	}
	if nodes > 1 {
		t += s.NodeComm * float64(nodes-1)
	}
	if t <= 0 {
		return 0
	}
	return 1 / t
}

// Linear is a job whose goodput grows linearly with its GPU count,
// wherever they are.
func Linear() Synthetic {
	return Synthetic{Parallel: 1}
}

// Flat is a job that gains almost nothing from more than one GPU.
func Flat() Synthetic {
	return Synthetic{Serial: 1, Parallel: 0.01, Comm: 0.05}
}

// Typical is a job that scales well inside a node and pays for spreading
// over nodes, roughly like the Pollux artifact's mid-sized models.
func Typical() Synthetic {
	return Synthetic{Serial: 0.02, Parallel: 1, Comm: 0.02, NodeComm: 0.05}
}

// Counting wraps a model and counts the calls made to it, to test
// memoisation. It is not safe for concurrent use.
type Counting struct {
	Model policy.GoodputModel
	Calls int
}

// Goodput forwards to the wrapped model and counts the call.
func (c *Counting) Goodput(nodes, replicas int) float64 {
	c.Calls++
	return c.Model.Goodput(nodes, replicas)
}
