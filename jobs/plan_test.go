package jobs_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
	"github.com/pollux-nomad/pollux/policy"
)

func planJob(t *testing.T, id, runs string) jobs.PlanJob {
	t.Helper()
	spec, err := jobs.ParseSpec(map[string]string{
		contract.MetaEnabled: "true", contract.MetaInitBatchSize: "128", contract.MetaInitLR: "0.1",
		contract.MetaMaxBatchSize: "4096", contract.MetaLocalBszMin: "32", contract.MetaLocalBszMax: "1024",
	})
	if err != nil {
		t.Fatal(err)
	}
	j := jobs.Job{JobRef: jobs.JobRef{Namespace: "default", ID: id}}
	if runs != "" {
		j.Placement, j.Running = placement(runs), placement(runs)
	}
	return jobs.PlanJob{Job: j, Spec: spec}
}

func order(p jobs.Plan) []string {
	var out []string
	for _, s := range p.Steps {
		out = append(out, s.Job.ID)
	}
	return out
}

func ids(refs []jobs.JobRef) []string {
	var out []string
	for _, r := range refs {
		out = append(out, r.ID)
	}
	return out
}

// TestPlanSwap: two jobs trading full nodes are both set aside to be
// stopped before they are placed; not in a dry run, nor when held.
func TestPlanSwap(t *testing.T) {
	in := jobs.PlanInput{
		Round: 7, AdaptiveBatch: true,
		Nodes: []policy.Node{{ID: "n1", GPUs: 2}, {ID: "n2", GPUs: 2}},
		Jobs:  []jobs.PlanJob{planJob(t, "a", "n1:2"), planJob(t, "b", "n2:2")},
		Next:  policy.Allocations{"default/a": {"n2", "n2"}, "default/b": {"n1", "n1"}},
	}
	p := jobs.MakePlan(in)
	if got := ids(p.Vacate); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("vacate %v, want [a b]", got)
	}
	for _, s := range p.Steps {
		if !s.Change || !s.Vacate || s.Decision.Round != 7 || s.Decision.NumReplicas != 2 {
			t.Fatalf("step %+v", s)
		}
	}
	in.DryRun = true
	if p := jobs.MakePlan(in); len(p.Vacate) != 0 || !p.DryRun || !p.Steps[0].Change {
		t.Fatalf("dry run: %+v", p)
	}
	in.DryRun, in.Hold = false, "consul down"
	if p := jobs.MakePlan(in); len(p.Vacate) != 0 || p.Hold != "consul down" {
		t.Fatalf("held: %+v", p)
	}
}

// TestPlanShrinkFirst: a shrinking job is written before a growing one,
// which then fits in what it freed; an unchanged job only has its
// decision published, and an unshaped job given nothing is a change (it
// must be scaled to zero).
func TestPlanShrinkFirst(t *testing.T) {
	idle := planJob(t, "idle", "")
	idle.Job.Unshaped = true
	p := jobs.MakePlan(jobs.PlanInput{
		Nodes: []policy.Node{{ID: "n1", GPUs: 4}, {ID: "n2", GPUs: 1}},
		Jobs:  []jobs.PlanJob{planJob(t, "grow", "n1:1"), planJob(t, "shrink", "n1:3"), planJob(t, "same", "n2:1"), idle},
		Next: policy.Allocations{
			"default/grow": {"n1", "n1", "n1"}, "default/shrink": {"n1"}, "default/same": {"n2"},
		},
	})
	if got := order(p); !slices.Equal(got, []string{"shrink", "same", "idle", "grow"}) {
		t.Fatalf("order %v, want shrink, same, idle, grow", got)
	}
	change := map[string]bool{}
	for _, s := range p.Steps {
		change[s.Job.ID] = s.Change
	}
	if !change["grow"] || !change["shrink"] || change["same"] || !change["idle"] || len(p.Vacate) != 0 {
		t.Fatalf("changes %v, vacate %v", change, p.Vacate)
	}
}

// program renders a plan's ops as "kind:job,job kind:job ...".
func program(p jobs.Plan) string {
	var ops []string
	for _, op := range p.Ops {
		var ids []string
		for _, i := range op.Steps {
			ids = append(ids, p.Steps[i].Job.ID)
		}
		ops = append(ops, string(op.Kind)+":"+strings.Join(ids, ","))
	}
	return strings.Join(ops, " ")
}

func refs(ids ...string) map[jobs.JobRef]bool {
	out := map[jobs.JobRef]bool{}
	for _, id := range ids {
		out[jobs.JobRef{Namespace: "default", ID: id}] = true
	}
	return out
}

// TestPlanProgram: the ops a plan runs, from the plan alone: settle
// what needs no write, park what is scaled to zero (queued jobs first),
// write in waves (a change whose GPUs another frees waits for the next
// wave), vacate and then place a swap; and what a plan made again from
// what apply observed runs instead (a failed write, vacated jobs, the
// park budget spent).
func TestPlanProgram(t *testing.T) {
	queued := func(id string) jobs.PlanJob {
		j := planJob(t, id, "")
		j.Job.Unshaped = true
		return j
	}
	// n1 (4 GPUs): shrink gives 2 of its 3 to grow; n2 (1 GPU): same
	// keeps it; n3 (2 GPUs): r runs on it and is parked; q1 and q2 wait
	// at their authors' count.
	mixed := jobs.PlanInput{
		Round: 3, ParkBudget: 4 * time.Second,
		Nodes: []policy.Node{{ID: "n1", GPUs: 4}, {ID: "n2", GPUs: 1}, {ID: "n3", GPUs: 2}},
		Jobs: []jobs.PlanJob{planJob(t, "grow", "n1:1"), planJob(t, "shrink", "n1:3"), planJob(t, "same", "n2:1"),
			planJob(t, "r", "n3:2"), queued("q1"), queued("q2")},
		Next: policy.Allocations{"default/grow": {"n1", "n1", "n1"}, "default/shrink": {"n1"}, "default/same": {"n2"}},
	}
	swap := jobs.PlanInput{
		Nodes: []policy.Node{{ID: "n1", GPUs: 2}, {ID: "n2", GPUs: 2}},
		Jobs:  []jobs.PlanJob{planJob(t, "a", "n1:2"), planJob(t, "b", "n2:2")},
		Next:  policy.Allocations{"default/a": {"n2", "n2"}, "default/b": {"n1", "n1"}},
	}
	with := func(in jobs.PlanInput, edit func(*jobs.PlanInput)) jobs.PlanInput {
		edit(&in)
		return in
	}
	observed := func(done, moved, vacated []string, spent bool) *jobs.Observed {
		return &jobs.Observed{Done: refs(done...), Moved: refs(moved...), Vacated: refs(vacated...), BudgetSpent: spent}
	}
	for _, c := range []struct {
		name string
		in   jobs.PlanInput
		want string
		why  []string
	}{
		{"dry run", with(mixed, func(in *jobs.PlanInput) { in.DryRun = true }),
			"settle:shrink,r,same,q1,q2,grow", []string{""}},
		{"held", with(mixed, func(in *jobs.PlanInput) { in.Hold = "consul down" }),
			"settle:shrink,r,same,q1,q2,grow", []string{"consul down"}},
		{"all writes", mixed, "settle:same park:q1,q2,r write:shrink write:grow", nil},
		{"shrink failed", with(mixed, func(in *jobs.PlanInput) {
			in.Observed = observed([]string{"same", "q1", "q2", "r", "shrink"}, []string{"q1", "q2", "r"}, nil, false)
		}), "vacate:grow place:grow", nil},
		{"park failed", with(mixed, func(in *jobs.PlanInput) {
			in.Observed = observed([]string{"same", "q1", "q2", "r"}, []string{"q1", "r"}, nil, false)
		}), "write:shrink write:grow", nil},
		{"budget spent, queued jobs left", with(mixed, func(in *jobs.PlanInput) {
			in.Observed = observed([]string{"same"}, nil, nil, true)
		}), "defer:q1,q2,r defer:shrink,grow", []string{
			"deferred: the round's 4s for scaling jobs to zero is spent (3 of them left); decided again next round",
			"deferred: 2 jobs Nomad queued are still to be scaled to zero first (Nomad would start them on the GPUs a change frees); decided again next round",
		}},
		{"budget spent, only running jobs left", with(mixed, func(in *jobs.PlanInput) {
			in.Observed = observed([]string{"same", "q1", "q2"}, []string{"q1", "q2"}, nil, true)
		}), "defer:r write:shrink write:grow", []string{
			"deferred: the round's 4s for scaling jobs to zero is spent (1 of them left); decided again next round",
		}},
		{"swap", swap, "vacate:a,b place:a,b", nil},
		{"swap, a vacated", with(swap, func(in *jobs.PlanInput) {
			in.Observed = observed(nil, nil, []string{"a"}, false)
		}), "write:b place:a", nil},
		{"swap, a could not be stopped", with(swap, func(in *jobs.PlanInput) {
			in.Observed = observed([]string{"a"}, nil, []string{}, false)
		}), "vacate:b place:b", nil},
	} {
		p := jobs.MakePlan(c.in)
		if got := program(p); got != c.want {
			t.Errorf("%s: program %q, want %q", c.name, got, c.want)
			continue
		}
		var whys []string
		for _, op := range p.Ops {
			if op.Kind == jobs.OpDefer || op.Kind == jobs.OpSettle && op.Why != "" || c.in.DryRun {
				whys = append(whys, op.Why)
			}
		}
		if !slices.Equal(whys, c.why) {
			t.Errorf("%s: reasons %q, want %q", c.name, whys, c.why)
		}
	}
}

// TestPlanParkChunks: 300 jobs scaled to zero go in park ops of at most
// 128 (two waves of Nomad writes), those Nomad queued first.
func TestPlanParkChunks(t *testing.T) {
	in := jobs.PlanInput{Nodes: []policy.Node{{ID: "n1", GPUs: 8}}, Next: policy.Allocations{}}
	for i := range 300 {
		j := planJob(t, fmt.Sprintf("p%03d", i), "")
		if i < 8 {
			j = planJob(t, fmt.Sprintf("p%03d", i), "n1:1")
		} else {
			j.Job.Unshaped = true
		}
		in.Jobs = append(in.Jobs, j)
	}
	p := jobs.MakePlan(in)
	var sizes []int
	for _, op := range p.Ops {
		if op.Kind != jobs.OpPark {
			t.Fatalf("op %s, want only park ops", op.Kind)
		}
		sizes = append(sizes, len(op.Steps))
	}
	if !slices.Equal(sizes, []int{128, 128, 44}) {
		t.Fatalf("park ops of %v jobs, want [128 128 44]", sizes)
	}
	last := p.Ops[2].Steps
	for k, i := range last[len(last)-8:] {
		if id := p.Steps[i].Job.ID; id != fmt.Sprintf("p%03d", k) {
			t.Fatalf("park order ends with %s, want the 8 running jobs last", id)
		}
	}
}

// TestPlanConvergingJobsHold: a previous leader rewrote a and b a moment
// ago and Nomad still runs their old allocations; c and d, placed by
// Nomad itself, are to take the GPUs a and b are about to get. Counting
// a and b by what they run would write c and d at once onto nodes that a
// and b will fill, where each would wait for the other's old allocation
// (Nomad stops none of them); counted by the larger of what they run and
// what their spec asks, c and d form a cycle and are stopped first.
func TestPlanConvergingJobsHold(t *testing.T) {
	a, b := planJob(t, "a", "n1:2"), planJob(t, "b", "n2:2")
	a.Job.Running, b.Job.Running = placement("n2:1"), placement("n1:1")
	c, d := planJob(t, "c", ""), planJob(t, "d", "")
	c.Job.Running, d.Job.Running = placement("n2:1"), placement("n1:1")
	in := jobs.PlanInput{
		Round: 3, AdaptiveBatch: true,
		Nodes: []policy.Node{{ID: "n1", GPUs: 4}, {ID: "n2", GPUs: 4}},
		Jobs:  []jobs.PlanJob{a, b, c, d},
		Next: policy.Allocations{"default/a": {"n1", "n1"}, "default/b": {"n2", "n2"},
			"default/c": {"n1", "n1"}, "default/d": {"n2", "n2"}},
	}
	p := jobs.MakePlan(in)
	if got := ids(p.Vacate); !slices.Equal(got, []string{"c", "d"}) {
		t.Fatalf("vacate %v, want [c d]; ops %+v", got, p.Ops)
	}
	// Once Nomad has carried a and b out, c and d are written directly.
	a.Job.Running, b.Job.Running = a.Job.Placement, b.Job.Placement
	c.Job.Running, d.Job.Running = nil, nil
	in.Jobs = []jobs.PlanJob{a, b, c, d}
	if p := jobs.MakePlan(in); len(p.Vacate) != 0 {
		t.Fatalf("vacate %v with a and b in place", ids(p.Vacate))
	}
}
