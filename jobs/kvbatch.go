package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/pollux-nomad/pollux/contract"
)

// How a round reads and writes Consul at scale: one listing of every
// job's keys per round instead of a read per job and key (TreeReader),
// and the round's bookkeeping writes (states, decisions) batched into
// transactions (BatchWriter) with bounded concurrency, each written only
// when its bytes changed. A KV store without these interfaces is read
// and written key by key.

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

// publishedDecision is what the decision key of a job last received.
type publishedDecision struct {
	key []byte
	at  time.Time
}

// queueDecision adds a job's decision to the round's decision writes if
// it differs from the one last written (ignoring its round number), on
// a new leader's first write, or decisionRefresh after the last write.
// Apply calls it from several goroutines: published only changes after
// apply (flushDecisions).
func (c *Controller) queueDecision(r *round, ref JobRef, d Decision) {
	same := d
	same.Round = 0
	key, _ := json.Marshal(same)
	if last, ok := c.published[ref]; ok && bytes.Equal(last.key, key) && c.now().Sub(last.at) < decisionRefresh {
		return
	}
	raw, err := json.Marshal(d)
	if err != nil {
		return
	}
	r.kv.queueDecision(pendingDecision{ref: ref, raw: raw, key: key})
}

// flushDecisions writes the round's queued decisions and remembers what
// each job's decision key received.
func (c *Controller) flushDecisions(ctx context.Context, r *round) {
	written := r.kv.flushDecisions(ctx)
	if c.published == nil {
		c.published = map[JobRef]publishedDecision{}
	}
	now := c.now()
	for _, q := range written {
		c.published[q.ref] = publishedDecision{key: q.key, at: now}
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
