package e2e

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
)

// TestRescaleTwoJobs: two tagged jobs with
// metrics get rescaled; what Nomad actually placed (device IDs per node)
// matches the decision, one job spans both clients, and the output meta
// keys are set and consistent.
func TestRescaleTwoJobs(t *testing.T) {
	e := newEnv(t)
	// "wide" scales well and must hold at least 5 GPUs: with 4 per client
	// it has to span both.
	wide := e.registerJob("wide", map[string]string{"pollux_min_gpus": "5"})
	narrow := e.registerJob("narrow", map[string]string{"pollux_max_gpus": "2"})
	e.putMetrics(wide, e.profileDoc("cifar10", []int{1}, []int{2}, []int{4}, []int{4, 4}))
	e.putMetrics(narrow, e.profileDoc("cifar10", []int{1}, []int{2}))

	c := e.controller("e2e", nil)
	ctx := context.Background()
	t0 := time.Now()
	st, err := c.Round(ctx, true)
	if err != nil {
		t.Fatalf("round: %v", err)
	}
	t.Logf("round took %s (%v)", time.Since(t0), st.Timings)
	for _, id := range []string{wide, narrow} {
		js := jobStatus(t, st, id)
		if js.State != contract.StateScheduled || !js.Applied || js.Decision == nil {
			t.Fatalf("%s: %+v, want scheduled and applied", id, js)
		}
		want := parsePlacement(t, js.Decision.Placement)
		got := e.waitRunning(id, want)
		t.Logf("%s: decided %s, Nomad placed %v", id, js.Decision.Placement, got)
		if id == wide && len(got) != 2 {
			t.Errorf("%s runs on %d nodes, want both clients", id, len(got))
		}
		job, _, err := e.nomad.Jobs().Info(id, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkMeta(t, job.Meta, *js.Decision)
	}
}

// parsePlacement reads "node:gpus,node:gpus".
func parsePlacement(t *testing.T, s string) []jobs.NodeGPUs {
	t.Helper()
	var out []jobs.NodeGPUs
	for _, part := range splitNonEmpty(s, ',') {
		i := len(part) - 1
		for i >= 0 && part[i] != ':' {
			i--
		}
		g, err := strconv.Atoi(part[i+1:])
		if i < 0 || err != nil {
			t.Fatalf("bad placement %q", s)
		}
		out = append(out, jobs.NodeGPUs{Node: part[:i], GPUs: g})
	}
	return out
}

func splitNonEmpty(s string, sep byte) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == sep {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

// checkMeta: the output keys match the decision and are consistent:
// batch = micro-batch × replicas × (accumulation steps + 1), within bounds.
func checkMeta(t *testing.T, meta map[string]string, d contract.Decision) {
	t.Helper()
	num := func(k string) int {
		v, err := strconv.Atoi(meta[k])
		if err != nil {
			t.Errorf("meta %s = %q: %v", k, meta[k], err)
		}
		return v
	}
	b, m, s, r := num(contract.MetaBatchSize), num(contract.MetaLocalBsz), num(contract.MetaAccumSteps), num(contract.MetaNumReplicas)
	if b != m*r*(s+1) {
		t.Errorf("meta: batch %d != local %d x replicas %d x (accum %d + 1)", b, m, r, s)
	}
	if b < 128 || b > 4096 || m < 1 || m > 1024 {
		t.Errorf("meta: batch %d or micro-batch %d outside the job's bounds", b, m)
	}
	if b != d.BatchSize || r != d.NumReplicas || meta[contract.MetaPlacement] != d.Placement || num(contract.MetaNumNodes) != d.NumNodes {
		t.Errorf("meta %v does not match the decision %+v", meta, d)
	}
	if lr, err := strconv.ParseFloat(meta[contract.MetaLR], 64); err != nil || lr <= 0 {
		t.Errorf("meta lr %q", meta[contract.MetaLR])
	}
	if meta[contract.MetaRound] == "" {
		t.Error("meta pollux_round missing")
	}
}

// editingCluster makes an operator edit right before the controller's
// write, i.e. between its read and its write, through the real Nomad API.
type editingCluster struct {
	jobs.Cluster
	edit func()
}

func (c editingCluster) Apply(ctx context.Context, ch jobs.Change) (uint64, error) {
	c.edit()
	return c.Cluster.Apply(ctx, ch)
}

// TestOperatorEditIsKept: an operator's change between
// the controller's read and write is kept; the controller reports a
// conflict and decides again next round.
func TestOperatorEditIsKept(t *testing.T) {
	e := newEnv(t)
	id := e.registerJob("edited", nil)
	e.putMetrics(id, e.profileDoc("cifar10", []int{1}, []int{2}))
	edit := func() {
		job, _, err := e.nomad.Jobs().Info(id, nil)
		if err != nil {
			t.Errorf("operator read: %v", err)
			return
		}
		job.Meta["owner"] = "operator"
		if _, _, err := e.nomad.Jobs().Register(job, nil); err != nil {
			t.Errorf("operator write: %v", err)
		}
	}
	cfg := jobs.DefaultConfig()
	cfg.Device, cfg.KVPrefix, cfg.Population, cfg.Generations = e.device, e.prefix, 30, 30
	c, err := jobs.New(cfg, jobs.Options{Cluster: editingCluster{Cluster: e.cluster, edit: edit}, KV: e.kv, Logger: e.log})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Round(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	js := jobStatus(t, st, id)
	if !js.Conflict || js.Applied || st.Conflicts != 1 {
		t.Fatalf("status %+v: want a conflict and no apply", js)
	}
	job, _, err := e.nomad.Jobs().Info(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	if job.Meta["owner"] != "operator" || job.Meta[contract.MetaBatchSize] != "" {
		t.Errorf("job meta %v: want the operator's edit kept and no controller keys", job.Meta)
	}
	// Next round (no more edits): the controller decides again and applies.
	c2 := e.controller("e2e", nil)
	st, err = c2.Round(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	if js := jobStatus(t, st, id); !js.Applied {
		t.Errorf("second round: %+v, want applied", js)
	}
	job, _, err = e.nomad.Jobs().Info(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	if job.Meta["owner"] != "operator" {
		t.Errorf("the controller's write dropped the operator's meta key: %v", job.Meta)
	}
}

// TestBadJobsAreSkipped: a job with malformed meta and a
// job with garbage metrics are reported and skipped (the garbage one keeps
// being scheduled on defaults) while a good job is still served.
func TestBadJobsAreSkipped(t *testing.T) {
	e := newEnv(t)
	good := e.registerJob("good", nil)
	badMeta := e.registerJob("badmeta", map[string]string{"pollux_init_batch_size": "lots", "pollux_max_gpus": "-3"})
	garbage := e.registerJob("garbage", nil)
	e.putMetrics(good, e.profileDoc("cifar10", []int{1}, []int{2}))
	e.putMetrics(garbage, []byte(`{"version": 1, "profile": [{"step_time": NaN`))
	before, _, err := e.nomad.Jobs().Info(badMeta, nil)
	if err != nil {
		t.Fatal(err)
	}

	c := e.controller("e2e", nil)
	st, err := c.Round(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	bm := jobStatus(t, st, badMeta)
	if bm.State != contract.StateInvalid || bm.Error == "" {
		t.Errorf("bad meta job: %+v, want invalid with a reason", bm)
	}
	for _, key := range []string{"pollux_init_batch_size", "pollux_max_gpus"} {
		if !strings.Contains(bm.Error, key) {
			t.Errorf("reason %q does not name %s", bm.Error, key)
		}
	}
	gb := jobStatus(t, st, garbage)
	if gb.Error == "" || gb.State != contract.StateScheduled {
		t.Errorf("garbage metrics job: %+v, want scheduled on defaults with the metrics error shown", gb)
	}
	gd := jobStatus(t, st, good)
	if !gd.Applied || gd.Error != "" || gd.Decision == nil {
		t.Fatalf("good job: %+v, want applied", gd)
	}
	e.waitRunning(good, parsePlacement(t, gd.Decision.Placement))
	after, _, err := e.nomad.Jobs().Info(badMeta, nil)
	if err != nil {
		t.Fatal(err)
	}
	if *after.JobModifyIndex != *before.JobModifyIndex {
		t.Errorf("the invalid job was modified (JobModifyIndex %d -> %d)", *before.JobModifyIndex, *after.JobModifyIndex)
	}
	// The status document in Consul shows the same.
	raw, _, err := e.kv.Get(context.Background(), "status")
	if err != nil {
		t.Fatal(err)
	}
	var stored jobs.Status
	if err := json.Unmarshal(raw, &stored); err != nil {
		t.Fatal(err)
	}
	if jobStatus(t, &stored, badMeta).State != contract.StateInvalid {
		t.Errorf("status in consul does not report the invalid job")
	}
}

// TestRestartResumesFromState: a new controller (a
// restart or a new leader) resumes from the state in Consul: no refit of
// unchanged metrics, and no job whose allocation is unchanged is touched.
func TestRestartResumesFromState(t *testing.T) {
	e := newEnv(t)
	id := e.registerJob("resume", nil)
	e.putMetrics(id, e.profileDoc("cifar10", []int{1}, []int{2}, []int{4}))
	first := e.controller("first", nil)
	st, err := first.Round(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	js := jobStatus(t, st, id)
	if !js.Fitted || !js.Applied {
		t.Fatalf("first round: %+v, want fitted and applied", js)
	}
	e.waitRunning(id, parsePlacement(t, js.Decision.Placement))
	before, _, err := e.nomad.Jobs().Info(id, nil)
	if err != nil {
		t.Fatal(err)
	}

	second := e.controller("second", nil) // fresh memory, same Consul
	st, err = second.Round(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	js2 := jobStatus(t, st, id)
	if js2.Fitted {
		t.Error("the restarted controller refitted unchanged metrics instead of resuming from state")
	}
	if js2.Changed || js2.Applied {
		t.Errorf("the restarted controller changed the job: %+v (was %s)", js2, js.Decision.Placement)
	}
	after, _, err := e.nomad.Jobs().Info(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	if *after.JobModifyIndex != *before.JobModifyIndex {
		t.Errorf("job re-registered: JobModifyIndex %d -> %d", *before.JobModifyIndex, *after.JobModifyIndex)
	}
}

// TestRoundLatency measures one full round (snapshot, fit, optimise,
// apply, publish) against the real servers with 10 and 50 tagged jobs.
// It asserts that every job is served; the durations are logged for the
// evaluation docs (docs/evaluation.md), never asserted.
func TestRoundLatency(t *testing.T) {
	for _, n := range []int{10, 50} {
		t.Run(strconv.Itoa(n)+" jobs", func(t *testing.T) {
			e := newEnv(t)
			doc := e.profileDoc("cifar10", []int{1}, []int{2})
			ids := make([]string, n)
			for i := range ids {
				ids[i] = e.registerJob("lat", nil)
				e.putMetrics(ids[i], doc)
			}
			c := e.controller("latency", nil)
			for round := 1; round <= 3; round++ {
				t0 := time.Now()
				st, err := c.Round(context.Background(), true)
				if err != nil {
					t.Fatal(err)
				}
				served := 0
				for _, id := range ids {
					if js := jobStatus(t, st, id); js.State == contract.StateScheduled && js.Error == "" {
						served++
					}
				}
				if served != n {
					t.Errorf("round %d: %d of %d jobs scheduled without error", round, served, n)
				}
				t.Logf("%d jobs, round %d: %s wall (phases ms: %v)", n, round, time.Since(t0).Round(time.Millisecond), st.Timings)
			}
		})
	}
}
