package jobs

import (
	"sort"

	"github.com/pollux-nomad/pollux/model"
	"github.com/pollux-nomad/pollux/policy"
)

// Plan is what a round does to its jobs, decided from data alone: the
// policy's allocation turned into decisions, the order to write them in
// and the jobs to stop before they are placed.
type Plan struct {
	// Round is the round's number (in every decision).
	Round int64
	// DryRun: decisions are published but no job is changed.
	DryRun bool
	// Hold, if not empty, is why no job may change this round (Consul
	// failed during it). Apply adds the fence's answer to it.
	Hold string
	// Steps are the scheduled jobs in the order their changes are
	// written: shrinking jobs first, as they free GPUs the growing ones
	// need (Nomad retries a blocked placement by itself, but later).
	Steps []Step
	// Vacate lists the jobs (steps) to stop before they are placed,
	// assuming every write succeeds. Nomad keeps a destructive update's
	// old allocation until the new one is placed, so a job whose new GPUs
	// are still held by a job that only moves away later in the round (a
	// swap of nodes, or a cycle of them) would wait for it forever, and it
	// for this one. Such jobs are set aside, scaled to zero once every
	// other change is written, and then placed.
	Vacate []JobRef
}

// Step is one job's part of a plan.
type Step struct {
	Job JobRef
	// Index is the job's position in the plan's input.
	Index int
	// Alloc is the policy's allocation (a node per GPU) and Placement
	// the same grouped per node.
	Alloc     []string
	Placement []NodeGPUs
	// Decision is the job's decision on Placement.
	Decision Decision
	// Change is true when the job's spec must be rewritten; a job whose
	// spec already asks for Placement only gets its decision published.
	Change bool
	// Vacate is true when the job is stopped before it is placed.
	Vacate bool
	// GPUModels are the GPU model names of the placement's GPU type (see
	// Change.GPUModels); empty when types are off or it has no GPUs.
	GPUModels []string
}

// PlanJob is one scheduled job as the plan needs it.
type PlanJob struct {
	Job  Job
	Spec Spec
	// Fit is the job's fitted model (nil before any metrics).
	Fit *model.GoodputFunc
	// Typed is its model per GPU type (nil when types are off): the
	// decision on a placement of type t uses Typed[t] when there is one.
	Typed map[string]*model.GoodputFunc
}

// PlanInput is everything a plan is made from.
type PlanInput struct {
	Round int64
	// DryRun and Hold as in Plan.
	DryRun bool
	Hold   string
	// AdaptiveBatch: decisions use the jobs' fitted models to pick the
	// batch size (policy.Traits); otherwise jobs keep theirs.
	AdaptiveBatch bool
	// Nodes are the GPUs the policy could hand out.
	Nodes []policy.Node
	Jobs  []PlanJob
	// Next is the policy's allocation.
	Next policy.Allocations
	// NodeType is each node's GPU type and TypeModels each type's GPU
	// model names (empty when types are off).
	NodeType   map[string]string
	TypeModels map[string][]string
}

// MakePlan decides a round's changes. It does no I/O.
func MakePlan(in PlanInput) Plan {
	p := Plan{Round: in.Round, DryRun: in.DryRun, Hold: in.Hold}
	for i, j := range in.Jobs {
		alloc := in.Next[j.Job.JobRef.String()]
		want := PlacementOf(alloc)
		gpuType := typeOfPlacement(want, in.NodeType)
		fit := j.Fit
		if f, ok := j.Typed[gpuType]; ok {
			fit = f
		}
		if !in.AdaptiveBatch {
			fit = nil // the job keeps its batch size
		}
		d := Decide(j.Spec, fit, want, in.Round)
		d.GPUType = gpuType
		p.Steps = append(p.Steps, Step{
			Job: j.Job.JobRef, Index: i, Alloc: alloc, Placement: want,
			Decision: d, GPUModels: in.TypeModels[gpuType],
			Change: !unchanged(j.Job, want),
		})
	}
	growth := func(s Step) int { return len(s.Alloc) - len(AllocOf(in.Jobs[s.Index].Job.Placement)) }
	sort.SliceStable(p.Steps, func(a, b int) bool { return growth(p.Steps[a]) < growth(p.Steps[b]) })
	if in.DryRun || in.Hold != "" {
		return p
	}
	free := newOccupancy(in.Nodes, runningOf(in.Jobs))
	for i := range p.Steps {
		s := &p.Steps[i]
		job := in.Jobs[s.Index].Job
		switch {
		case !s.Change:
		case !free.fits(job.Running, s.Placement):
			s.Vacate = true
			p.Vacate = append(p.Vacate, s.Job)
		default:
			free.move(job.Running, s.Placement)
		}
	}
	return p
}

// runningOf is what the jobs' allocations hold now.
func runningOf(jobs []PlanJob) [][]NodeGPUs {
	out := make([][]NodeGPUs, len(jobs))
	for i, j := range jobs {
		out[i] = j.Job.Running
	}
	return out
}

// unchanged reports whether the job's spec already asks for placement
// want. An unshaped job given nothing is not unchanged: as submitted it
// asks Nomad for GPUs on its own, so it must be scaled to zero.
func unchanged(job Job, want []NodeGPUs) bool {
	return SamePlacement(want, job.Placement) && !(len(want) == 0 && job.Unshaped)
}

// plan makes the round's plan from what the earlier phases found.
func (c *Controller) plan(r *round) Plan {
	in := PlanInput{
		Round: r.number, DryRun: r.cfg.DryRun || !r.apply, AdaptiveBatch: r.traits.AdaptiveBatch,
		Nodes: r.in.Nodes, Next: r.next, NodeType: r.nodeType, TypeModels: r.typeModels,
	}
	if err := r.kv.failure(); err != nil {
		in.Hold = err.Error()
	}
	for _, e := range r.entries {
		in.Jobs = append(in.Jobs, PlanJob{Job: e.job, Spec: e.spec, Fit: e.fit, Typed: e.typed})
	}
	return MakePlan(in)
}
