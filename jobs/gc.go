package jobs

import (
	"context"
	"strings"
	"time"

	"github.com/pollux-nomad/pollux/contract"
)

// KeyLister is implemented by a KV store that can list the keys under a
// folder without their values (consul.Client, jobstest.KV). The
// controller garbage-collects the keys of vanished jobs only with one.
type KeyLister interface {
	ListKeys(ctx context.Context, dir string) ([]string, error)
}

// gcEvery is how often (at most) the leader lists the jobs' keys to find
// those of vanished jobs.
const gcEvery = 5 * time.Minute

// collectGarbage deletes the KV keys (state, metrics, decision,
// rendezvous, ...) of jobs that have not been listed for the configured
// grace period: purged jobs, and jobs whose pollux_enabled was removed.
// The first round that finds a job's keys without the job starts its
// grace period; a job listed again meanwhile keeps everything. The grace
// periods live in memory, so a new leader starts them afresh: keys are
// deleted at least the grace period after their job vanished, never
// earlier. Only a leader that may write (not a dry run, Consul answering)
// collects, at most every gcEvery.
func (c *Controller) collectGarbage(ctx context.Context, r *round) {
	// A job listed in any round restarts its grace period, whether or not
	// this round collects.
	listed := make(map[JobRef]bool, len(r.stats))
	for _, st := range r.stats {
		if ns, id, ok := strings.Cut(st.Job, "/"); ok {
			ref := JobRef{Namespace: ns, ID: id}
			listed[ref] = true
			delete(c.orphans, ref)
		}
	}
	lister, ok := c.kv.(KeyLister)
	grace := r.cfg.StateGCGrace
	if !ok || grace <= 0 || !r.apply || r.cfg.DryRun || r.kv.failure() != nil || ctx.Err() != nil {
		return
	}
	now := c.now()
	if !c.lastGC.IsZero() && now.Sub(c.lastGC) < min(gcEvery, grace) {
		return
	}
	c.lastGC = now
	keys, err := lister.ListKeys(ctx, contract.JobsPrefix)
	if err != nil {
		c.log.Warn("failed to list the jobs' keys for garbage collection", "error", err)
		c.metrics.incError("gc")
		return
	}
	found := map[JobRef]bool{}
	for _, k := range keys {
		if ref, ok := jobOfKey(k); ok && !listed[ref] {
			found[ref] = true
		}
	}
	if c.orphans == nil {
		c.orphans = map[JobRef]time.Time{}
	}
	for ref := range c.orphans {
		if !found[ref] {
			delete(c.orphans, ref) // listed again, or its keys are gone
		}
	}
	for ref := range found {
		since, seen := c.orphans[ref]
		if !seen {
			c.orphans[ref] = now
			continue
		}
		if now.Sub(since) < grace {
			continue
		}
		dir := strings.TrimSuffix(contract.JobPrefix(ref.Namespace, ref.ID), "/")
		if err := c.kv.Delete(ctx, dir, true); err != nil {
			c.log.Warn("failed to delete the keys of a vanished job", "job_id", ref.String(), "error", err)
			c.metrics.incError("gc")
			continue
		}
		delete(c.orphans, ref)
		c.log.Info("deleted the keys of a job no longer listed", "job_id", ref.String(), "unlisted_for", now.Sub(since).Round(time.Second))
	}
}

// jobOfKey returns the job a key "jobs/<ns>/<id>/<leaf>" belongs to.
func jobOfKey(key string) (JobRef, bool) {
	rest, ok := strings.CutPrefix(key, contract.JobsPrefix)
	if !ok {
		return JobRef{}, false
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return JobRef{}, false
	}
	return JobRef{Namespace: parts[0], ID: parts[1]}, true
}
