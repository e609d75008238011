package ui

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
)

// memKV is an in-memory KV: Watch returns at once when the key's index
// passed the caller's, else waits for a change or ctx.
type memKV struct {
	mu      sync.Mutex
	data    map[string][]byte
	index   uint64
	changed chan struct{}
}

func newMemKV() *memKV { return &memKV{data: map[string][]byte{}, changed: make(chan struct{})} }

func (m *memKV) put(key string, v []byte) {
	m.mu.Lock()
	m.data[key] = v
	m.index++
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
}

func (m *memKV) Get(_ context.Context, key string) ([]byte, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.data[key]
	if !ok {
		return nil, 0, jobs.ErrNotFound
	}
	return v, m.index, nil
}

func (m *memKV) Watch(ctx context.Context, key string, index uint64, wait time.Duration) ([]byte, uint64, error) {
	for {
		m.mu.Lock()
		v, idx, ch := m.data[key], m.index, m.changed
		m.mu.Unlock()
		if idx > index {
			return v, idx, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}

func (m *memKV) List(_ context.Context, dir string) (map[string][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]byte{}
	for k, v := range m.data {
		if len(k) > len(dir) && k[:len(dir)] == dir {
			out[k] = v
		}
	}
	return out, nil
}

func TestConsulSource(t *testing.T) {
	kv := newMemKV()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := NewConsulSource(ctx, kv, ReaderOf(""), nil)
	snap, err := src.Snapshot(ctx)
	if err != nil || snap.Status != nil || len(snap.Rounds) != 0 {
		t.Fatalf("before any round: %+v %v", snap, err)
	}
	perf, grad := testFit()
	state, _ := json.Marshal(jobs.State{Version: 1, Perf: ptr(contract.PerfParams(perf)), Grad: ptr(contract.GradParams(grad)), Restarts: 2})
	kv.put("jobs/default/a/state", state)
	kv.put("jobs/default/a/metrics", []byte(`{"version":1}`))
	kv.put("jobs/default/a/decision", []byte(`{}`))
	for r := int64(1); r <= 3; r++ {
		raw, _ := json.Marshal(jobs.Status{Round: r, Time: t0.Add(time.Duration(r) * time.Minute), Instance: "leader",
			Jobs: []jobs.JobStatus{{Job: "default/a", Decision: &jobs.Decision{NumReplicas: int(r), Placement: "n1:" + string(rune('0'+r))}}}})
		kv.put("status", raw)
		// The watcher records every round, even with nobody looking.
		deadline := time.Now().Add(5 * time.Second)
		for {
			var s Snapshot
			src.hist.fill(&s)
			if len(s.Rounds) > 0 && s.Rounds[0].Round == r {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d not recorded by the watcher", r)
			}
			time.Sleep(time.Millisecond)
		}
	}
	snap, err = src.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Status == nil || snap.Status.Round != 3 || len(snap.Rounds) != 3 || len(snap.Allocations["default/a"]) != 3 {
		t.Fatalf("snapshot: status %+v, %d rounds, %d allocation changes", snap.Status, len(snap.Rounds), len(snap.Allocations["default/a"]))
	}
	d := snap.Jobs["default/a"]
	if d == nil || d.State == nil || d.State.Restarts != 2 || d.Metrics != nil || d.MetricsError == "" {
		t.Fatalf("job data %+v: want the state and the metrics document's error", d)
	}
	if snap.Reader != "no Consul token (anonymous; CONSUL_HTTP_TOKEN is not set)" {
		t.Errorf("reader %q", snap.Reader)
	}
}
