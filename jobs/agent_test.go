package jobs_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
)

type configured struct {
	cfg jobs.Config
	err error
}

// next returns the next configuration the agent handled; the timeout
// only stops a broken test from hanging.
func next(t *testing.T, ch <-chan configured) configured {
	t.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("the agent handled no configuration document")
		return configured{}
	}
}

// TestAgentHotReload: the agent retries a failed watch of the
// configuration on its (injected) clock, loads a new document without a
// restart, and keeps the last good configuration when a document is bad.
func TestAgentHotReload(t *testing.T) {
	f := newFixture(t, map[string]int{"n1": 1})
	f.lock.Lose() // the agent takes the lock itself
	c := f.controller("agent")
	down := errors.New("consul down")
	f.kv.FailWith(func(op, key string) error {
		if op == "watch" && key == contract.ConfigKey {
			return down
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	configs := make(chan configured, 10)
	done := make(chan error, 1)
	go func() {
		done <- jobs.RunAgent(ctx, jobs.AgentOptions{
			Controller: c, Leadership: f.lock, KV: f.kv, Base: f.cfg, Clock: f.clock,
			OnConfig: func(cfg jobs.Config, err error) { configs <- configured{cfg, err} },
		})
	}()
	put := func(doc string) {
		if err := f.kv.Put(ctx, contract.ConfigKey, []byte(doc)); err != nil {
			t.Fatal(err)
		}
	}
	put(`{"interval": "10s"}`)
	// The failed watch is retried after a second on the agent's clock.
	if err := f.clock.WaitTimer(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	f.kv.FailWith(nil)
	f.clock.Advance(time.Second)
	if got := next(t, configs); got.err != nil || got.cfg.Interval != 10*time.Second || c.Config().Interval != 10*time.Second {
		t.Fatalf("first document: %+v, controller interval %s", got, c.Config().Interval)
	}
	for doc, field := range map[string]string{
		`{"interval": "soon"}`:   "interval",
		`{"interval": "10s"`:     "parse",
		`{"fairness_p": 0}`:      "fairness_p",
		`{"policy": "shortest"}`: "policy",
	} {
		put(doc)
		got := next(t, configs)
		if got.err == nil || !strings.Contains(got.err.Error(), field) || c.Config().Interval != 10*time.Second || c.Config().Policy != "pollux" {
			t.Fatalf("bad document %s: %+v; controller has %+v", doc, got, c.Config())
		}
	}
	put(`{"interval": "20s", "policy": "tiresias"}`)
	if got := next(t, configs); got.err != nil || c.Config().Interval != 20*time.Second || c.Config().Policy != "tiresias" {
		t.Fatalf("good document after bad ones: %+v, controller %+v", got, c.Config())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("agent: %v", err)
	}
}
