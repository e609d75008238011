package jobs

import (
	"context"
	"fmt"
	"sort"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/model"
	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/record"
	"github.com/pollux-nomad/pollux/policy/registry"
)

// optimize builds the policy's input and runs the policy.
func (c *Controller) optimize(ctx context.Context, r *round) error {
	r.in = c.input(r)
	for _, n := range r.in.Nodes {
		r.status.GPUs += n.GPUs
	}
	r.status.Nodes = len(r.in.Nodes)
	cp, err := c.policyFor(r.cfg)
	if err != nil {
		return fmt.Errorf("failed to create policy: %w", err)
	}
	r.in.Round = r.number
	r.in.Carry = cp.carry
	r.next = policy.Allocations{}
	if len(r.in.Jobs) > 0 {
		r.next, err = optimizeSafely(ctx, cp.policy, r.in)
		if err != nil {
			c.metrics.incError("optimize")
			return fmt.Errorf("failed to optimize: %w", err)
		}
		cp.carry = cp.policy.Carry()
		c.recordRound(r, cp.settings)
	}
	c.keepOneType(r, r.pref)
	return nil
}

// optimizeSafely runs the policy and turns a panic (a bug, or input the
// policy did not foresee) into an error, so that one bad round holds the
// jobs as they are instead of bringing the controller down.
func optimizeSafely(ctx context.Context, pol policy.Policy, in policy.Input) (out policy.Allocations, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("policy %s panicked: %v", pol.Name(), r)
		}
	}()
	return pol.Optimize(ctx, in)
}

// input builds the policy's view of the cluster: the nodes by ID with
// the GPUs the policy may hand out, and the entries in submission order
// (it sorts r.entries so).
func (c *Controller) input(r *round) policy.Input {
	in := policy.Input{Now: float64(r.start.Unix()), Current: policy.Allocations{}}
	nodes := r.nodes
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].ID < nodes[j].ID })
	total := 0
	capacity, perNode := map[string]int{}, map[string]int{}
	for _, n := range nodes {
		free := max(n.GPUs-n.UsedByOthers-r.held[n.ID], 0)
		if r.cfg.Autoscale.Enabled && c.autoscaler != nil && c.autoscaler.Emptying(n.ID) {
			// Its pool is above the desired count: the autoscaler
			// removes it once it is empty.
			free = 0
		}
		t := r.nodeType[n.ID]
		in.Nodes = append(in.Nodes, policy.Node{ID: n.ID, GPUs: free, Type: t})
		total += free
		capacity[t] += free
		perNode[t] = max(perNode[t], free)
	}
	if r.cfg.typed() && !r.traits.TypeAware {
		r.pref = map[string]string{}
	}
	sort.SliceStable(r.entries, func(i, j int) bool { return r.entries[i].job.SubmitTime.Before(r.entries[j].job.SubmitTime) })
	for _, e := range r.entries {
		pj := c.policyJob(r, e, total)
		if r.pref != nil {
			// A policy that is not type-aware sees the job's model on
			// the type the controller chose for it.
			t := preferredType(pj, e.gpuType, capacity, perNode, contract.TotalGPUs(e.job.Placement))
			r.pref[pj.ID] = t
			if m, ok := pj.TypedGoodput[t]; ok {
				pj.Goodput = m
			}
		}
		in.Jobs = append(in.Jobs, pj)
		if a := AllocOf(e.job.Placement); len(a) > 0 {
			in.Current[pj.ID] = a
		}
	}
	return in
}

// policyJob is one entry as the policy sees it; total is the GPUs the
// policy may hand out.
func (c *Controller) policyJob(r *round, e *entry, total int) policy.Job {
	limits := registry.JobLimits{
		// A fixed-size job asks for pollux_max_gpus, else pollux_min_gpus.
		Requested:  e.spec.MinGPUs,
		Cap:        total,
		BatchLimit: e.spec.MaxBatchSize / e.spec.LocalBszMin,
		Profiled:   e.state.MaxProfiled,
		Explore:    r.cfg.ExploreFactor,
		Start:      r.cfg.ExploreStart,
	}
	if e.spec.MaxGPUs > 0 {
		limits.Requested = e.spec.MaxGPUs
		limits.Cap = min(limits.Cap, e.spec.MaxGPUs)
	}
	if r.cfg.MaxGPUsPerJob > 0 {
		limits.Cap = min(limits.Cap, r.cfg.MaxGPUsPerJob)
	}
	pj := policy.Job{
		ID:              e.job.JobRef.String(),
		Submitted:       float64(e.job.SubmitTime.Unix()),
		Age:             r.start.Sub(e.job.SubmitTime).Seconds(),
		AttainedService: e.state.AttainedService,
		MinReplicas:     e.spec.MinGPUs,
		MaxReplicas:     max(r.traits.MaxReplicas(limits), 0),
		NumRestarts:     e.state.Restarts,
		RestartTime:     restartTime(r.cfg, e.state),
		Restoring:       restoring(r.cfg, e.state, len(e.job.Running) > 0, r.start),
	}
	if len(e.job.Running) > 0 && len(e.state.Allocation) > 0 && !e.state.AppliedAt.IsZero() {
		// For Pollux's first hold: how long the job has had the
		// allocation the controller last wrote.
		pj.Held = max(r.start.Sub(e.state.AppliedAt).Seconds(), 0)
	}
	if pj.MinReplicas > pj.MaxReplicas {
		pj.MinReplicas = pj.MaxReplicas
	}
	if r.traits.UsesGoodput && e.fit != nil {
		pj.Goodput = model.NewGoodputCache(*e.fit, e.spec.Bounds())
	}
	if r.traits.UsesGoodput && len(e.typed) > 0 {
		pj.TypedGoodput = map[string]policy.GoodputModel{}
		for t, f := range e.typed {
			pj.TypedGoodput[t] = model.NewGoodputCache(*f, e.spec.Bounds())
		}
	}
	if r.traits.NeedsOracle && c.oracle != nil {
		pj.Oracle = c.oracle(e.job, e.spec)
	}
	return pj
}

// recordRound keeps the round's input and the policy's decision in the
// round log (before the controller keeps each job on one type).
func (c *Controller) recordRound(r *round, s registry.Settings) {
	if c.rounds == nil {
		return
	}
	if r.cfg.RecordRounds == 0 {
		c.rounds.add(r.start, nil, 0)
		return
	}
	rec, err := record.New(r.cfg.Policy, s, r.in, r.next)
	if err != nil {
		c.log.Warn("round not recorded", "round", r.number, "error", err)
		return
	}
	c.rounds.add(r.start, rec, r.cfg.RecordRounds)
}
