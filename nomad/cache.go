package nomad

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/pollux-nomad/pollux/jobs"
)

// The read cache: what lets a steady-state round read only what changed.
// ListJobs records each tagged job's JobModifyIndex, status and stop flag
// from the list (one call for every job); ReadListed then reuses the job's
// spec (and its first submission time) read at that JobModifyIndex
// instead of reading it again, and takes the job's placed allocations
// from one listing of every placed allocation, shared by the reads of a
// round, instead of one listing per job. A spec is re-read when its
// JobModifyIndex moves, when it is older than its time to live (the safety
// net: specTTL less up to a half at random, so that specs cached in one
// round are not all read again in one later round), and after Invalidate
// (a new leadership term). Apply writes from the cached spec (the
// check-and-set guards it) and caches what it wrote at the new index, so
// a job the controller changed is not read back. Entries of jobs no
// longer listed are dropped, so the cache holds at most the listed jobs.
const (
	// specTTL bounds how long a cached spec is trusted without a re-read.
	specTTL = 10 * time.Minute
	// allocsTTL bounds the age of the shared allocation listing: the reads
	// of one round share it; the next round lists again.
	allocsTTL = time.Second
)

// listed is what the job list says of one job.
type listed struct {
	jobModifyIndex uint64
	status         string
	stop           bool
	// meta is the job's meta block as listed (the list asks for it).
	meta map[string]string
	// createIndex and submitTime (of the current version, Unix ns) let
	// ReadQueued tell a job never changed since its author submitted it
	// (createIndex == jobModifyIndex) and when that was.
	createIndex uint64
	submitTime  int64
	// queued and placed sum the job summary's queued allocations and its
	// starting and running ones over the groups.
	queued, placed int
}

// cachedSpec is a job's spec as read at one JobModifyIndex.
type cachedSpec struct {
	index  uint64
	job    *api.Job
	submit time.Time
	// expires is when the spec is read again even if unchanged.
	expires time.Time
}

// readCache is the Client's cache; its zero value is empty and usable.
type readCache struct {
	mu     sync.Mutex
	listed map[jobs.JobRef]listed
	specs  map[jobs.JobRef]cachedSpec
	// allocs are the placed allocations by job, listed at allocsAt.
	allocs   map[jobs.JobRef][]*api.AllocationListStub
	allocsAt time.Time
	// fill serialises the allocation listing, so that concurrent reads
	// share one call.
	fill sync.Mutex
	// now is the clock (time.Now; tests may replace it).
	now func() time.Time
}

func (rc *readCache) clock() time.Time {
	if rc.now != nil {
		return rc.now()
	}
	return time.Now()
}

// recordList keeps what a full job list says and drops the entries of
// jobs it no longer lists.
func (rc *readCache) recordList(stubs []*api.JobListStub, managed func(string) bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	seen := make(map[jobs.JobRef]listed, len(stubs))
	for _, s := range stubs {
		ns := cmp.Or(s.Namespace, "default")
		if !managed(ns) {
			continue
		}
		l := listed{jobModifyIndex: s.JobModifyIndex, status: s.Status, stop: s.Stop, meta: s.Meta, createIndex: s.CreateIndex, submitTime: s.SubmitTime}
		if s.JobSummary != nil {
			for _, g := range s.JobSummary.Summary {
				l.queued += g.Queued
				l.placed += g.Starting + g.Running
			}
		}
		seen[jobs.JobRef{Namespace: ns, ID: s.ID}] = l
	}
	rc.listed = seen
	for ref := range rc.specs {
		if _, ok := seen[ref]; !ok {
			delete(rc.specs, ref)
		}
	}
}

// spec returns the cached spec of ref if the list still shows the index
// it was read at and it is fresh enough, with the list's status and stop
// flag (they change without a new JobModifyIndex).
func (rc *readCache) spec(ref jobs.JobRef) (cachedSpec, listed, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	l, ok := rc.listed[ref]
	s, cached := rc.specs[ref]
	if !ok || !cached || s.index != l.jobModifyIndex || rc.clock().After(s.expires) {
		return cachedSpec{}, listed{}, false
	}
	return s, l, true
}

// listing returns what the last list said of ref, and whether a spec is
// cached at that index.
func (rc *readCache) listing(ref jobs.JobRef) (listed, bool, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	l, ok := rc.listed[ref]
	s, cached := rc.specs[ref]
	return l, ok, cached && s.index == l.jobModifyIndex
}

// remember caches a spec just read.
func (rc *readCache) remember(ref jobs.JobRef, job *api.Job, submit time.Time) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.specs == nil {
		rc.specs = map[jobs.JobRef]cachedSpec{}
	}
	ttl := specTTL - time.Duration(rand.Int64N(int64(specTTL/2)))
	rc.specs[ref] = cachedSpec{index: *job.JobModifyIndex, job: job, submit: submit, expires: rc.clock().Add(ttl)}
}

// at returns a copy of the cached spec of ref if it was read (or written)
// at JobModifyIndex index, however old: a write from it is a check-and-set
// at that index, which Nomad refuses if the job changed since.
func (rc *readCache) at(ref jobs.JobRef, index uint64) (*api.Job, time.Time, bool) {
	rc.mu.Lock()
	s, ok := rc.specs[ref]
	rc.mu.Unlock()
	if !ok || s.index != index {
		return nil, time.Time{}, false
	}
	job, err := copyJob(s.job)
	if err != nil {
		return nil, time.Time{}, false
	}
	return job, s.submit, true
}

// forget drops a job's spec (after a write to it).
func (rc *readCache) forget(ref jobs.JobRef) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	delete(rc.specs, ref)
}

// Invalidate drops everything cached, so that the next round reads every
// job again: the controller calls it when a leadership term begins.
func (c *Client) Invalidate() {
	rc := &c.cache
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.listed, rc.specs, rc.allocs, rc.allocsAt = nil, nil, nil, time.Time{}
}

// storeAllocs keeps, as the shared listing of placed allocations, those
// of allocs (a listing taken at at, of every allocation desired to run)
// that are pending or running: Nodes lists them anyway, and the reads of
// the round that follow need not list them again.
func (rc *readCache) storeAllocs(allocs []*api.AllocationListStub, at time.Time) {
	byJob := map[jobs.JobRef][]*api.AllocationListStub{}
	for _, a := range allocs {
		if a.DesiredStatus != api.AllocDesiredStatusRun || (a.ClientStatus != api.AllocClientStatusRunning && a.ClientStatus != api.AllocClientStatusPending) {
			continue
		}
		r := jobs.JobRef{Namespace: cmp.Or(a.Namespace, "default"), ID: a.JobID}
		byJob[r] = append(byJob[r], a)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.allocs, rc.allocsAt = byJob, at
}

// placedAllocs returns the placed allocations (pending or running, desired
// to run) of ref from the shared listing, listing again if it is older
// than allocsTTL.
func (c *Client) placedAllocs(ctx context.Context, ref jobs.JobRef) ([]*api.AllocationListStub, error) {
	rc := &c.cache
	rc.fill.Lock()
	defer rc.fill.Unlock()
	rc.mu.Lock()
	fresh := rc.allocs != nil && rc.clock().Sub(rc.allocsAt) < allocsTTL
	rc.mu.Unlock()
	if !fresh {
		q := c.query(ctx, "*")
		q.Filter = `(ClientStatus == "running" or ClientStatus == "pending") and DesiredStatus == "run"`
		q.Params = map[string]string{"resources": "true"}
		at := rc.clock()
		allocs, _, err := c.api.Allocations().List(q)
		if err != nil {
			return nil, fmt.Errorf("failed to list allocations: %w", Classify(err, "listing allocations in every namespace", NeedNamespace("read-job", "*")))
		}
		byJob := map[jobs.JobRef][]*api.AllocationListStub{}
		for _, a := range allocs {
			r := jobs.JobRef{Namespace: cmp.Or(a.Namespace, "default"), ID: a.JobID}
			byJob[r] = append(byJob[r], a)
		}
		rc.mu.Lock()
		rc.allocs, rc.allocsAt = byJob, at
		rc.mu.Unlock()
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.allocs[ref], nil
}
