package jobs_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
)

// TestGarbageCollection: the keys of a purged job and of a job whose
// pollux_enabled was removed are deleted once they have been unlisted for
// the grace period, and not before; a job listed again keeps its keys;
// keys of a job whose ID extends another's are left alone; a dry run
// deletes nothing.
func TestGarbageCollection(t *testing.T) {
	f := newFixture(t, map[string]int{"n1": 4})
	f.cfg.StateGCGrace = time.Hour
	c := f.controller("a")
	purged, untagged, kept, back := f.submit("train", 1), f.submit("untag", 1), f.submit("train2", 1), f.submit("back", 1)
	f.policy.set(map[string][]string{"train": {"n1"}, "untag": {"n1"}, "train2": {"n1"}, "back": {"n1"}})
	f.round(c)
	ctx := context.Background()
	// A worker's documents, besides the controller's state and decision.
	for _, ref := range []jobs.JobRef{purged, untagged, kept, back} {
		for _, key := range []string{contract.MetricsKey(ref.Namespace, ref.ID), contract.RendezvousKey(ref.Namespace, ref.ID)} {
			if err := f.kv.Put(ctx, key, []byte("{}")); err != nil {
				t.Fatal(err)
			}
		}
	}
	has := func(ref jobs.JobRef) bool {
		return slices.ContainsFunc(f.kv.Keys(), func(k string) bool {
			return k == contract.StateKey(ref.Namespace, ref.ID) || k == contract.MetricsKey(ref.Namespace, ref.ID)
		})
	}
	f.cluster.Purge(purged)
	if err := f.cluster.Edit(untagged, func(j *jobs.Job) { delete(j.Meta, contract.MetaEnabled) }); err != nil {
		t.Fatal(err)
	}
	if err := f.cluster.Edit(back, func(j *jobs.Job) { j.Meta[contract.MetaEnabled] = "false" }); err != nil {
		t.Fatal(err)
	}

	f.clock.Advance(6 * time.Minute)
	f.round(c) // the grace periods start
	f.clock.Advance(30 * time.Minute)
	f.round(c)
	if err := f.cluster.Edit(back, func(j *jobs.Job) { j.Meta[contract.MetaEnabled] = "true" }); err != nil {
		t.Fatal(err)
	}
	f.round(c) // back is listed again
	if err := f.cluster.Edit(back, func(j *jobs.Job) { j.Meta[contract.MetaEnabled] = "false" }); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []jobs.JobRef{purged, untagged, kept, back} {
		if !has(ref) {
			t.Fatalf("%s: keys deleted within the grace period: %v", ref, f.kv.Keys())
		}
	}

	// A dry run never deletes.
	f.clock.Advance(2 * time.Hour)
	dry := f.cfg
	dry.DryRun = true
	if err := c.SetConfig(dry); err != nil {
		t.Fatal(err)
	}
	f.round(c)
	if !has(purged) || !has(untagged) {
		t.Fatalf("a dry run deleted keys: %v", f.kv.Keys())
	}
	if err := c.SetConfig(f.cfg); err != nil {
		t.Fatal(err)
	}
	f.round(c)
	for _, ref := range []jobs.JobRef{purged, untagged} {
		if has(ref) {
			t.Errorf("%s: keys kept after the grace period: %v", ref, f.kv.Keys())
		}
	}
	if !has(kept) {
		t.Errorf("train2's keys deleted with train's: %v", f.kv.Keys())
	}
	// back's grace period began again when it was unlisted the second time.
	if !has(back) {
		t.Errorf("back's keys deleted although it was listed again within the grace period")
	}
	f.clock.Advance(2 * time.Hour)
	f.round(c)
	if has(back) {
		t.Errorf("back's keys kept after a full grace period unlisted")
	}
}
