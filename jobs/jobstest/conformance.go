package jobstest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
)

// Backend is what Conformance checks: this package's stand-ins or the
// adapters of real Consul and Nomad servers.
type Backend struct {
	Cluster jobs.Cluster
	// KV must be empty under "conformance/".
	KV jobs.KV
	// NewJob registers a Pollux job whose worker group asks for one GPU.
	NewJob func(t testing.TB, name string) jobs.JobRef
	// Edit changes the job as an operator would, setting the meta key
	// "conformance" to value (its JobModifyIndex moves).
	Edit func(t testing.TB, ref jobs.JobRef, value string)
	// Elapse lets the wait d of the blocking read in progress pass: the
	// stand-ins advance their clock, real servers let real time pass.
	Elapse func(ctx context.Context, d time.Duration)
}

// Conformance runs the index semantics the controller relies on against
// b: KV check-and-set and blocking reads (Consul), and the check-and-set
// of a job's rewrite on its JobModifyIndex (Nomad). The same function
// runs on the stand-ins (unit test) and on real servers (e2e), which is
// what shows that the stand-ins behave like the servers there.
func Conformance(t *testing.T, b Backend) {
	t.Run("kv", func(t *testing.T) { conformKV(t, b) })
	t.Run("cluster", func(t *testing.T) { conformCluster(t, b) })
}

// conformKV: CAS index 0 writes only an absent key, a CAS at a stale
// index fails, a blocking read returns at once past its index, with the
// same index when the wait elapses, and wakes on a write or a delete.
func conformKV(t *testing.T, b Backend) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kv, key := b.KV, "conformance/a"
	if _, _, err := kv.Get(ctx, key); !errors.Is(err, contract.ErrNotFound) {
		t.Fatalf("get of an absent key: %v, want ErrNotFound", err)
	}
	v, i0, err := kv.Watch(ctx, key, 0, time.Second)
	if err != nil || v != nil || i0 == 0 {
		t.Fatalf("watch at index 0 of an absent key: %q, %d, %v; want nil at the store's index at once", v, i0, err)
	}
	mustCAS(ctx, t, kv, key, "v1", 0, nil)
	mustCAS(ctx, t, kv, key, "again", 0, contract.ErrConflict)
	i1 := mustGet(ctx, t, kv, key, "v1")
	if i1 <= i0 {
		t.Fatalf("a write's index %d is not past the store's index %d before it", i1, i0)
	}
	mustCAS(ctx, t, kv, key, "v2", i1, nil)
	i2 := mustGet(ctx, t, kv, key, "v2")
	mustCAS(ctx, t, kv, key, "stale", i1, contract.ErrConflict)
	if got := mustGet(ctx, t, kv, key, "v2"); got != i2 {
		t.Fatalf("a refused CAS moved the index from %d to %d", i2, got)
	}
	if v, i, err := kv.Watch(ctx, key, i1, time.Minute); err != nil || string(v) != "v2" || i != i2 {
		t.Fatalf("watch past its index: %q, %d, %v; want v2 at %d at once", v, i, err, i2)
	}
	got := watchAsync(ctx, kv, key, i2, time.Second)
	b.Elapse(ctx, time.Second)
	if r := <-got; r.err != nil || string(r.value) != "v2" || r.index != i2 {
		t.Fatalf("watch whose wait elapsed: %q, %d, %v; want v2 at the same index %d", r.value, r.index, r.err, i2)
	}
	got = watchAsync(ctx, kv, key, i2, time.Minute)
	if err := kv.Put(ctx, key, []byte("v3")); err != nil {
		t.Fatalf("put: %v", err)
	}
	r := <-got
	if r.err != nil || string(r.value) != "v3" || r.index <= i2 {
		t.Fatalf("watch woken by a write: %q, %d, %v; want v3 past %d", r.value, r.index, r.err, i2)
	}
	got = watchAsync(ctx, kv, key, r.index, time.Minute)
	if err := kv.Delete(ctx, key, false); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if d := <-got; d.err != nil || d.value != nil || d.index <= r.index {
		t.Fatalf("watch woken by a delete: %q, %d, %v; want nil past %d", d.value, d.index, d.err, r.index)
	}
	mustCAS(ctx, t, kv, key, "v4", 0, nil) // absent again
}

// conformCluster: a rewrite at the index the job was read at succeeds and
// moves the index; at a stale index, or after an operator's edit, it
// fails with ErrConflict and leaves the job as it was; a blocking list
// wakes on the rewrite; the fast-path readers the cluster implements
// agree with ReadJob, on a job as submitted and on one scaled to zero.
func conformCluster(t *testing.T, b Backend) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := b.Cluster
	ref := b.NewJob(t, "conformance")
	j0 := mustRead(ctx, t, c, ref)
	if j0.Meta[contract.MetaEnabled] != "true" || j0.JobModifyIndex == 0 {
		t.Fatalf("new job: meta %v, index %d", j0.Meta, j0.JobModifyIndex)
	}
	nodes, err := c.Nodes(ctx)
	if err != nil || len(nodes) == 0 {
		t.Fatalf("nodes: %v, %v", nodes, err)
	}
	place := []jobs.NodeGPUs{{Node: nodes[0].ID, GPUs: 1}}
	_, listIdx, err := c.ListJobs(ctx, 0, 0)
	if err != nil {
		t.Fatalf("list jobs: %v", err)
	}
	if lr, ok := c.(jobs.ListedReader); ok {
		sameRead(ctx, t, c, "ReadListed", ref, lr.ReadListed)
	}
	if qr, ok := c.(jobs.QueuedReader); ok {
		sameRead(ctx, t, c, "ReadQueued", ref, qr.ReadQueued)
	}
	change := func(index uint64, round string) jobs.Change {
		return jobs.Change{Job: ref, JobModifyIndex: index, Placement: place, Meta: map[string]string{contract.MetaRound: round}}
	}
	i1, err := c.Apply(ctx, change(j0.JobModifyIndex, "1"))
	if err != nil || i1 <= j0.JobModifyIndex {
		t.Fatalf("apply at the read index %d: index %d, %v; want a later index", j0.JobModifyIndex, i1, err)
	}
	j1 := mustRead(ctx, t, c, ref)
	if j1.JobModifyIndex != i1 || j1.Meta[contract.MetaRound] != "1" || !jobs.SamePlacement(j1.Placement, place) {
		t.Fatalf("after apply: index %d (want %d), round %q, placement %v (want %v)", j1.JobModifyIndex, i1, j1.Meta[contract.MetaRound], j1.Placement, place)
	}
	if refs, idx, err := c.ListJobs(ctx, listIdx, time.Minute); err != nil || idx <= listIdx || !contains(refs, ref) {
		t.Fatalf("blocking list after a rewrite: %v at %d, %v; want the job past %d", refs, idx, err, listIdx)
	}
	if _, err := c.Apply(ctx, change(j0.JobModifyIndex, "stale")); !errors.Is(err, contract.ErrConflict) {
		t.Fatalf("apply at a stale index: %v, want ErrConflict", err)
	}
	b.Edit(t, ref, "edited")
	j2 := mustRead(ctx, t, c, ref)
	if j2.JobModifyIndex <= i1 || j2.Meta["conformance"] != "edited" {
		t.Fatalf("after an operator's edit: index %d (want past %d), meta %v", j2.JobModifyIndex, i1, j2.Meta)
	}
	if _, err := c.Apply(ctx, change(i1, "lost")); !errors.Is(err, contract.ErrConflict) {
		t.Fatalf("apply read before an operator's edit: %v, want ErrConflict", err)
	}
	j3 := mustRead(ctx, t, c, ref)
	if j3.JobModifyIndex != j2.JobModifyIndex || j3.Meta[contract.MetaRound] != "1" || j3.Meta["conformance"] != "edited" {
		t.Fatalf("a refused apply changed the job: index %d (was %d), meta %v", j3.JobModifyIndex, j2.JobModifyIndex, j3.Meta)
	}
	i4, err := c.Apply(ctx, change(j2.JobModifyIndex, "2"))
	if err != nil || i4 <= j2.JobModifyIndex {
		t.Fatalf("apply at the index after the edit: %d, %v", i4, err)
	}
	// Scaled to zero by the controller: a ParkedReader may describe it
	// from the list alone, and must agree with a full read.
	park := change(i4, "3")
	park.Placement = nil
	i5, err := c.Apply(ctx, park)
	if err != nil || i5 <= i4 {
		t.Fatalf("apply of zero GPUs: %d, %v", i5, err)
	}
	if _, _, err := c.ListJobs(ctx, 0, 0); err != nil {
		t.Fatalf("list jobs: %v", err)
	}
	if pr, ok := c.(jobs.ParkedReader); ok {
		sameRead(ctx, t, c, "ReadParked", ref, func(ctx context.Context, ref jobs.JobRef) (jobs.Job, error) {
			return pr.ReadParked(ctx, ref, i5)
		})
	}
}

// sameRead checks that a fast-path read of ref right after ListJobs
// agrees with ReadJob on what the job's spec says: its index, placement
// and the controller's meta keys.
func sameRead(ctx context.Context, t *testing.T, c jobs.Cluster, name string, ref jobs.JobRef, read func(context.Context, jobs.JobRef) (jobs.Job, error)) {
	t.Helper()
	got, err := read(ctx, ref)
	if err != nil {
		t.Fatalf("%s %s: %v", name, ref, err)
	}
	want := mustRead(ctx, t, c, ref)
	if got.JobRef != want.JobRef || got.JobModifyIndex != want.JobModifyIndex || !jobs.SamePlacement(got.Placement, want.Placement) ||
		got.Meta[contract.MetaEnabled] != want.Meta[contract.MetaEnabled] || got.Meta[contract.MetaRound] != want.Meta[contract.MetaRound] {
		t.Fatalf("%s %s: index %d, placement %v, meta %v; ReadJob: index %d, placement %v, meta %v",
			name, ref, got.JobModifyIndex, got.Placement, got.Meta, want.JobModifyIndex, want.Placement, want.Meta)
	}
}

type watched struct {
	value []byte
	index uint64
	err   error
}

func watchAsync(ctx context.Context, kv jobs.KV, key string, index uint64, wait time.Duration) <-chan watched {
	out := make(chan watched, 1)
	go func() {
		v, i, err := kv.Watch(ctx, key, index, wait)
		out <- watched{v, i, err}
	}()
	return out
}

func mustCAS(ctx context.Context, t *testing.T, kv jobs.KV, key, value string, index uint64, want error) {
	t.Helper()
	err := kv.CAS(ctx, key, []byte(value), index)
	if (want == nil && err != nil) || (want != nil && !errors.Is(err, want)) {
		t.Fatalf("CAS %s=%q at index %d: %v, want %v", key, value, index, err, want)
	}
}

func mustGet(ctx context.Context, t *testing.T, kv jobs.KV, key, want string) uint64 {
	t.Helper()
	v, idx, err := kv.Get(ctx, key)
	if err != nil || string(v) != want {
		t.Fatalf("get %s: %q, %v; want %q", key, v, err, want)
	}
	return idx
}

func mustRead(ctx context.Context, t *testing.T, c jobs.Cluster, ref jobs.JobRef) jobs.Job {
	t.Helper()
	j, err := c.ReadJob(ctx, ref)
	if err != nil {
		t.Fatalf("read %s: %v", ref, err)
	}
	return j
}

func contains(refs []jobs.JobRef, ref jobs.JobRef) bool {
	for _, r := range refs {
		if r == ref {
			return true
		}
	}
	return false
}
