package baseline

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

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
	cfg TiresiasConfig
	// carry is what the last Optimize handed on.
	carry *TiresiasCarry
}

var _ policy.Policy = (*Tiresias)(nil)

// TiresiasCarry is what a Tiresias round hands to the next (Input.Carry):
// the two queues in order and each job's accounting, by job ID. It is
// never changed once returned.
type TiresiasCarry struct {
	// Queue0 and Queue1 are the high- and low-priority queues, FIFO.
	Queue0 []string `json:"queue0"`
	Queue1 []string `json:"queue1"`
	// Running is whether the job ran in the last round.
	Running map[string]bool `json:"running"`
	// Seen holds the jobs that have entered a queue.
	Seen map[string]bool `json:"seen"`
	// LastSeen is the last round's time, whole seconds.
	LastSeen map[string]int64 `json:"last_seen"`
	// Executed is the seconds run since the last promotion.
	Executed map[string]int64 `json:"executed"`
	// Waited is the seconds pending since the last run (PromoteKnob).
	Waited map[string]int64 `json:"waited"`
}

// newTiresiasCarry returns a copy of c, or an empty carry for nil.
func newTiresiasCarry(c *TiresiasCarry) *TiresiasCarry {
	out := &TiresiasCarry{
		Running:  make(map[string]bool),
		Seen:     make(map[string]bool),
		LastSeen: make(map[string]int64),
		Executed: make(map[string]int64),
		Waited:   make(map[string]int64),
	}
	if c == nil {
		return out
	}
	out.Queue0 = slices.Clone(c.Queue0)
	out.Queue1 = slices.Clone(c.Queue1)
	maps.Copy(out.Running, c.Running)
	maps.Copy(out.Seen, c.Seen)
	maps.Copy(out.LastSeen, c.LastSeen)
	maps.Copy(out.Executed, c.Executed)
	maps.Copy(out.Waited, c.Waited)
	return out
}

// DecodeTiresiasCarry decodes a TiresiasCarry from its JSON form; null
// gives nil.
func DecodeTiresiasCarry(raw []byte) (policy.Carry, error) {
	var c *TiresiasCarry
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("failed to decode tiresias carry: %w", err)
	}
	if c == nil {
		return nil, nil
	}
	return newTiresiasCarry(c), nil
}

// NewTiresias returns a Tiresias policy.
func NewTiresias(cfg TiresiasConfig) (*Tiresias, error) {
	if cfg.QueueThreshold < 0 || cfg.PromoteKnob < 0 {
		return nil, fmt.Errorf("invalid tiresias config: queue threshold and promote knob must not be negative")
	}
	if cfg.QueueThreshold == 0 {
		cfg.QueueThreshold = 3600 * 16
	}
	return &Tiresias{cfg: cfg}, nil
}

// Name returns "tiresias".
func (t *Tiresias) Name() string { return "tiresias" }

// Carry returns what the last Optimize handed on (a *TiresiasCarry), nil
// before the first call.
func (t *Tiresias) Carry() policy.Carry {
	if t.carry == nil {
		return nil
	}
	return t.carry
}

// Optimize runs one round of Tiresias from the queues in in.Carry (empty
// without one).
func (t *Tiresias) Optimize(ctx context.Context, in policy.Input) (policy.Allocations, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	prev, _ := in.Carry.(*TiresiasCarry)
	st := newTiresiasCarry(prev)
	now := int64(in.Now)
	jobs := make(map[string]*policy.Job, len(in.Jobs))
	for i := range in.Jobs {
		jobs[in.Jobs[i].ID] = &in.Jobs[i]
	}
	st.forget(jobs)
	alloc := keepValid(in, func(j *policy.Job, a []string) bool { return len(a) == j.MaxReplicas })
	// New jobs enter Q0 in submission order.
	for _, j := range in.Jobs {
		if !st.Seen[j.ID] {
			st.Seen[j.ID] = true
			st.Queue0 = append(st.Queue0, j.ID)
		}
	}
	st.account(t.cfg, in.Jobs, now)

	// Decide who runs: Q0 then Q1, FIFO, each at its requested size.
	free := 0
	for _, n := range in.Nodes {
		free += n.GPUs
	}
	for _, queue := range [][]string{st.Queue0, st.Queue1} {
		for _, id := range queue {
			want := jobs[id].MaxReplicas
			if want <= free {
				st.Running[id] = true
				free -= want
			} else {
				st.Running[id] = false
				delete(alloc, id)
			}
		}
	}
	// Place the jobs that start running now.
	pool := newFreePool(in.Nodes, alloc)
	for _, queue := range [][]string{st.Queue0, st.Queue1} {
		for _, id := range queue {
			if st.Running[id] && len(alloc[id]) == 0 {
				alloc[id] = pool.take(jobs[id].MaxReplicas)
			}
		}
	}
	t.carry = st
	return alloc, nil
}

// forget drops the state of jobs that are gone (completed or deleted).
func (st *TiresiasCarry) forget(jobs map[string]*policy.Job) {
	keep := func(q []string) []string {
		out := q[:0]
		for _, id := range q {
			if _, ok := jobs[id]; ok {
				out = append(out, id)
			}
		}
		return out
	}
	st.Queue0 = keep(st.Queue0)
	st.Queue1 = keep(st.Queue1)
	for id := range st.Seen {
		if _, ok := jobs[id]; !ok {
			delete(st.Seen, id)
			delete(st.Running, id)
			delete(st.LastSeen, id)
			delete(st.Executed, id)
			delete(st.Waited, id)
		}
	}
}

// account adds the time since the last round to each job's executed or
// pending time and applies demotion (and promotion, if enabled). Times are
// whole seconds, as in the artifact.
func (st *TiresiasCarry) account(cfg TiresiasConfig, list []policy.Job, now int64) {
	for _, j := range list {
		dt := now - st.LastSeen[j.ID]
		st.LastSeen[j.ID] = now
		if st.Running[j.ID] {
			st.Executed[j.ID] += dt
			st.Waited[j.ID] = 0
			if float64(st.Executed[j.ID]*int64(j.MaxReplicas)) >= cfg.QueueThreshold && remove(&st.Queue0, j.ID) {
				st.Queue1 = append(st.Queue1, j.ID)
			}
			continue
		}
		if st.Executed[j.ID] > 0 {
			st.Waited[j.ID] += dt
		}
		if cfg.PromoteKnob > 0 && st.Executed[j.ID] > 0 &&
			float64(st.Waited[j.ID]) >= float64(st.Executed[j.ID])*cfg.PromoteKnob && remove(&st.Queue1, j.ID) {
			st.Executed[j.ID] = 0
			st.Waited[j.ID] = 0
			st.Queue0 = append(st.Queue0, j.ID)
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
