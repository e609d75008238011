package autoscale

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
)

// QueueConfig configures a Queue.
type QueueConfig struct {
	// Pool is the pool sized (one pool of one template).
	Pool Pool
	// IdleDelay is how long, in seconds, a node must hold no GPU of any
	// job before it is removed (default DefaultScaleDownDelay, the
	// Kubernetes cluster autoscaler's scale-down-unneeded-time).
	IdleDelay float64
}

// Validate reports every invalid field at once.
func (c QueueConfig) Validate() error {
	var errs []error
	if err := (Config{Pools: []Pool{c.Pool}}).Validate(); err != nil {
		errs = append(errs, err)
	}
	if math.IsNaN(c.IdleDelay) || math.IsInf(c.IdleDelay, 0) || c.IdleDelay < 0 {
		errs = append(errs, fmt.Errorf("idle_delay: %v is not a finite non-negative number of seconds", c.IdleDelay))
	}
	return errors.Join(errs...)
}

// NodeUse is a ready node and the GPUs jobs hold on it.
type NodeUse struct {
	// ID names the node.
	ID string
	// Used is the GPUs jobs hold on the node.
	Used int
}

// QueueInput is what a Queue sees in one round.
type QueueInput struct {
	// Now is the time in seconds.
	Now float64
	// Pending are the GPU requests of the jobs that hold no GPUs.
	Pending []int
	// Nodes are the pool's ready nodes.
	Nodes []NodeUse
	// Booting is the number of the pool's nodes asked for and not ready.
	Booting int
}

// QueueDecision is what a Queue asks for.
type QueueDecision struct {
	// Launch is the number of nodes to add.
	Launch int
	// Remove names the idle nodes to remove.
	Remove []string
}

// Queue is the queue-driven autoscaler of a rigid scheduler: it adds the
// nodes that the pending GPU requests need beyond the free GPUs of the
// ready and booting nodes (first-fit decreasing, a request larger than a
// node taking whole nodes), and removes nodes that have been idle for
// IdleDelay while no request is pending, within MinNodes and MaxNodes.
// It keeps when each node became idle and is not safe for concurrent use.
type Queue struct {
	cfg       QueueConfig
	idleSince map[string]float64
}

// NewQueue returns a Queue, or the configuration's errors.
func NewQueue(cfg QueueConfig) (*Queue, error) {
	if cfg.IdleDelay == 0 {
		cfg.IdleDelay = DefaultScaleDownDelay
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid queue autoscaler config: %w", err)
	}
	return &Queue{cfg: cfg, idleSince: map[string]float64{}}, nil
}

// Decide returns the nodes to add and remove this round.
func (q *Queue) Decide(in QueueInput) QueueDecision {
	g := q.cfg.Pool.Template.GPUsPerNode
	size := len(in.Nodes) + in.Booting
	var out QueueDecision

	// Free GPUs per node: ready nodes, then booting ones (empty).
	free := make([]int, 0, size)
	for _, n := range in.Nodes {
		free = append(free, max(g-n.Used, 0))
	}
	for range in.Booting {
		free = append(free, g)
	}
	reqs := slices.Clone(in.Pending)
	sort.Sort(sort.Reverse(sort.IntSlice(reqs)))
	newNodes := 0
	for _, r := range reqs {
		if r <= 0 {
			continue
		}
		if fitFirst(free, r, g) {
			continue
		}
		// New nodes: whole nodes for the request, the rest kept free.
		whole := (r + g - 1) / g
		if size+newNodes+whole > q.cfg.Pool.MaxNodes {
			continue
		}
		newNodes += whole
		if rest := whole*g - r; rest > 0 {
			free = append(free, rest)
		}
	}
	out.Launch = newNodes
	if size < q.cfg.Pool.MinNodes {
		out.Launch = max(out.Launch, q.cfg.Pool.MinNodes-size)
	}

	// Idle nodes: removed once idle for IdleDelay, while nothing waits.
	seen := map[string]bool{}
	removable := size + out.Launch - q.cfg.Pool.MinNodes
	for _, n := range in.Nodes {
		seen[n.ID] = true
		if n.Used > 0 {
			delete(q.idleSince, n.ID)
			continue
		}
		since, ok := q.idleSince[n.ID]
		if !ok {
			q.idleSince[n.ID] = in.Now
			since = in.Now
		}
		if len(reqs) == 0 && out.Launch == 0 && removable > 0 && in.Now-since >= q.cfg.IdleDelay {
			out.Remove = append(out.Remove, n.ID)
			delete(q.idleSince, n.ID)
			removable--
		}
	}
	for id := range q.idleSince {
		if !seen[id] {
			delete(q.idleSince, id)
		}
	}
	return out
}

// fitFirst places a request of r GPUs on the free GPUs: within one node
// if it fits on one, else on whole free nodes; it reports whether it did
// and takes the GPUs.
func fitFirst(free []int, r, g int) bool {
	if r <= g {
		for i, f := range free {
			if f >= r {
				free[i] -= r
				return true
			}
		}
		return false
	}
	whole := (r + g - 1) / g
	var idx []int
	for i, f := range free {
		if f == g {
			idx = append(idx, i)
			if len(idx) == whole {
				break
			}
		}
	}
	if len(idx) < whole {
		return false
	}
	left := r
	for _, i := range idx {
		take := min(left, g)
		free[i] -= take
		left -= take
	}
	return true
}
