package nomad_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pollux-nomad/pollux/jobs"
	"github.com/pollux-nomad/pollux/nomad"
	"github.com/pollux-nomad/pollux/nomad/nomadtest"
)

var _ jobs.QueuedReader = (*nomad.Client)(nil)

// TestReadQueued: a job its author submitted and Nomad queued is
// described from the job list alone, as a full read describes it, by an
// adapter that never read its spec (a controller adopting the cluster);
// a write to it then reads the spec and is a check-and-set as always,
// and a problem in the spec shows then; a job that runs, or that was
// written since its submission, is read in full.
func TestReadQueued(t *testing.T) {
	c, raw := setup(t, nomad.Config{})
	ctx := ctxFor(t, 3*time.Minute)
	queuedJob := func(prefix string, groups int) (string, jobs.JobRef) {
		id := nomadtest.ID(prefix)
		j := nomadtest.Job(id, 64, true) // more GPUs than any client has
		for i := 1; i < groups; i++ {
			g := *j.TaskGroups[0]
			g.Name = new(fmt.Sprintf("other%d", i))
			j.AddTaskGroup(&g)
		}
		nomadtest.Register(t, raw, j)
		nomadtest.WaitFor(t, 60*time.Second, "Nomad to queue "+id, func() (bool, string, error) {
			s, _, err := raw.Jobs().Summary(id, nil)
			if err != nil {
				return false, "", err
			}
			q := 0
			for _, g := range s.Summary {
				q += g.Queued
			}
			return q > 0, fmt.Sprintf("queued %d", q), nil
		})
		return id, ref(id)
	}
	fresh := func() *nomad.Client { return listedAdapter(t, ctx, raw) }

	_, r := queuedJob("queued", 1)
	a := fresh()
	got, err := a.ReadQueued(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if a.QueuedReads() != 1 || a.SpecCached(r) {
		t.Fatalf("ReadQueued of a queued job: %d described from the list, spec cached %v; want 1 and no spec read", a.QueuedReads(), a.SpecCached(r))
	}
	if !got.Listed || !got.Unshaped || got.Placement != nil || got.Running != nil || got.SubmitTime.IsZero() {
		t.Errorf("queued job described from the list: %+v; want listed, unshaped, no placement, nothing running, a submission time", got)
	}
	full, err := a.ReadJob(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	got.Listed = false
	if d := cmp.Diff(full, got); d != "" {
		t.Errorf("described from the list (-full read +list):\n%s", d)
	}

	// A write to it: Apply reads the spec, checks the index, writes.
	b := fresh()
	got, err = b.ReadQueued(ctx, r)
	if err != nil || !got.Listed {
		t.Fatalf("ReadQueued: %+v, %v", got, err)
	}
	parked, err := b.Apply(ctx, jobs.Change{Job: r, JobModifyIndex: got.JobModifyIndex, Meta: map[string]string{"pollux_num_replicas": "0"}})
	if err != nil {
		t.Fatalf("Apply to a job described from the list: %v", err)
	}
	if _, err := b.Apply(ctx, jobs.Change{Job: r, JobModifyIndex: got.JobModifyIndex, Meta: map[string]string{"pollux_num_replicas": "0"}}); err == nil {
		t.Errorf("a second write at the submission's index succeeded; want a conflict")
	}
	// Written since its submission: read in full, whoever asks.
	d := fresh()
	if got, err := d.ReadQueued(ctx, r); err != nil || d.QueuedReads() != 0 || got.JobModifyIndex != parked || got.Unshaped {
		t.Errorf("ReadQueued after a write: %+v, %v, %d from the list; want a full read at %d, shaped", got, err, d.QueuedReads(), parked)
	}

	// A job that runs: read in full.
	id := nomadtest.ID("runs")
	nomadtest.Register(t, raw, nomadtest.Job(id, 1, true))
	var running jobs.Job
	nomadtest.WaitFor(t, 60*time.Second, "the job to run", func() (bool, string, error) {
		running, err = c.ReadJob(ctx, ref(id))
		return err == nil && len(running.Running) == 1, "running " + placementString(running.Running), err
	})
	e := fresh()
	if got, err := e.ReadQueued(ctx, ref(id)); err != nil || e.QueuedReads() != 0 || len(got.Running) != 1 {
		t.Errorf("ReadQueued of a running job: %+v, %v, %d from the list; want a full read showing what runs", got, err, e.QueuedReads())
	}

	// A queued job whose spec cannot be managed: described from the list
	// (its meta is fine), the write that reads the spec names the
	// problem, and the next read, from the cached spec, has it.
	_, bad := queuedJob("twogroups", 2)
	f := fresh()
	got, err = f.ReadQueued(ctx, bad)
	if err != nil || !got.Listed {
		t.Fatalf("ReadQueued of a queued two-group job: %+v, %v; want it described from the list", got, err)
	}
	if _, err := f.Apply(ctx, jobs.Change{Job: bad, JobModifyIndex: got.JobModifyIndex, Meta: map[string]string{"pollux_num_replicas": "0"}}); err == nil || !strings.Contains(err.Error(), "task groups") {
		t.Errorf("Apply to a two-group job: %v; want the spec's problem", err)
	}
	if _, _, err := f.ListJobs(ctx, 0, 0); err != nil {
		t.Fatal(err)
	}
	got, err = f.ReadQueued(ctx, bad)
	if err != nil || got.Listed || !strings.Contains(got.Problem, "task groups") {
		t.Errorf("ReadQueued after the spec was read: %+v, %v; want a full read with the problem", got, err)
	}
}
