package nomad

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/nomad/api"

	"github.com/pollux-nomad/pollux/jobs"
)

// TestReshapeKeepsNetwork checks that every per-node copy of the worker
// group keeps the group's network block (so each copy gets its own
// dynamic "pollux" port for the worker library's rendezvous), as a deep
// copy: two copies on one node must not share one port definition.
func TestReshapeKeepsNetwork(t *testing.T) {
	task := api.NewTask("train", "raw_exec")
	task.Resources = &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: new(uint64(1))}}}
	g := api.NewTaskGroup("workers", 1).AddTask(task)
	g.Networks = []*api.NetworkResource{{
		Mode:          "host",
		DynamicPorts:  []api.Port{{Label: "pollux"}},
		ReservedPorts: []api.Port{{Label: "metrics", Value: 9100}},
	}}
	job := api.NewBatchJob("train", "train", "global", 50)
	job.AddTaskGroup(g)
	dev, err := parseDevice("nvidia/gpu")
	if err != nil {
		t.Fatal(err)
	}
	// Three ranks, two of them on node-a.
	p := []jobs.NodeGPUs{{Node: "node-b", GPUs: 3}, {Node: "node-a", GPUs: 2}, {Node: "node-a", GPUs: 1}}
	if err := reshape(job, g, p, dev, nil); err != nil {
		t.Fatalf("reshape: %v", err)
	}
	if len(job.TaskGroups) != 3 {
		t.Fatalf("got %d groups, want 3", len(job.TaskGroups))
	}
	want := []*api.NetworkResource{{
		Mode:          "host",
		DynamicPorts:  []api.Port{{Label: "pollux"}},
		ReservedPorts: []api.Port{{Label: "metrics", Value: 9100}},
	}}
	for i, tg := range job.TaskGroups {
		if d := cmp.Diff(want, tg.Networks); d != "" {
			t.Errorf("group %d (%s): network (-want +got):\n%s", i, groupName(tg), d)
		}
	}
	// Deep copies: changing one copy's port leaves the others alone.
	job.TaskGroups[1].Networks[0].DynamicPorts[0].Label = "changed"
	for _, i := range []int{0, 2} {
		if got := job.TaskGroups[i].Networks[0].DynamicPorts[0].Label; got != "pollux" {
			t.Errorf("group %d shares its network block with group 1: label %q", i, got)
		}
	}
}

// TestReshapeGPUTypeConstraint: every per-node group gets the GPU type
// constraint (in the device request for device.model, as a group
// constraint for node meta); a move replaces the adapter's constraint and
// keeps an operator's own; scaling to zero removes it.
func TestReshapeGPUTypeConstraint(t *testing.T) {
	newJob := func() (*api.Job, *api.TaskGroup) {
		task := api.NewTask("train", "raw_exec")
		task.Resources = &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: new(uint64(1))}}}
		g := api.NewTaskGroup("workers", 1).AddTask(task)
		g.Constraints = []*api.Constraint{api.NewConstraint("${meta.gpu_type}", "!=", "k80")} // the operator's
		job := api.NewBatchJob("train", "train", "global", 50)
		job.AddTaskGroup(g)
		return job, g
	}
	dev, _ := parseDevice("nvidia/gpu")
	p := []jobs.NodeGPUs{{Node: "a", GPUs: 2}, {Node: "b", GPUs: 1}}

	job, g := newJob()
	meta := jobs.GPUTypeSource{Kind: "meta", Key: "gpu_type"}
	if err := reshape(job, g, p, dev, gpuTypeConstraint(meta, []string{"t4"})); err != nil {
		t.Fatal(err)
	}
	for _, tg := range job.TaskGroups {
		if !hasConstraint(tg.Constraints, "${meta.gpu_type}", "=", "t4") || !hasConstraint(tg.Constraints, "${meta.gpu_type}", "!=", "k80") {
			t.Errorf("group %s constraints %v", groupName(tg), fmtConstraints(tg.Constraints))
		}
	}
	// Moving to a100: the t4 constraint goes, the operator's stays.
	if err := reshape(job, g, p[:1], dev, gpuTypeConstraint(meta, []string{"A100", "a100"})); err != nil {
		t.Fatal(err)
	}
	if len(job.TaskGroups) != 1 {
		t.Fatalf("%d groups", len(job.TaskGroups))
	}
	cs := job.TaskGroups[0].Constraints
	if hasConstraint(cs, "${meta.gpu_type}", "=", "t4") || !hasConstraint(cs, "${meta.gpu_type}", "regexp", "^(?:A100|a100)$") || !hasConstraint(cs, "${meta.gpu_type}", "!=", "k80") {
		t.Errorf("after the move: %v", fmtConstraints(cs))
	}
	// Scaled to zero: no type constraint.
	if err := reshape(job, g, nil, dev, gpuTypeConstraint(meta, []string{"t4"})); err != nil {
		t.Fatal(err)
	}
	if cs := job.TaskGroups[0].Constraints; len(cs) != 1 {
		t.Errorf("scaled to zero: %v", fmtConstraints(cs))
	}

	// device.model: inside the device request.
	job, g = newJob()
	if err := reshape(job, g, p, dev, gpuTypeConstraint(jobs.GPUTypeSource{Kind: "device"}, []string{"Tesla T4"})); err != nil {
		t.Fatal(err)
	}
	for _, tg := range job.TaskGroups {
		d := tg.Tasks[0].Resources.Devices[0]
		if !hasConstraint(d.Constraints, "${device.model}", "=", "Tesla T4") || len(tg.Constraints) != 2 {
			t.Errorf("group %s: device constraints %v, group %v", groupName(tg), fmtConstraints(d.Constraints), fmtConstraints(tg.Constraints))
		}
	}
	if err := reshape(job, g, p, dev, nil); err != nil {
		t.Fatal(err)
	}
	if d := job.TaskGroups[0].Tasks[0].Resources.Devices[0]; len(d.Constraints) != 0 {
		t.Errorf("untyped again: device constraints %v", fmtConstraints(d.Constraints))
	}
}

func hasConstraint(cs []*api.Constraint, l, op, r string) bool {
	for _, c := range cs {
		if c.LTarget == l && c.Operand == op && c.RTarget == r {
			return true
		}
	}
	return false
}

func fmtConstraints(cs []*api.Constraint) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.LTarget+" "+c.Operand+" "+c.RTarget)
	}
	return out
}
