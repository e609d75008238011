package jobs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
)

// TestRoundReadsKeysOnce: a round lists the jobs' keys once instead of
// reading each job's state and metrics, and a steady round rewrites no
// decision that did not change (only after the 10-minute refresh).
func TestRoundReadsKeysOnce(t *testing.T) {
	f := newFixture(t, map[string]int{"n1": 2})
	refs := make([]jobs.JobRef, 30)
	alloc := map[string][]string{}
	for i := range refs {
		id := fmt.Sprintf("j%02d", i)
		refs[i] = f.submit(id, 1)
		if i < 2 {
			alloc[id] = []string{"n1"}
		}
	}
	f.policy.set(alloc)
	c := f.controller("one")
	c.TakeOver(context.Background())
	f.round(c)
	gets0, trees0, _ := f.kv.Ops()
	if trees0 != 1 {
		t.Fatalf("first round: %d tree reads, want 1", trees0)
	}
	// The first round published every decision.
	for _, ref := range refs {
		if _, _, err := f.kv.Get(context.Background(), contract.DecisionKey(ref.Namespace, ref.ID)); err != nil {
			t.Fatalf("decision of %s after the first round: %v", ref, err)
		}
	}
	gets0 += len(refs)

	f.clock.Advance(10 * time.Second)
	_, _, w1 := f.kv.Ops()
	f.round(c)
	gets, trees, w2 := f.kv.Ops()
	if gets != gets0 || trees != 2 {
		t.Errorf("steady round: %d gets and %d tree reads, want no get and 1 tree read", gets-gets0, trees-trees0)
	}
	// Steady: the states of the 2 running jobs (attained service) and
	// the status; no decision.
	if n := w2 - w1; n > 3 {
		t.Errorf("steady round wrote %d keys, want at most 3 (2 states, the status)", n)
	}

	f.clock.Advance(11 * time.Minute)
	f.round(c)
	_, _, w3 := f.kv.Ops()
	if n := w3 - w2; n < uint64(len(refs)) {
		t.Errorf("round after the refresh period wrote %d keys, want every job's decision again (%d)", n, len(refs))
	}
}

// TestStatusShards: a round with more than StatusInlineJobs jobs writes
// its job lines in shards that ReadStatus joins.
func TestStatusShards(t *testing.T) {
	f := newFixture(t, map[string]int{"n1": 4})
	n := contract.StatusInlineJobs + contract.StatusShardJobs + 7
	for i := range n {
		f.submit(fmt.Sprintf("s%04d", i), 1)
	}
	f.policy.set(map[string][]string{"s0000": {"n1"}})
	c := f.controller("one")
	c.TakeOver(context.Background())
	f.round(c)
	st, _, err := jobs.ReadStatus(context.Background(), f.kv)
	if err != nil {
		t.Fatal(err)
	}
	wantShards := (n + contract.StatusShardJobs - 1) / contract.StatusShardJobs
	if st.JobShards != wantShards || len(st.Jobs) != n || st.JobCount != n {
		t.Fatalf("status: %d shards, %d job lines, count %d; want %d shards, %d lines", st.JobShards, len(st.Jobs), st.JobCount, wantShards, n)
	}
	if st.Jobs[0].Job != "default/s0000" || st.Jobs[0].GPUs != 1 {
		t.Errorf("first job line %+v, want default/s0000 with 1 GPU", st.Jobs[0])
	}
	f.clock.Advance(10 * time.Second)
	f.round(c)
	if st, _, err = jobs.ReadStatus(context.Background(), f.kv); err != nil || st.Round != 2 || len(st.Jobs) != n {
		t.Fatalf("second round's status: %v, %+v", err, st)
	}
}
