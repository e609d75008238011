package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/pollux-nomad/pollux/jobs"
)

// python is the interpreter with PyTorch and scikit-learn (Debian's
// python3-torch and python3-sklearn install for /usr/bin/python3).
const python = "/usr/bin/python3"

// trainEvent is one line the training script (deploy/examples/train_digits.py)
// appends to its TRAIN_LOG.
type trainEvent struct {
	Event          string   `json:"event"`
	T              float64  `json:"t"`
	Rank           int      `json:"rank"`
	PID            int      `json:"pid"`
	World          int      `json:"world"`
	RankSum        float64  `json:"rank_sum"`
	Round          int64    `json:"round"`
	FinishedEpochs int      `json:"finished_epochs"`
	Step           int      `json:"step"`
	Epoch          int      `json:"epoch"`
	BatchSize      int      `json:"batch_size"`
	FullBatchSize  int      `json:"full_batch_size"`
	LocalBsz       int      `json:"local_bsz"`
	AccumSteps     int      `json:"accum_steps"`
	LR             float64  `json:"lr"`
	BaseLR         float64  `json:"base_lr"`
	GradVar        *float64 `json:"grad_var"`
	ValAcc         float64  `json:"val_acc"`
	ProcessStart   float64  `json:"process_start"`
	LauncherStart  float64  `json:"launcher_start"`
	Imported       float64  `json:"imported"`
}

func (ev trainEvent) time() time.Time {
	return time.Unix(0, int64(ev.T*1e9))
}

func readTrainLog(t *testing.T, path string) []trainEvent {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []trainEvent
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var ev trainEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue // a line being written
		}
		out = append(out, ev)
	}
	return out
}

func requireTorch(t *testing.T) {
	t.Helper()
	if out, err := exec.Command(python, "-c", "import torch, sklearn").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import torch and sklearn (apt-get install python3-torch python3-sklearn): %v\n%s", python, err, out)
	}
}

// torchJob builds a raw_exec Pollux job whose task is the launcher running
// the digits example: each fake GPU is one CPU training process.
func (e *env) torchJob(id, dir string, epochs int, meta map[string]string) *nomadapi.Job {
	root := repoRoot(e.t)
	m := map[string]string{
		"pollux_enabled": "true", "pollux_init_batch_size": "64", "pollux_init_lr": "0.05",
		"pollux_max_batch_size": "512", "pollux_local_bsz_min": "8", "pollux_local_bsz_max": "64",
		"pollux_lr_scaling": "sqrt",
	}
	for k, v := range meta {
		m[k] = v
	}
	job := nomadapi.NewBatchJob(id, id, "global", 50)
	job.Datacenters = []string{"*"}
	job.Meta = m
	task := nomadapi.NewTask("train", "raw_exec").
		SetConfig("command", python).
		SetConfig("args", []string{"-m", "pollux.torch.launch", "--rendezvous-timeout", "60", "--grace", "20",
			"--preload", "torch,sklearn.datasets",
			filepath.Join(root, "deploy", "examples", "train_digits.py"),
			"--epochs", fmt.Sprint(epochs), "--step-delay", "0.1"})
	task.Env = map[string]string{
		"PYTHONPATH":             filepath.Join(root, "worker", "python"),
		"CONSUL_HTTP_ADDR":       os.Getenv("CONSUL_HTTP_ADDR"),
		"POLLUX_KV_PREFIX":       e.prefix,
		"POLLUX_CHECKPOINT_DIR":  filepath.Join(dir, "checkpoints"),
		"POLLUX_REPORT_INTERVAL": "2",
		"TRAIN_LOG":              filepath.Join(dir, "train.jsonl"),
		"OMP_NUM_THREADS":        "1",
	}
	task.KillTimeout = ptr(20 * time.Second) // time to finish the step and checkpoint
	task.Resources = &nomadapi.Resources{
		CPU: ptr(50), MemoryMB: ptr(64),
		Devices: []*nomadapi.RequestedDevice{{Name: e.device, Count: ptr(uint64(1))}},
	}
	tg := nomadapi.NewTaskGroup("workers", 1).AddTask(task)
	tg.Networks = []*nomadapi.NetworkResource{{DynamicPorts: []nomadapi.Port{{Label: "pollux"}}}}
	tg.RestartPolicy = &nomadapi.RestartPolicy{Attempts: ptr(3), Delay: ptr(time.Second), Interval: ptr(10 * time.Minute), Mode: ptr("fail")}
	tg.ReschedulePolicy = &nomadapi.ReschedulePolicy{Attempts: ptr(0), Unlimited: ptr(false)}
	tg.EphemeralDisk = &nomadapi.EphemeralDisk{SizeMB: ptr(150)}
	job.AddTaskGroup(tg)
	return job
}

// setJobMeta changes author meta keys with a check-and-set register, as an
// operator would (Nomad restarts the tasks: meta is in their environment).
func (e *env) setJobMeta(id string, kv map[string]string) {
	e.t.Helper()
	job, _, err := e.nomad.Jobs().Info(id, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range kv {
		job.Meta[k] = v
	}
	if _, _, err := e.nomad.Jobs().EnforceRegister(job, *job.JobModifyIndex, nil); err != nil {
		e.t.Fatalf("edit meta of %s: %v", id, err)
	}
}

// dumpTaskLogs prints the tail of every allocation's task stderr (on failure).
func (e *env) dumpTaskLogs(id string) {
	stubs, _, err := e.nomad.Jobs().Allocations(id, true, nil)
	if err != nil {
		return
	}
	for _, s := range stubs {
		a, _, err := e.nomad.Allocations().Info(s.ID, nil)
		if err != nil {
			continue
		}
		r, err := e.nomad.AllocFS().Cat(a, "alloc/logs/train.stderr.0", nil)
		if err != nil {
			continue
		}
		b := make([]byte, 1<<16)
		n, _ := r.Read(b)
		r.Close()
		lines := strings.Split(strings.TrimSpace(string(b[:n])), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		e.t.Logf("allocation %s (%s, %s):\n%s", s.ID[:8], s.TaskGroup, s.ClientStatus, strings.Join(lines, "\n"))
	}
}

// phase is one allocation the controller applied.
type phase struct {
	decision jobs.Decision
	applied  time.Time // when the controller's round (and so its write) returned
	// metaRound is the pollux_round the processes see: the decision's round
	// if it was applied (a reallocation), else that of the allocation it
	// refines (it reaches the workers through the decision key).
	metaRound int64
}

// TestTorchTraining: a real PyTorch job (the digits example,
// under the launcher) is started by the controller on 1 GPU, moved to 5
// GPUs across both clients, then shrunk to at most 2. From what the
// training processes logged it checks that every allocation formed one
// process group of the decided size, that training resumed from the
// checkpoint at the step it stopped after each reallocation (no lost or
// repeated step or epoch), that the batch size and learning rate used are
// the controller's, that the metrics document has a profile entry with
// grad_var > 0 for every placement, and that the job completes with a
// validation accuracy of at least 0.9. It reports how long each
// reallocation took from the controller's write to the first training step
// at the new size. The sizes are steered with pollux_min_gpus and
// pollux_max_gpus; Nomad restarts the tasks for such an edit too (meta is
// in their environment), so each move has one more incarnation at the old
// size, which the checks cover as well.
func TestTorchTraining(t *testing.T) {
	requireTorch(t)
	e := newEnv(t)
	dir := t.TempDir()
	const epochs = 20
	id := fmt.Sprintf("torch-%d", rand.Uint32()%100000)
	if _, _, err := e.nomad.Jobs().Register(e.torchJob(id, dir, epochs, map[string]string{
		"pollux_min_gpus": "1", "pollux_max_gpus": "1",
	}), nil); err != nil {
		t.Fatal(err)
	}
	e.jobs = append(e.jobs, id)
	t.Cleanup(func() {
		if t.Failed() {
			e.dumpTaskLogs(id)
		}
	})
	e.rescaleDigits(id, filepath.Join(dir, "train.jsonl"), epochs)
}

// rescaleDigits runs the digits job id (registered on 1 GPU at most, with
// pollux_min_gpus = pollux_max_gpus = 1) through a controller: 1 GPU, then
// 5 GPUs on both clients, then at most 2, until it completes; then checks
// the processes' log at logPath (see TestTorchTraining) and the job's
// profile entries.
func (e *env) rescaleDigits(id, logPath string, epochs int) {
	t := e.t
	t.Helper()
	c := e.controller("torch", func(cfg *jobs.Config) { cfg.ExploreFactor = 8 })
	ctx := context.Background()

	var phases []phase
	apply := func(want func(jobs.Decision) error) phase {
		t.Helper()
		st, err := c.Round(ctx, true)
		if err != nil {
			t.Fatalf("round: %v", err)
		}
		js := jobStatus(t, st, id)
		if !js.Applied || js.Decision == nil {
			t.Fatalf("the controller did not reallocate the job: %+v", js)
		}
		if err := want(*js.Decision); err != nil {
			t.Fatalf("decision %+v: %v", *js.Decision, err)
		}
		p := phase{decision: *js.Decision, applied: time.Now(), metaRound: js.Decision.Round}
		phases = append(phases, p)
		t.Logf("round %d: placement %s, batch %d = %d x %d x (%d + 1), lr %.6g", p.decision.Round, p.decision.Placement,
			p.decision.BatchSize, p.decision.LocalBsz, p.decision.NumReplicas, p.decision.AccumSteps, p.decision.LR)
		e.waitRunning(id, mergePerNode(parsePlacement(t, p.decision.Placement)))
		return p
	}
	// waitEpochs waits until the processes of round r finished n epochs.
	waitEpochs := func(r int64, n int, timeout time.Duration) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for {
			done := 0
			for _, ev := range readTrainLog(t, logPath) {
				if ev.Event == "epoch" && ev.Round == r {
					done++
				}
			}
			if done >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d epochs finished after %s, want %d", r, done, timeout, n)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}

	// 1. The controller starts it on one GPU.
	p1 := apply(func(d jobs.Decision) error {
		if d.NumReplicas != 1 {
			return fmt.Errorf("want 1 GPU")
		}
		return nil
	})
	waitEpochs(p1.decision.Round, 3, 2*time.Minute)
	e.waitProfile(id, 1, 30*time.Second)

	// 2. Allowed 5 GPUs and no fewer, it spans both clients (4 per client).
	e.setJobMeta(id, map[string]string{"pollux_min_gpus": "5", "pollux_max_gpus": "5"})
	p2 := apply(func(d jobs.Decision) error {
		if d.NumReplicas != 5 || d.NumNodes != 2 {
			return fmt.Errorf("want 5 GPUs on 2 nodes")
		}
		return nil
	})
	waitEpochs(p2.decision.Round, 2, 2*time.Minute)
	e.waitProfile(id, 5, 30*time.Second)
	// A round that keeps the placement refreshes the decision key; the
	// workers adopt a new batch size without a restart.
	st, err := c.Round(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if js := jobStatus(t, st, id); js.Decision != nil && !js.Applied {
		t.Logf("round %d keeps the placement: batch %d = %d x %d x (%d + 1), lr %.6g", js.Decision.Round, js.Decision.BatchSize,
			js.Decision.LocalBsz, js.Decision.NumReplicas, js.Decision.AccumSteps, js.Decision.LR)
		phases = append(phases, phase{decision: *js.Decision, applied: time.Now(), metaRound: p2.decision.Round})
	}
	waitEpochs(p2.decision.Round, 4, 2*time.Minute)

	// 3. Shrunk to at most 2 GPUs.
	e.setJobMeta(id, map[string]string{"pollux_min_gpus": "1", "pollux_max_gpus": "2"})
	apply(func(d jobs.Decision) error {
		if d.NumReplicas < 1 || d.NumReplicas > 2 {
			return fmt.Errorf("want 1 or 2 GPUs")
		}
		return nil
	})

	// It completes.
	deadline := time.Now().Add(3 * time.Minute)
	var events []trainEvent
	for {
		events = readTrainLog(t, logPath)
		if n := len(events); n > 0 && events[n-1].Event == "done" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("training did not finish; last events: %+v", events[max(len(events)-3, 0):])
		}
		time.Sleep(500 * time.Millisecond)
	}
	e.waitComplete(id, time.Minute)

	checkTraining(t, events, phases, epochs)
	e.checkProfiles(id, phases)
}

// mergePerNode sums a placement's GPUs per node (waitRunning compares per node).
func mergePerNode(p []jobs.NodeGPUs) []jobs.NodeGPUs {
	per := map[string]int{}
	for _, n := range p {
		per[n.Node] += n.GPUs
	}
	var out []jobs.NodeGPUs
	for n, g := range per {
		out = append(out, jobs.NodeGPUs{Node: n, GPUs: g})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// checkTraining checks the processes' own log against the decisions.
func checkTraining(t *testing.T, events []trainEvent, phases []phase, epochs int) {
	t.Helper()
	byRound := map[int64][]jobs.Decision{} // meta round -> the decisions made for it
	for _, p := range phases {
		byRound[p.metaRound] = append(byRound[p.metaRound], p.decision)
	}

	// Every incarnation formed one group of exactly the decided size: each
	// process saw the all-reduce of the ranks 0 + 1 + ... + (K - 1).
	starts := map[int64]int{} // round -> processes started
	for _, ev := range events {
		if ev.Event != "start" {
			continue
		}
		if ds, ok := byRound[ev.Round]; ok && ev.World != ds[0].NumReplicas {
			t.Errorf("a process of round %d ran with world size %d, the decision says %d", ev.Round, ev.World, ds[0].NumReplicas)
		}
		if want := float64(ev.World*(ev.World-1)) / 2; ev.RankSum != want {
			t.Errorf("rank %d of %d (round %d): all-reduce of the ranks %v, want %v", ev.Rank, ev.World, ev.Round, ev.RankSum, want)
		}
		starts[ev.Round]++
	}
	// Steps and epochs continue across restarts: every step number once,
	// in order; epochs never go back; every epoch finished once.
	var steps []trainEvent
	for _, ev := range events {
		if ev.Event == "step" {
			steps = append(steps, ev)
		}
	}
	for i, ev := range steps {
		if ev.Step != i+1 {
			t.Fatalf("step event %d has step %d: a step was lost or repeated (previous %+v)", i, ev.Step, steps[max(i-1, 0)])
		}
		if i > 0 && ev.Epoch < steps[i-1].Epoch {
			t.Errorf("step %d in epoch %d after epoch %d", ev.Step, ev.Epoch, steps[i-1].Epoch)
		}
	}
	var finished []int
	var last trainEvent
	for _, ev := range events {
		if ev.Event == "epoch" {
			finished = append(finished, ev.Epoch)
			last = ev
		}
	}
	for i, ep := range finished {
		if ep != i {
			t.Fatalf("epochs finished in order %v, want 0..%d each once", finished, epochs-1)
		}
	}
	if len(finished) != epochs {
		t.Errorf("%d epochs finished, want %d", len(finished), epochs)
	}
	if last.ValAcc < 0.9 {
		t.Errorf("validation accuracy %.4f, want >= 0.9", last.ValAcc)
	}

	// Batch size and learning rate are the controller's: each full step of
	// round r used one of the decisions made for r, and the LR that
	// decision gives (scaled by the script's own schedule).
	var sizes []string
	for _, p := range phases {
		if p.metaRound != p.decision.Round {
			continue // not a reallocation
		}
		r := p.decision.Round
		var first *trainEvent
		for i, ev := range steps {
			if ev.Round == r && ev.World == p.decision.NumReplicas {
				first = &steps[i]
				break
			}
		}
		if first == nil {
			if starts[r] > 0 {
				t.Errorf("round %d: no training step logged", r)
			}
			continue
		}
		sizes = append(sizes, fmt.Sprint(p.decision.NumReplicas))
		// Where the time went: the last step of the old allocation, the
		// first new process, all imported torch, the group formed.
		lastOld, procStart, imported, formed := math.NaN(), 0.0, 0.0, 0.0
		for _, ev := range events {
			at := ev.T
			switch {
			case ev.Event == "step" && ev.Round != r && at < first.T:
				if math.IsNaN(lastOld) || at > lastOld {
					lastOld = at
				}
			case ev.Event == "start" && ev.Round == r && at <= first.T && ev.T > float64(p.applied.UnixNano())/1e9:
				if procStart == 0 || ev.LauncherStart < procStart {
					procStart = ev.LauncherStart
				}
				imported = max(imported, ev.Imported)
				formed = max(formed, at)
			}
		}
		w := float64(p.applied.UnixNano()) / 1e9
		t.Logf("reallocation to %d GPUs (%s, round %d): first step %d at the new size %.2fs after the controller's write "+
			"(old processes' last step %+.2fs, first new launcher started %+.2fs, torch imported %+.2fs, group formed %+.2fs)",
			p.decision.NumReplicas, p.decision.Placement, r, first.Step, first.T-w, lastOld-w, procStart-w, imported-w, formed-w)
	}
	t.Logf("world sizes: %s; final validation accuracy %.4f after %d steps", strings.Join(sizes, " -> "), last.ValAcc, len(steps))
	for _, ev := range steps {
		ds, ok := byRound[ev.Round]
		if !ok {
			continue // the job as submitted, before the controller placed it
		}
		match := false
		for _, d := range ds {
			if ev.FullBatchSize == d.BatchSize && ev.LocalBsz == d.LocalBsz && ev.AccumSteps == d.AccumSteps &&
				ev.World == d.NumReplicas {
				match = true
				if ev.BatchSize == ev.FullBatchSize {
					want := d.LR * ev.BaseLR / 0.05
					if math.Abs(ev.LR-want) > 1e-9*want {
						t.Errorf("step %d: lr %.10g, the decision gives %.10g (x schedule %.3g)", ev.Step, ev.LR, want, ev.BaseLR/0.05)
					}
				}
			}
		}
		if !match {
			t.Errorf("step %d (round %d): batch %d = %d x %d x (%d + 1) is none of the round's decisions %+v",
				ev.Step, ev.Round, ev.FullBatchSize, ev.LocalBsz, ev.World, ev.AccumSteps, ds)
		}
	}
}

// waitProfile waits until the job's metrics document has a profile entry
// for k replicas.
func (e *env) waitProfile(id string, k int, timeout time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		doc, err := e.metricsDoc(id)
		if err == nil {
			for _, p := range doc.Profile {
				if p.NumReplicas == k {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("no metrics profile entry for %d replicas after %s (%v)", k, timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// metricsDoc is the part of the job's metrics document (the contract's
// section 3) this test checks, decoded here so that the test does not
// depend on the parser's package.
type metricsDoc struct {
	Progress float64 `json:"progress"`
	GradSqr  float64 `json:"grad_sqr"`
	GradVar  float64 `json:"grad_var"`
	Profile  []struct {
		NumNodes    int `json:"num_nodes"`
		NumReplicas int `json:"num_replicas"`
		LocalBsz    int `json:"local_bsz"`
		AccumSteps  int `json:"accum_steps"`
	} `json:"profile"`
}

func (e *env) metricsDoc(id string) (*metricsDoc, error) {
	raw, _, err := e.kv.Get(context.Background(), "jobs/default/"+id+"/metrics")
	if err != nil {
		return nil, err
	}
	var d metricsDoc
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("metrics document: %w", err)
	}
	return &d, nil
}

// checkProfiles: the metrics document has an entry for every placement the
// job ran on, and gradient statistics with grad_var > 0.
func (e *env) checkProfiles(id string, phases []phase) {
	t := e.t
	doc, err := e.metricsDoc(id)
	if err != nil {
		t.Fatalf("metrics document: %v", err)
	}
	if !(doc.GradVar > 0) || !(doc.GradSqr >= 0) {
		t.Errorf("metrics document: grad_var %v, grad_sqr %v; want grad_var > 0", doc.GradVar, doc.GradSqr)
	}
	for _, p := range phases {
		found := false
		for _, pe := range doc.Profile {
			if pe.NumReplicas == p.decision.NumReplicas && pe.NumNodes == p.decision.NumNodes {
				found = true
			}
		}
		if !found {
			t.Errorf("metrics document has no profile entry for %d replicas on %d nodes: %+v", p.decision.NumReplicas, p.decision.NumNodes, doc.Profile)
		}
	}
	t.Logf("metrics document: grad_sqr %.4g, grad_var %.4g, progress %.0f, %d profile entries", doc.GradSqr, doc.GradVar, doc.Progress, len(doc.Profile))
}

// waitComplete waits until the job's current allocations all completed
// successfully.
func (e *env) waitComplete(id string, timeout time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		allocs, _, err := e.nomad.Jobs().Allocations(id, false, nil)
		if err != nil {
			e.t.Fatal(err)
		}
		complete, running := 0, 0
		for _, a := range allocs {
			if a.DesiredStatus != "run" {
				continue
			}
			switch a.ClientStatus {
			case nomadapi.AllocClientStatusComplete:
				complete++
			case nomadapi.AllocClientStatusFailed:
				e.t.Fatalf("allocation %s (%s) failed", a.ID, a.TaskGroup)
			default:
				running++
			}
		}
		if running == 0 && complete > 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("job %s: %d allocations still running after %s", id, running, timeout)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestPolluxPortPerCopy: the per-node copies of a worker group keep its
// network block, so each gets its own dynamic "pollux" port, also two
// copies on the same node (and, on this one-host cluster, all of them).
func TestPolluxPortPerCopy(t *testing.T) {
	e := newEnv(t)
	id := e.registerJob("ports", nil)
	job, _, err := e.nomad.Jobs().Info(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	job.TaskGroups[0].Networks = []*nomadapi.NetworkResource{{DynamicPorts: []nomadapi.Port{{Label: "pollux"}}}}
	if _, _, err := e.nomad.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
	e.waitAsSubmitted(t, id)
	ctx := context.Background()
	nodes, err := e.cluster.Nodes(ctx)
	if err != nil || len(nodes) < 2 {
		t.Fatalf("nodes: %v %v", nodes, err)
	}
	n1, n2 := nodes[0].ID, nodes[1].ID
	job, _, err = e.nomad.Jobs().Info(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	placement := []jobs.NodeGPUs{{Node: n1, GPUs: 1}, {Node: n2, GPUs: 1}, {Node: n1, GPUs: 2}}
	if _, err := e.cluster.Apply(ctx, jobs.Change{Job: ref(id), JobModifyIndex: *job.JobModifyIndex, Placement: placement}); err != nil {
		t.Fatal(err)
	}
	e.waitRunning(id, mergePerNode(placement))
	stubs, _, err := e.nomad.Jobs().Allocations(id, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	ports := map[string]int{} // group -> pollux host port
	nodeOf := map[string]string{}
	for _, s := range stubs {
		if s.ClientStatus != "running" || s.DesiredStatus != "run" {
			continue
		}
		a, _, err := e.nomad.Allocations().Info(s.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range a.AllocatedResources.Shared.Ports {
			if p.Label == "pollux" {
				ports[a.TaskGroup] = p.Value
				nodeOf[a.TaskGroup] = a.NodeID
			}
		}
	}
	t.Logf("pollux ports per group: %v", ports)
	if len(ports) != 3 {
		t.Fatalf("got a pollux port in %d groups (%v), want all 3", len(ports), ports)
	}
	if nodeOf["workers"] != nodeOf["workers-r2"] {
		t.Fatalf("workers and workers-r2 run on %s and %s, want the same node", nodeOf["workers"], nodeOf["workers-r2"])
	}
	seen := map[int]string{}
	for g, p := range ports {
		if other, dup := seen[p]; dup {
			t.Errorf("groups %s and %s share the pollux port %d", g, other, p)
		}
		seen[p] = g
	}
}
