package jobs_test

import (
	"slices"
	"testing"

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
