package nomad_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/nomad/api"

	"github.com/pollux-nomad/pollux/jobs"
	"github.com/pollux-nomad/pollux/nomad"
	"github.com/pollux-nomad/pollux/nomad/nomadtest"
)

var _ jobs.ParkedReader = (*nomad.Client)(nil)

// TestReadParked: a job the controller scaled to zero is described from
// the job list alone, exactly as a full read describes it, by an adapter
// that never read its spec (a new leader's); a write to it then reads the
// spec and is a check-and-set as always; after an operator's edit, or at
// another index, or while it holds GPUs, the job is read in full.
func TestReadParked(t *testing.T) {
	c, raw := setup(t, nomad.Config{})
	ctx := ctxFor(t, 3*time.Minute)
	n1 := nomadtest.NodeIDs(t, raw)["client-1"]
	id := nomadtest.ID("parked")
	j := nomadtest.Job(id, 1, true)
	j.Meta["owner"] = "alice"
	nomadtest.Register(t, raw, j)
	r := ref(id)
	var cur jobs.Job
	nomadtest.WaitFor(t, 60*time.Second, "the job to run", func() (bool, string, error) {
		var err error
		cur, err = c.ReadJob(ctx, r)
		return err == nil && len(cur.Running) == 1, "running " + placementString(cur.Running), err
	})
	parkedAt, err := c.Apply(ctx, jobs.Change{Job: r, JobModifyIndex: cur.JobModifyIndex, Meta: map[string]string{"pollux_num_replicas": "0"}})
	if err != nil {
		t.Fatalf("scale to zero: %v", err)
	}
	// Stopped and settled: Nomad moves the job's status from "pending" to
	// "dead" after its allocations stop, and the comparisons below read
	// the job twice.
	nomadtest.WaitFor(t, 60*time.Second, "the job to stop", func() (bool, string, error) {
		cur, err = c.ReadJob(ctx, r)
		return err == nil && len(cur.Running) == 0 && cur.Status == "dead", "running " + placementString(cur.Running) + ", status " + cur.Status, err
	})

	// A new leader's adapter: nothing cached.
	fresh := func() *nomad.Client { return listedAdapter(t, ctx, raw) }
	a := fresh()
	got, err := a.ReadParked(ctx, r, parkedAt)
	if err != nil {
		t.Fatal(err)
	}
	if a.ParkedReads() != 1 || a.SpecCached(r) {
		t.Fatalf("ReadParked at the parking index: %d described from the list, spec cached %v; want 1 and no spec read", a.ParkedReads(), a.SpecCached(r))
	}
	full, err := a.ReadJob(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(full, got); d != "" {
		t.Errorf("described from the list (-full read +list):\n%s", d)
	}
	if got.Placement != nil || got.Unshaped || got.Problem != "" || got.SubmitTime.IsZero() {
		t.Errorf("parked job %+v: want no placement, shaped, no problem, a submission time", got)
	}

	// At another index (the state is not the job's), read in full.
	b := fresh()
	if _, err := b.ReadParked(ctx, r, parkedAt-1); err != nil || b.ParkedReads() != 0 {
		t.Errorf("ReadParked at another index: %v, %d described from the list; want a full read", err, b.ParkedReads())
	}

	// A write to a job described from the list: Apply reads the spec,
	// checks the index and places it.
	c2 := fresh()
	if _, err := c2.ReadParked(ctx, r, parkedAt); err != nil {
		t.Fatal(err)
	}
	placed, err := c2.Apply(ctx, jobs.Change{Job: r, JobModifyIndex: parkedAt, Placement: []jobs.NodeGPUs{{Node: n1, GPUs: 1}}, Meta: map[string]string{"pollux_num_replicas": "1"}})
	if err != nil {
		t.Fatalf("Apply to a job described from the list: %v", err)
	}
	cur = waitRunning(t, c2, r, []jobs.NodeGPUs{{Node: n1, GPUs: 1}})
	// Holding GPUs (even at an index someone calls parked): read in full.
	d := fresh()
	if got, err := d.ReadParked(ctx, r, placed); err != nil || d.ParkedReads() != 0 || len(got.Placement) != 1 {
		t.Errorf("ReadParked of a running job: %+v, %v, %d from the list; want a full read with its placement", got, err, d.ParkedReads())
	}

	// Parked again, then an operator's edit: the index moves, a full read.
	parkedAt, err = c2.Apply(ctx, jobs.Change{Job: r, JobModifyIndex: placed, Meta: map[string]string{"pollux_num_replicas": "0"}})
	if err != nil {
		t.Fatal(err)
	}
	spec, _, err := raw.Jobs().Info(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec.Meta["owner"] = "bob"
	spec.TaskGroups[0].Count = intPtr(2)
	nomadtest.Register(t, raw, spec)
	e := fresh()
	got, err = e.ReadParked(ctx, r, parkedAt)
	if err != nil {
		t.Fatal(err)
	}
	if e.ParkedReads() != 0 || got.JobModifyIndex == parkedAt || got.Meta["owner"] != "bob" || !got.Unshaped && len(got.Placement) == 0 {
		t.Errorf("after an operator's edit: %+v, %d from the list; want a full read showing the edit", got, e.ParkedReads())
	}
}

func intPtr(n int) *int { return &n }

// listedAdapter is a new leader's adapter (nothing cached) that has
// listed the jobs, as a round does before it reads them.
func listedAdapter(t *testing.T, ctx context.Context, raw *api.Client) *nomad.Client {
	t.Helper()
	a, err := nomad.New(raw, nomad.Config{Device: nomadtest.Device()})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.ListJobs(ctx, 0, 0); err != nil {
		t.Fatal(err)
	}
	return a
}
