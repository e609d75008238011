package report

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/pollux-nomad/pollux/contract"
)

// attempt is a check-and-set whose request failed in transit: Consul may
// or may not have applied it.
type attempt struct {
	value    []byte
	casIndex uint64
	delta    map[StepConfig]stats // the samples it would have stored
	counts   map[StepConfig]int
}

// write stores the merged document with check-and-set (see the package
// documentation), retrying on conflict. On failure the observations are
// kept for the next write.
func (r *Reporter) write(ctx context.Context) (err error) {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	r.mu.Lock()
	snap := r.acc.take()
	r.mu.Unlock()
	delta := snap.delta
	inTransit := false
	defer func() {
		if err == nil || inTransit {
			return
		}
		r.mu.Lock()
		r.acc.restore(delta, !errors.Is(err, ErrNotReady))
		r.mu.Unlock()
	}()

	for try := 1; ; try++ {
		pair, _, err := r.kv.Get(r.key, (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			return fmt.Errorf("failed to read metrics document %q: %w", r.key, err)
		}
		if u := r.unsure; u != nil {
			r.unsure = nil
			if pair != nil && pair.ModifyIndex != u.casIndex && bytes.Equal(pair.Value, u.value) {
				r.last = &lastWrite{createIndex: pair.CreateIndex, casIndex: u.casIndex, counts: u.counts}
			} else {
				d := maps.Clone(u.delta)
				mergeInto(d, delta)
				delta = d
			}
		}

		var stored *contract.Metrics
		var createIndex, casIndex uint64
		survived := true
		if pair != nil {
			createIndex, casIndex = pair.CreateIndex, pair.ModifyIndex
			if stored, err = contract.ParseMetrics(pair.Value); err != nil {
				r.log.Warn("stored metrics document is invalid, replacing it", "key", r.key, "error", err)
				survived = false
			}
		}
		if r.last != nil && !r.last.survives(createIndex, casIndex, stored) {
			r.log.Info("stored metrics document lost earlier writes, writing all samples", "key", r.key)
			survived = false
		}
		add := delta
		if !survived {
			add = snap.mine
		}
		doc, err := build(stored, add, snap, r.cfg.InitBatchSize, r.cfg.Now())
		if err != nil {
			return err
		}
		value, err := contract.MarshalMetrics(doc)
		if err != nil {
			return fmt.Errorf("failed to write metrics document %q: %w", r.key, err)
		}
		counts := make(map[StepConfig]int, len(doc.Profile))
		for _, e := range doc.Profile {
			counts[keyOf(e)] = e.Count
		}
		ok, _, err := r.kv.CAS(&api.KVPair{Key: r.key, Value: value, ModifyIndex: casIndex}, (&api.WriteOptions{}).WithContext(ctx))
		if err != nil {
			// Consul may have applied it: the next write finds out.
			r.unsure = &attempt{value: value, casIndex: casIndex, delta: delta, counts: counts}
			inTransit = true
			r.mu.Lock()
			r.acc.dirty = true
			r.mu.Unlock()
			return fmt.Errorf("failed to write metrics document %q: %w", r.key, err)
		}
		if ok {
			r.last = &lastWrite{createIndex: createIndex, casIndex: casIndex, counts: counts}
			r.log.Debug("wrote metrics", "key", r.key, "entries", len(doc.Profile), "attempts", try)
			return nil
		}
		if try == maxCASAttempts {
			return fmt.Errorf("failed to write metrics document %q: still conflicting after %d check-and-set attempts", r.key, try)
		}
		// Another writer got there first: read again after a short,
		// jittered pause.
		pause := time.Duration(5+rand.IntN(20)) * time.Millisecond
		select {
		case <-ctx.Done():
			return fmt.Errorf("failed to write metrics document %q: %w", r.key, ctx.Err())
		case <-time.After(pause):
		}
	}
}
