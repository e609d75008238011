package jobs

import "github.com/pollux-nomad/pollux/policy"

// occupancy is, while a round's changes are planned or written, how many
// GPUs of each node no allocation of a scheduled job holds: the nodes'
// free GPUs as the policy saw them, less what the jobs' allocations hold
// now, updated as writes move jobs.
type occupancy map[string]int

// newOccupancy starts from nodes, less running (each scheduled job's
// allocations).
func newOccupancy(nodes []policy.Node, running [][]NodeGPUs) occupancy {
	o := occupancy{}
	for _, n := range nodes {
		o[n.ID] += n.GPUs
	}
	for _, run := range running {
		for _, r := range run {
			o[r.Node] -= r.GPUs
		}
	}
	return o
}

// fits reports whether Nomad can place want for a job running on running
// now: on every node, the GPUs it asks for are free or are the job's own
// (Nomad stops a job's old allocation on a node in the plan that places
// its new one).
func (o occupancy) fits(running, want []NodeGPUs) bool {
	own := map[string]int{}
	for _, r := range running {
		own[r.Node] += r.GPUs
	}
	for _, w := range want {
		if w.GPUs > o[w.Node]+own[w.Node] {
			return false
		}
	}
	return true
}

// move records that a job holding running now holds want.
func (o occupancy) move(running, want []NodeGPUs) {
	for _, r := range running {
		o[r.Node] += r.GPUs
	}
	for _, w := range want {
		o[w.Node] -= w.GPUs
	}
}

// take reserves the GPUs that want needs beyond what the job holds on
// each node (running), without giving back what it would leave: while
// its write is in flight the job may still hold them.
func (o occupancy) take(running, want []NodeGPUs) {
	own := map[string]int{}
	for _, r := range running {
		own[r.Node] += r.GPUs
	}
	need := map[string]int{}
	for _, w := range want {
		need[w.Node] += w.GPUs
	}
	for n, g := range need {
		if extra := g - own[n]; extra > 0 {
			o[n] -= extra
		}
	}
}
