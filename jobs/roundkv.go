package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/pollux-nomad/pollux/contract"
)

// roundKV is one round's I/O with Consul, a unit of work created with
// the round and dropped with it: the listing of the jobs' keys read at
// its start (fit phase only), the states whose writes wait for the end of
// the bookkeeping, the decision writes queued until after apply, and the
// round's first failure to reach Consul, after which it makes no further
// call (and the round changes no job). One lock guards all of it: apply
// writes from several goroutines.
type roundKV struct {
	kv      KV
	log     hclog.Logger
	metrics *Telemetry

	mu        sync.Mutex
	err       error
	tree      roundTree
	deferred  map[JobRef]*State
	decisions []pendingDecision
}

// roundTree is the round's listing of every job's keys.
type roundTree map[string]KVPair

// pendingDecision is a decision write of the round.
type pendingDecision struct {
	ref      JobRef
	raw, key []byte
}

func newRoundKV(kv KV, log hclog.Logger, metrics *Telemetry) *roundKV {
	return &roundKV{kv: kv, log: log, metrics: metrics}
}

// failure is the round's Consul failure (nil while Consul answers).
func (u *roundKV) failure() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.err
}

// failed records err as the round's Consul failure unless one is
// recorded already, logging it once.
func (u *roundKV) failed(err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.err == nil {
		u.err = fmt.Errorf("consul unreachable this round: %w", err)
		u.log.Warn("consul failed; holding every job this round (no change without state and leadership checks)", "error", err)
		u.metrics.incError("consul")
	}
}

// down reports whether err is the round's Consul failure, already
// logged once by failed.
func (u *roundKV) down(err error) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.err != nil && errors.Is(err, u.err)
}

// readTree lists every job's keys once for the round (nothing without a
// TreeReader). A failure is the round's Consul failure. It may run
// while the round reads Nomad; the round waits for it before any get.
func (u *roundKV) readTree(ctx context.Context) {
	tr, ok := u.kv.(TreeReader)
	if !ok || u.failure() != nil {
		return
	}
	pairs, err := tr.ReadTree(ctx, contract.JobsPrefix)
	if err != nil {
		u.failed(err)
		return
	}
	t := make(roundTree, len(pairs))
	for _, p := range pairs {
		t[p.Key] = p
	}
	u.mu.Lock()
	u.tree = t
	u.mu.Unlock()
}

// dropTree ends the use of the listing: later reads go to Consul.
func (u *roundKV) dropTree() {
	u.mu.Lock()
	u.tree = nil
	u.mu.Unlock()
}

// hasListing reports whether the round has a listing of the keys to
// read from (none without a TreeReader, after a Consul failure, or after
// the fit phase).
func (u *roundKV) hasListing() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.tree != nil && u.err == nil
}

// listed returns a key as the round's listing has it: false without a
// listing (see hasListing) and for a key it does not hold.
func (u *roundKV) listed(key string) (KVPair, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.tree == nil || u.err != nil {
		return KVPair{}, false
	}
	p, ok := u.tree[key]
	return p, ok
}

// get reads a key from the round's listing when there is one, else from
// Consul, unless Consul already failed this round. A failure other than
// a missing key is the round's Consul failure.
func (u *roundKV) get(ctx context.Context, key string) ([]byte, uint64, error) {
	u.mu.Lock()
	tree, failed := u.tree, u.err
	u.mu.Unlock()
	if failed != nil {
		return nil, 0, failed
	}
	if tree != nil {
		p, ok := tree[key]
		if !ok {
			return nil, 0, fmt.Errorf("key %q: %w", key, ErrNotFound)
		}
		return p.Value, p.ModifyIndex, nil
	}
	raw, idx, err := u.kv.Get(ctx, key)
	if err != nil && !errors.Is(err, ErrNotFound) {
		u.failed(err)
	}
	return raw, idx, err
}

// put writes a key unless Consul already failed this round.
func (u *roundKV) put(ctx context.Context, key string, value []byte) error {
	if err := u.failure(); err != nil {
		return err
	}
	err := u.kv.Put(ctx, key, value)
	if err != nil {
		u.failed(err)
	}
	return err
}

// putMany writes pairs: in transactions with a BatchWriter, else one by
// one; both with at most writeConcurrency requests in flight. It returns
// the keys that failed (with the first error).
func (u *roundKV) putMany(ctx context.Context, pairs []KVPair) (failed map[string]bool, first error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	if err := u.failure(); err != nil {
		failed = map[string]bool{}
		for _, p := range pairs {
			failed[p.Key] = true
		}
		return failed, err
	}
	var groups [][]KVPair
	bw, batched := u.kv.(BatchWriter)
	if batched {
		groups = batches(pairs, 64, 256*1024)
	} else {
		for _, p := range pairs {
			groups = append(groups, []KVPair{p})
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, writeConcurrency)
	for _, g := range groups {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var err error
			if batched {
				err = bw.PutMany(ctx, g)
			} else {
				err = u.kv.Put(ctx, g[0].Key, g[0].Value)
			}
			if err == nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if failed == nil {
				failed = map[string]bool{}
			}
			for _, p := range g {
				failed[p.Key] = true
			}
			if first == nil {
				first = err
			}
		}()
	}
	wg.Wait()
	if first != nil {
		u.failed(first)
	}
	return failed, first
}

// saveState writes a job's state now; it reports whether the write
// succeeded.
func (u *roundKV) saveState(ctx context.Context, ref JobRef, s *State) bool {
	raw, err := json.Marshal(s)
	if err == nil {
		err = u.put(ctx, stateKey(ref), raw)
	}
	if err != nil {
		if !u.down(err) {
			u.log.Warn("failed to persist state", "job_id", ref.String(), "error", err)
			u.metrics.incError("write_state")
		}
		return false
	}
	return true
}

// deferState records that a job's state changed in the bookkeeping
// phases (fit, reconcile, accrue): flushStates writes it once, batched
// with the others, before anything is applied.
func (u *roundKV) deferState(ref JobRef, s *State) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.deferred == nil {
		u.deferred = map[JobRef]*State{}
	}
	u.deferred[ref] = s
}

// flushStates writes the deferred states.
func (u *roundKV) flushStates(ctx context.Context) {
	u.mu.Lock()
	deferred := u.deferred
	u.deferred = nil
	u.mu.Unlock()
	if len(deferred) == 0 {
		return
	}
	pairs := make([]KVPair, 0, len(deferred))
	for ref, s := range deferred {
		raw, err := json.Marshal(s)
		if err != nil {
			continue
		}
		pairs = append(pairs, KVPair{Key: stateKey(ref), Value: raw})
	}
	if failed, err := u.putMany(ctx, pairs); err != nil && !u.down(err) {
		u.log.Warn("failed to persist states", "jobs", len(failed), "error", err)
		u.metrics.incError("write_state")
	}
}

// queueDecision adds a decision write to the round's queue.
func (u *roundKV) queueDecision(d pendingDecision) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.decisions = append(u.decisions, d)
}

// flushDecisions writes the round's queued decisions and returns those
// written.
func (u *roundKV) flushDecisions(ctx context.Context) []pendingDecision {
	u.mu.Lock()
	queued := u.decisions
	u.decisions = nil
	u.mu.Unlock()
	if len(queued) == 0 {
		return nil
	}
	pairs := make([]KVPair, len(queued))
	for i, q := range queued {
		pairs[i] = KVPair{Key: decisionKey(q.ref), Value: q.raw}
	}
	failed, err := u.putMany(ctx, pairs)
	if err != nil && !u.down(err) {
		u.log.Warn("failed to publish decisions", "jobs", len(failed), "error", err)
		u.metrics.incError("write_decision")
	}
	written := queued[:0]
	for _, q := range queued {
		if !failed[decisionKey(q.ref)] {
			written = append(written, q)
		}
	}
	return written
}

// writeStatus writes the round's status: in one document up to
// contract.StatusInlineJobs job lines, else a summary and shards of
// contract.StatusShardJobs lines (every shard changes each round: the
// lines carry the round's decisions), shards first, so that a reader of
// the summary finds its shards.
func (u *roundKV) writeStatus(ctx context.Context, st *Status) error {
	doc := *st
	var pairs []KVPair
	if len(st.Jobs) > contract.StatusInlineJobs {
		doc.Jobs = nil
		doc.JobCount = len(st.Jobs)
		for i := 0; i < len(st.Jobs); i += contract.StatusShardJobs {
			raw, err := json.Marshal(contract.StatusShard{Jobs: st.Jobs[i:min(i+contract.StatusShardJobs, len(st.Jobs))]})
			if err != nil {
				return err
			}
			pairs = append(pairs, KVPair{Key: contract.StatusShardKey(len(pairs)), Value: raw})
		}
		doc.JobShards = len(pairs)
	}
	if failed, err := u.putMany(ctx, pairs); err != nil {
		return fmt.Errorf("%d status shards: %w", len(failed), err)
	}
	raw, err := json.Marshal(&doc)
	if err != nil {
		return err
	}
	return u.put(ctx, contract.StatusKey, raw)
}
