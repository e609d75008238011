package consul_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/pollux-nomad/pollux/consul"
	"github.com/pollux-nomad/pollux/contract"
)

// refusals counts FencedKV's refused writes by reason.
type refusals struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *refusals) add(op, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[reason]++
}

func (r *refusals) get(reason string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[reason]
}

// The leader's fenced writes: accepted while the term holds the lock
// (Put, PutMany across several transactions, CAS with its conflict,
// Delete), refused without being sent once the term is released.
func TestFencedKVWhileLeader(t *testing.T) {
	t.Parallel()
	raw := rawClient(t)
	prefix := testPrefix(t, raw)
	ctx := context.Background()
	l := newClient(t, raw, consul.Config{Prefix: prefix, Instance: instanceName(prefix, "a")}).Leader()
	releaseOnCleanup(t, l)
	kv := l.KV()
	var ref refusals
	kv.OnRefused = ref.add

	if err := kv.Put(ctx, "before", []byte("x")); !errors.Is(err, consul.ErrFenced) || !errors.Is(err, consul.ErrNotLeader) {
		t.Fatalf("Put before any term = %v, want ErrFenced and ErrNotLeader", err)
	}
	if _, err := l.Acquire(ctx); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	term, ok := l.Term()
	if !ok || term.Number == 0 || term.Session == "" {
		t.Fatalf("Term() = %+v, %v; want a held term with a number and a session", term, ok)
	}
	if err := kv.Put(ctx, "a", []byte("1")); err != nil {
		t.Fatalf("Put: %v", err)
	}
	pairs := make([]contract.KVPair, 150) // three transactions
	for i := range pairs {
		pairs[i] = contract.KVPair{Key: fmt.Sprintf("many/%03d", i), Value: []byte{byte(i)}}
	}
	if err := kv.PutMany(ctx, pairs); err != nil {
		t.Fatalf("PutMany: %v", err)
	}
	if n := len(keysUnder(t, raw, prefix+"many/")); n != len(pairs) {
		t.Fatalf("PutMany wrote %d keys, want %d", n, len(pairs))
	}
	_, idx, err := kv.Get(ctx, "a")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if err := kv.CAS(ctx, "a", []byte("2"), idx); err != nil {
		t.Fatalf("CAS at the current index: %v", err)
	}
	if err := kv.CAS(ctx, "a", []byte("3"), idx); !errors.Is(err, contract.ErrConflict) || errors.Is(err, consul.ErrFenced) {
		t.Fatalf("CAS at a stale index = %v, want ErrConflict only", err)
	}
	if err := kv.CAS(ctx, "b", []byte("new"), 0); err != nil {
		t.Fatalf("CAS creating a key: %v", err)
	}
	if err := kv.CAS(ctx, "b", []byte("again"), 0); !errors.Is(err, contract.ErrConflict) {
		t.Fatalf("CAS index 0 on an existing key = %v, want ErrConflict", err)
	}
	if v, _, _ := kv.Get(ctx, "a"); string(v) != "2" {
		t.Fatalf("a = %q after the CAS writes, want 2", v)
	}
	if err := kv.Delete(ctx, "many", true); err != nil {
		t.Fatalf("Delete recurse: %v", err)
	}
	if n := len(keysUnder(t, raw, prefix+"many/")); n != 0 {
		t.Fatalf("%d keys left under many/ after Delete", n)
	}
	if err := kv.Delete(ctx, "a", false); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if ref.get(consul.RefusedSession) != 0 {
		t.Fatalf("%d writes refused by Consul while leading", ref.get(consul.RefusedSession))
	}

	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := kv.Put(ctx, "after", []byte("x")); !errors.Is(err, consul.ErrFenced) {
		t.Fatalf("Put after Release = %v, want ErrFenced", err)
	}
	if got := ref.get(consul.RefusedNoTerm); got != 2 {
		t.Errorf("refusals without a term = %d, want 2", got)
	}
	if _, _, err := l.Lease(); !errors.Is(err, consul.ErrNotLeader) {
		t.Errorf("Lease after Release = %v, want ErrNotLeader", err)
	}
}

// A deposed leader that still believes in its term (a paused process):
// Consul refuses every one of its writes once another instance holds the
// lock, and the other instance's keys stay as it wrote them.
func TestFencedKVDeposedLeaderRefused(t *testing.T) {
	t.Parallel()
	raw := rawClient(t)
	prefix := testPrefix(t, raw)
	ctx := context.Background()
	a := newClient(t, raw, consul.Config{Prefix: prefix, Instance: instanceName(prefix, "a")}).Leader()
	b := newClient(t, raw, consul.Config{Prefix: prefix, Instance: instanceName(prefix, "b")}).Leader()
	releaseOnCleanup(t, a)
	releaseOnCleanup(t, b)
	if _, err := a.Acquire(ctx); err != nil {
		t.Fatalf("Acquire(a): %v", err)
	}
	old, _ := a.Term()
	stale := a.KV()
	var ref refusals
	stale.OnRefused = ref.add
	consul.SetTermSource(stale, func() (consul.Term, bool) { return old, true })
	if err := stale.Put(ctx, "state", []byte("a")); err != nil {
		t.Fatalf("Put while leading: %v", err)
	}

	// a's session ends (as when Consul invalidates a paused holder's);
	// b takes the lock after the lock-delay and writes.
	if _, err := raw.Session().Destroy(old.Session, nil); err != nil {
		t.Fatalf("failed to destroy a's session: %v", err)
	}
	actx, cancel := context.WithTimeout(ctx, lockDelay+slack+5*time.Second)
	defer cancel()
	if _, err := b.Acquire(actx); err != nil {
		t.Fatalf("Acquire(b): %v", err)
	}
	bt, _ := b.Term()
	if bt.Number <= old.Number {
		t.Errorf("b's term number %d is not above a's %d", bt.Number, old.Number)
	}
	if err := b.KV().Put(ctx, "state", []byte("b")); err != nil {
		t.Fatalf("b's Put: %v", err)
	}

	writes := map[string]func() error{
		"put": func() error { return stale.Put(ctx, "state", []byte("a-late")) },
		"put_many": func() error {
			return stale.PutMany(ctx, []contract.KVPair{{Key: "state", Value: []byte("a-late")}, {Key: "other", Value: []byte("a")}})
		},
		"cas":    func() error { return stale.CAS(ctx, "other", []byte("a"), 0) },
		"delete": func() error { return stale.Delete(ctx, "state", true) },
	}
	for op, write := range writes {
		err := write()
		if !errors.Is(err, consul.ErrFenced) || !errors.Is(err, consul.ErrNotLeader) {
			t.Errorf("deposed %s = %v, want ErrFenced", op, err)
		}
	}
	if got := ref.get(consul.RefusedSession); got != len(writes) {
		t.Errorf("writes refused by Consul = %d, want %d", got, len(writes))
	}
	pair, _, err := raw.KV().Get(prefix+"state", nil)
	if err != nil || pair == nil || string(pair.Value) != "b" {
		t.Fatalf("state = %v, %v; want b's value", pair, err)
	}
	if p, _, _ := raw.KV().Get(prefix+"other", nil); p != nil {
		t.Errorf("the deposed leader's key %q was written", p.Key)
	}
}

// The lease: it ends TTL − margin after the last successful renewal, on a
// holder that can no longer reach Consul, before its term ends.
func TestLeaderLease(t *testing.T) {
	t.Parallel()
	raw := rawClient(t)
	prefix := testPrefix(t, raw)
	ctx := context.Background()
	p := startProxy(t, consulTarget(t))
	viaProxy := proxiedClient(t, p)
	a := newClient(t, viaProxy, consul.Config{Prefix: prefix, Instance: instanceName(prefix, "a")}).Leader()
	releaseOnCleanup(t, a)
	t.Cleanup(p.Restore)
	lost, err := a.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	term, end, err := a.Lease()
	if err != nil {
		t.Fatalf("Lease: %v", err)
	}
	margin := min(consul.DefaultLeaseMargin, ttl/5)
	if left := time.Until(end); left <= 0 || left > ttl-margin {
		t.Fatalf("lease ends in %v, want within (0, %v]", left, ttl-margin)
	}
	// Cut right after a renewal, so the lease's end is known.
	renewed := waitRenewal(t, a, end)
	p.Cut()
	var first error
	var at time.Time
	for first == nil {
		time.Sleep(20 * time.Millisecond)
		_, _, first = a.Lease()
		at = time.Now()
		if time.Since(renewed) > 2*ttl {
			t.Fatalf("lease still valid %v after the last renewal", time.Since(renewed))
		}
	}
	if !errors.Is(first, consul.ErrLeaseExpired) {
		t.Fatalf("first lease error = %v, want ErrLeaseExpired (the lease ends before the term)", first)
	}
	if d := at.Sub(renewed); d < ttl-margin || d > ttl-margin+time.Second {
		t.Errorf("lease ended %v after the last renewal, want about %v", d, ttl-margin)
	}
	select {
	case <-lost:
		t.Errorf("term ended before its lease")
	default:
	}
	awaitClosed(t, lost, margin+slack, "lease expired")
	t.Logf("term %d: lease ended %v after the last renewal", term.Number, at.Sub(renewed).Round(time.Millisecond))
}

// waitRenewal waits until the lease's end moves past end (a renewal) and
// returns when that renewal was sent.
func waitRenewal(t *testing.T, l *consul.Leader, end time.Time) time.Time {
	t.Helper()
	margin := min(consul.DefaultLeaseMargin, ttl/5)
	deadline := time.Now().Add(ttl)
	for time.Now().Before(deadline) {
		_, e, err := l.Lease()
		if err != nil {
			t.Fatalf("Lease: %v", err)
		}
		if e.After(end) {
			return e.Add(margin - ttl)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no renewal within %v", ttl)
	return time.Time{}
}

// proxiedClient is an API client that reaches Consul through p.
func proxiedClient(t *testing.T, p *proxy) *api.Client {
	t.Helper()
	cfg := api.DefaultConfig()
	cfg.Address = p.Addr()
	cfg.Scheme = "http"
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatalf("failed to create the proxied api client: %v", err)
	}
	return c
}

// Liveness after an outage: a holder that lost Consul for longer than its
// TTL keeps trying to destroy its session, so the lock is free again
// within a moment of Consul's return, not when Consul's own timer (2×TTL
// after the last renewal) runs out.
func TestLeaderCleanupAfterOutage(t *testing.T) {
	t.Parallel()
	raw := rawClient(t)
	prefix := testPrefix(t, raw)
	ctx := context.Background()
	p := startProxy(t, consulTarget(t))
	aName, bName := instanceName(prefix, "cut"), instanceName(prefix, "direct")
	a := newClient(t, proxiedClient(t, p), consul.Config{Prefix: prefix, Instance: aName}).Leader()
	b := newClient(t, raw, consul.Config{Prefix: prefix, Instance: bName}).Leader()
	releaseOnCleanup(t, a)
	releaseOnCleanup(t, b)
	t.Cleanup(p.Restore)
	lostA, err := a.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire(a): %v", err)
	}
	race := newContest(t)
	race.acquire(bName, b)
	_, end, _ := a.Lease()
	renewed := waitRenewal(t, a, end)
	p.Cut()
	awaitClosed(t, lostA, ttl+slack, "Consul unreachable")
	// Consul invalidates a's session no earlier than 2×TTL after renewed;
	// come back well before.
	restore := renewed.Add(ttl + 3*time.Second)
	time.Sleep(time.Until(restore))
	p.Restore()
	restoredAt := time.Now()
	r := await(t, race.results, 2*ttl, "takeover after the outage")
	took := r.at.Sub(restoredAt)
	t.Logf("lock taken %v after Consul became reachable again (%v after the last renewal)", took.Round(time.Millisecond), r.at.Sub(renewed).Round(time.Millisecond))
	if !r.at.Before(renewed.Add(2 * ttl)) {
		t.Errorf("lock taken %v after the last renewal: the old session was left to Consul's timer (2×TTL)", r.at.Sub(renewed))
	}
	if bound := 2*time.Second + lockDelay + slack; took > bound {
		t.Errorf("lock taken %v after Consul's return, want within %v", took, bound)
	}
}

// benchLeader returns a client on a fresh prefix of the local Consul and
// its leader, holding the lock; both are cleaned up after the benchmark.
func benchLeader(b *testing.B) (*consul.Client, *consul.Leader) {
	b.Helper()
	raw, err := api.NewClient(api.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	prefix := fmt.Sprintf("pollux-bench/%d/", time.Now().UnixNano())
	b.Cleanup(func() { _, _ = raw.KV().DeleteTree(prefix, nil) })
	c, err := consul.New(raw, consul.Config{Prefix: prefix, Instance: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	l := c.Leader()
	if _, err := l.Acquire(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Release(context.Background()) })
	return c, l
}

// BenchmarkPutMany compares a round's batch of 200 state writes without
// and with the term's check (one more operation per transaction of 63).
func BenchmarkPutMany(b *testing.B) {
	c, l := benchLeader(b)
	ctx := context.Background()
	pairs := make([]contract.KVPair, 200)
	for i := range pairs {
		pairs[i] = contract.KVPair{Key: fmt.Sprintf("jobs/default/j%03d/state", i), Value: make([]byte, 600)}
	}
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			if err := c.PutMany(ctx, pairs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fenced", func(b *testing.B) {
		kv := l.KV()
		for b.Loop() {
			if err := kv.PutMany(ctx, pairs); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCAS measures one check-and-set write, plain and fenced (a
// transaction with the term's check-session first): the write-ahead record
// and state of each job a round changes take one each.
func BenchmarkCAS(b *testing.B) {
	c, l := benchLeader(b)
	ctx := context.Background()
	value := make([]byte, 600)
	for _, v := range []struct {
		name string
		kv   interface {
			CAS(context.Context, string, []byte, uint64) error
		}
	}{{"plain", c}, {"fenced", l.KV()}} {
		b.Run(v.name, func(b *testing.B) {
			run := time.Now().UnixNano() // each run creates fresh keys
			i := 0
			for b.Loop() {
				i++
				if err := v.kv.CAS(ctx, fmt.Sprintf("jobs/default/%s-%d-%06d/state", v.name, run, i), value, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
