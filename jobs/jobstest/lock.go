package jobstest

import (
	"context"
	"errors"
	"sync"
)

// ErrLockLost is what Verify returns once the lock was lost.
var ErrLockLost = errors.New("leader lock lost")

// Lock is a leader lock for one contender at a time (Verify does not
// tell holders apart). It implements jobs.Leadership; Verify is the
// controller's fence.
type Lock struct {
	mu    sync.Mutex
	held  bool
	lost  chan struct{}
	freed chan struct{}
}

// NewLock returns a free lock.
func NewLock() *Lock { return &Lock{freed: make(chan struct{})} }

// Acquire blocks until the lock is free and takes it, or ctx ends. The
// returned channel is closed when the lock is lost.
func (l *Lock) Acquire(ctx context.Context) (<-chan struct{}, error) {
	for {
		l.mu.Lock()
		if !l.held {
			l.held = true
			l.lost = make(chan struct{})
			lost := l.lost
			l.mu.Unlock()
			return lost, nil
		}
		freed := l.freed
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-freed:
		}
	}
}

// Release gives the lock up.
func (l *Lock) Release(ctx context.Context) error {
	l.drop()
	return nil
}

// Lose takes the lock away from its holder (its session expired, say):
// the holder's channel is closed and Verify fails.
func (l *Lock) Lose() { l.drop() }

func (l *Lock) drop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held {
		return
	}
	l.held = false
	close(l.lost)
	close(l.freed)
	l.freed = make(chan struct{})
}

// Verify reports whether the lock is still held (the controller's fence).
func (l *Lock) Verify(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held {
		return ErrLockLost
	}
	return nil
}

// Held reports whether someone holds the lock.
func (l *Lock) Held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held
}
