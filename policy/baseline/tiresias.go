package baseline

import (
	"context"
	"fmt"

	"github.com/pollux-nomad/pollux/policy"
)

// TiresiasConfig configures the Tiresias baseline. The zero value gives the
// settings of the Pollux artifact's simulator (simulator/tiresias.py).
type TiresiasConfig struct {
	// QueueThreshold is the attained service, in GPU-seconds, at which a
	// job is demoted from the high-priority queue Q0 to Q1. Default 16
	// GPU-hours (57600), the artifact's `_queue_threshold = 3600 * 16`.
	QueueThreshold float64
	// PromoteKnob enables starvation avoidance when positive: a demoted
	// job that has waited PromoteKnob times its executed time goes back to
	// Q0 (Tiresias, NSDI '19, §4.2). Default 0, disabled, as the artifact.
	PromoteKnob float64
}

// Tiresias is the discretized two-queue Least-Attained-Service scheduler of
// Tiresias (Gu et al., NSDI '19) as configured in the Pollux artifact: every
// job runs on its fixed, requested number of GPUs (Job.MaxReplicas), jobs in
// Q0 before Q1, FIFO within a queue, and a job that does not fit is
// preempted while later, smaller jobs may pass it. Newly started jobs are
// placed greedily on the nodes with the most free GPUs.
type Tiresias struct {
	cfg      TiresiasConfig
	queue0   []string
	queue1   []string
	running  map[string]bool
	seen     map[string]bool
	lastSeen map[string]int64 // last check time, whole seconds
	executed map[string]int64 // executed seconds since the last promotion
	waited   map[string]int64 // pending seconds since the last run (for PromoteKnob)
}

var _ policy.Policy = (*Tiresias)(nil)

// NewTiresias returns a Tiresias policy.
func NewTiresias(cfg TiresiasConfig) (*Tiresias, error) {
	if cfg.QueueThreshold < 0 || cfg.PromoteKnob < 0 {
		return nil, fmt.Errorf("invalid tiresias config: queue threshold and promote knob must not be negative")
	}
	if cfg.QueueThreshold == 0 {
		cfg.QueueThreshold = 3600 * 16
	}
	return &Tiresias{
		cfg:      cfg,
		running:  make(map[string]bool),
		seen:     make(map[string]bool),
		lastSeen: make(map[string]int64),
		executed: make(map[string]int64),
		waited:   make(map[string]int64),
	}, nil
}

// Name returns "tiresias".
func (t *Tiresias) Name() string { return "tiresias" }

// Optimize runs one round of Tiresias.
func (t *Tiresias) Optimize(ctx context.Context, in policy.Input) (policy.Allocations, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := int64(in.Now)
	jobs := make(map[string]*policy.Job, len(in.Jobs))
	for i := range in.Jobs {
		jobs[in.Jobs[i].ID] = &in.Jobs[i]
	}
	t.forget(jobs)
	alloc := keepValid(in, func(j *policy.Job, a []string) bool { return len(a) == j.MaxReplicas })
	// New jobs enter Q0 in submission order.
	for _, j := range in.Jobs {
		if !t.seen[j.ID] {
			t.seen[j.ID] = true
			t.queue0 = append(t.queue0, j.ID)
		}
	}
	t.account(in.Jobs, now)

	// Decide who runs: Q0 then Q1, FIFO, each at its requested size.
	free := 0
	for _, n := range in.Nodes {
		free += n.GPUs
	}
	for _, queue := range [][]string{t.queue0, t.queue1} {
		for _, id := range queue {
			want := jobs[id].MaxReplicas
			if want <= free {
				t.running[id] = true
				free -= want
			} else {
				t.running[id] = false
				delete(alloc, id)
			}
		}
	}
	// Place the jobs that start running now.
	pool := newFreePool(in.Nodes, alloc)
	for _, queue := range [][]string{t.queue0, t.queue1} {
		for _, id := range queue {
			if t.running[id] && len(alloc[id]) == 0 {
				alloc[id] = pool.take(jobs[id].MaxReplicas)
			}
		}
	}
	return alloc, nil
}

// forget drops the state of jobs that are gone (completed or deleted).
func (t *Tiresias) forget(jobs map[string]*policy.Job) {
	keep := func(q []string) []string {
		out := q[:0]
		for _, id := range q {
			if _, ok := jobs[id]; ok {
				out = append(out, id)
			}
		}
		return out
	}
	t.queue0 = keep(t.queue0)
	t.queue1 = keep(t.queue1)
	for id := range t.seen {
		if _, ok := jobs[id]; !ok {
			delete(t.seen, id)
			delete(t.running, id)
			delete(t.lastSeen, id)
			delete(t.executed, id)
			delete(t.waited, id)
		}
	}
}

// account adds the time since the last round to each job's executed or
// pending time and applies demotion (and promotion, if enabled). Times are
// whole seconds, as in the artifact.
func (t *Tiresias) account(list []policy.Job, now int64) {
	for _, j := range list {
		dt := now - t.lastSeen[j.ID]
		t.lastSeen[j.ID] = now
		if t.running[j.ID] {
			t.executed[j.ID] += dt
			t.waited[j.ID] = 0
			if float64(t.executed[j.ID]*int64(j.MaxReplicas)) >= t.cfg.QueueThreshold && remove(&t.queue0, j.ID) {
				t.queue1 = append(t.queue1, j.ID)
			}
			continue
		}
		if t.executed[j.ID] > 0 {
			t.waited[j.ID] += dt
		}
		if t.cfg.PromoteKnob > 0 && t.executed[j.ID] > 0 &&
			float64(t.waited[j.ID]) >= float64(t.executed[j.ID])*t.cfg.PromoteKnob && remove(&t.queue1, j.ID) {
			t.executed[j.ID] = 0
			t.waited[j.ID] = 0
			t.queue0 = append(t.queue0, j.ID)
		}
	}
}

// remove deletes id from *q and reports whether it was there.
func remove(q *[]string, id string) bool {
	for i, x := range *q {
		if x == id {
			*q = append((*q)[:i], (*q)[i+1:]...)
			return true
		}
	}
	return false
}

// keepValid returns the current allocations that a baseline may keep: of
// active jobs, accepted by ok, on known nodes, and within node capacity
// when taken in job order. Anything else (a node that shrank or vanished,
// an operator's edit) is dropped, so the job is placed afresh.
func keepValid(in policy.Input, ok func(j *policy.Job, a []string) bool) policy.Allocations {
	capacity := make(map[string]int, len(in.Nodes))
	for _, n := range in.Nodes {
		capacity[n.ID] = n.GPUs
	}
	out := make(policy.Allocations, len(in.Current))
	for i := range in.Jobs {
		j := &in.Jobs[i]
		a := in.Current[j.ID]
		if len(a) == 0 || !ok(j, a) {
			continue
		}
		need := map[string]int{}
		for _, n := range a {
			need[n]++
		}
		fits := true
		for n, k := range need {
			if c, known := capacity[n]; !known || k > c {
				fits = false
			}
		}
		if !fits {
			continue
		}
		for n, k := range need {
			capacity[n] -= k
		}
		out[j.ID] = a
	}
	return out
}

// freePool tracks free GPUs per node for greedy placement.
type freePool struct {
	ids  []string
	free []int
}

// newFreePool returns the free GPUs of each node given the allocations in
// force.
func newFreePool(nodes []policy.Node, alloc policy.Allocations) *freePool {
	used := alloc.UsedGPUs()
	p := &freePool{ids: make([]string, len(nodes)), free: make([]int, len(nodes))}
	for i, n := range nodes {
		p.ids[i] = n.ID
		p.free[i] = n.GPUs - used[n.ID]
	}
	return p
}

// take places k GPUs greedily: repeatedly on the node with the most free
// GPUs (the first such node in node order on ties), as much as it holds.
// The caller guarantees that k GPUs are free in total.
func (p *freePool) take(k int) []string {
	out := make([]string, 0, k)
	for len(out) < k {
		best := -1
		for i, f := range p.free {
			if f > 0 && (best < 0 || f > p.free[best]) {
				best = i
			}
		}
		if best < 0 {
			panic("policy: greedy placement ran out of GPUs")
		}
		n := min(p.free[best], k-len(out))
		for range n {
			out = append(out, p.ids[best])
		}
		p.free[best] -= n
	}
	return out
}
