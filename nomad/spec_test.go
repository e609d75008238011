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
	if err := reshape(job, g, p, dev); err != nil {
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
