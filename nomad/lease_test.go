package nomad_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
	"github.com/pollux-nomad/pollux/nomad"
	"github.com/pollux-nomad/pollux/nomad/nomadtest"
)

// Each registration asks the lease first: refused, nothing is written;
// granted, the job version carries the lease's term; a lease that ends
// before the request is sent cancels it.
func TestApplyUnderLease(t *testing.T) {
	var lease atomic.Value // func() (string, time.Time, error)
	var asked atomic.Int64
	c, raw := setup(t, nomad.Config{Lease: func() (string, time.Time, error) {
		asked.Add(1)
		return lease.Load().(func() (string, time.Time, error))()
	}})
	ctx := ctxFor(t, 2*time.Minute)
	n1 := nomadtest.NodeIDs(t, raw)["client-1"]
	id := nomadtest.ID("lease")
	j := nomadtest.Job(id, 1, true)
	*j.TaskGroups[0].Count = 0
	nomadtest.Register(t, raw, j)
	r := ref(id)
	read := func() jobs.Job {
		t.Helper()
		job, err := c.ReadJob(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return job
	}
	before := read()
	change := jobs.Change{Job: r, JobModifyIndex: before.JobModifyIndex, Placement: []jobs.NodeGPUs{{Node: n1, GPUs: 1}}, Meta: map[string]string{contract.MetaRound: "3"}}

	deposed := errors.New("term 4 ended")
	lease.Store(func() (string, time.Time, error) { return "4", time.Time{}, deposed })
	if _, err := c.Apply(ctx, change); !errors.Is(err, nomad.ErrNoLease) || !errors.Is(err, deposed) {
		t.Fatalf("Apply without a lease = %v, want ErrNoLease wrapping the lease's error", err)
	}
	if after := read(); after.JobModifyIndex != before.JobModifyIndex {
		t.Fatalf("job written without a lease: index %d -> %d", before.JobModifyIndex, after.JobModifyIndex)
	}

	lease.Store(func() (string, time.Time, error) { return "5", time.Now().Add(-time.Millisecond), nil })
	if _, err := c.Apply(ctx, change); err == nil {
		t.Fatalf("Apply with a lease that already ended succeeded")
	}
	if after := read(); after.JobModifyIndex != before.JobModifyIndex {
		t.Fatalf("job written after its lease ended: index %d -> %d", before.JobModifyIndex, after.JobModifyIndex)
	}

	lease.Store(func() (string, time.Time, error) { return "6", time.Now().Add(time.Minute), nil })
	idx, err := c.Apply(ctx, change)
	if err != nil {
		t.Fatalf("Apply under a lease: %v", err)
	}
	after := read()
	if after.JobModifyIndex != idx || after.Meta[contract.MetaTerm] != "6" || after.Meta[contract.MetaRound] != "3" {
		t.Fatalf("job after Apply: index %d (Apply said %d), meta %v; want pollux_term 6", after.JobModifyIndex, idx, after.Meta)
	}
	if n := asked.Load(); n != 3 {
		t.Errorf("lease asked %d times for 3 registrations", n)
	}
}
