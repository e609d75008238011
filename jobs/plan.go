package jobs

import (
	"fmt"
	"maps"
	"sort"
	"time"

	"github.com/pollux-nomad/pollux/model"
	"github.com/pollux-nomad/pollux/policy"
)

// Plan is what a round does to its jobs, decided from data alone: the
// policy's allocation turned into decisions, and the program apply runs
// to write them (Ops, in order). Apply makes no decision of its own: when
// a write fails, or the round's budget for scaling jobs to zero is spent,
// it asks MakePlan again with what it observed (PlanInput.Observed) and
// runs the new plan's ops.
type Plan struct {
	// Round is the round's number (in every decision).
	Round int64
	// DryRun: decisions are published but no job is changed.
	DryRun bool
	// Hold, if not empty, is why no job may change this round (Consul
	// failed during it, or the fence refused).
	Hold string
	// Steps are the scheduled jobs in the order their changes are
	// written: shrinking jobs first, as they free GPUs the growing ones
	// need (Nomad retries a blocked placement by itself, but later).
	Steps []Step
	// Ops is the program: each op names steps (indexes into Steps), and
	// every step still to be carried out is in exactly one op.
	Ops []Op
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

// OpKind says what an op does with its steps.
type OpKind string

// The kinds of op, in the order a plan runs them.
const (
	// OpPark scales its steps' jobs to zero together: their intents are
	// saved in batched transactions, then their Nomad writes go out with
	// at most zeroConcurrency in flight, then their outcomes are saved.
	// Apply starts no park op but the first once the round spent its
	// park budget on them (PlanInput.ParkBudget), and plans again.
	OpPark OpKind = "park"
	// OpSettle writes nothing: it publishes the decision of a job whose
	// spec has it, and records a change not written (dry run, or held:
	// Why says why).
	OpSettle OpKind = "settle"
	// OpDefer records its steps' decisions without writing them; Why
	// says what they wait for. The next round decides again.
	OpDefer OpKind = "defer"
	// OpWrite writes its steps' changes in parallel (a wave): each one's
	// new GPUs are free once the earlier ops are done, not counting GPUs
	// another write of the same wave frees (it may fail).
	OpWrite OpKind = "write"
	// OpVacate scales its steps' jobs to zero ahead of their move (see
	// Plan.Vacate), one by one.
	OpVacate OpKind = "vacate"
	// OpPlace writes its steps' changes, one by one, once they are
	// vacated.
	OpPlace OpKind = "place"
)

// Op is one instruction of a plan.
type Op struct {
	Kind OpKind
	// Steps are indexes into Plan.Steps, in the order to run them.
	Steps []int
	// Why is the reason of an OpDefer, or of a held OpSettle.
	Why string
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
	// batch size (registry.Traits); otherwise jobs keep theirs.
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
	// ParkBudget is the round's budget for park ops (for the reason of
	// the steps deferred once it is spent).
	ParkBudget time.Duration
	// Observed is what apply saw of the ops it ran (nil for a round's
	// first plan): the plan then covers only the steps left.
	Observed *Observed
}

// Observed is what apply saw while running part of a plan.
type Observed struct {
	// Done are the jobs whose steps are carried out or given up: they
	// are in no op of a new plan.
	Done map[JobRef]bool
	// Moved are the done jobs whose change was written: they hold their
	// new placement. Every other job holds what it runs (Job.Running).
	Moved map[JobRef]bool
	// Vacated are the jobs scaled to zero ahead of their move: they hold
	// nothing and are still to be placed.
	Vacated map[JobRef]bool
	// BudgetSpent: no park op may start this round.
	BudgetSpent bool
}

// NewObserved returns an empty observation.
func NewObserved() *Observed {
	return &Observed{Done: map[JobRef]bool{}, Moved: map[JobRef]bool{}, Vacated: map[JobRef]bool{}}
}

// MakePlan decides a round's changes and the program that writes them.
// It does no I/O.
func MakePlan(in PlanInput) Plan {
	p := Plan{Round: in.Round, DryRun: in.DryRun, Hold: in.Hold, Steps: planSteps(in)}
	obs := in.Observed
	if obs == nil {
		obs = NewObserved()
	}
	var settle, changes []int
	for i, s := range p.Steps {
		switch {
		case obs.Done[s.Job]:
		case !s.Change || in.DryRun || in.Hold != "":
			settle = append(settle, i)
		default:
			changes = append(changes, i)
		}
	}
	if len(settle) > 0 {
		p.Ops = append(p.Ops, Op{Kind: OpSettle, Steps: settle, Why: in.Hold})
	}
	if len(changes) == 0 {
		return p
	}
	// What each job holds once the ops run so far are done. A job this
	// plan does not rewrite holds, on each node, the larger of what it
	// runs and what its spec asks for: Nomad may not have carried out its
	// last write yet (a previous leader's, moments before), and it will.
	holds := make([][]NodeGPUs, len(p.Steps))
	for i, s := range p.Steps {
		switch job := in.Jobs[s.Index].Job; {
		case obs.Moved[s.Job]:
			holds[i] = s.Placement
		case obs.Vacated[s.Job]:
		case !s.Change || obs.Done[s.Job]:
			holds[i] = converging(job.Running, job.Placement)
		default:
			holds[i] = job.Running
		}
	}
	free := newOccupancy(in.Nodes, holds)
	changes = p.park(in, obs, changes, holds, free)
	var place []int
	for _, i := range changes {
		if obs.Vacated[p.Steps[i].Job] {
			place = append(place, i)
		}
	}
	changes = p.waves(changes, holds, free, obs)
	if len(changes) > 0 {
		p.Ops = append(p.Ops, Op{Kind: OpVacate, Steps: changes})
		for _, i := range changes {
			p.Steps[i].Vacate = true
			p.Vacate = append(p.Vacate, p.Steps[i].Job)
		}
	}
	if place = append(place, changes...); len(place) > 0 {
		p.Ops = append(p.Ops, Op{Kind: OpPlace, Steps: place})
	}
	return p
}

// converging returns, node by node, the larger of running and spec: what
// a job may hold while Nomad replaces the allocations it runs by those its
// spec asks for.
func converging(running, spec []NodeGPUs) []NodeGPUs {
	if len(spec) == 0 {
		return running
	}
	most := map[string]int{}
	var nodes []string
	for _, l := range [][]NodeGPUs{running, spec} {
		per := map[string]int{}
		for _, r := range l {
			per[r.Node] += r.GPUs
		}
		for n, g := range per {
			if _, ok := most[n]; !ok {
				nodes = append(nodes, n)
			}
			most[n] = max(most[n], g)
		}
	}
	sort.Strings(nodes)
	out := make([]NodeGPUs, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, NodeGPUs{Node: n, GPUs: most[n]})
	}
	return out
}

// planSteps turns the policy's allocation into one step per job, in the
// order of their growth (shrinking jobs first).
func planSteps(in PlanInput) []Step {
	steps := make([]Step, 0, len(in.Jobs))
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
		steps = append(steps, Step{
			Job: j.Job.JobRef, Index: i, Alloc: alloc, Placement: want,
			Decision: d, GPUModels: in.TypeModels[gpuType],
			Change: !unchanged(j.Job, want),
		})
	}
	growth := func(s Step) int { return len(s.Alloc) - len(AllocOf(in.Jobs[s.Index].Job.Placement)) }
	sort.SliceStable(steps, func(a, b int) bool { return growth(steps[a]) < growth(steps[b]) })
	return steps
}

// park adds the park ops: the changes that give a job no GPUs, when
// there are at least two of them in the round (a first round adopting
// jobs Nomad queued scales most of 2,000 jobs to zero). They only free
// GPUs, so they neither wait for nor block another step. The jobs that
// hold no GPUs go first (while one of them is queued at its author's
// count, Nomad would start it on any GPU another write frees), then
// those that run, in chunks of zeroChunkSize. Once the park budget is
// spent the parks left are deferred, and while any of them holds no GPUs
// (Nomad queued it) so is every other change: rewriting a job that runs
// frees its GPUs, and Nomad would start a queued job there before the
// one the policy chose. It returns the changes left for the waves, and
// marks in free the GPUs the parks release.
func (p *Plan) park(in PlanInput, obs *Observed, changes []int, holds [][]NodeGPUs, free occupancy) []int {
	all := 0
	for _, s := range p.Steps {
		if s.Change && len(s.Placement) == 0 {
			all++
		}
	}
	if all < 2 {
		return changes
	}
	var queued, running, rest []int
	for _, i := range changes {
		switch {
		case len(p.Steps[i].Placement) > 0:
			rest = append(rest, i)
		case len(holds[i]) > 0:
			running = append(running, i)
		default:
			queued = append(queued, i)
		}
	}
	parks := append(queued, running...)
	if len(parks) == 0 {
		return rest
	}
	if obs.BudgetSpent {
		why := fmt.Sprintf("deferred: the round's %s for scaling jobs to zero is spent (%d of them left); decided again next round", in.ParkBudget, len(parks))
		p.Ops = append(p.Ops, Op{Kind: OpDefer, Steps: parks, Why: why})
		if len(queued) > 0 && len(rest) > 0 {
			why := fmt.Sprintf("deferred: %d jobs Nomad queued are still to be scaled to zero first (Nomad would start them on the GPUs a change frees); decided again next round", len(queued))
			p.Ops = append(p.Ops, Op{Kind: OpDefer, Steps: rest, Why: why})
			return nil
		}
		return rest
	}
	for start := 0; start < len(parks); start += zeroChunkSize {
		p.Ops = append(p.Ops, Op{Kind: OpPark, Steps: parks[start:min(start+zeroChunkSize, len(parks))]})
	}
	for _, i := range parks {
		free.move(holds[i], nil)
	}
	return rest
}

// waves adds the write ops: each wave takes, in the plan's order, the
// changes whose new GPUs are free after the earlier ops, not counting
// GPUs that another change of the same wave frees (its write may fail),
// and reserving what each takes; the next wave counts what the wave's
// writes free. Vacated jobs are left to the place op. It returns the
// changes no wave can take: their GPUs are held by a job that must be
// stopped first.
func (p *Plan) waves(changes []int, holds [][]NodeGPUs, free occupancy, obs *Observed) []int {
	var pending []int
	for _, i := range changes {
		if !obs.Vacated[p.Steps[i].Job] {
			pending = append(pending, i)
		}
	}
	for len(pending) > 0 {
		reserved := maps.Clone(free)
		var wave, rest []int
		for _, i := range pending {
			if !reserved.fits(holds[i], p.Steps[i].Placement) {
				rest = append(rest, i)
				continue
			}
			reserved.take(holds[i], p.Steps[i].Placement)
			wave = append(wave, i)
		}
		if len(wave) == 0 {
			return rest
		}
		p.Ops = append(p.Ops, Op{Kind: OpWrite, Steps: wave})
		for _, i := range wave {
			free.move(holds[i], p.Steps[i].Placement)
		}
		pending = rest
	}
	return nil
}

// unchanged reports whether the job's spec already asks for placement
// want. An unshaped job given nothing is not unchanged: as submitted it
// asks Nomad for GPUs on its own, so it must be scaled to zero.
func unchanged(job Job, want []NodeGPUs) bool {
	return SamePlacement(want, job.Placement) && !(len(want) == 0 && job.Unshaped)
}

// planInput is what the round's plan is made from, as the earlier phases
// found it.
func (c *Controller) planInput(r *round) PlanInput {
	in := PlanInput{
		Round: r.number, DryRun: r.cfg.DryRun || !r.apply, AdaptiveBatch: r.traits.AdaptiveBatch,
		Nodes: r.in.Nodes, Next: r.next, NodeType: r.nodeType, TypeModels: r.typeModels,
		ParkBudget: c.parkBudget,
	}
	if err := r.kv.failure(); err != nil {
		in.Hold = err.Error()
	}
	for _, e := range r.entries {
		in.Jobs = append(in.Jobs, PlanJob{Job: e.job, Spec: e.spec, Fit: e.fit, Typed: e.typed})
	}
	return in
}
