package consul

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/pollux-nomad/pollux/contract"
)

const (
	// lockWaitTime bounds one blocking read of the API's lock loop. The
	// loop runs once takeKey holds the key and then returns at once; it
	// waits only if the key was lost in between. An abandoned loop
	// (cancelled Acquire) returns within about this.
	lockWaitTime = 5 * time.Second
	// monitorRetryTime is the pause between the lock monitor's retries
	// when Consul cannot be reached.
	monitorRetryTime = 2 * time.Second
	// cleanupLimit bounds the background clean-up of a lost or abandoned
	// term. It retries until the session is destroyed or Consul says it is
	// gone; past this limit an unrenewed session has long been invalidated
	// by Consul itself (2×TTL after its last renewal, once Consul runs).
	cleanupLimit = 10 * time.Minute
	// cleanupRetryMax bounds the pause between clean-up attempts, so that
	// a session left behind by an outage is destroyed within about this
	// much of Consul's return.
	cleanupRetryMax = 2 * time.Second
	// maxBackoff bounds the pause between failed acquisition attempts: a
	// waiting instance tries again within this much of Consul's return.
	maxBackoff = 2 * time.Second
	// lockDelayMargin is waited beyond the lock-delay, for the time between
	// the invalidation and its being seen.
	lockDelayMargin = 100 * time.Millisecond
)

// errSessionLost: the session could not be renewed within its TTL, or
// Consul no longer knows it.
var errSessionLost = errors.New("session lost")

// Leader is one controller instance's candidacy for the leader lock
// <prefix><lock key>. It implements jobs.Leadership with a Consul lock
// (api.LockOpts) held by a session of its own:
//
//   - the session has TTL Config.SessionTTL, behaviour "release" (the lock
//     is freed, not deleted, when the session ends), lock-delay
//     Config.LockDelay and Consul's default node health check; Leader
//     renews it every TTL/2 from its creation until the term ends;
//   - Acquire waits for the lock without limit (LockTryOnce false) and
//     retries after errors (Consul unreachable, ...) until its context
//     ends. It waits with blocking reads of its own that end with the
//     context, and takes the key as soon as it is free and any lock-delay
//     has passed; the API lock then adopts the key, monitors it and
//     unlocks it (left to itself, the API's loop would pause a fixed 5s on
//     every lock-delay);
//   - the lock monitor retries for about one TTL (MonitorRetries) when
//     Consul cannot be reached, so a brief blip does not drop leadership.
//
// The channel Acquire returns is closed when the term ends: the lock key
// no longer names the session (session destroyed or invalidated, key
// deleted), the session could not be renewed for one TTL since the last
// successful renewal (Consul unreachable), or Release was called. The key
// is then unlocked if it still names the session and the session is
// destroyed. A term that ended cannot be resumed: call Acquire again.
//
// No two holders at once: Consul grants the lock to one session at a time.
// A holder cut off from Consul gives up one TTL after its last renewal,
// while Consul invalidates the session no earlier than 2×TTL after it, so
// the old holder's channel closes before anyone else can hold the lock
// (assuming clocks that run at the same rate). When the session is
// destroyed or invalidated while the holder still reaches Consul, the
// lock-delay keeps the lock free for LockDelay, so that the old holder,
// told by the same blocking query as the others, stops first.
//
// Takeover times, with the defaults (TTL 10s, lock-delay 1s): after a
// Release, at once (milliseconds); after the holder's session is destroyed,
// the lock-delay (about 1.1s); after the holder dies, Consul invalidates its
// session 2×TTL after its last renewal, 1.5–2×TTL after the death as
// renewals come every TTL/2, and the lock-delay follows: 16–21s.
type Leader struct {
	c   *Client
	log hclog.Logger
	key string

	mu        sync.Mutex
	acquiring bool
	term      *term
	// pending is closed when an abandoned attempt has cleaned up.
	pending chan struct{}
}

// Leader returns a new candidacy for the leader lock with the client's
// configuration (SessionTTL, LockDelay, LockKey, Instance). Each Leader is
// an independent contender.
func (c *Client) Leader() *Leader {
	return &Leader{
		c:   c,
		log: c.cfg.Logger.Named("consul").Named("leader").With("instance", c.cfg.Instance),
		key: c.cfg.Prefix + c.cfg.LockKey,
	}
}

// Holder returns the instance name of the lock's current holder, or ""
// if no one holds it.
func (l *Leader) Holder(ctx context.Context) (string, error) {
	pair, _, err := l.c.kv.Get(l.key, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return "", fmt.Errorf("failed to read lock %q: %w", l.key, l.c.denied(err, "reading lock", l.key, false))
	}
	if pair == nil || pair.Session == "" {
		return "", nil
	}
	return string(pair.Value), nil
}

// ErrNotLeader: Verify found that this instance does not hold the lock.
var ErrNotLeader = errors.New("not the leader")

// Verify checks with a consistent read that the lock key is still held by
// this instance's current session. The controller calls it right before it
// changes jobs, so that a holder cut off from Consul (or one whose session
// was invalidated a moment ago) writes nothing it cannot vouch for. It
// returns an error wrapping ErrNotLeader when another session (or none)
// holds the key, and Consul's error when it cannot be read.
func (l *Leader) Verify(ctx context.Context) error {
	l.mu.Lock()
	t := l.term
	l.mu.Unlock()
	if t == nil || isClosed(t.lost) {
		return fmt.Errorf("failed to verify leadership: %w", ErrNotLeader)
	}
	ctx, cancel := context.WithTimeout(ctx, l.c.cfg.RequestTimeout)
	defer cancel()
	pair, _, err := l.c.kv.Get(l.key, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("failed to verify leadership: failed to read lock %q: %w", l.key, l.c.denied(err, "reading lock", l.key, false))
	}
	if pair == nil || pair.Session != t.session {
		return fmt.Errorf("failed to verify leadership: lock %q is not held by session %s: %w", l.key, t.session, ErrNotLeader)
	}
	return nil
}

// Term names one leadership term of this instance.
type Term struct {
	// Number is the lock key's LockIndex when the term began: Consul
	// increases it with every acquisition of the lock, so a later term
	// always has a larger number than an earlier one (a fencing token).
	Number uint64
	// Session is the Consul session that holds the lock.
	Session string
	// Instance is the holder's instance name.
	Instance string
	// Key is the lock's full key.
	Key string
}

// String renders the term as "<number>" for job meta and logs.
func (t Term) String() string { return fmt.Sprintf("%d", t.Number) }

// ErrLeaseExpired: the term's lease ran out (no renewal of the session
// succeeded for TTL minus the lease margin), so the holder may no longer
// act outside Consul although its term has not ended yet.
var ErrLeaseExpired = errors.New("leader lease expired")

// Term returns the term this instance holds, if any and not ended.
func (l *Leader) Term() (Term, bool) {
	l.mu.Lock()
	t := l.term
	l.mu.Unlock()
	if t == nil || isClosed(t.lost) {
		return Term{}, false
	}
	return t.info(), true
}

// Lease returns the current term and the end of its lease: the last
// successful renewal of its session (the time the renewal was sent, or the
// session's creation) plus the TTL, minus Config.LeaseMargin, read on the
// monotonic clock. Consul invalidates an unrenewed session no earlier than
// 2×TTL after its last renewal, and another instance then waits the
// lock-delay, so an instance that acts only while its lease holds acts
// before anyone else can hold the lock, unless it is paused between this
// check and its action for longer than TTL + LeaseMargin + LockDelay (the
// residual window no client-side check can close; see docs/reliability.md).
// It returns an error wrapping ErrNotLeader when no term is held or it
// ended, and one wrapping ErrLeaseExpired when the lease ran out.
func (l *Leader) Lease() (Term, time.Time, error) {
	l.mu.Lock()
	t := l.term
	l.mu.Unlock()
	if t == nil || isClosed(t.lost) || !t.held.Load() {
		return Term{}, time.Time{}, fmt.Errorf("no leader lease: %w", ErrNotLeader)
	}
	end := t.leaseEnd(l.c.cfg.LeaseMargin)
	if now := time.Now(); !now.Before(end) {
		return t.info(), end, fmt.Errorf("term %d: lease ended %v ago: %w", t.number, now.Sub(end).Round(time.Millisecond), ErrLeaseExpired)
	}
	return t.info(), end, nil
}

// LeaseEnd returns when the current term's lease ends (see Lease), or
// false when no term is held.
func (l *Leader) LeaseEnd() (time.Time, bool) {
	_, end, err := l.Lease()
	if errors.Is(err, ErrNotLeader) {
		return time.Time{}, false
	}
	return end, true
}

// Acquire blocks until this instance holds the lock, or ctx ends. The
// returned channel is closed when leadership is lost (see Leader). The
// lock outlives ctx: call Release to give it up. It is an error to call
// Acquire while holding the lock or while another Acquire of the same
// Leader is in progress.
func (l *Leader) Acquire(ctx context.Context) (<-chan struct{}, error) {
	l.mu.Lock()
	if l.acquiring {
		l.mu.Unlock()
		return nil, errors.New("failed to acquire leadership: another acquire is in progress")
	}
	if t := l.term; t != nil {
		select {
		case <-t.lost:
			l.term = nil
		default:
			l.mu.Unlock()
			return nil, errors.New("failed to acquire leadership: already held")
		}
	}
	l.acquiring = true
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.acquiring = false
		l.mu.Unlock()
	}()

	backoff := time.Second
	for {
		if err := l.waitPending(ctx); err != nil {
			return nil, fmt.Errorf("failed to acquire leadership: %w", err)
		}
		t, err := l.attempt(ctx)
		if err == nil {
			l.mu.Lock()
			l.term = t
			l.mu.Unlock()
			return t.lost, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("failed to acquire leadership: %w", ctx.Err())
		}
		if !retryable(err) {
			return nil, fmt.Errorf("failed to acquire leadership: %w", err)
		}
		l.log.Warn("failed to acquire leadership, retrying", "error", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("failed to acquire leadership: %w", ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// Release gives the lock up, if held: it unlocks the key (no lock-delay
// applies, so a waiting instance takes over at once), stops renewing and
// destroys the session. The channel Acquire returned is closed before the
// key is unlocked. It also waits for a cancelled Acquire's clean-up. An
// Acquire in progress is stopped by cancelling its context, not by
// Release.
func (l *Leader) Release(ctx context.Context) error {
	if err := l.waitPending(ctx); err != nil {
		return fmt.Errorf("failed to release leadership: %w", err)
	}
	l.mu.Lock()
	t := l.term
	l.term = nil
	l.mu.Unlock()
	if t == nil {
		return nil
	}
	select {
	case <-t.lost:
		// Lost earlier: its own clean-up runs or ran; wait for it.
		select {
		case <-t.done:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("failed to release leadership: %w", ctx.Err())
		}
	default:
	}
	if err := t.teardown(ctx, "released"); err != nil {
		return fmt.Errorf("failed to release leadership: %w", err)
	}
	return nil
}

// waitPending waits for an abandoned attempt's clean-up, if any.
func (l *Leader) waitPending(ctx context.Context) error {
	l.mu.Lock()
	p := l.pending
	l.mu.Unlock()
	if p == nil {
		return nil
	}
	select {
	case <-p:
		l.mu.Lock()
		if l.pending == p {
			l.pending = nil
		}
		l.mu.Unlock()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retryable reports whether an acquisition attempt that failed with err
// should be tried again: everything but a key used for something else and
// ACL refusals.
func retryable(err error) bool {
	if errors.Is(err, api.ErrLockConflict) || errors.Is(err, api.ErrLockHeld) || errors.Is(err, contract.ErrPermissionDenied) {
		return false
	}
	msg := err.Error()
	for _, s := range []string{"Permission denied", "ACL not found", "code: 403"} {
		if strings.Contains(msg, s) {
			return false
		}
	}
	return true
}

// lockResult is what api.Lock.Lock returned.
type lockResult struct {
	ch  <-chan struct{}
	err error
}

// attempt makes one acquisition attempt with a new session: it returns the
// term once the lock is held, or an error (the session is then cleaned up,
// in the background if the lock loop has yet to notice).
func (l *Leader) attempt(ctx context.Context) (*term, error) {
	cfg := l.c.cfg
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	id, _, err := l.c.api.Session().Create(&api.SessionEntry{
		Name:      "pollux leader " + cfg.Instance,
		TTL:       cfg.SessionTTL.String(),
		LockDelay: cfg.LockDelay,
		Behavior:  api.SessionBehaviorRelease,
	}, (&api.WriteOptions{}).WithContext(cctx))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("failed to create session: %w", Classify(err, "creating a session for the lock "+l.key, NeedSession))
	}
	t := newTerm(l, id, cfg.SessionTTL, start)
	lock, err := l.c.api.LockOpts(&api.LockOptions{
		Key:              l.key,
		Value:            []byte(cfg.Instance),
		Session:          id,
		MonitorRetries:   int(math.Ceil(float64(cfg.SessionTTL) / float64(monitorRetryTime))),
		MonitorRetryTime: monitorRetryTime,
		LockWaitTime:     lockWaitTime,
		LockTryOnce:      false,
	})
	if err != nil {
		t.cleanup("lock setup failed")
		return nil, fmt.Errorf("failed to create lock %q: %w", l.key, err)
	}
	t.lock = lock
	l.log.Debug("waiting for leadership", "session", id, "key", l.key)
	number, err := l.takeKey(ctx, t)
	if err != nil {
		l.abandon(t, nil, "wait for the lock ended")
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	t.held.Store(true) // the key names the session: teardown must free it
	t.number = number

	stop := make(chan struct{})
	res := make(chan lockResult, 1)
	go func() {
		ch, err := lock.Lock(stop)
		res <- lockResult{ch, err}
	}()
	select {
	case r := <-res:
		if r.err != nil || r.ch == nil {
			t.cleanup("lock failed")
			if r.err == nil {
				r.err = errors.New("lock loop stopped")
			}
			return nil, fmt.Errorf("failed to lock %q: %w", l.key, r.err)
		}
		t.held.Store(true)
		go t.watch(r.ch)
		l.log.Info("leadership acquired", "session", id, "key", l.key, "term", number, "wait", time.Since(start).Round(time.Millisecond))
		return t, nil
	case <-ctx.Done():
		close(stop)
		l.abandon(t, res, "acquire cancelled")
		return nil, ctx.Err()
	case <-t.sessionLost:
		close(stop)
		l.abandon(t, res, "session lost while waiting")
		return nil, errSessionLost
	}
}

// takeKey acquires the lock key for t's session with its own loop and
// returns the key's LockIndex once it names the session: it
// waits with blocking reads while another session holds the key and, when
// the key is free, tries to acquire it; a refusal while the key is free
// means a lock-delay is in force (a holder's session was invalidated), so
// it waits LockDelay and tries again. The API's lock loop, run next, then
// finds the key held by this session and only starts its monitor. Left to
// itself, that loop pauses a fixed 5s (api.DefaultLockRetryTime) whenever a
// lock-delay refuses it, which would add 5s to every takeover; and its
// blocking reads do not end with ctx, while these do.
func (l *Leader) takeKey(ctx context.Context, t *term) (uint64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-t.sessionLost:
			cancel()
		case <-ctx.Done():
		}
	}()
	fail := func(err error) (uint64, error) {
		if isClosed(t.sessionLost) {
			return 0, errSessionLost
		}
		return 0, err
	}
	var index uint64
	for {
		q := &api.QueryOptions{WaitIndex: index, WaitTime: time.Minute}
		pair, meta, err := l.c.kv.Get(l.key, q.WithContext(ctx))
		if err != nil {
			return fail(fmt.Errorf("failed to read lock %q: %w", l.key, l.c.denied(err, "reading lock", l.key, false)))
		}
		if pair != nil && pair.Flags != api.LockFlagValue {
			return 0, fmt.Errorf("failed to lock %q: %w", l.key, api.ErrLockConflict)
		}
		if pair != nil && pair.Session == t.session {
			return pair.LockIndex, nil
		}
		if pair != nil && pair.Session != "" {
			if indexWentBack(index, meta.LastIndex) {
				index = 0
			} else {
				index = clampIndex(meta.LastIndex)
			}
			continue
		}
		ok, _, err := l.c.kv.Acquire(&api.KVPair{
			Key:     l.key,
			Value:   []byte(l.c.cfg.Instance),
			Session: t.session,
			Flags:   api.LockFlagValue,
		}, (&api.WriteOptions{}).WithContext(ctx))
		if err != nil {
			return fail(fmt.Errorf("failed to acquire lock %q: %w", l.key, l.c.denied(err, "acquiring lock", l.key, true)))
		}
		if ok {
			// Read the term's number (the key's LockIndex) back; the next
			// loop finds the key held by this session and returns it.
			index = 0
			continue
		}
		// Refused: someone else was quicker, or a lock-delay is in force.
		pair, meta, err = l.c.kv.Get(l.key, (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			return fail(fmt.Errorf("failed to read lock %q: %w", l.key, l.c.denied(err, "reading lock", l.key, false)))
		}
		if pair != nil && pair.Session != "" {
			index = clampIndex(meta.LastIndex)
			continue
		}
		l.log.Debug("lock-delay in force, waiting", "lock_delay", l.c.cfg.LockDelay)
		select {
		case <-time.After(l.c.cfg.LockDelay + lockDelayMargin):
		case <-ctx.Done():
			return fail(ctx.Err())
		}
		index = 0
	}
}

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// abandon cleans an attempt up in the background, once its lock loop (if
// res is not nil) has returned, within lockWaitTime: it unlocks if the loop
// got the lock after all, and destroys the session. Acquire and Release
// wait for it.
func (l *Leader) abandon(t *term, res <-chan lockResult, reason string) {
	done := make(chan struct{})
	l.mu.Lock()
	l.pending = done
	l.mu.Unlock()
	go func() {
		defer close(done)
		if res != nil {
			if r := <-res; r.err == nil && r.ch != nil {
				t.held.Store(true)
			}
		}
		t.cleanup(reason)
	}()
}

// term is one session and, once acquired, the lock it holds.
type term struct {
	l       *Leader
	log     hclog.Logger
	session string
	lock    *api.Lock
	held    atomic.Bool
	// number is the lock's LockIndex when the term began.
	number uint64

	// leaseMu guards renewed and ttl: when the last successful renewal
	// was sent (monotonic clock) and the TTL Consul granted.
	leaseMu sync.Mutex
	renewed time.Time
	ttl     time.Duration

	stopRenew   context.CancelFunc
	renewDone   chan struct{}
	sessionLost chan struct{}
	loseOnce    sync.Once

	lost chan struct{}
	once sync.Once
	done chan struct{}
	err  error
}

// newTerm starts renewing session id, created at created with TTL ttl.
func newTerm(l *Leader, id string, ttl time.Duration, created time.Time) *term {
	ctx, cancel := context.WithCancel(context.Background())
	t := &term{
		l:           l,
		log:         l.log.With("session", id),
		session:     id,
		stopRenew:   cancel,
		renewDone:   make(chan struct{}),
		sessionLost: make(chan struct{}),
		lost:        make(chan struct{}),
		done:        make(chan struct{}),
		renewed:     created,
		ttl:         ttl,
	}
	go t.renew(ctx, ttl, created)
	return t
}

// renew renews the session every TTL/2 until ctx ends. If no renewal has
// succeeded for one TTL since the last success (or creation), or Consul
// says the session is gone, it closes sessionLost and stops. Consul itself
// invalidates the session only 2×TTL after the last renewal, so the holder
// always learns first.
func (t *term) renew(ctx context.Context, ttl time.Duration, last time.Time) {
	defer close(t.renewDone)
	sessions := t.l.c.api.Session()
	timer := time.NewTimer(ttl / 2)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		sent := time.Now()
		rctx, cancel := context.WithDeadline(ctx, last.Add(ttl))
		entry, _, err := sessions.Renew(t.session, (&api.WriteOptions{}).WithContext(rctx))
		cancel()
		if ctx.Err() != nil {
			return
		}
		wait := ttl / 2
		switch {
		case err == nil && entry == nil:
			t.loseSession("session no longer exists")
			return
		case err == nil:
			last = sent
			if d, perr := time.ParseDuration(entry.TTL); perr == nil && d > 0 {
				ttl = d
				wait = ttl / 2
			}
			t.leaseMu.Lock()
			t.renewed, t.ttl = sent, ttl
			t.leaseMu.Unlock()
		default:
			left := time.Until(last.Add(ttl))
			if left <= 0 {
				t.loseSession(fmt.Sprintf("session not renewed for %v: %v", ttl, err))
				return
			}
			t.log.Warn("failed to renew session", "error", err, "time_left", left.Round(time.Millisecond))
			wait = min(time.Second, left)
		}
		timer.Reset(wait)
	}
}

// info describes the term.
func (t *term) info() Term {
	return Term{Number: t.number, Session: t.session, Instance: t.l.c.cfg.Instance, Key: t.l.key}
}

// leaseEnd is the last successful renewal plus the TTL minus margin.
func (t *term) leaseEnd(margin time.Duration) time.Time {
	t.leaseMu.Lock()
	defer t.leaseMu.Unlock()
	return t.renewed.Add(t.ttl - margin)
}

// loseSession records that the session cannot be kept.
func (t *term) loseSession(reason string) {
	t.loseOnce.Do(func() {
		t.log.Warn("leader session lost", "reason", reason)
		close(t.sessionLost)
	})
}

// watch ends the term when the lock monitor reports the lock gone or the
// session is lost, unless Release ends it first.
func (t *term) watch(lockLost <-chan struct{}) {
	var reason string
	select {
	case <-lockLost:
		reason = "lock no longer held"
	case <-t.sessionLost:
		reason = "session lost"
	case <-t.lost:
		return
	}
	t.log.Warn("leadership lost", "reason", reason)
	t.cleanup(reason)
}

// cleanup tears the term down in the background: it retries until the
// session is destroyed or Consul says it is gone (within cleanupLimit), so
// that a session left over from an outage does not keep the lock once
// Consul answers again.
func (t *term) cleanup(reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupLimit)
	defer cancel()
	if err := t.teardown(ctx, reason); err != nil {
		t.log.Warn("failed to clean up leader session", "error", err)
	}
}

// unlock frees the key if it still names the session: with the API lock's
// Unlock once its loop has adopted the key, else (the attempt ended between
// taking the key and the loop's adopting it) with a plain release. Either
// way no lock-delay applies, unlike when the session is destroyed.
func (t *term) unlock(ctx context.Context) error {
	unlocked := make(chan error, 1)
	go func() {
		if t.lock == nil {
			unlocked <- api.ErrLockNotHeld
			return
		}
		unlocked <- t.lock.Unlock()
	}()
	var err error
	select {
	case err = <-unlocked:
	case <-ctx.Done():
		return ctx.Err()
	}
	if !errors.Is(err, api.ErrLockNotHeld) {
		return err
	}
	_, _, err = t.l.c.kv.Release(&api.KVPair{Key: t.l.key, Session: t.session, Flags: api.LockFlagValue}, (&api.WriteOptions{}).WithContext(ctx))
	return err
}

// teardown ends the term once: closes lost, unlocks the key if held, stops
// renewing and destroys the session, retrying (with pauses of up to
// cleanupRetryMax) until the session is destroyed or gone, or ctx ends.
// Later calls wait for the first.
func (t *term) teardown(ctx context.Context, reason string) error {
	t.once.Do(func() {
		close(t.lost)
		t.stopRenew()
		<-t.renewDone
		t.err = t.retryRelease(ctx)
		if t.held.Load() {
			t.log.Info("leadership ended", "reason", reason)
		} else {
			t.log.Debug("leader session ended", "reason", reason)
		}
		close(t.done)
	})
	select {
	case <-t.done:
		return t.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retryRelease unlocks the key (if held) and destroys the session until
// both succeed or the session is gone, or ctx ends.
func (t *term) retryRelease(ctx context.Context) error {
	wait := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := t.releaseOnce(ctx)
		if err == nil {
			if attempt > 1 {
				t.log.Info("leader session cleaned up", "attempts", attempt)
			}
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		t.log.Warn("failed to clean up leader session; retrying", "error", err, "attempt", attempt, "backoff", wait)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, cleanupRetryMax)
	}
}

// releaseOnce makes one attempt at unlocking and destroying the session.
// The attempt succeeds once the session is destroyed or Consul no longer
// knows it: with behaviour "release" its end frees the key (after the
// lock-delay, which only an unlock avoids).
func (t *term) releaseOnce(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, t.l.c.cfg.RequestTimeout)
	defer cancel()
	var unlockErr error
	if t.held.Load() {
		if unlockErr = t.unlock(rctx); unlockErr != nil {
			unlockErr = fmt.Errorf("failed to unlock %q: %w", t.l.key, unlockErr)
		}
	}
	_, err := t.l.c.api.Session().Destroy(t.session, (&api.WriteOptions{}).WithContext(rctx))
	if err == nil {
		if unlockErr != nil {
			t.log.Debug("session destroyed; the key is freed after the lock-delay", "error", unlockErr)
		}
		return nil
	}
	if entry, _, ierr := t.l.c.api.Session().Info(t.session, (&api.QueryOptions{}).WithContext(rctx)); ierr == nil && entry == nil {
		return nil
	}
	return errors.Join(unlockErr, fmt.Errorf("failed to destroy session %s: %w", t.session, err))
}
