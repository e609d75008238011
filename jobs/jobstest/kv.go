package jobstest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
)

// KV is an in-memory key/value store with Consul's index semantics (see
// the package documentation). It implements jobs.KV.
type KV struct {
	clock *Clock

	mu    sync.Mutex
	index uint64
	keys  map[string]kvEntry
	// changed is closed (and replaced) on every write.
	changed chan struct{}
	fail    func(op, key string) error
	// gets, reads and writes count Get calls, tree reads and key writes.
	gets, reads int
	writes      uint64
}

type kvEntry struct {
	value  []byte
	modify uint64
}

var _ jobs.KV = (*KV)(nil)

// NewKV returns an empty store whose blocking reads time out on clock.
func NewKV(clock *Clock) *KV {
	return &KV{clock: clock, index: 1, keys: map[string]kvEntry{}, changed: make(chan struct{})}
}

// FailWith makes every later call for which f returns an error fail with
// it (Consul unreachable, say); nil heals the store.
func (s *KV) FailWith(f func(op, key string) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = f
}

// check returns the injected failure of op on key; s.mu is held.
func (s *KV) check(op, key string) error {
	if s.fail == nil {
		return nil
	}
	return s.fail(op, key)
}

// write stores value at key under the next index; s.mu is held.
func (s *KV) write(key string, value []byte) {
	s.index++
	s.writes++
	s.keys[key] = kvEntry{value: append([]byte(nil), value...), modify: s.index}
	close(s.changed)
	s.changed = make(chan struct{})
}

// Get returns a key's value and ModifyIndex, or contract.ErrNotFound.
func (s *KV) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gets++
	if err := s.check("get", key); err != nil {
		return nil, 0, err
	}
	e, ok := s.keys[key]
	if !ok {
		return nil, 0, fmt.Errorf("key %q: %w", key, contract.ErrNotFound)
	}
	return append([]byte(nil), e.value...), e.modify, nil
}

// Put writes a key unconditionally.
func (s *KV) Put(ctx context.Context, key string, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check("put", key); err != nil {
		return err
	}
	s.write(key, value)
	return nil
}

// CAS writes a key only if its ModifyIndex is index (0: only if absent),
// else returns contract.ErrConflict.
func (s *KV) CAS(ctx context.Context, key string, value []byte, index uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check("cas", key); err != nil {
		return err
	}
	e, ok := s.keys[key]
	if (index == 0 && ok) || (index != 0 && (!ok || e.modify != index)) {
		return fmt.Errorf("key %q at index %d: %w", key, index, contract.ErrConflict)
	}
	s.write(key, value)
	return nil
}

// Delete removes a key, or every key under it if recurse.
func (s *KV) Delete(ctx context.Context, key string, recurse bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check("delete", key); err != nil {
		return err
	}
	deleted := false
	for k := range s.keys {
		// As the consul adapter: the key and the tree under "key/" (never
		// "key2/...").
		if k == key || (recurse && strings.HasPrefix(k, strings.TrimSuffix(key, "/")+"/")) {
			delete(s.keys, k)
			deleted = true
		}
	}
	if deleted {
		// A delete moves the index too (Consul keeps a tombstone).
		s.index++
		close(s.changed)
		s.changed = make(chan struct{})
	}
	return nil
}

// Watch blocks until the key's index passes index, or wait elapses on the
// clock (default 5 minutes), and returns its value (nil if absent) and
// index. An absent key's index is the store's, so its read may also
// return on a write to another key (Consul's blocking reads may return
// early too; callers compare what they read).
func (s *KV) Watch(ctx context.Context, key string, index uint64, wait time.Duration) ([]byte, uint64, error) {
	if wait <= 0 {
		wait = 5 * time.Minute
	}
	var timeout <-chan time.Time
	for {
		s.mu.Lock()
		if err := s.check("watch", key); err != nil {
			s.mu.Unlock()
			return nil, 0, err
		}
		value, idx := s.current(key)
		changed := s.changed
		s.mu.Unlock()
		if index == 0 || idx > index {
			return value, idx, nil
		}
		if timeout == nil {
			timeout = s.clock.After(wait)
		}
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-timeout:
			s.mu.Lock()
			value, idx = s.current(key)
			s.mu.Unlock()
			return value, idx, nil
		case <-changed:
		}
	}
}

// current is a key's value and index as a read returns them; s.mu is held.
func (s *KV) current(key string) ([]byte, uint64) {
	if e, ok := s.keys[key]; ok {
		return append([]byte(nil), e.value...), e.modify
	}
	return nil, s.index
}

// ListKeys lists the keys under the folder dir, sorted, as
// consul.Client.ListKeys does.
func (s *KV) ListKeys(ctx context.Context, dir string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check("list", dir); err != nil {
		return nil, err
	}
	dir = strings.TrimSuffix(dir, "/") + "/"
	var out []string
	for k := range s.keys {
		if strings.HasPrefix(k, dir) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Keys lists the stored keys, sorted.
func (s *KV) Keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.keys))
	for k := range s.keys {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ReadTree returns every key under the folder dir with its value and
// ModifyIndex, sorted, as consul.Client.ReadTree does.
func (s *KV) ReadTree(ctx context.Context, dir string) ([]jobs.KVPair, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	if err := s.check("list", dir); err != nil {
		return nil, err
	}
	dir = strings.TrimSuffix(dir, "/") + "/"
	var out []jobs.KVPair
	for k, e := range s.keys {
		if strings.HasPrefix(k, dir) {
			out = append(out, jobs.KVPair{Key: k, Value: append([]byte(nil), e.value...), ModifyIndex: e.modify})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// PutMany writes every pair (each checked as a put), as
// consul.Client.PutMany does in transactions; a failure writes none of
// the pairs.
func (s *KV) PutMany(ctx context.Context, pairs []jobs.KVPair) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range pairs {
		if err := s.check("put", p.Key); err != nil {
			return err
		}
	}
	for _, p := range pairs {
		s.write(p.Key, p.Value)
	}
	return nil
}

// Ops returns how many single-key reads (Get) and tree reads the store
// has served and how many keys it has written, for tests of the
// controller's I/O.
func (s *KV) Ops() (gets, trees int, writes uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets, s.reads, s.writes
}
