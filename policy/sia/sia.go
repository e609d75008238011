package sia

import (
	"context"
	"fmt"

	"github.com/pollux-nomad/pollux/policy"
)

// maxNodeGPUs bounds a node's GPUs as Pollux does, so that an input valid
// for one policy is valid for the other.
const maxNodeGPUs = 255

// Stats describes the last round of the Sia policy.
type Stats struct {
	// Jobs is the number of jobs, Candidates those with at least one
	// configuration worth more than no GPUs, Kept those held to their
	// allocation because they are restoring.
	Jobs, Candidates, Kept int
	// Configs is the size of the configuration space (over all types).
	Configs int
	// Solver is "dp" (exact dynamic programme over the per-type
	// capacities) or "bb" (branch and bound on a Lagrangian bound).
	Solver string
	// Nodes counts branch-and-bound nodes (0 for "dp").
	Nodes int
	// Objective is the artifact's objective of the chosen allocation:
	// Σ A·x + λn·(jobs − allocated), minimised for p < 0.
	Objective float64
	// Gap is an upper bound on the relative distance of Objective from
	// the optimum (0 when proven optimal).
	Gap float64
	// Unplaced counts jobs whose chosen configuration found no nodes (on
	// clusters whose nodes of one type differ in size); they get nothing.
	Unplaced int
}

// Policy is a re-implementation of Sia's policy (Jayaram Subramanya et
// al., SOSP '23; artifact siasosp23/artifacts, sia-simulator/sia.py,
// Policy.optimize_mip and __solve_mip_rescaled), for comparisons:
//
//   - Configurations per GPU type: 1, 2, 4, ... GPUs within one node (the
//     powers of two dividing the node size), then whole nodes (CONFIGS_4GPU
//     and CONFIGS_8GPU of the artifact), within each job's replica bounds.
//   - Each job's goodput on each configuration comes from its model for
//     that type (Job.GoodputOn), divided by its smallest positive goodput
//     over all types' configurations, so that its slowest configuration
//     is worth 1. A job with no model on a type may run there on 1 GPU,
//     worth 1.
//   - A job that holds GPUs has the goodput of every configuration but
//     its current one multiplied by the Pollux restart factor
//     max(T − R·δ, 0)/(T + δ) (1 while T < δ); a job without GPUs pays no
//     factor.
//   - Costs A = round(goodput^p, 2), clipped at 3000; the integer
//     programme picks at most one configuration per job, within each
//     type's GPU count, minimising Σ A·x + λn·(jobs − allocated) for
//     p < 0 (maximising for p > 0). Restoring jobs keep their
//     configuration.
//   - Chosen configurations are placed type by type, largest first:
//     whole free nodes for multi-node configurations, a node with room for
//     the others (the artifact's alloc_to_placement_fast), keeping a job
//     on its nodes where it keeps its configuration.
//
// The growth limit (at most twice the GPUs a job has been profiled on) is
// the runner's MaxReplicas (registry.Traits.Replicas =
// registry.ExploreReplicas). The integer programme is solved exactly by
// dynamic programming over the per-type capacities when that is small
// (64 GPUs), else by branch and bound on a Lagrangian bound to the
// artifact's gap. It is not safe for concurrent use.
type Policy struct {
	cfg   Config
	stats Stats
	// maxNodes is cfg.MaxNodesByType parsed.
	maxNodes map[string]int
	// weight is the score of one hundredth of benefit this round.
	weight int64
}

// New returns a Sia policy, or an error naming every invalid setting.
func New(cfg Config) (*Policy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	limits, _ := parseNodeLimits(cfg.MaxNodesByType)
	return &Policy{cfg: cfg.withDefaults(), maxNodes: limits}, nil
}

// Name returns "sia".
func (p *Policy) Name() string { return "sia" }

// Carry returns nil: Sia decides each round from its input alone.
func (p *Policy) Carry() policy.Carry { return nil }

// LastStats returns the statistics of the last Optimize call.
func (p *Policy) LastStats() Stats { return p.stats }

// Optimize returns the allocation of the round; see Policy. Every job
// gets either no GPUs or one configuration within its replica bounds on
// one GPU type, listed node by node in the order of in.Nodes. It returns an
// error naming the job or node for invalid input, or the context's error
// if it ended before the round.
func (p *Policy) Optimize(ctx context.Context, in policy.Input) (policy.Allocations, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("failed to optimize allocations: %w", err)
	}
	if err := policy.CheckInput(in, maxNodeGPUs); err != nil {
		return nil, fmt.Errorf("failed to optimize allocations: %w", err)
	}
	p.stats = Stats{Jobs: len(in.Jobs)}
	types, nodeType := siaTypes(in.Nodes, p.maxNodes)
	for _, t := range types {
		p.stats.Configs += len(t.configs)
	}
	jobs := p.buildJobs(in, types, nodeType)
	choice := p.solve(ctx, jobs, types, len(in.Jobs))
	return p.place(in, types, nodeType, jobs, choice), nil
}
