package agent_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
	"github.com/pollux-nomad/pollux/jobs/agent"
	"github.com/pollux-nomad/pollux/jobs/jobstest"
	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/registry"
)

// fixture is a controller on the in-memory stand-ins, driven by a policy
// that allocates nothing: the agent's tests are about its configuration
// and leadership, not the rounds' decisions.
type fixture struct {
	t       *testing.T
	clock   *jobstest.Clock
	cluster *jobstest.Cluster
	kv      *jobstest.KV
	lock    *jobstest.Lock
	cfg     jobs.Config
}

// idle is a policy that allocates no GPUs.
type idle struct{}

func (idle) Name() string        { return "pollux" }
func (idle) Carry() policy.Carry { return nil }
func (idle) Optimize(context.Context, policy.Input) (policy.Allocations, error) {
	return policy.Allocations{}, nil
}

// newFixture returns stand-ins with the given nodes (id → GPUs), the lock
// held.
func newFixture(t *testing.T, nodes map[string]int) *fixture {
	t.Helper()
	clock := jobstest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	f := &fixture{
		t: t, clock: clock, cluster: jobstest.NewCluster(clock), kv: jobstest.NewKV(clock),
		lock: jobstest.NewLock(), cfg: jobs.DefaultConfig(),
	}
	if _, err := f.lock.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		if g, ok := nodes[id]; ok {
			f.cluster.AddNode(id, g)
		}
	}
	return f
}

// controller returns a new controller instance over the fixture's
// stand-ins, fenced by its lock.
func (f *fixture) controller(instance string) *jobs.Controller {
	f.t.Helper()
	c, err := jobs.New(f.cfg, jobs.Options{
		Cluster: f.cluster, KV: f.kv, Now: f.clock.Now, Instance: instance, Fence: f.lock.Verify,
		NewPolicy: func(string, registry.Settings) (policy.Policy, error) { return idle{}, nil },
		Traits:    registry.TraitsOf,
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

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

// runAgent runs the agent on the fixture with controller c until ctx ends;
// configs receives every configuration it handled, done its result.
func runAgent(ctx context.Context, f *fixture, c *jobs.Controller) (<-chan configured, <-chan error) {
	configs := make(chan configured, 10)
	done := make(chan error, 1)
	go func() {
		done <- agent.Run(ctx, agent.Options{
			Controller: c, Leadership: f.lock, KV: f.kv, Base: f.cfg, Clock: f.clock,
			OnConfig: func(cfg jobs.Config, err error) { configs <- configured{cfg, err} },
		})
	}()
	return configs, done
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
	configs, done := runAgent(ctx, f, c)
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

// TestAgentAutoscalingFromConsul: the autoscaling section may come from
// the configuration document in Consul; a document with a bad section
// (min above max, a band outside (0, 1), a node pool Nomad does not have)
// is refused with the field named, and the agent keeps the last good
// configuration, autoscaling included.
func TestAgentAutoscalingFromConsul(t *testing.T) {
	f := newFixture(t, map[string]int{"n1": 4})
	f.lock.Lose()
	c := f.controller("agent")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	configs, done := runAgent(ctx, f, c)
	put := func(doc string) configured {
		t.Helper()
		if err := f.kv.Put(ctx, contract.ConfigKey, []byte(doc)); err != nil {
			t.Fatal(err)
		}
		return next(t, configs)
	}
	good := `{"autoscaling": {"low": 0.4, "high": 0.7, "scale_down_delay": "1m", "pool": [{"name": "default", "gpus_per_node": 4, "min_nodes": 1, "max_nodes": 3}]}}`
	got := put(good)
	if got.err != nil {
		t.Fatalf("good document refused: %v", got.err)
	}
	a := c.Config().Autoscale
	if !a.Enabled || a.Scaler.Low != 0.4 || a.Scaler.High != 0.7 || a.Scaler.ScaleDownDelay != 60 || len(a.Scaler.Pools) != 1 || a.Scaler.Pools[0].MaxNodes != 3 || a.Scaler.Pools[0].MinNodes != 1 {
		t.Fatalf("autoscaling from consul: %+v", a)
	}
	for _, tc := range []struct{ doc, want string }{
		{`{"autoscaling": {"pool": [{"name": "default", "gpus_per_node": 4, "min_nodes": 5, "max_nodes": 2}]}}`, `autoscaling.pool "default".min_nodes: 5 exceeds max_nodes 2`},
		{`{"autoscaling": {"high": 1.5, "pool": [{"name": "default", "gpus_per_node": 4, "max_nodes": 2}]}}`, "autoscaling.high: 1.5 is outside (0, 1)"},
		{`{"autoscaling": {"low": 0, "pool": [{"name": "default", "gpus_per_node": 4, "max_nodes": 2}]}}`, "autoscaling.low: 0 is outside (0, 1)"},
		{`{"autoscaling": {"pool": [{"name": "gpu", "gpus_per_node": 4, "max_nodes": 2}]}}`, `autoscaling.pool "gpu": unknown node pool`},
		{`{"autoscaling": {"pool": [{"name": "default", "gpus_per_node": 4, "max_nodes": 2, "colour": 1}]}}`, `unknown field "colour"`},
		{`{"autoscaling": {}}`, "autoscaling: at least one pool is needed"},
	} {
		got := put(tc.doc)
		if got.err == nil || !strings.Contains(got.err.Error(), tc.want) {
			t.Errorf("%s:\n got %v\nwant %q", tc.doc, got.err, tc.want)
		}
		if cur := c.Config().Autoscale; !reflect.DeepEqual(cur, a) {
			t.Errorf("after %s the controller has %+v, want the last good %+v", tc.doc, cur, a)
		}
	}
	// Once Nomad has the pool, the same section is taken.
	f.cluster.AddNodePool("gpu")
	if got := put(`{"autoscaling": {"pool": [{"name": "gpu", "gpus_per_node": 8, "max_nodes": 2}]}}`); got.err != nil {
		t.Fatalf("known pool refused: %v", got.err)
	}
	if p := c.Config().Autoscale.Scaler.Pools; len(p) != 1 || p[0].Name != "gpu" || p[0].Template.GPUsPerNode != 8 {
		t.Errorf("pools %+v", p)
	}
	if got := put(`{"autoscaling": {"enabled": false}}`); got.err != nil || c.Config().Autoscale.Enabled {
		t.Errorf("enabled false: %+v, controller %+v", got, c.Config().Autoscale)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("agent: %v", err)
	}
}
