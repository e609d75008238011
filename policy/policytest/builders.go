package policytest

import (
	"fmt"

	"github.com/pollux-nomad/pollux/policy"
)

// JobBuilder builds a policy.Job step by step, for example
// Job("a").GPUs(1, 8).Goodput(Linear()).Build(). The zero configuration is a
// job with no model, submitted at time 0, age 0, no attained service, no
// restarts and bounds [0, 64].
type JobBuilder struct {
	job policy.Job
}

// Job starts a builder for a job with the given ID.
func Job(id string) *JobBuilder {
	return &JobBuilder{job: policy.Job{ID: id, MinReplicas: 0, MaxReplicas: 64}}
}

// GPUs sets the job's replica bounds.
func (b *JobBuilder) GPUs(minReplicas, maxReplicas int) *JobBuilder {
	b.job.MinReplicas, b.job.MaxReplicas = minReplicas, maxReplicas
	return b
}

// Goodput sets the job's goodput model (nil means not yet profiled).
func (b *JobBuilder) Goodput(m policy.GoodputModel) *JobBuilder {
	b.job.Goodput = m
	return b
}

// Submitted sets the submission time in seconds.
func (b *JobBuilder) Submitted(t float64) *JobBuilder {
	b.job.Submitted = t
	return b
}

// Age sets the job's age (now minus submission) in seconds.
func (b *JobBuilder) Age(age float64) *JobBuilder {
	b.job.Age = age
	return b
}

// Attained sets the GPU-seconds the job has been allocated so far.
func (b *JobBuilder) Attained(gpuSeconds float64) *JobBuilder {
	b.job.AttainedService = gpuSeconds
	return b
}

// Restarts sets the number of reallocations after the first one.
func (b *JobBuilder) Restarts(n int) *JobBuilder {
	b.job.NumRestarts = n
	return b
}

// Build returns the job.
func (b *JobBuilder) Build() policy.Job {
	return b.job
}

// Jobs builds several jobs at once, in the order given.
func Jobs(builders ...*JobBuilder) []policy.Job {
	out := make([]policy.Job, len(builders))
	for i, b := range builders {
		out[i] = b.Build()
	}
	return out
}

// Nodes returns count nodes of gpus GPUs each, named n00, n01, ... (the
// width grows with count so that the names sort in order).
func Nodes(count, gpus int) []policy.Node {
	width := len(fmt.Sprint(max(count-1, 0)))
	width = max(width, 2)
	out := make([]policy.Node, count)
	for i := range out {
		out[i] = policy.Node{ID: fmt.Sprintf("n%0*d", width, i), GPUs: gpus}
	}
	return out
}

// NodeBuilder builds one policy.Node.
type NodeBuilder struct {
	node policy.Node
}

// Node starts a builder for a node with the given ID and 4 GPUs.
func Node(id string) *NodeBuilder {
	return &NodeBuilder{node: policy.Node{ID: id, GPUs: 4}}
}

// GPUs sets the node's GPU count.
func (b *NodeBuilder) GPUs(n int) *NodeBuilder {
	b.node.GPUs = n
	return b
}

// Build returns the node.
func (b *NodeBuilder) Build() policy.Node {
	return b.node
}

// Alloc builds one job's allocation from (node ID, GPU count) pairs, for
// example Alloc("n00", 2, "n01", 1) gives [n00 n00 n01]. It panics on an
// odd number of arguments or wrong types (programmer error).
func Alloc(pairs ...any) []string {
	if len(pairs)%2 != 0 {
		panic("policytest.Alloc: odd number of arguments")
	}
	var out []string
	for i := 0; i < len(pairs); i += 2 {
		id, ok1 := pairs[i].(string)
		n, ok2 := pairs[i+1].(int)
		if !ok1 || !ok2 {
			panic(fmt.Sprintf("policytest.Alloc: want (string, int) pairs, got (%T, %T)", pairs[i], pairs[i+1]))
		}
		for range n {
			out = append(out, id)
		}
	}
	return out
}

// Warm returns in as round round of p's sequence: Input.Round set to
// round and Input.Carry to what p's last Optimize handed on, as the controller and the simulator
// pass it from one round to the next.
func Warm(p policy.Policy, in policy.Input, round int64) policy.Input {
	in.Round = round
	in.Carry = p.Carry()
	return in
}
