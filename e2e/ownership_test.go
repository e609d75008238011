package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
	"github.com/pollux-nomad/pollux/nomad"
)

// ownedMeta are the job meta keys the controller writes (docs/contracts.md §1,
// pollux_submit_time, and the adapter's pollux_term and pollux_write);
// every other key is the author's.
var ownedMeta = []string{
	contract.MetaBatchSize, contract.MetaLocalBsz, contract.MetaAccumSteps, contract.MetaLR,
	contract.MetaNumReplicas, contract.MetaNumNodes, contract.MetaPlacement, contract.MetaRound,
	contract.MetaSubmitTime, contract.MetaTerm, contract.MetaWrite,
}

// richJob is a job with more than registerJob's: a constraint, group and
// task meta, task env, a sidecar task without a GPU, its own restart and
// disk settings. meta is the whole job meta block.
func (e *env) richJob(name string, meta map[string]string) string {
	e.t.Helper()
	id := fmt.Sprintf("%s-%d", name, rand.Uint32()%100000)
	job := nomadapi.NewBatchJob(id, id, "global", 50)
	job.Datacenters = []string{"*"}
	job.Meta = meta
	train := nomadapi.NewTask("train", "raw_exec").
		SetConfig("command", "/bin/sleep").
		SetConfig("args", []string{"600"})
	train.Env = map[string]string{"DATASET": "imagenet", "TEAM": "vision", "EPOCHS": "90"}
	train.Meta = map[string]string{"checkpoint_dir": "/ckpt/" + id}
	train.KillTimeout = ptr(7 * time.Second)
	train.Resources = &nomadapi.Resources{
		CPU: ptr(20), MemoryMB: ptr(24),
		Devices: []*nomadapi.RequestedDevice{{Name: e.device, Count: ptr(uint64(1))}},
	}
	side := nomadapi.NewTask("log-shipper", "raw_exec").
		SetConfig("command", "/bin/sleep").
		SetConfig("args", []string{"600"})
	side.Env = map[string]string{"SHIP_TO": "logs.internal:514"}
	side.Resources = &nomadapi.Resources{CPU: ptr(10), MemoryMB: ptr(16)}
	tg := nomadapi.NewTaskGroup("workers", 1).AddTask(train).AddTask(side)
	tg.Meta = map[string]string{"shard": "a"}
	tg.Constraints = []*nomadapi.Constraint{nomadapi.NewConstraint("${attr.kernel.name}", "=", "linux")}
	tg.RestartPolicy = &nomadapi.RestartPolicy{Attempts: ptr(0), Mode: ptr("fail")}
	tg.ReschedulePolicy = &nomadapi.ReschedulePolicy{Attempts: ptr(0), Unlimited: ptr(false)}
	tg.EphemeralDisk = &nomadapi.EphemeralDisk{SizeMB: ptr(160)}
	job.AddTaskGroup(tg)
	if _, _, err := e.nomad.Jobs().Register(job, nil); err != nil {
		e.t.Fatalf("register %s: %v", id, err)
	}
	e.jobs = append(e.jobs, id)
	return id
}

// authorMeta is a Pollux job's meta as its author wrote it.
func authorMeta(extra map[string]string) map[string]string {
	m := map[string]string{
		"pollux_enabled": "true", "pollux_init_batch_size": "128", "pollux_init_lr": "0.1",
		"pollux_max_batch_size": "4096", "pollux_local_bsz_min": "32", "pollux_local_bsz_max": "1024",
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func (e *env) jobInfo(id string) *nomadapi.Job {
	e.t.Helper()
	job, _, err := e.nomad.Jobs().Info(id, nil)
	if err != nil {
		e.t.Fatalf("job %s: %v", id, err)
	}
	return job
}

// rankName matches the name of a per-node copy of a group.
var rankName = regexp.MustCompile(`^(.*)-r[0-9]+$`)

// withoutOwned returns the job's spec without what Nomad itself changes
// on every register (indexes, version, submit time, status) and without
// the fields the controller owns: its meta keys, and in the worker group
// and its per-node copies the name suffix -rN, the count, the
// ${node.unique.id} pin, the group meta pollux_rank / pollux_node, a
// copy's scaling block and the device count of the GPU device. With
// device "" (a job the controller must not touch) only Nomad's own fields
// are dropped. It returns the job without groups and each group, as
// indented JSON.
func withoutOwned(t *testing.T, job *nomadapi.Job, device string) (string, []string) {
	t.Helper()
	raw, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	var j nomadapi.Job
	if err := json.Unmarshal(raw, &j); err != nil {
		t.Fatal(err)
	}
	j.Status, j.StatusDescription, j.Stable, j.Version, j.SubmitTime = nil, nil, nil, nil, nil
	j.CreateIndex, j.ModifyIndex, j.JobModifyIndex = nil, nil, nil
	var groups []string
	for _, g := range j.TaskGroups {
		if device == "" {
			b, err := json.MarshalIndent(g, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			groups = append(groups, string(b))
			continue
		}
		if _, ok := g.Meta[contract.MetaRank]; ok {
			if m := rankName.FindStringSubmatch(*g.Name); m != nil && g.Meta[contract.MetaRank] != "0" {
				g.Name = &m[1]
				g.Scaling = nil
			}
			delete(g.Meta, contract.MetaRank)
			delete(g.Meta, contract.MetaNode)
			g.Constraints = slices.DeleteFunc(g.Constraints, func(c *nomadapi.Constraint) bool {
				return c.LTarget == "${node.unique.id}" && c.Operand == "="
			})
		}
		if len(g.Constraints) == 0 {
			g.Constraints = nil
		}
		g.Count = nil
		for _, task := range g.Tasks {
			if task.Resources == nil {
				continue
			}
			for _, d := range task.Resources.Devices {
				if d.Name == device {
					d.Count = nil
				}
			}
		}
		b, err := json.MarshalIndent(g, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		groups = append(groups, string(b))
	}
	if device != "" {
		for _, k := range ownedMeta {
			delete(j.Meta, k)
		}
	}
	j.TaskGroups = nil
	b, err := json.MarshalIndent(&j, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b), groups
}

// lineDiff returns the lines that differ between a and b ("-" only in a,
// "+" only in b), by longest common subsequence; "" if equal.
func lineDiff(a, b string) string {
	if a == b {
		return ""
	}
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	l := make([][]int, len(x)+1)
	for i := range l {
		l[i] = make([]int, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				l[i][j] = l[i+1][j+1] + 1
			} else {
				l[i][j] = max(l[i+1][j], l[i][j+1])
			}
		}
	}
	var out strings.Builder
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			i, j = i+1, j+1
		case j < len(y) && (i == len(x) || l[i][j+1] >= l[i+1][j]):
			fmt.Fprintf(&out, "+ %s\n", y[j])
			j++
		default:
			fmt.Fprintf(&out, "- %s\n", x[i])
			i++
		}
	}
	return out.String()
}

// TestOwnership (access issue, part 3): the controller changes only jobs
// tagged pollux_enabled = "true", and in them only what it owns. Next to
// a tagged job it reallocates, an untagged job asking for a GPU and one
// with pollux_enabled = "false" keep their JobModifyIndex, version and
// spec over several rounds, and their GPUs are counted as used by others;
// in the tagged job every author meta key, unrelated key, constraint,
// task config, env, meta and resource but the GPU count is byte-identical
// after the reallocation.
func TestOwnership(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	untagged := e.richJob("untagged", map[string]string{"team": "other"})
	disabled := e.richJob("disabled", authorMeta(map[string]string{"pollux_enabled": "false", "team": "other"}))
	// At least 5 GPUs: the job must span both clients, so the worker group
	// gets a per-node copy.
	tagged := e.richJob("tagged", authorMeta(map[string]string{
		"pollux_min_gpus": "5", "team": "vision", "cost_center": "ml-research-42", "notes": "lr warmup 5 epochs; see wiki",
	}))
	e.putMetrics(tagged, e.profileDoc("cifar10", []int{1}, []int{2}, []int{4}, []int{4, 4}))

	// Everything runs as submitted, one GPU each.
	e.waitAsSubmitted(t, untagged, disabled, tagged)
	before := map[string]*nomadapi.Job{}
	for _, id := range []string{untagged, disabled, tagged} {
		before[id] = e.jobInfo(id)
	}

	// The adapter refuses to change a job that is not tagged.
	nodes, err := e.cluster.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	others := 0
	for _, n := range nodes {
		others += n.UsedByOthers
	}
	if others != 2 {
		t.Errorf("nodes count %d GPUs as used by others, want 2 (the untagged and the disabled job): %+v", others, nodes)
	}
	for _, id := range []string{untagged, disabled} {
		_, err := e.cluster.Apply(ctx, jobs.Change{Job: ref(id), JobModifyIndex: *before[id].JobModifyIndex,
			Placement: []jobs.NodeGPUs{{Node: nodes[0].ID, GPUs: 1}}, Meta: map[string]string{contract.MetaRound: "1"}})
		if !errors.Is(err, nomad.ErrNotManaged) {
			t.Errorf("Apply to %s: %v, want ErrNotManaged", id, err)
		}
	}

	// Several rounds; the first reallocates the tagged job.
	c := e.controller("ownership", nil)
	var placed []jobs.NodeGPUs
	for round := 1; round <= 4; round++ {
		st, err := c.Round(ctx, true)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for _, js := range st.Jobs {
			if js.Job == "default/"+untagged || js.Job == "default/"+disabled {
				t.Errorf("round %d: the controller considered %s: %+v", round, js.Job, js)
			}
		}
		if round == 1 {
			js := jobStatus(t, st, tagged)
			if !js.Applied || js.Decision == nil {
				t.Fatalf("round 1 did not reallocate %s: %+v", tagged, js)
			}
			placed = e.waitPlaced(t, tagged, 90*time.Second)
			t.Logf("round 1 reallocated %s: %s (GPUs used by others: %d)", tagged, js.Decision.Placement, others)
		}
		time.Sleep(time.Second)
	}
	if len(placed) != 2 {
		t.Errorf("tagged job placed on %v, want both clients", placed)
	}

	// The jobs that are not tagged: untouched.
	for _, id := range []string{untagged, disabled} {
		b, a := before[id], e.jobInfo(id)
		if *a.JobModifyIndex != *b.JobModifyIndex || *a.Version != *b.Version {
			t.Errorf("%s changed: JobModifyIndex %d -> %d, Version %d -> %d", id, *b.JobModifyIndex, *a.JobModifyIndex, *b.Version, *a.Version)
		}
		bj, bg := withoutOwned(t, b, "")
		aj, ag := withoutOwned(t, a, "")
		if d := lineDiff(bj+strings.Join(bg, "\n"), aj+strings.Join(ag, "\n")); d != "" {
			t.Errorf("%s spec changed:\n%s", id, d)
		}
		t.Logf("%s: JobModifyIndex %d, Version %d after 4 rounds (unchanged)", id, *a.JobModifyIndex, *a.Version)
	}
	if got, _ := e.devicesPerNode(ctx, untagged); len(got) != 1 || got[0].GPUs != 1 {
		t.Errorf("untagged job runs %v, want its 1 GPU", got)
	}

	// The tagged job: only the owned fields differ.
	b, a := before[tagged], e.jobInfo(tagged)
	if *a.Version <= *b.Version {
		t.Fatalf("tagged job not rewritten: version %d -> %d", *b.Version, *a.Version)
	}
	for k, v := range b.Meta {
		if a.Meta[k] != v {
			t.Errorf("meta %s: %q -> %q", k, v, a.Meta[k])
		}
	}
	var added []string
	for k := range a.Meta {
		if _, ok := b.Meta[k]; !ok {
			if !slices.Contains(ownedMeta, k) {
				t.Errorf("meta key %s = %q added, not one of the controller's", k, a.Meta[k])
			}
			added = append(added, k)
		}
	}
	slices.Sort(added)
	// Compared raw, the job did change (so the comparison below is not
	// vacuous): these are the owned fields it strips.
	rbj, rbg := withoutOwned(t, b, "")
	raj, rag := withoutOwned(t, a, "")
	raw := lineDiff(rbj+strings.Join(rbg, "\n"), raj+strings.Join(rag, "\n"))
	if raw == "" {
		t.Fatal("tagged job spec identical before and after the reallocation")
	}
	t.Logf("tagged job: %d changed lines in the raw spec", strings.Count(raw, "\n"))
	bj, bg := withoutOwned(t, b, e.device)
	aj, ag := withoutOwned(t, a, e.device)
	if d := lineDiff(bj, aj); d != "" {
		t.Errorf("tagged job: fields outside the controller's changed:\n%s", d)
	}
	if len(bg) != 1 || len(ag) != len(placed) {
		t.Fatalf("groups: %d before, %d after, want 1 and %d", len(bg), len(ag), len(placed))
	}
	for i, g := range ag {
		if d := lineDiff(bg[0], g); d != "" {
			t.Errorf("tagged job group %s (rank %d) differs from the submitted group outside the owned fields:\n%s", *a.TaskGroups[i].Name, i, d)
		}
	}
	t.Logf("tagged job: version %d -> %d, %d groups, meta keys added %v; every other field identical (%d lines of job, %d of group compared)",
		*b.Version, *a.Version, len(ag), added, strings.Count(bj, "\n")+1, strings.Count(bg[0], "\n")+1)
}
