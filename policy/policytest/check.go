package policytest

import (
	"errors"
	"fmt"
	"sort"

	"github.com/pollux-nomad/pollux/policy"
)

// CheckOptions selects the optional invariants Check verifies.
type CheckOptions struct {
	// NoInterference requires that no node holds GPUs of two distributed
	// (multi-node) jobs.
	NoInterference bool
	// NodeOrder requires each job's GPUs to be listed node by node in the
	// order of Input.Nodes, each node's GPUs contiguous.
	NodeOrder bool
}

// Check verifies the invariants every allocation returned for in must
// satisfy: only active jobs, only known nodes, each job either absent or
// holding between MinReplicas and MaxReplicas GPUs and at most its
// TypedMaxReplicas of each GPU type, no node above its capacity; plus
// those selected in opts. It reports every violation at
// once, in a deterministic order.
func Check(in policy.Input, out policy.Allocations, opts CheckOptions) error {
	var errs []error
	jobs := make(map[string]policy.Job, len(in.Jobs))
	for _, j := range in.Jobs {
		jobs[j.ID] = j
	}
	nodeIdx := make(map[string]int, len(in.Nodes))
	for i, n := range in.Nodes {
		nodeIdx[n.ID] = i
	}
	ids := make([]string, 0, len(out))
	for id := range out {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	used := make([]int, len(in.Nodes))
	distributedOn := make([][]string, len(in.Nodes))
	for _, id := range ids {
		alloc := out[id]
		if len(alloc) == 0 {
			continue
		}
		j, ok := jobs[id]
		if !ok {
			errs = append(errs, fmt.Errorf("job %q is not in the input", id))
			continue
		}
		if len(alloc) < j.MinReplicas || len(alloc) > j.MaxReplicas {
			errs = append(errs, fmt.Errorf("job %q holds %d GPUs, outside [%d, %d]", id, len(alloc), j.MinReplicas, j.MaxReplicas))
		}
		last := -1
		seen := map[int]bool{}
		perType := map[string]int{}
		for _, n := range alloc {
			i, ok := nodeIdx[n]
			if !ok {
				errs = append(errs, fmt.Errorf("job %q uses unknown node %q", id, n))
				continue
			}
			used[i]++
			perType[in.Nodes[i].Type]++
			if opts.NodeOrder && i < last {
				errs = append(errs, fmt.Errorf("job %q lists node %q after node %q, not in input order", id, n, in.Nodes[last].ID))
			}
			if opts.NodeOrder && i != last && seen[i] {
				errs = append(errs, fmt.Errorf("job %q lists node %q in two separate runs", id, n))
			}
			seen[i] = true
			last = i
		}
		for _, t := range policy.GPUTypes(in.Nodes) {
			if perType[t] > j.MaxReplicasOn(t) {
				errs = append(errs, fmt.Errorf("job %q holds %d GPUs of type %q, at most %d", id, perType[t], t, j.MaxReplicasOn(t)))
			}
		}
		if len(seen) > 1 {
			for i := range seen {
				distributedOn[i] = append(distributedOn[i], id)
			}
		}
	}
	for i, n := range in.Nodes {
		if used[i] > n.GPUs {
			errs = append(errs, fmt.Errorf("node %q holds %d GPUs, capacity %d", n.ID, used[i], n.GPUs))
		}
		if opts.NoInterference && len(distributedOn[i]) > 1 {
			d := distributedOn[i]
			sort.Strings(d)
			errs = append(errs, fmt.Errorf("node %q is shared by distributed jobs %v", n.ID, d))
		}
	}
	return errors.Join(errs...)
}
