package nomad_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
	"github.com/pollux-nomad/pollux/nomad"
	"github.com/pollux-nomad/pollux/nomad/nomadtest"
)

// These tests run against the real local cluster (scripts/with-cluster.sh):
// two clients, client-1 and client-2, with 4 fake GPUs each.

// testWriter sends log lines to t.Log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// setup locks the cluster's GPUs for the test and returns an adapter and a
// raw API client (the "operator").
func setup(t *testing.T, cfg nomad.Config) (*nomad.Client, *api.Client) {
	t.Helper()
	raw := nomadtest.Client(t)
	nomadtest.Lock(t)
	if cfg.Device == "" {
		cfg.Device = nomadtest.Device()
	}
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Debug, Output: testWriter{t}})
	c, err := nomad.New(raw, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c, raw
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func ref(id string) jobs.JobRef { return jobs.JobRef{Namespace: "default", ID: id} }

// waitRunning waits until ReadJob reports want as the job's running
// placement, and returns that read.
func waitRunning(t *testing.T, c *nomad.Client, r jobs.JobRef, want []jobs.NodeGPUs) jobs.Job {
	t.Helper()
	var j jobs.Job
	nomadtest.WaitFor(t, 60*time.Second, "job "+r.ID+" to run "+placementString(want), func() (bool, string, error) {
		var err error
		j, err = c.ReadJob(context.Background(), r)
		if err != nil {
			return false, "", err
		}
		d := cmp.Diff(want, j.Running)
		if d != "" {
			return false, "placed (-want +got):\n" + d, nil
		}
		// Running counts pending allocations too (they hold their devices);
		// wait until the allocations really run.
		running := nomadtest.Devices(t, nomadtest.Client(t), r.Namespace, r.ID, os.Getenv("POLLUX_DEVICE"))
		for _, w := range want {
			if len(running[w.Node]) != w.GPUs {
				return false, fmt.Sprintf("node %s runs %d devices, want %d", w.Node, len(running[w.Node]), w.GPUs), nil
			}
		}
		return true, "", nil
	})
	return j
}

func placementString(p []jobs.NodeGPUs) string {
	var s []string
	for _, ng := range p {
		s = append(s, ng.Node[:8]+":"+string(rune('0'+ng.GPUs)))
	}
	return "[" + strings.Join(s, ",") + "]"
}

func TestNewRejectsBadDevice(t *testing.T) {
	for name, dev := range map[string]string{"empty": "", "empty part": "nvidia//gpu", "four parts": "a/b/c/d"} {
		t.Run(name, func(t *testing.T) {
			if _, err := nomad.New(&api.Client{}, nomad.Config{Device: dev}); err == nil {
				t.Fatalf("New(Device: %q) succeeded, want an error", dev)
			}
		})
	}
}

func TestListJobs(t *testing.T) {
	c, raw := setup(t, nomad.Config{})
	tagged := nomadtest.ID("list-tagged")
	untagged := nomadtest.ID("list-untagged")
	for _, j := range []*api.Job{nomadtest.Job(tagged, 1, true), nomadtest.Job(untagged, 1, false)} {
		*j.TaskGroups[0].Count = 0 // nothing to schedule
		nomadtest.Register(t, raw, j)
	}
	ctx := ctxFor(t, 60*time.Second)

	tests := map[string]struct {
		namespaces []string
		want       map[string]bool // job ID -> listed
	}{
		"all namespaces":    {nil, map[string]bool{tagged: true, untagged: false}},
		"default namespace": {[]string{"default"}, map[string]bool{tagged: true, untagged: false}},
		"other namespace":   {[]string{"other"}, map[string]bool{tagged: false, untagged: false}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			lc, err := nomad.New(raw, nomad.Config{Device: nomadtest.Device(), Namespaces: tc.namespaces})
			if err != nil {
				t.Fatal(err)
			}
			refs, index, err := lc.ListJobs(ctx, 0, 0)
			if err != nil {
				t.Fatalf("ListJobs: %v", err)
			}
			if index == 0 {
				t.Errorf("ListJobs returned index 0")
			}
			if !slices.IsSortedFunc(refs, func(a, b jobs.JobRef) int { return strings.Compare(a.String(), b.String()) }) {
				t.Errorf("ListJobs result not sorted: %v", refs)
			}
			got := map[string]bool{}
			for id := range tc.want {
				got[id] = slices.Contains(refs, ref(id))
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("listed (-want +got):\n%s", d)
			}
		})
	}

	t.Run("blocking query wakes on a new tagged job", func(t *testing.T) {
		_, index, err := c.ListJobs(ctx, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		late := nomadtest.ID("list-late")
		go func() {
			time.Sleep(500 * time.Millisecond)
			j := nomadtest.Job(late, 1, true)
			*j.TaskGroups[0].Count = 0
			if _, _, err := raw.Jobs().Register(j, nil); err != nil {
				t.Errorf("register %s: %v", late, err)
			}
		}()
		t.Cleanup(func() { nomadtest.Purge(t, raw, "default", late) })
		start := time.Now()
		for !t.Failed() {
			refs, next, err := c.ListJobs(ctx, index, 20*time.Second)
			if err != nil {
				t.Fatalf("ListJobs(%d): %v", index, err)
			}
			if slices.Contains(refs, ref(late)) {
				t.Logf("blocking ListJobs returned the new job %v after it was started (0.5 s of which before the register)", time.Since(start).Round(time.Millisecond))
				if time.Since(start) > 10*time.Second {
					t.Errorf("blocking query took %v, want it to wake on the change", time.Since(start))
				}
				return
			}
			if time.Since(start) > 20*time.Second {
				t.Fatalf("new tagged job %s not listed after %v", late, time.Since(start))
			}
			index = next
		}
	})
}

func TestReadJobProblems(t *testing.T) {
	c, raw := setup(t, nomad.Config{})
	ctx := ctxFor(t, 60*time.Second)
	tests := map[string]struct {
		edit    func(j *api.Job)
		problem string // substring; "" = none
	}{
		"one group": {func(*api.Job) {}, ""},
		"several groups, no pollux_group": {func(j *api.Job) {
			g := *j.TaskGroups[0]
			g.Name = new("ps")
			j.AddTaskGroup(&g)
		}, "task groups and no pollux_group"},
		"several groups, pollux_group names one": {func(j *api.Job) {
			g := *j.TaskGroups[0]
			g.Name = new("ps")
			j.AddTaskGroup(&g)
			j.Meta["pollux_group"] = "train"
		}, ""},
		"pollux_group names a missing group": {func(j *api.Job) {
			j.Meta["pollux_group"] = "workers"
		}, `group "workers" named by pollux_group does not exist`},
		"no device request of the configured type": {func(j *api.Job) {
			j.TaskGroups[0].Tasks[0].Resources.Devices[0].Name = "nvidia/gpu"
		}, "no device request of type " + nomadtest.Device()},
		"not tagged": {func(j *api.Job) {
			j.Meta["pollux_enabled"] = "false"
		}, nomad.ErrNotManaged.Error()},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			id := nomadtest.ID("problem")
			j := nomadtest.Job(id, 1, true)
			*j.TaskGroups[0].Count = 0
			tc.edit(j)
			index := nomadtest.Register(t, raw, j)
			got, err := c.ReadJob(ctx, ref(id))
			if err != nil {
				t.Fatalf("ReadJob: %v", err)
			}
			if tc.problem == "" && got.Problem != "" || !strings.Contains(got.Problem, tc.problem) {
				t.Errorf("Problem = %q, want %q", got.Problem, tc.problem)
			}
			if got.JobModifyIndex != index || got.Meta["pollux_enabled"] != j.Meta["pollux_enabled"] || got.Status == "" {
				t.Errorf("ReadJob = %+v, want index %d and the job's meta and status", got, index)
			}
			if got.Placement != nil || got.Running != nil {
				t.Errorf("Placement %v, Running %v: want none for an unshaped job of count 0", got.Placement, got.Running)
			}
			if time.Since(got.SubmitTime) > time.Minute || time.Since(got.SubmitTime) < 0 {
				t.Errorf("SubmitTime = %v, want about now", got.SubmitTime)
			}
			if tc.problem == "" {
				return
			}
			// A job with a problem is never written.
			_, err = c.Apply(ctx, jobs.Change{Job: ref(id), JobModifyIndex: index, Placement: []jobs.NodeGPUs{{Node: "x", GPUs: 1}}})
			if err == nil {
				t.Fatalf("Apply to a job with problem %q succeeded", tc.problem)
			}
			if after, _ := c.ReadJob(ctx, ref(id)); after.JobModifyIndex != index {
				t.Errorf("Apply changed the job (index %d -> %d) despite the problem", index, after.JobModifyIndex)
			}
		})
	}

	t.Run("missing job", func(t *testing.T) {
		missing := ref(nomadtest.ID("missing"))
		if _, err := c.ReadJob(ctx, missing); !errors.Is(err, contract.ErrNotFound) {
			t.Errorf("ReadJob(missing) error = %v, want ErrNotFound", err)
		}
		if _, err := c.Apply(ctx, jobs.Change{Job: missing, JobModifyIndex: 1}); !errors.Is(err, contract.ErrNotFound) {
			t.Errorf("Apply(missing) error = %v, want ErrNotFound", err)
		}
	})
	t.Run("invalid placement is refused", func(t *testing.T) {
		id := nomadtest.ID("invalid")
		j := nomadtest.Job(id, 1, true)
		*j.TaskGroups[0].Count = 0
		index := nomadtest.Register(t, raw, j)
		for name, p := range map[string][]jobs.NodeGPUs{
			"no node":   {{Node: "", GPUs: 1}},
			"zero GPUs": {{Node: "n", GPUs: 0}},
		} {
			if _, err := c.Apply(ctx, jobs.Change{Job: ref(id), JobModifyIndex: index, Placement: p}); err == nil {
				t.Errorf("%s: Apply(%v) succeeded, want an error", name, p)
			}
		}
		if after, _ := c.ReadJob(ctx, ref(id)); after.JobModifyIndex != index {
			t.Errorf("invalid placement written: index %d -> %d", index, after.JobModifyIndex)
		}
	})
	t.Run("untagged job is never written", func(t *testing.T) {
		id := nomadtest.ID("untagged")
		j := nomadtest.Job(id, 1, false)
		*j.TaskGroups[0].Count = 0
		index := nomadtest.Register(t, raw, j)
		_, err := c.Apply(ctx, jobs.Change{Job: ref(id), JobModifyIndex: index, Meta: map[string]string{"pollux_round": "1"}})
		if !errors.Is(err, nomad.ErrNotManaged) {
			t.Errorf("Apply(untagged) error = %v, want ErrNotManaged", err)
		}
		info, _, err := raw.Jobs().Info(id, nil)
		if err != nil {
			t.Fatal(err)
		}
		if *info.JobModifyIndex != index || info.Meta["pollux_round"] != "" {
			t.Errorf("untagged job changed: index %d -> %d, meta %v", index, *info.JobModifyIndex, info.Meta)
		}
	})
}

// TestApplyPlacement shapes one job over both clients, checks what Nomad
// really placed, moves it, and scales it to zero.
func TestApplyPlacement(t *testing.T) {
	for _, typ := range []string{"batch", "service"} {
		t.Run(typ, func(t *testing.T) { testApplyPlacement(t, typ) })
	}
}

func testApplyPlacement(t *testing.T, typ string) {
	c, raw := setup(t, nomad.Config{})
	ctx := ctxFor(t, 5*time.Minute)
	nodes := nomadtest.NodeIDs(t, raw)
	n1, n2 := nodes["client-1"], nodes["client-2"]
	id := nomadtest.ID("spread-" + typ)
	j := nomadtest.Job(id, 1, true)
	j.Type = &typ
	j.Meta["owner"] = "alice"
	nomadtest.Register(t, raw, j)
	r := ref(id)

	// Unshaped: one group, one GPU somewhere, no placement of the controller's.
	var first jobs.Job
	nomadtest.WaitFor(t, 60*time.Second, "the unshaped job to run", func() (bool, string, error) {
		var err error
		first, err = c.ReadJob(ctx, r)
		return err == nil && len(first.Running) == 1 && first.Running[0].GPUs == 1, "running " + placementString(first.Running), err
	})
	if first.Placement != nil || first.Problem != "" {
		t.Fatalf("unshaped job: Placement %v, Problem %q; want none", first.Placement, first.Problem)
	}

	steps := []struct {
		name      string
		placement []jobs.NodeGPUs
		groups    []string // task groups with count >= 1 afterwards
	}{
		{"spread 4+2 over both clients", []jobs.NodeGPUs{{Node: n1, GPUs: 4}, {Node: n2, GPUs: 2}}, []string{"train", "train-r1"}},
		{"move to 1 GPU on client-2", []jobs.NodeGPUs{{Node: n2, GPUs: 1}}, []string{"train"}},
		{"three ranks, two on client-1", []jobs.NodeGPUs{{Node: n2, GPUs: 3}, {Node: n1, GPUs: 2}, {Node: n1, GPUs: 1}}, []string{"train", "train-r1", "train-r2"}},
		{"scale to zero", nil, nil},
	}
	cur := first
	for round, step := range steps {
		meta := map[string]string{
			"pollux_batch_size":   "256",
			"pollux_num_replicas": "6",
			"pollux_placement":    "x",
			"pollux_round":        string(rune('1' + round)),
		}
		start := time.Now()
		index, err := c.Apply(ctx, jobs.Change{Job: r, JobModifyIndex: cur.JobModifyIndex, Placement: step.placement, Meta: meta})
		if err != nil {
			t.Fatalf("%s: Apply: %v", step.name, err)
		}
		if index <= cur.JobModifyIndex {
			t.Errorf("%s: Apply returned index %d, want > %d", step.name, index, cur.JobModifyIndex)
		}
		ok, reason, err := c.Placed(ctx, r, index)
		if err != nil || !ok {
			t.Fatalf("%s: Placed = %v, %q, %v; want ok", step.name, ok, reason, err)
		}
		want := mergeByNode(step.placement)
		cur = waitRunning(t, c, r, want)
		t.Logf("%s: applied and running in %v", step.name, time.Since(start).Round(time.Millisecond))

		if cur.JobModifyIndex != index {
			t.Errorf("%s: ReadJob index %d, Apply returned %d", step.name, cur.JobModifyIndex, index)
		}
		if d := cmp.Diff(step.placement, cur.Placement); d != "" {
			t.Errorf("%s: Placement read back (-want +got):\n%s", step.name, d)
		}
		// Meta: the change's keys set, the author's kept.
		wantMeta := maps.Clone(j.Meta)
		maps.Copy(wantMeta, meta)
		wantMeta["pollux_submit_time"] = first.SubmitTime.Format(time.RFC3339Nano)
		// The write's marker: term 0 (no lease), the change's round, a
		// digest of the change.
		if m := cur.Meta[contract.MetaWrite]; !strings.HasPrefix(m, "0/"+meta[contract.MetaRound]+"/") {
			t.Errorf("%s: pollux_write %q, want 0/%s/<digest>", step.name, m, meta[contract.MetaRound])
		}
		wantMeta[contract.MetaWrite] = cur.Meta[contract.MetaWrite]
		if d := cmp.Diff(wantMeta, cur.Meta); d != "" {
			t.Errorf("%s: meta (-want +got):\n%s", step.name, d)
		}
		if !cur.SubmitTime.Equal(first.SubmitTime) {
			t.Errorf("%s: SubmitTime %v, want the first submission %v", step.name, cur.SubmitTime, first.SubmitTime)
		}
		// The spec Apply cached as written reads the same as Nomad's copy.
		if _, _, err := c.ListJobs(ctx, 0, 0); err != nil {
			t.Fatal(err)
		}
		if !c.SpecCached(r) {
			t.Errorf("%s: the written spec is not cached at the listed index", step.name)
		}
		listed, err := c.ReadListed(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		// (Running and Started come from a shared allocation listing up to
		// a second old.)
		if d := cmp.Diff(cur, listed, cmpopts.IgnoreFields(jobs.Job{}, "Running", "Started")); d != "" {
			t.Errorf("%s: the cached spec reads differently from Nomad's (-nomad +cached):\n%s", step.name, d)
		}
		// Device IDs really allocated per node: distinct, of that node, as many as decided.
		devs := nomadtest.Devices(t, raw, "default", id, nomadtest.Device())
		for _, ng := range want {
			ids := devs[ng.Node]
			if len(ids) != ng.GPUs || len(slices.Compact(slices.Clone(ids))) != len(ids) {
				t.Errorf("%s: node %s holds devices %v, want %d distinct", step.name, ng.Node, ids, ng.GPUs)
			}
			prefix := "gpu-1-"
			if ng.Node == n2 {
				prefix = "gpu-2-"
			}
			for _, d := range ids {
				if !strings.HasPrefix(d, prefix) {
					t.Errorf("%s: node %s holds device %s, not one of its own", step.name, ng.Node, d)
				}
			}
		}
		if len(devs) != len(want) {
			t.Errorf("%s: devices held on %d nodes, want %d: %v", step.name, len(devs), len(want), devs)
		}
		// The spec: one pinned group per rank.
		info, _, err := raw.Jobs().Info(id, nil)
		if err != nil {
			t.Fatal(err)
		}
		var active []string
		for _, g := range info.TaskGroups {
			if *g.Count > 0 {
				active = append(active, *g.Name)
			}
		}
		if d := cmp.Diff(step.groups, active); d != "" {
			t.Errorf("%s: groups with count > 0 (-want +got):\n%s", step.name, d)
		}
		if want := max(1, len(step.placement)); len(info.TaskGroups) != want {
			t.Errorf("%s: job has %d task groups, want %d", step.name, len(info.TaskGroups), want)
		}
		for rank, ng := range step.placement {
			g := info.TaskGroups[rank]
			pins := 0
			for _, con := range g.Constraints {
				if con.LTarget == "${node.unique.id}" {
					pins++
					if con.RTarget != ng.Node {
						t.Errorf("%s: group %s pinned to %s, want %s", step.name, *g.Name, con.RTarget, ng.Node)
					}
				}
			}
			if pins != 1 || g.Meta["pollux_rank"] != string(rune('0'+rank)) || g.Meta["pollux_node"] != ng.Node {
				t.Errorf("%s: group %s: %d pins, meta %v; want one pin and rank %d on %s", step.name, *g.Name, pins, g.Meta, rank, ng.Node)
			}
		}
		// The newer API client loses nothing of the v1.6.1 job: re-planning
		// the job as read shows no difference.
		plan, _, err := raw.Jobs().Plan(info, true, nil)
		if err != nil {
			t.Fatalf("plan: %v", err)
		}
		if plan.Diff.Type != "None" {
			t.Errorf("%s: planning the job as read gives diff %q, want None", step.name, plan.Diff.Type)
		}
	}
}

// mergeByNode sums a placement per node, in first-appearance order, as
// Running reports it.
func mergeByNode(p []jobs.NodeGPUs) []jobs.NodeGPUs {
	var out []jobs.NodeGPUs
	at := map[string]int{}
	for _, ng := range p {
		if i, ok := at[ng.Node]; ok {
			out[i].GPUs += ng.GPUs
			continue
		}
		at[ng.Node] = len(out)
		out = append(out, ng)
	}
	return out
}

// TestApplyConflict: a write never overwrites a change made since the read.
func TestApplyConflict(t *testing.T) {
	c, raw := setup(t, nomad.Config{})
	ctx := ctxFor(t, 2*time.Minute)
	n1 := nomadtest.NodeIDs(t, raw)["client-1"]
	id := nomadtest.ID("conflict")
	j := nomadtest.Job(id, 1, true)
	*j.TaskGroups[0].Count = 0
	nomadtest.Register(t, raw, j)
	r := ref(id)
	read, err := c.ReadJob(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	change := jobs.Change{Job: r, Placement: []jobs.NodeGPUs{{Node: n1, GPUs: 1}}, Meta: map[string]string{"pollux_round": "7"}}

	t.Run("stale index", func(t *testing.T) {
		change.JobModifyIndex = read.JobModifyIndex - 1
		if _, err := c.Apply(ctx, change); !errors.Is(err, contract.ErrConflict) {
			t.Fatalf("Apply with a stale index: error %v, want ErrConflict", err)
		}
		after, err := c.ReadJob(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if after.JobModifyIndex != read.JobModifyIndex || after.Meta["pollux_round"] != "" {
			t.Errorf("job written despite the conflict: index %d -> %d, meta %v", read.JobModifyIndex, after.JobModifyIndex, after.Meta)
		}
	})

	t.Run("operator edit between read and apply is kept", func(t *testing.T) {
		// The operator changes the job after the controller read it.
		info, _, err := raw.Jobs().Info(id, nil)
		if err != nil {
			t.Fatal(err)
		}
		info.Meta["owner"] = "bob"
		info.TaskGroups[0].Tasks[0].Env = map[string]string{"EDITED": "yes"}
		if _, _, err := raw.Jobs().Register(info, nil); err != nil {
			t.Fatal(err)
		}
		change.JobModifyIndex = read.JobModifyIndex
		if _, err := c.Apply(ctx, change); !errors.Is(err, contract.ErrConflict) {
			t.Fatalf("Apply after an operator's edit: error %v, want ErrConflict", err)
		}
		info, _, err = raw.Jobs().Info(id, nil)
		if err != nil {
			t.Fatal(err)
		}
		if info.Meta["owner"] != "bob" || info.Meta["pollux_round"] != "" || info.TaskGroups[0].Tasks[0].Env["EDITED"] != "yes" {
			t.Fatalf("operator's edit lost or controller's write applied: meta %v env %v", info.Meta, info.TaskGroups[0].Tasks[0].Env)
		}
		// The next round reads again and applies on top of the edit.
		again, err := c.ReadJob(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		change.JobModifyIndex = again.JobModifyIndex
		if _, err := c.Apply(ctx, change); err != nil {
			t.Fatalf("Apply after re-reading: %v", err)
		}
		info, _, err = raw.Jobs().Info(id, nil)
		if err != nil {
			t.Fatal(err)
		}
		if info.Meta["owner"] != "bob" || info.Meta["pollux_round"] != "7" || info.TaskGroups[0].Tasks[0].Env["EDITED"] != "yes" {
			t.Errorf("after re-apply: meta %v env %v; want the edit and the controller's keys", info.Meta, info.TaskGroups[0].Tasks[0].Env)
		}
	})
}

// TestNodes: capacity per client, and the devices of jobs Pollux does not
// manage.
func TestNodes(t *testing.T) {
	c, raw := setup(t, nomad.Config{})
	ctx := ctxFor(t, 2*time.Minute)
	ids := nomadtest.NodeIDs(t, raw)

	// An untagged job holding 3 GPUs on client-2, a tagged one holding 2
	// on client-1 and 1 on client-2.
	other := nomadtest.ID("nodes-other")
	oj := nomadtest.Job(other, 3, false)
	oj.Constrain(api.NewConstraint("${node.unique.id}", "=", ids["client-2"]))
	nomadtest.Register(t, raw, oj)
	own := nomadtest.ID("nodes-own")
	read := jobs.Job{JobModifyIndex: nomadtest.Register(t, raw, nomadtest.Job(own, 1, true))}
	if _, err := c.Apply(ctx, jobs.Change{Job: ref(own), JobModifyIndex: read.JobModifyIndex,
		Placement: []jobs.NodeGPUs{{Node: ids["client-1"], GPUs: 2}, {Node: ids["client-2"], GPUs: 1}}}); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, c, ref(own), []jobs.NodeGPUs{{Node: ids["client-1"], GPUs: 2}, {Node: ids["client-2"], GPUs: 1}})
	nomadtest.WaitFor(t, 60*time.Second, "the untagged job to run", func() (bool, string, error) {
		d := nomadtest.Devices(t, raw, "default", other, nomadtest.Device())
		return len(d[ids["client-2"]]) == 3, "", nil
	})

	tests := map[string]struct {
		cfg  nomad.Config
		want []jobs.Node
	}{
		"all nodes": {nomad.Config{}, []jobs.Node{
			{ID: ids["client-1"], Name: "client-1", NodePool: "default", GPUs: 4, UsedByOthers: 0},
			{ID: ids["client-2"], Name: "client-2", NodePool: "default", GPUs: 4, UsedByOthers: 3, OtherJobs: []contract.OtherJob{{Job: other, GPUs: 3}}},
		}},
		"device given as type only": {nomad.Config{Device: "file"}, []jobs.Node{
			{ID: ids["client-1"], Name: "client-1", NodePool: "default", GPUs: 4, UsedByOthers: 0},
			{ID: ids["client-2"], Name: "client-2", NodePool: "default", GPUs: 4, UsedByOthers: 3, OtherJobs: []contract.OtherJob{{Job: other, GPUs: 3}}},
		}},
		"another device type": {nomad.Config{Device: "nvidia/gpu"}, []jobs.Node{
			{ID: ids["client-1"], Name: "client-1", NodePool: "default"},
			{ID: ids["client-2"], Name: "client-2", NodePool: "default"},
		}},
		"another node pool": {nomad.Config{NodePool: "gpu-pool"}, nil},
		"only another namespace managed: the tagged job counts as others'": {nomad.Config{Namespaces: []string{"other"}}, []jobs.Node{
			{ID: ids["client-1"], Name: "client-1", NodePool: "default", GPUs: 4, UsedByOthers: 2, OtherJobs: []contract.OtherJob{{Job: own, GPUs: 2}}},
			{ID: ids["client-2"], Name: "client-2", NodePool: "default", GPUs: 4, UsedByOthers: 4, OtherJobs: []contract.OtherJob{{Job: other, GPUs: 3}, {Job: own, GPUs: 1}}},
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if tc.cfg.Device == "" {
				tc.cfg.Device = nomadtest.Device()
			}
			nc, err := nomad.New(raw, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			got, err := nc.Nodes(ctx)
			if err != nil {
				t.Fatalf("Nodes: %v", err)
			}
			t.Logf("Nodes took %v", time.Since(start).Round(time.Microsecond))
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("Nodes (-want +got):\n%s", d)
			}
			// Given the round's job list, the same answer without listing again.
			refs, _, err := nc.ListJobs(ctx, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			got, err = nc.NodesFor(ctx, refs)
			if err != nil {
				t.Fatalf("NodesFor: %v", err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("NodesFor (-want +got):\n%s", d)
			}
		})
	}
}

// TestPlaced: a placement Nomad cannot satisfy is reported, not taken for
// success; it is placed once the devices are free.
func TestPlaced(t *testing.T) {
	c, raw := setup(t, nomad.Config{})
	ctx := ctxFor(t, 3*time.Minute)
	ids := nomadtest.NodeIDs(t, raw)
	n1 := ids["client-1"]

	hog := nomadtest.ID("placed-hog")
	hj := nomadtest.Job(hog, 3, false)
	hj.Constrain(api.NewConstraint("${node.unique.id}", "=", n1))
	nomadtest.Register(t, raw, hj)
	nomadtest.WaitFor(t, 60*time.Second, "the untagged job to hold 3 GPUs on client-1", func() (bool, string, error) {
		return len(nomadtest.Devices(t, raw, "default", hog, nomadtest.Device())[n1]) == 3, "", nil
	})

	tests := map[string]struct {
		placement []jobs.NodeGPUs
		reason    string
	}{
		"more GPUs than free on the node": {[]jobs.NodeGPUs{{Node: n1, GPUs: 2}}, "devices"},
		"more GPUs than the node has":     {[]jobs.NodeGPUs{{Node: n1, GPUs: 5}}, "devices"},
		"a node that does not exist":      {[]jobs.NodeGPUs{{Node: "00000000-0000-0000-0000-000000000000", GPUs: 1}}, "not placed"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			id := nomadtest.ID("placed")
			j := nomadtest.Job(id, 1, true)
			*j.TaskGroups[0].Count = 0
			index := nomadtest.Register(t, raw, j)
			index, err := c.Apply(ctx, jobs.Change{Job: ref(id), JobModifyIndex: index, Placement: tc.placement})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			ok, reason, err := c.Placed(ctx, ref(id), index)
			if err != nil {
				t.Fatalf("Placed: %v", err)
			}
			t.Logf("Placed answered in %v: ok=%v reason=%q", time.Since(start).Round(time.Millisecond), ok, reason)
			if ok || !strings.Contains(reason, tc.reason) {
				t.Errorf("Placed = %v, %q; want not ok with a reason mentioning %q", ok, reason, tc.reason)
			}
			got, err := c.ReadJob(ctx, ref(id))
			if err != nil {
				t.Fatal(err)
			}
			if got.Running != nil {
				t.Errorf("Running = %v for an unplaceable job", got.Running)
			}
		})
	}

	t.Run("placed once the devices are free", func(t *testing.T) {
		id := nomadtest.ID("placed-later")
		j := nomadtest.Job(id, 1, true)
		*j.TaskGroups[0].Count = 0
		index := nomadtest.Register(t, raw, j)
		index, err := c.Apply(ctx, jobs.Change{Job: ref(id), JobModifyIndex: index, Placement: []jobs.NodeGPUs{{Node: n1, GPUs: 4}}})
		if err != nil {
			t.Fatal(err)
		}
		if ok, reason, err := c.Placed(ctx, ref(id), index); ok || err != nil {
			t.Fatalf("Placed = %v, %q, %v; want not ok while the hog runs", ok, reason, err)
		}
		nomadtest.Purge(t, raw, "default", hog)
		waitRunning(t, c, ref(id), []jobs.NodeGPUs{{Node: n1, GPUs: 4}})
		if ok, reason, err := c.Placed(ctx, ref(id), index); !ok || err != nil {
			t.Errorf("Placed = %v, %q, %v after the blocked evaluation was placed; want ok", ok, reason, err)
		}
	})
}

// TestApplyKeepsOtherGroups: with pollux_group, only the worker group is
// reshaped; the job's other groups stay as they are.
func TestApplyKeepsOtherGroups(t *testing.T) {
	c, raw := setup(t, nomad.Config{})
	ctx := ctxFor(t, 2*time.Minute)
	ids := nomadtest.NodeIDs(t, raw)
	id := nomadtest.ID("groups")
	j := nomadtest.Job(id, 1, true)
	j.Meta["pollux_group"] = "train"
	ps := api.NewTaskGroup("ps", 1).AddTask(api.NewTask("server", "raw_exec").
		SetConfig("command", "/bin/sleep").SetConfig("args", []string{"3600"}).
		Require(&api.Resources{CPU: new(20), MemoryMB: new(16)}))
	j.TaskGroups = append([]*api.TaskGroup{ps}, j.TaskGroups...)
	index := nomadtest.Register(t, raw, j)
	r := ref(id)

	steps := []struct {
		name      string
		placement []jobs.NodeGPUs
		groups    []string
	}{
		{"spread", []jobs.NodeGPUs{{Node: ids["client-2"], GPUs: 1}, {Node: ids["client-1"], GPUs: 2}}, []string{"ps", "train", "train-r1"}},
		{"zero", nil, []string{"ps", "train"}},
	}
	for _, step := range steps {
		var err error
		index, err = c.Apply(ctx, jobs.Change{Job: r, JobModifyIndex: index, Placement: step.placement})
		if err != nil {
			t.Fatalf("%s: Apply: %v", step.name, err)
		}
		got := waitRunning(t, c, r, step.placement)
		if got.Problem != "" {
			t.Errorf("%s: Problem %q", step.name, got.Problem)
		}
		info, _, err := raw.Jobs().Info(id, nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, g := range info.TaskGroups {
			names = append(names, *g.Name)
		}
		if d := cmp.Diff(step.groups, names); d != "" {
			t.Errorf("%s: task groups (-want +got):\n%s", step.name, d)
		}
		g := info.LookupTaskGroup("ps")
		if *g.Count != 1 || len(g.Constraints) != 0 || len(g.Meta) != 0 {
			t.Errorf("%s: group ps changed: count %d, constraints %v, meta %v", step.name, *g.Count, g.Constraints, g.Meta)
		}
	}
}

// TestReadLatency measures what one controller round spends reading Nomad
// for 10 and 50 tagged jobs: ListJobs, ReadJob of each, Nodes.
func TestReadLatency(t *testing.T) {
	c, raw := setup(t, nomad.Config{})
	ctx := ctxFor(t, 2*time.Minute)
	var refs []jobs.JobRef
	for _, n := range []int{10, 50} {
		for len(refs) < n {
			id := nomadtest.ID("latency")
			j := nomadtest.Job(id, 1, true)
			*j.TaskGroups[0].Count = 0
			nomadtest.Register(t, raw, j)
			refs = append(refs, ref(id))
		}
		start := time.Now()
		listed, _, err := c.ListJobs(ctx, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		list := time.Since(start)
		for _, r := range refs {
			if !slices.Contains(listed, r) {
				t.Fatalf("ListJobs misses %s", r)
			}
		}
		start = time.Now()
		for _, r := range refs {
			if _, err := c.ReadJob(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		read := time.Since(start)
		start = time.Now()
		if _, err := c.Nodes(ctx); err != nil {
			t.Fatal(err)
		}
		nodes := time.Since(start)
		t.Logf("%d jobs: ListJobs %v, ReadJob x%d %v (%v each), Nodes %v", n,
			list.Round(time.Microsecond), n, read.Round(time.Microsecond), (read / time.Duration(n)).Round(time.Microsecond), nodes.Round(time.Microsecond))
	}
}

// TestNodePools: the adapter lists Nomad's node pools: the built-in "all"
// and "default", and one an operator created with no node in it yet (a
// pool the autoscaler grows from zero).
func TestNodePools(t *testing.T) {
	c, raw := setup(t, nomad.Config{})
	ctx := ctxFor(t, time.Minute)
	name := nomadtest.ID("pool")
	if _, err := raw.NodePools().Register(&api.NodePool{Name: name, Description: "pollux test pool"}, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = raw.NodePools().Delete(name, nil) })
	pools, err := c.NodePools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"all", "default", name} {
		if !slices.Contains(pools, want) {
			t.Errorf("NodePools() = %v, want %q among them", pools, want)
		}
	}
}
