package jobstest

import (
	"context"
	"sync"
	"time"
)

// Clock is a manual clock: Now stays put until Advance. It implements
// agent.Clock; pass its Now as the controller's clock.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []timer
	// added is closed (and replaced) whenever a timer is added.
	added chan struct{}
}

type timer struct {
	at time.Time
	ch chan time.Time
}

// NewClock returns a clock reading start.
func NewClock(start time.Time) *Clock {
	return &Clock{now: start, added: make(chan struct{})}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives the time once the clock has been
// advanced by d (at once if d ≤ 0).
func (c *Clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.timers = append(c.timers, timer{at: c.now.Add(d), ch: ch})
	close(c.added)
	c.added = make(chan struct{})
	return ch
}

// Advance moves the clock by d and fires the timers that are due.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.ch <- c.now
	}
	c.timers = kept
}

// WaitTimer blocks until someone waits on the clock for d from now (a
// timer due at Now()+d is pending), or ctx ends.
func (c *Clock) WaitTimer(ctx context.Context, d time.Duration) error {
	for {
		c.mu.Lock()
		due, added := c.now.Add(d), c.added
		found := false
		for _, t := range c.timers {
			found = found || t.at.Equal(due)
		}
		c.mu.Unlock()
		if found {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-added:
		}
	}
}
