package e2e

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
	"github.com/pollux-nomad/pollux/jobs/agent"
)

// TestHostileInputs: jobs with hostile meta and metrics next to a good
// job, on the real cluster. Each hostile one is reported with the key or
// field that is wrong and left untouched (or scheduled on defaults, for
// bad metrics); the good job is served as usual; nothing crashes.
func TestHostileInputs(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("x", 64<<10)
	metaCases := []struct {
		name string
		meta map[string]string
		key  string // the key the reason must name
	}{
		{"huge", map[string]string{"pollux_init_batch_size": "1e300"}, "pollux_init_batch_size"},
		{"overflow", map[string]string{"pollux_max_batch_size": "99999999999999999999999"}, "pollux_max_batch_size"},
		{"negative", map[string]string{"pollux_min_gpus": "-4"}, "pollux_min_gpus"},
		{"nan", map[string]string{"pollux_init_lr": "NaN"}, "pollux_init_lr"},
		{"inf", map[string]string{"pollux_init_lr": "+Inf"}, "pollux_init_lr"},
		{"long", map[string]string{"pollux_lr_scaling": long}, "pollux_lr_scaling"},
		{"minmax", map[string]string{"pollux_min_gpus": "8", "pollux_max_gpus": "2"}, "pollux_max_gpus"},
	}
	metaJobs := map[string]string{}
	for _, mc := range metaCases {
		metaJobs[mc.name] = e.registerJob("meta-"+mc.name, mc.meta)
	}
	good := e.registerJob("good", nil)
	e.putMetrics(good, e.profileDoc("cifar10", []int{1}, []int{2}))

	valid := string(e.profileDoc("cifar10", []int{1}))
	many := `{"version":1,"timestamp":"2026-12-02T13:00:00Z","batch_size":128,"progress":1,"grad_sqr":1,"grad_var":1,"profile":[` +
		strings.Repeat(`{"num_nodes":1,"num_replicas":1,"local_bsz":32,"accum_steps":0,"compute_time":0.1,"step_time":0.1,"sync_time":0,"count":1},`, 4096) +
		`{"num_nodes":1,"num_replicas":1,"local_bsz":32,"accum_steps":0,"compute_time":0.1,"step_time":0.1,"sync_time":0,"count":1}]}`
	metricsCases := []struct {
		name, doc, field string
	}{
		{"truncated", valid[:len(valid)/2], "metrics"},
		{"version", strings.Replace(valid, `"version":1`, `"version":7`, 1), "version"},
		{"absurd", strings.Replace(valid, `"grad_sqr":`, `"grad_sqr":-1e308,"x":`, 1), ""},
		{"entries", many, "profile"},
		{"empty", `{}`, ""},
	}
	metricsJobs := map[string]string{}
	for _, mc := range metricsCases {
		id := e.registerJob("metrics-"+mc.name, map[string]string{"pollux_max_gpus": "1"})
		e.putMetrics(id, []byte(mc.doc))
		metricsJobs[mc.name] = id
	}
	// A document over Consul's 512 KiB value limit is refused before it
	// reaches Consul, with the reason.
	if err := e.kv.Put(context.Background(), "jobs/default/"+good+"/metrics-big", make([]byte, 600<<10)); err == nil || !strings.Contains(err.Error(), "524288") {
		t.Errorf("a 600 KiB value: err %v, want a refusal naming the 524288-byte limit", err)
	}
	before := map[string]uint64{}
	for _, id := range metaJobs {
		before[id] = e.modifyIndex(id)
	}

	c := e.controller("e2e", nil)
	st, err := c.Round(context.Background(), true)
	if err != nil {
		t.Fatalf("round: %v", err)
	}
	for _, mc := range metaCases {
		id := metaJobs[mc.name]
		js := jobStatus(t, st, id)
		if js.State != contract.StateInvalid || !strings.Contains(js.Error, mc.key) {
			t.Errorf("%s: %+v, want invalid naming %s", mc.name, js, mc.key)
		}
		if len(js.Error) > 4096 {
			t.Errorf("%s: reason is %d bytes long; a hostile value must be cut", mc.name, len(js.Error))
		}
		if got := e.modifyIndex(id); got != before[id] {
			t.Errorf("%s: the invalid job was changed (index %d -> %d)", mc.name, before[id], got)
		}
	}
	for _, mc := range metricsCases {
		js := jobStatus(t, st, metricsJobs[mc.name])
		if js.State != contract.StateScheduled || js.Error == "" || (mc.field != "" && !strings.Contains(js.Error, mc.field)) {
			t.Errorf("metrics %s: %+v, want scheduled on defaults with a reason naming %q", mc.name, js, mc.field)
		} else {
			t.Logf("metrics %s: %s", mc.name, js.Error)
		}
	}
	gd := jobStatus(t, st, good)
	if !gd.Applied || gd.Error != "" || gd.Decision == nil {
		t.Fatalf("good job: %+v, want applied", gd)
	}
	e.waitRunning(good, parsePlacement(t, gd.Decision.Placement))
}

// TestHostileConfig: invalid configuration documents in Consul while the
// agent runs. Each is refused with the field named, the last good
// configuration stays in force, rounds go on, and a valid document is
// taken up.
func TestHostileConfig(t *testing.T) {
	e := newEnv(t)
	id := e.registerJob("cfg", nil)
	e.putMetrics(id, e.profileDoc("cifar10", []int{1}))
	c := e.controller("agent", nil)
	base := c.Config()
	var rounds atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- agent.Run(ctx, agent.Options{
			Controller: c, Leadership: e.kv.Leader(), KV: e.kv, Logger: e.log, Base: base,
			OnRound: func(*jobs.Status) { rounds.Add(1) },
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	}()
	waitRounds := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for rounds.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("only %d rounds, want %d", rounds.Load(), n)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitRounds(1)
	for _, doc := range []string{
		`{"interval": "10s", "fairness_p": 0}`,
		`{"interval": "soon"}`,
		`{"interval": "-5s"}`,
		`{"intervall": "10s"}`,
		`{"ga": {"population": 1e12}}`,
		`{"fairness_p": "minus one"}`,
		`{"interval": "10s"} trailing`,
		`not json at all`,
		strings.Repeat(`{"a":`, 10000),
	} {
		if err := e.kv.Put(context.Background(), contract.ConfigKey, []byte(doc)); err != nil {
			t.Fatal(err)
		}
		n := rounds.Load()
		time.Sleep(500 * time.Millisecond) // the watcher sees it
		waitRounds(n + 1)
		if got := c.Config(); !reflect.DeepEqual(got, base) {
			t.Fatalf("configuration changed after the invalid document %.40q: %+v", doc, got)
		}
	}
	if err := e.kv.Put(context.Background(), contract.ConfigKey, []byte(`{"fairness_p": -2}`)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.Config().FairnessP != -2 {
		if time.Now().After(deadline) {
			t.Fatalf("valid configuration not taken up: %+v", c.Config())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Log(fmt.Sprintf("rounds during the test: %d; every invalid document refused", rounds.Load()))
}
