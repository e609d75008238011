package agent

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// fakeLease is a lease whose end the test moves.
type fakeLease struct {
	mu   sync.Mutex
	end  time.Time
	held bool
	asks int
}

func (f *fakeLease) LeaseEnd() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asks++
	return f.end, f.held
}

func (f *fakeLease) set(end time.Time, held bool) {
	f.mu.Lock()
	f.end, f.held = end, held
	f.mu.Unlock()
}

// watchLease stops the rounds once the lease has ended without renewal,
// keeps them while it is renewed, and stops at once without a term.
func TestWatchLease(t *testing.T) {
	log := hclog.NewNullLogger()
	t.Run("renewed, then not", func(t *testing.T) {
		f := &fakeLease{}
		f.set(time.Now().Add(30*time.Millisecond), true)
		stopped := make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go watchLease(ctx, f, func() { close(stopped) }, log)
		// Renew twice before the end; then let it run out.
		for i := 0; i < 2; i++ {
			time.Sleep(15 * time.Millisecond)
			f.set(time.Now().Add(30*time.Millisecond), true)
		}
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
			t.Fatal("rounds not stopped after the lease ended")
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if !time.Now().After(f.end) {
			t.Errorf("stopped before the lease's end")
		}
	})
	t.Run("no term", func(t *testing.T) {
		f := &fakeLease{}
		stopped := make(chan struct{})
		go watchLease(context.Background(), f, func() { close(stopped) }, log)
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
			t.Fatal("rounds not stopped without a term")
		}
	})
	t.Run("term over first", func(t *testing.T) {
		f := &fakeLease{}
		f.set(time.Now().Add(time.Hour), true)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			watchLease(ctx, f, func() { t.Error("stopped although the lease holds") }, log)
			close(done)
		}()
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("watcher still running after its context ended")
		}
	})
}
