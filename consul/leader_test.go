package consul_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/consul/api"

	"github.com/pollux-nomad/pollux/consul"
)

// Timings the leadership tests hold the implementation to, with the
// default session TTL and lock-delay.
const (
	ttl       = consul.DefaultSessionTTL
	lockDelay = consul.DefaultLockDelay
	// slack covers scheduling on a loaded two-core machine.
	slack = 3 * time.Second
)

// acquisition is what one Acquire call returned, and when.
type acquisition struct {
	name string
	lost <-chan struct{}
	err  error
	at   time.Time
}

// contest runs Acquire calls in the background and collects their
// results. When the test ends, the calls still waiting are cancelled and
// awaited, before the Leaders are released: make it after the
// releaseOnCleanup calls (clean-ups run last registered first).
type contest struct {
	ctx     context.Context
	wg      sync.WaitGroup
	results chan acquisition
}

func newContest(t *testing.T) *contest {
	ctx, cancel := context.WithCancel(context.Background())
	c := &contest{ctx: ctx, results: make(chan acquisition, 16)}
	t.Cleanup(func() {
		cancel()
		c.wg.Wait()
	})
	return c
}

// acquire runs l.Acquire in the background and sends the result.
func (c *contest) acquire(name string, l *consul.Leader) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		lost, err := l.Acquire(c.ctx)
		c.results <- acquisition{name: name, lost: lost, err: err, at: time.Now()}
	}()
}

// await returns the next acquisition, failing the test after timeout.
func await(t *testing.T, results <-chan acquisition, timeout time.Duration, what string) acquisition {
	t.Helper()
	select {
	case r := <-results:
		if r.err != nil {
			t.Fatalf("%s: Acquire(%s): %v", what, r.name, r.err)
		}
		return r
	case <-time.After(timeout):
		t.Fatalf("%s: no instance acquired leadership within %v", what, timeout)
		return acquisition{}
	}
}

// awaitClosed returns when ch is closed, failing the test after timeout.
func awaitClosed(t *testing.T, ch <-chan struct{}, timeout time.Duration, what string) time.Time {
	t.Helper()
	select {
	case <-ch:
		return time.Now()
	case <-time.After(timeout):
		t.Fatalf("%s: lost channel still open after %v", what, timeout)
		return time.Time{}
	}
}

// terms records each instance's terms of leadership as the instances see
// them (from Acquire's return to the lost channel's closing), to check that
// no two overlap.
type terms struct {
	mu    sync.Mutex
	spans []span
}

type span struct {
	name     string
	from, to time.Time // to is zero while held
}

// add records a term that began at a.at and ends when a.lost closes.
func (ts *terms) add(a acquisition) {
	ts.mu.Lock()
	i := len(ts.spans)
	ts.spans = append(ts.spans, span{name: a.name, from: a.at})
	ts.mu.Unlock()
	go func() {
		<-a.lost
		now := time.Now()
		ts.mu.Lock()
		ts.spans[i].to = now
		ts.mu.Unlock()
	}()
}

// check fails the test if two terms overlapped.
func (ts *terms) check(t *testing.T) {
	t.Helper()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	now := time.Now()
	end := func(s span) time.Time {
		if s.to.IsZero() {
			return now
		}
		return s.to
	}
	for i := range ts.spans {
		for j := i + 1; j < len(ts.spans); j++ {
			a, b := ts.spans[i], ts.spans[j]
			if a.from.Before(end(b)) && b.from.Before(end(a)) {
				t.Errorf("two leaders at once: %s held %v–%v, %s held %v–%v",
					a.name, a.from.Format(time.StampMilli), end(a).Format(time.StampMilli),
					b.name, b.from.Format(time.StampMilli), end(b).Format(time.StampMilli))
			}
		}
	}
}

// instanceName makes an instance name unique to the test's prefix.
func instanceName(prefix, name string) string {
	return path.Base(prefix) + "-" + name
}

// lockSession returns the session holding the lock under prefix, or "".
func lockSession(t *testing.T, raw *api.Client, prefix string) string {
	t.Helper()
	pair, _, err := raw.KV().Get(prefix+consul.DefaultLockKey, nil)
	if err != nil {
		t.Fatalf("failed to read the lock key: %v", err)
	}
	if pair == nil {
		return ""
	}
	return pair.Session
}

// sessionsOf lists the IDs of the live sessions of an instance.
func sessionsOf(t *testing.T, raw *api.Client, instance string) []string {
	t.Helper()
	all, _, err := raw.Session().List(nil)
	if err != nil {
		t.Fatalf("failed to list sessions: %v", err)
	}
	ids := []string{}
	for _, s := range all {
		if s.Name == "pollux leader "+instance {
			ids = append(ids, s.ID)
		}
	}
	return ids
}

// eventuallyNoSessions waits until instance has no session left.
func eventuallyNoSessions(t *testing.T, raw *api.Client, instance string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ids := sessionsOf(t, raw, instance)
		if len(ids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("instance %s still has sessions %v after %v", instance, ids, within)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// releaseOnCleanup releases l when the test ends.
func releaseOnCleanup(t *testing.T, l *consul.Leader) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*ttl)
		defer cancel()
		if err := l.Release(ctx); err != nil {
			t.Logf("release at clean-up: %v", err)
		}
	})
}

// Three contenders: one holds the lock, the others wait; a release hands it
// over at once; a destroyed session (what Consul does to a dead holder's)
// closes the holder's channel and a waiting instance takes over once the
// lock-delay has passed, every time (not only the first).
func TestLeaderElection(t *testing.T) {
	t.Parallel()
	raw := rawClient(t)
	prefix := testPrefix(t, raw)
	ctx := context.Background()

	names := []string{instanceName(prefix, "a"), instanceName(prefix, "b"), instanceName(prefix, "c")}
	leaders := map[string]*consul.Leader{}
	for _, n := range names {
		leaders[n] = newClient(t, raw, consul.Config{Prefix: prefix, Instance: n}).Leader()
		releaseOnCleanup(t, leaders[n])
	}
	var log terms
	race := newContest(t)
	results := race.results
	for _, n := range names {
		race.acquire(n, leaders[n])
	}

	// Only one holds it.
	cur := await(t, results, 10*time.Second, "first election")
	log.add(cur)
	select {
	case r := <-results:
		t.Fatalf("two instances acquired leadership: %s and %s (err %v)", cur.name, r.name, r.err)
	case <-time.After(3 * time.Second):
	}
	holder, err := leaders[cur.name].Holder(ctx)
	if err != nil {
		t.Fatalf("Holder: %v", err)
	}
	if diff := cmp.Diff(cur.name, holder); diff != "" {
		t.Errorf("Holder (-want +got):\n%s", diff)
	}
	if _, err := leaders[cur.name].Acquire(ctx); err == nil {
		t.Errorf("a second Acquire while holding succeeded, want an error")
	}

	// A release hands over at once and leaves no session behind.
	releasedAt := time.Now()
	if err := leaders[cur.name].Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	awaitClosed(t, cur.lost, time.Second, "after Release")
	if ids := sessionsOf(t, raw, cur.name); len(ids) != 0 {
		t.Errorf("sessions of %s after Release: %v, want none", cur.name, ids)
	}
	if err := leaders[cur.name].Release(ctx); err != nil {
		t.Errorf("second Release: %v, want nil", err)
	}
	next := await(t, results, 5*time.Second, "handover after release")
	log.add(next)
	handover := next.at.Sub(releasedAt)
	t.Logf("takeover after Release: %v", handover.Round(time.Millisecond))
	if handover > 2*time.Second {
		t.Errorf("takeover after Release took %v, want under 2s", handover)
	}
	race.acquire(cur.name, leaders[cur.name]) // back in line
	cur = next

	// Destroying the holder's session, twice: each time its term ends and
	// a waiting instance takes over after the lock-delay.
	for round := 1; round <= 2; round++ {
		time.Sleep(500 * time.Millisecond) // let the re-entered instance wait
		sess := lockSession(t, raw, prefix)
		if sess == "" {
			t.Fatalf("lock key has no session while %s holds it", cur.name)
		}
		destroyedAt := time.Now()
		if _, err := raw.Session().Destroy(sess, nil); err != nil {
			t.Fatalf("failed to destroy the holder's session: %v", err)
		}
		lostAt := awaitClosed(t, cur.lost, 2*time.Second, "after the session was destroyed")
		next := await(t, results, lockDelay+2*slack, "takeover after session destroyed")
		log.add(next)
		if next.name == cur.name {
			t.Fatalf("%s took over from itself", next.name)
		}
		takeover := next.at.Sub(destroyedAt)
		t.Logf("session destroyed (%d): holder's lost channel closed after %v, takeover after %v (lock-delay %v)",
			round, lostAt.Sub(destroyedAt).Round(time.Millisecond), takeover.Round(time.Millisecond), lockDelay)
		if takeover < lockDelay {
			t.Errorf("takeover after %v, inside the lock-delay %v", takeover, lockDelay)
		}
		if takeover > lockDelay+slack {
			t.Errorf("takeover after %v, want under %v", takeover, lockDelay+slack)
		}
		eventuallyNoSessions(t, raw, cur.name, 5*time.Second)
		holder, err = leaders[next.name].Holder(ctx)
		if err != nil || holder != next.name {
			t.Errorf("Holder = %q, %v; want %q", holder, err, next.name)
		}
		race.acquire(cur.name, leaders[cur.name]) // back in line
		cur = next
	}
	log.check(t)
}

// Every way a term ends closes the lost channel promptly, leaves no session
// behind, and the instance can acquire again.
func TestLeaderLost(t *testing.T) {
	tests := map[string]struct {
		end func(t *testing.T, raw *api.Client, prefix string, l *consul.Leader)
		// reacquireWithin bounds the next Acquire (a lock-delay applies
		// after an invalidated session).
		reacquireWithin time.Duration
	}{
		"session destroyed": {
			end: func(t *testing.T, raw *api.Client, prefix string, _ *consul.Leader) {
				if _, err := raw.Session().Destroy(lockSession(t, raw, prefix), nil); err != nil {
					t.Fatalf("failed to destroy session: %v", err)
				}
			},
			reacquireWithin: lockDelay + slack,
		},
		"lock key deleted": {
			end: func(t *testing.T, raw *api.Client, prefix string, _ *consul.Leader) {
				if _, err := raw.KV().Delete(prefix+consul.DefaultLockKey, nil); err != nil {
					t.Fatalf("failed to delete the lock key: %v", err)
				}
			},
			reacquireWithin: slack,
		},
		"released": {
			end: func(t *testing.T, _ *api.Client, _ string, l *consul.Leader) {
				if err := l.Release(context.Background()); err != nil {
					t.Fatalf("Release: %v", err)
				}
			},
			reacquireWithin: slack,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			raw := rawClient(t)
			prefix := testPrefix(t, raw)
			inst := instanceName(prefix, "x")
			l := newClient(t, raw, consul.Config{Prefix: prefix, Instance: inst}).Leader()
			releaseOnCleanup(t, l)
			ctx := context.Background()

			lost, err := l.Acquire(ctx)
			if err != nil {
				t.Fatalf("Acquire: %v", err)
			}
			endAt := time.Now()
			tc.end(t, raw, prefix, l)
			lostAt := awaitClosed(t, lost, 2*time.Second, name)
			t.Logf("%s: lost channel closed after %v", name, lostAt.Sub(endAt).Round(time.Millisecond))
			eventuallyNoSessions(t, raw, inst, 5*time.Second)

			start := time.Now()
			actx, cancel := context.WithTimeout(ctx, tc.reacquireWithin)
			defer cancel()
			lost2, err := l.Acquire(actx)
			if err != nil {
				t.Fatalf("Acquire again: %v", err)
			}
			t.Logf("%s: acquired again after %v", name, time.Since(start).Round(time.Millisecond))
			select {
			case <-lost2:
				t.Errorf("new term's lost channel is closed")
			default:
			}
		})
	}
}

// An Acquire whose context ends returns at once, and leaves no session
// (its clean-up finishes in the background; Release waits for it).
func TestLeaderAcquireCancel(t *testing.T) {
	t.Parallel()
	raw := rawClient(t)
	prefix := testPrefix(t, raw)
	a := newClient(t, raw, consul.Config{Prefix: prefix, Instance: instanceName(prefix, "a")}).Leader()
	bName := instanceName(prefix, "b")
	b := newClient(t, raw, consul.Config{Prefix: prefix, Instance: bName}).Leader()
	releaseOnCleanup(t, a)
	releaseOnCleanup(t, b)

	if _, err := a.Acquire(context.Background()); err != nil {
		t.Fatalf("Acquire(a): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := b.Acquire(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire(b) with a held lock and an expiring context: %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 500*time.Millisecond+time.Second {
		t.Errorf("Acquire(b) returned %v after it began, want right after its 500ms context", d)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer rcancel()
	if err := b.Release(rctx); err != nil {
		t.Fatalf("Release(b) after a cancelled Acquire: %v", err)
	}
	if ids := sessionsOf(t, raw, bName); len(ids) != 0 {
		t.Errorf("sessions of b after its cancelled Acquire and Release: %v, want none", ids)
	}
	holder, err := a.Holder(context.Background())
	if err != nil || holder != instanceName(prefix, "a") {
		t.Errorf("Holder = %q, %v; want a", holder, err)
	}
}

// A holder in another process is killed (SIGKILL, no clean-up): Consul
// invalidates its session and the waiting instance takes over within
// about twice the TTL.
func TestLeaderTakeoverAfterKill(t *testing.T) {
	t.Parallel()
	raw := rawClient(t)
	prefix := testPrefix(t, raw)
	ctx := context.Background()

	holderName := instanceName(prefix, "doomed")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+holderName, holderPrefixEnv+"="+prefix)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("failed to pipe the holder's stdout: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("failed to start the holder process: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			if strings.TrimSpace(s.Text()) == holderAcquired {
				line <- holderAcquired
			}
		}
	}()
	select {
	case <-line:
	case <-time.After(15 * time.Second):
		t.Fatalf("the holder process did not acquire leadership within 15s; its stderr:\n%s", stderr.String())
	}
	sess := lockSession(t, raw, prefix)
	if sess == "" {
		t.Fatalf("lock key has no session while the holder process holds it")
	}

	wName := instanceName(prefix, "heir")
	w := newClient(t, raw, consul.Config{Prefix: prefix, Instance: wName}).Leader()
	releaseOnCleanup(t, w)
	race := newContest(t)
	results := race.results
	race.acquire(wName, w)
	select {
	case r := <-results:
		t.Fatalf("%s acquired leadership while the holder process was alive (err %v)", r.name, r.err)
	case <-time.After(time.Second):
	}

	killedAt := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("failed to kill the holder process: %v", err)
	}
	_ = cmd.Wait()
	bound := 2*ttl + lockDelay + slack
	r := await(t, results, bound+5*time.Second, "takeover after the holder was killed")
	takeover := r.at.Sub(killedAt)
	t.Logf("holder killed: takeover after %v (TTL %v; Consul invalidates 2×TTL after the last renewal, then lock-delay %v)",
		takeover.Round(time.Millisecond), ttl, lockDelay)
	if takeover > bound {
		t.Errorf("takeover after the holder was killed took %v, want under %v", takeover, bound)
	}
	if takeover < ttl {
		t.Errorf("takeover after %v: Consul cannot have invalidated a %v session that soon", takeover, ttl)
	}
	info, _, err := raw.Session().Info(sess, nil)
	if err != nil {
		t.Fatalf("failed to read the dead holder's session: %v", err)
	}
	if info != nil {
		t.Errorf("the dead holder's session %s still exists", sess)
	}
	holder, err := w.Holder(ctx)
	if err != nil || holder != wName {
		t.Errorf("Holder = %q, %v; want %q", holder, err, wName)
	}
}

// A holder whose link to Consul breaks: a 3s blip does not cost it
// leadership; an outage does, one TTL after its last renewal at most, and
// before another instance gets the lock.
func TestLeaderConsulUnreachable(t *testing.T) {
	t.Parallel()
	raw := rawClient(t)
	prefix := testPrefix(t, raw)
	ctx := context.Background()
	p := startProxy(t, consulTarget(t))
	pcfg := api.DefaultConfig()
	pcfg.Address = p.Addr()
	pcfg.Scheme = "http"
	viaProxy, err := api.NewClient(pcfg)
	if err != nil {
		t.Fatalf("failed to create the proxied api client: %v", err)
	}
	aName, bName := instanceName(prefix, "cut"), instanceName(prefix, "direct")
	a := newClient(t, viaProxy, consul.Config{Prefix: prefix, Instance: aName}).Leader()
	b := newClient(t, raw, consul.Config{Prefix: prefix, Instance: bName}).Leader()
	releaseOnCleanup(t, a)
	releaseOnCleanup(t, b)
	t.Cleanup(p.Restore) // runs before the releases (last registered, first run)

	var log terms
	lostA, err := a.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire(a): %v", err)
	}
	log.add(acquisition{name: aName, lost: lostA, at: time.Now()})
	sess := lockSession(t, raw, prefix)
	race := newContest(t)
	results := race.results
	race.acquire(bName, b)

	// A blip.
	p.Cut()
	time.Sleep(3 * time.Second)
	p.Restore()
	select {
	case <-lostA:
		t.Fatalf("a 3s blip cost the holder its leadership")
	case r := <-results:
		t.Fatalf("%s acquired leadership after a 3s blip (err %v)", r.name, r.err)
	case <-time.After(ttl):
	}
	if got := lockSession(t, raw, prefix); got != sess {
		t.Fatalf("lock session after the blip = %q, want %q", got, sess)
	}

	// An outage.
	cutAt := time.Now()
	p.Cut()
	lostAt := awaitClosed(t, lostA, ttl+slack, "Consul unreachable")
	r := await(t, results, 2*ttl+lockDelay+slack, "takeover after the holder lost Consul")
	log.add(r)
	t.Logf("Consul unreachable: holder gave up after %v, other instance took over after %v",
		lostAt.Sub(cutAt).Round(time.Millisecond), r.at.Sub(cutAt).Round(time.Millisecond))
	if d := lostAt.Sub(cutAt); d > ttl+time.Second {
		t.Errorf("holder gave up %v after losing Consul, want within one TTL (%v)", d, ttl)
	}
	if !lostAt.Before(r.at) {
		t.Errorf("other instance took over at %v, before the cut-off holder gave up at %v", r.at, lostAt)
	}
	log.check(t)
}
