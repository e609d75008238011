package baseline

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/pollux-nomad/pollux/policy"
)

// Optimus is the Optimus+Oracle baseline (Peng et al., EuroSys '18) as
// configured in the Pollux artifact (simulator/optimus.py): every job gets
// one GPU in submission order while GPUs last, then GPUs are added one at a
// time to the job whose completion time drops most, i.e. the largest
// (T(k) − T(k+1)) × remaining iterations, with the true step time T and
// the true remaining work from Job.Oracle. Jobs keep their placement while
// their GPU count is unchanged; the others are placed greedily on the nodes
// with the most free GPUs, smallest jobs first.
type Optimus struct{}

var _ policy.Policy = (*Optimus)(nil)

// NewOptimus returns an Optimus+Oracle policy.
func NewOptimus() *Optimus { return &Optimus{} }

// Name returns "optimus".
func (o *Optimus) Name() string { return "optimus" }

// Carry returns nil: Optimus decides each round from its input alone.
func (o *Optimus) Carry() policy.Carry { return nil }

// Optimize runs one round of Optimus+Oracle. Every job needs an Oracle.
func (o *Optimus) Optimize(ctx context.Context, in policy.Input) (policy.Allocations, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n := len(in.Jobs)
	for _, j := range in.Jobs {
		if j.Oracle == nil {
			return nil, fmt.Errorf("failed to optimize job %q: optimus needs an oracle", j.ID)
		}
	}
	free := 0
	for _, nd := range in.Nodes {
		free += nd.GPUs
	}
	replicas := make([]int, n)
	gain := make([]float64, n)
	remaining := make([]float64, n)
	// marginal is the reduction of the remaining time from one more GPU,
	// or 0 when the job cannot take one.
	marginal := func(i int) float64 {
		j := &in.Jobs[i]
		if replicas[i]+1 > j.MaxReplicas || free < 1 {
			return 0
		}
		d := (j.Oracle.StepTime(replicas[i]) - j.Oracle.StepTime(replicas[i]+1)) * remaining[i]
		if math.IsNaN(d) {
			return 0
		}
		return d
	}
	for i, j := range in.Jobs {
		remaining[i] = j.Oracle.RemainingIterations()
		lo := max(j.MinReplicas, 1)
		if lo > free {
			continue
		}
		replicas[i] = lo
		free -= lo
		gain[i] = marginal(i)
	}
	for free > 0 {
		best := -1
		for i, g := range gain {
			if g > 0 && (best < 0 || g > gain[best]) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		replicas[best]++
		gain[best] = marginal(best)
		free--
	}

	// Keep placements whose size is unchanged; place the others greedily.
	want := make(map[string]int, n)
	for i, j := range in.Jobs {
		want[j.ID] = replicas[i]
	}
	alloc := keepValid(in, func(j *policy.Job, a []string) bool { return len(a) == want[j.ID] })
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return replicas[a] - replicas[b] })
	pool := newFreePool(in.Nodes, alloc)
	for _, i := range order {
		id := in.Jobs[i].ID
		if replicas[i] > 0 && len(alloc[id]) == 0 {
			alloc[id] = pool.take(replicas[i])
		}
	}
	return alloc, nil
}
