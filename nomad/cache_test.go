package nomad

import (
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/pollux-nomad/pollux/jobs"
)

var (
	_ jobs.Invalidator  = (*Client)(nil)
	_ jobs.ListedReader = (*Client)(nil)
	_ jobs.ListedNodes  = (*Client)(nil)
)

// TestReadCache: a spec is reused only while the job list shows the index
// it was read at, for at most specTTL, and never after a write, an
// Invalidate or the job leaving the list; the list's status wins over the
// cached one.
func TestReadCache(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := &Client{}
	c.cache.now = func() time.Time { return now }
	all := func(string) bool { return true }
	ref := jobs.JobRef{Namespace: "default", ID: "train"}
	stub := func(index uint64, status string) []*api.JobListStub {
		return []*api.JobListStub{{ID: "train", Namespace: "default", JobModifyIndex: index, Status: status}}
	}
	idx := uint64(7)
	job := &api.Job{JobModifyIndex: &idx}

	c.cache.recordList(stub(7, "pending"), all)
	if _, _, ok := c.cache.spec(ref); ok {
		t.Fatal("hit before anything was read")
	}
	c.cache.remember(ref, job, now)
	c.cache.recordList(stub(7, "running"), all)
	s, l, ok := c.cache.spec(ref)
	if !ok || s.job != job || l.status != "running" {
		t.Fatalf("same index: hit %v, status %q; want a hit with the list's status", ok, l.status)
	}
	c.cache.recordList(stub(8, "running"), all)
	if _, _, ok := c.cache.spec(ref); ok {
		t.Error("hit although the job's JobModifyIndex moved")
	}
	c.cache.recordList(stub(7, "running"), all)
	now = now.Add(specTTL + time.Second)
	if _, _, ok := c.cache.spec(ref); ok {
		t.Error("hit past the TTL")
	}
	c.cache.remember(ref, job, now)
	c.cache.forget(ref)
	if _, _, ok := c.cache.spec(ref); ok {
		t.Error("hit after a write to the job")
	}
	c.cache.remember(ref, job, now)
	c.Invalidate()
	if _, _, ok := c.cache.spec(ref); ok {
		t.Error("hit after Invalidate")
	}
	c.cache.recordList(stub(7, "running"), all)
	c.cache.remember(ref, job, now)
	c.cache.recordList(nil, all)
	if len(c.cache.specs) != 0 {
		t.Errorf("%d specs kept for jobs no longer listed", len(c.cache.specs))
	}
}

// SpecCached reports whether ReadListed would reuse ref's spec (for the
// external tests).
func (c *Client) SpecCached(ref jobs.JobRef) bool {
	_, _, ok := c.cache.spec(ref)
	return ok
}

// ParkedReads is how many jobs ReadParked described from the list alone
// (for the external tests).
func (c *Client) ParkedReads() int64 { return c.parked.Load() }

// QueuedReads is how many jobs ReadQueued described from the list alone.
func (c *Client) QueuedReads() int64 { return c.queued.Load() }
