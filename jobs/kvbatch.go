package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/pollux-nomad/pollux/contract"
)

// How a round reads and writes Consul at scale: one listing of every
// job's keys per round instead of a read per job and key (TreeReader),
// and the round's bookkeeping writes (states, decisions) batched into
// transactions (BatchWriter) with bounded concurrency, each written only
// when its bytes changed. A KV store without these interfaces is read
// and written key by key, as before.

// KVPair is one key with its value and ModifyIndex.
type KVPair = contract.KVPair

// TreeReader is implemented by a KV store that can return every key under
// a folder with its value and ModifyIndex in one request (consul.Client:
// a `?recurse` read; jobstest.KV).
type TreeReader interface {
	ReadTree(ctx context.Context, dir string) ([]KVPair, error)
}

// BatchWriter is implemented by a KV store that can write many keys in
// few requests (consul.Client: transactions of at most 64 operations).
// Each key is written unconditionally; an error may leave some written.
type BatchWriter interface {
	PutMany(ctx context.Context, pairs []KVPair) error
}

// writeConcurrency bounds the parallel writes of a round (batches, or
// single keys when the store cannot batch).
const writeConcurrency = 8

// zeroConcurrency bounds the Nomad writes in flight that scale jobs to
// zero (a first round at 2,000 jobs makes about 2,000 of them). Measured
// in the 2,000-job load test on a 2-core machine: 32 in flight wrote
// 1,968 in 21.5 s, 64 in flight 1,976 in 19.1 s (Nomad's CPU is the
// bound there: the load generator's own 2,000 registrations took 17 s).
const zeroConcurrency = 64

// zeroChunkSize is how many jobs a round scales to zero between checks of
// its budget (Options.ParkBudget): two waves of zeroConcurrency, about
// 1.3 s of Nomad writes on a 2-core machine.
const zeroChunkSize = 2 * zeroConcurrency

// decisionRefresh is how often a job's decision key is written even
// though it did not change (the safety net for a key lost or edited).
const decisionRefresh = 10 * time.Minute

// roundTree is the round's listing of every job's keys.
type roundTree map[string]KVPair

// readTree lists every job's keys once for the round (nil without a
// TreeReader). A failure is the round's Consul failure.
func (c *Controller) readTree(ctx context.Context) roundTree {
	tr, ok := c.kv.(TreeReader)
	if !ok || c.kvErr != nil {
		return nil
	}
	pairs, err := tr.ReadTree(ctx, contract.JobsPrefix)
	if err != nil {
		c.kvFailed(err)
		return nil
	}
	t := make(roundTree, len(pairs))
	for _, p := range pairs {
		t[p.Key] = p
	}
	return t
}

// get reads a key from the round's listing when there is one, else from
// Consul.
func (c *Controller) get(ctx context.Context, key string) ([]byte, uint64, error) {
	if c.tree != nil {
		if c.kvErr != nil {
			return nil, 0, c.kvErr
		}
		p, ok := c.tree[key]
		if !ok {
			return nil, 0, fmt.Errorf("key %q: %w", key, ErrNotFound)
		}
		return p.Value, p.ModifyIndex, nil
	}
	return c.kvGet(ctx, key)
}

// putMany writes pairs: in transactions with a BatchWriter, else one by
// one; both with at most writeConcurrency requests in flight. It returns
// the keys that failed (with the first error).
func (c *Controller) putMany(ctx context.Context, pairs []KVPair) (failed map[string]bool, first error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	if c.kvErr != nil {
		failed = map[string]bool{}
		for _, p := range pairs {
			failed[p.Key] = true
		}
		return failed, c.kvErr
	}
	var groups [][]KVPair
	bw, batched := c.kv.(BatchWriter)
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
				err = c.kv.Put(ctx, g[0].Key, g[0].Value)
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
			first = cmpError(first, err)
		}()
	}
	wg.Wait()
	if first != nil {
		c.kvFailed(first)
	}
	return failed, first
}

func cmpError(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// batches splits pairs into groups of at most n pairs and about size
// bytes of values (a larger value goes alone).
func batches(pairs []KVPair, n, size int) [][]KVPair {
	var out [][]KVPair
	var cur []KVPair
	bytes := 0
	for _, p := range pairs {
		if len(cur) > 0 && (len(cur) == n || bytes+len(p.Value) > size) {
			out = append(out, cur)
			cur, bytes = nil, 0
		}
		cur = append(cur, p)
		bytes += len(p.Value)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// deferState records that a job's state changed in the bookkeeping
// phases (fit, reconcile, accrue): flushStates writes it once, batched
// with the others, before anything is applied.
func (c *Controller) deferState(ref JobRef, s *State) {
	if c.deferred == nil {
		c.deferred = map[JobRef]*State{}
	}
	c.deferred[ref] = s
}

// flushStates writes the deferred states.
func (c *Controller) flushStates(ctx context.Context) {
	if len(c.deferred) == 0 {
		return
	}
	pairs := make([]KVPair, 0, len(c.deferred))
	for ref, s := range c.deferred {
		raw, err := json.Marshal(s)
		if err != nil {
			continue
		}
		pairs = append(pairs, KVPair{Key: stateKey(ref), Value: raw})
	}
	c.deferred = nil
	if failed, err := c.putMany(ctx, pairs); err != nil && !c.kvDown(err) {
		c.log.Warn("failed to persist states", "jobs", len(failed), "error", err)
		c.metrics.incError("write_state")
	}
}

// queueDecision adds a job's decision to the round's decision writes if
// it differs from the one last written (ignoring its round number), on
// a new leader's first write, or decisionRefresh after the last write.
func (c *Controller) queueDecision(ref JobRef, d Decision) {
	same := d
	same.Round = 0
	key, _ := json.Marshal(same)
	c.decMu.Lock()
	defer c.decMu.Unlock()
	if last, ok := c.published[ref]; ok && bytes.Equal(last.key, key) && c.now().Sub(last.at) < decisionRefresh {
		return
	}
	raw, err := json.Marshal(d)
	if err != nil {
		return
	}
	c.decisions = append(c.decisions, pendingDecision{ref: ref, raw: raw, key: key})
}

// pendingDecision is a decision write of the round.
type pendingDecision struct {
	ref      JobRef
	raw, key []byte
}

// publishedDecision is what the decision key of a job last received.
type publishedDecision struct {
	key []byte
	at  time.Time
}

// flushDecisions writes the round's queued decisions.
func (c *Controller) flushDecisions(ctx context.Context) {
	c.decMu.Lock()
	queued := c.decisions
	c.decisions = nil
	c.decMu.Unlock()
	if len(queued) == 0 {
		return
	}
	pairs := make([]KVPair, len(queued))
	for i, q := range queued {
		pairs[i] = KVPair{Key: decisionKey(q.ref), Value: q.raw}
	}
	failed, err := c.putMany(ctx, pairs)
	if err != nil && !c.kvDown(err) {
		c.log.Warn("failed to publish decisions", "jobs", len(failed), "error", err)
		c.metrics.incError("write_decision")
	}
	if c.published == nil {
		c.published = map[JobRef]publishedDecision{}
	}
	now := c.now()
	for _, q := range queued {
		if !failed[decisionKey(q.ref)] {
			c.published[q.ref] = publishedDecision{key: q.key, at: now}
		}
	}
}

// forgetPublished drops the memory of jobs no longer listed.
func (c *Controller) forgetPublished(listed map[JobRef]bool) {
	for ref := range c.published {
		if !listed[ref] {
			delete(c.published, ref)
		}
	}
}

// writeStatus writes the round's status: in one document up to
// contract.StatusInlineJobs job lines, else a summary and shards of
// contract.StatusShardJobs lines (every shard changes each round: the
// lines carry the round's decisions), shards first, so that a reader of
// the summary finds its shards.
func (c *Controller) writeStatus(ctx context.Context, st *Status) error {
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
	if failed, err := c.putMany(ctx, pairs); err != nil {
		return fmt.Errorf("%d status shards: %w", len(failed), err)
	}
	raw, err := json.Marshal(&doc)
	if err != nil {
		return err
	}
	return c.kvPut(ctx, contract.StatusKey, raw)
}

// StatusReader is what ReadStatus needs of a KV store.
type StatusReader interface {
	Get(ctx context.Context, key string) ([]byte, uint64, error)
}

// ReadStatus reads the last round's status with all its job lines (from
// its shards when it has them) and the status key's index.
func ReadStatus(ctx context.Context, kv StatusReader) (*Status, uint64, error) {
	raw, idx, err := kv.Get(ctx, contract.StatusKey)
	if err != nil {
		return nil, 0, err
	}
	st, err := ParseStatus(ctx, kv, raw)
	return st, idx, err
}

// ParseStatus decodes a status document read from the status key and
// reads its shards, if any, from kv.
func ParseStatus(ctx context.Context, kv StatusReader, raw []byte) (*Status, error) {
	var st Status
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	for i := range st.JobShards {
		sraw, _, err := kv.Get(ctx, contract.StatusShardKey(i))
		if err != nil {
			return nil, fmt.Errorf("status shard %d: %w", i, err)
		}
		var sh contract.StatusShard
		if err := json.Unmarshal(sraw, &sh); err != nil {
			return nil, fmt.Errorf("status shard %d: %w", i, err)
		}
		st.Jobs = append(st.Jobs, sh.Jobs...)
	}
	if st.JobShards > 0 && len(st.Jobs) != st.JobCount {
		return nil, fmt.Errorf("status of round %d: %d job lines in %d shards, want %d (a round was being written; read again)",
			st.Round, len(st.Jobs), st.JobShards, st.JobCount)
	}
	return &st, nil
}
