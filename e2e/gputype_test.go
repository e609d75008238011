package e2e

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/pollux-nomad/pollux/apps"
	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/data"
	"github.com/pollux-nomad/pollux/jobs"
	"github.com/pollux-nomad/pollux/model"
)

// TestGPUTypesOnNomad: a dedicated cluster whose
// two clients carry different GPU types in their node meta (client-1 t4,
// client-2 a100, cluster.sh's POLLUX_GPU_TYPES), a controller with
// gpu_type_source = "meta.gpu_type" and the pollux policy (the type is
// the policy's choice if it is type-aware, else the controller's: the
// test passes either way), and an emulated
// ImageNet worker whose GPUs compute 3x faster on a100 (pollux emulate
// -gpu-speed a100=3) and that learns its type from the node
// (POLLUX_GPU_TYPE = "${meta.gpu_type}"). It shows that:
//
//   - the job is placed on the type the controller chose (t4, the only
//     eligible type at first), with the type in its decision, its status
//     and a ${meta.gpu_type} constraint on its groups;
//   - its metrics carry gpu_type and are fitted per type: t4 fitted, a100
//     predicted from the speed prior;
//   - once the a100 node is eligible the job moves there (predicted
//     faster; after its first hold, three restart times on its first
//     allocation), Nomad runs it there, the worker reports a100 entries, and
//     both types are fitted, a100's compute about 3x t4's speed, so the
//     job stays.
func TestGPUTypesOnNomad(t *testing.T) {
	c := startCluster(t, clusterOptions{Env: []string{"POLLUX_GPU_TYPES=t4,a100"}})
	e := newEnvOn(t, c)
	ctx := context.Background()
	bin := polluxBinary(t)

	// The adapter reads each node's type from its meta.
	e.cluster.SetGPUTypeSource(jobs.GPUTypeSource{Kind: "meta", Key: "gpu_type"})
	nodes, err := e.cluster.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byType := map[string]string{}
	for _, n := range nodes {
		byType[n.GPUModel] = n.ID
	}
	t4, a100 := byType["t4"], byType["a100"]
	if len(nodes) != 2 || t4 == "" || a100 == "" {
		t.Fatalf("nodes %+v: want one with meta gpu_type t4 and one with a100", nodes)
	}
	// From the device's name instead: the fake GPUs are all "mock".
	e.cluster.SetGPUTypeSource(jobs.GPUTypeSource{Kind: "device"})
	if nodes, err = e.cluster.Nodes(ctx); err != nil || len(nodes) != 2 || nodes[0].GPUModel != "mock" || nodes[1].GPUModel != "mock" {
		t.Fatalf("device.model source: nodes %+v, err %v; want both named mock", nodes, err)
	}

	// Only the t4 node is eligible at first.
	if _, err := e.nomad.Nodes().ToggleEligibility(a100, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.nomad.Nodes().ToggleEligibility(a100, true, nil) })
	waitNodeCount(t, e, 1)

	all, err := apps.LoadAll(data.Traces())
	if err != nil {
		t.Fatal(err)
	}
	app := all["imagenet"]
	id := e.registerJob("types", map[string]string{
		"pollux_init_batch_size": strconv.Itoa(app.InitBatchSize), "pollux_max_batch_size": strconv.Itoa(app.MaxBatchSize),
		"pollux_local_bsz_min": strconv.Itoa(app.MinLocalBsz), "pollux_local_bsz_max": strconv.Itoa(app.MaxLocalBsz),
		"pollux_max_gpus": "4", contract.MetaModel: "imagenet-emulated",
	})
	emulated := func(id string) {
		t.Helper()
		job, _, err := e.nomad.Jobs().Info(id, nil)
		if err != nil {
			t.Fatal(err)
		}
		task := job.TaskGroups[0].Tasks[0]
		task.Config = map[string]any{"command": bin, "args": []string{"emulate", "-app", "imagenet", "-speedup", "50",
			"-kv-prefix", e.prefix, "-report-interval", "500ms", "-gpu-speed", "a100=3"}}
		task.Env = map[string]string{"CONSUL_HTTP_ADDR": c.env["CONSUL_HTTP_ADDR"], contract.EnvGPUType: "${meta.gpu_type}"}
		if _, _, err := e.nomad.Jobs().Register(job, nil); err != nil {
			t.Fatal(err)
		}
	}
	emulated(id)
	// No restart penalty: a type-aware policy would otherwise (rightly)
	// keep a job this young where it is rather than pay a restart. The
	// job starts on one GPU (explore_start 1), so that the move to a100
	// also grows it: a same-size move must clear the typed hysteresis
	// (0.5), which the 2x speed prior alone does not.
	ctl := e.controller("types", func(cfg *jobs.Config) {
		cfg.GPUTypeSource = "meta.gpu_type"
		cfg.RestartPenalty = 0
		cfg.ExploreStart = 1
	})

	// 1. Placed on t4, the only type there is.
	start := time.Now()
	st, err := ctl.Round(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	js := jobStatus(t, st, id)
	if !js.Applied || js.GPUType != "t4" || js.Decision.GPUType != "t4" {
		t.Fatalf("first round: %+v (decision %+v), want it applied on t4", js, js.Decision)
	}
	placed := mustPlacement(t, js.Decision.Placement)
	for _, p := range placed {
		if p.Node != t4 {
			t.Fatalf("placement %s is not on the t4 node %s", js.Decision.Placement, t4)
		}
	}
	e.waitRunning(id, placed)
	waitVersionRunning(t, e, id, checkTypeConstraint(t, e, id, "t4"))
	timeToPlace := time.Since(start)
	t.Logf("placed on t4 (%s) in %s", js.Decision.Placement, timeToPlace.Round(100*time.Millisecond))

	// 2. Its metrics carry gpu_type t4 and are fitted on t4.
	waitTypedEntries(t, e, id, "t4")
	if _, err := e.nomad.Nodes().ToggleEligibility(a100, true, nil); err != nil {
		t.Fatal(err)
	}
	waitNodeCount(t, e, 2)

	// 3. With a100 back, the prediction (speed prior 2x) moves the job,
	// once it has held its first allocation for 3 restart times (pollux's
	// first hold on a cluster of several types: about 15 s with the
	// emulator's restarts of a few seconds); the rounds before leave it.
	start = time.Now()
	held := 0
	for {
		st, err = ctl.Round(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		js = jobStatus(t, st, id)
		if js.Applied || time.Since(start) > time.Minute {
			break
		}
		if js.Changed || js.GPUType != "t4" {
			t.Fatalf("round held the job but reports %+v", js)
		}
		held++
		time.Sleep(2 * time.Second)
	}
	t.Logf("first hold: %d rounds left the job on t4 before the move", held)
	// The job names its model (pollux_model): its t4 model is the fit on
	// its model's pooled t4 points (its own so far).
	if js.Models["t4"] != "shared" || js.Models["a100"] != "predicted" {
		t.Fatalf("models %v: want t4 shared and a100 predicted", js.Models)
	}
	if !js.Applied || js.GPUType != "a100" {
		t.Fatalf("second round: %+v (decision %+v), want the job moved to a100", js, js.Decision)
	}
	moved := mustPlacement(t, js.Decision.Placement)
	for _, p := range moved {
		if p.Node != a100 {
			t.Fatalf("placement %s is not on the a100 node %s", js.Decision.Placement, a100)
		}
	}
	e.waitRunning(id, moved)
	waitVersionRunning(t, e, id, checkTypeConstraint(t, e, id, "a100"))
	timeToMove := time.Since(start)
	t.Logf("moved to a100 (%s) in %s", js.Decision.Placement, timeToMove.Round(100*time.Millisecond))

	// 4. The worker on a100 reports a100 entries; both types are fitted,
	// a100 computing about 3x faster; the job stays there.
	waitTypedEntries(t, e, id, "a100")
	st, err = ctl.Round(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	js = jobStatus(t, st, id)
	if js.Models["t4"] != "shared" || js.Models["a100"] != "shared" {
		t.Fatalf("models %v: want both shared (fitted on the pooled points of its model)", js.Models)
	}
	if js.GPUType != "a100" || js.Changed {
		t.Errorf("third round: type %s changed %v, want the job left on a100", js.GPUType, js.Changed)
	}
	s := readJobState(t, e, id)
	m := float64(app.MinLocalBsz+app.MaxLocalBsz) / 2
	ratio := model.PerfParams(s.Typed["t4"].Perf).AccumStepTime(m) / model.PerfParams(s.Typed["a100"].Perf).AccumStepTime(m)
	t.Logf("fitted compute time t4/a100 at local batch %g: %.2f (emulated 3); profile points t4 %d, a100 %d; restarts %d",
		m, ratio, s.Typed["t4"].ProfilePoints, s.Typed["a100"].ProfilePoints, s.Restarts)
	if ratio < 2 || ratio > 4.5 {
		t.Errorf("fitted t4/a100 compute time ratio %.2f, want about 3", ratio)
	}
	if s.GPUType != "a100" {
		t.Errorf("state gpu_type %q, want a100", s.GPUType)
	}

	// 5. A second job of the same model: once it has reported on the type
	// it was placed on, its model on the other type is fitted on what the
	// first job measured there ("shared", not "predicted"), while its own
	// state holds only its own fit.
	idB := e.registerJob("types-b", map[string]string{
		"pollux_init_batch_size": strconv.Itoa(app.InitBatchSize), "pollux_max_batch_size": strconv.Itoa(app.MaxBatchSize),
		"pollux_local_bsz_min": strconv.Itoa(app.MinLocalBsz), "pollux_local_bsz_max": strconv.Itoa(app.MaxLocalBsz),
		"pollux_max_gpus": "2", contract.MetaModel: "imagenet-emulated",
	})
	emulated(idB)
	deadline := time.Now().Add(90 * time.Second)
	var jb jobs.JobStatus
	for {
		st, err = ctl.Round(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		jb = jobStatus(t, st, idB)
		if jb.Models["t4"] == "shared" && jb.Models["a100"] == "shared" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("second job of the model: models %v (status %+v), want both shared", jb.Models, jb)
		}
		time.Sleep(2 * time.Second)
	}
	sB := readJobState(t, e, idB)
	if len(sB.Typed) == 0 || len(sB.Typed) > 1 && sB.Restarts == 0 {
		t.Errorf("second job's own fits %+v (restarts %d): want only the type(s) it ran on", sB.Typed, sB.Restarts)
	}
	t.Logf("second job of the model on %s: models %v", jb.GPUType, jb.Models)
}

// readJobState reads and parses the controller's state document of job id.
func readJobState(t *testing.T, e *env, id string) *contract.State {
	t.Helper()
	raw, _, err := e.kv.Get(context.Background(), "jobs/default/"+id+"/state")
	if err != nil {
		t.Fatal(err)
	}
	s, err := contract.ParseState(raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// mustPlacement parses a decision's placement.
func mustPlacement(t *testing.T, s string) []jobs.NodeGPUs {
	t.Helper()
	p, err := contract.ParsePlacement(s)
	if err != nil || len(p) == 0 {
		t.Fatalf("placement %q: %v", s, err)
	}
	return p
}

// waitNodeCount waits until the adapter lists n nodes.
func waitNodeCount(t *testing.T, e *env, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		nodes, err := e.cluster.Nodes(context.Background())
		if err == nil && len(nodes) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodes %+v (err %v), want %d", nodes, err, n)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// checkTypeConstraint checks that every worker group of the job asks for
// nodes whose meta gpu_type is want, and the job meta names the type; it
// returns the job's version.
func checkTypeConstraint(t *testing.T, e *env, id, want string) uint64 {
	t.Helper()
	job, _, err := e.nomad.Jobs().Info(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := job.Meta[contract.MetaGPUType]; got != want {
		t.Errorf("job meta %s = %q, want %q", contract.MetaGPUType, got, want)
	}
	for _, g := range job.TaskGroups {
		if g.Count == nil || *g.Count == 0 {
			continue
		}
		if !slices.ContainsFunc(g.Constraints, func(c *nomadapi.Constraint) bool {
			return c.LTarget == "${meta.gpu_type}" && c.Operand == "=" && c.RTarget == want
		}) {
			t.Errorf("group %s has no ${meta.gpu_type} = %s constraint: %+v", *g.Name, want, g.Constraints)
		}
	}
	return *job.Version
}

// waitTypedEntries waits until the job's metrics document has a profile
// entry of GPU type gpuType.
func waitTypedEntries(t *testing.T, e *env, id, gpuType string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		raw, _, err := e.kv.Get(context.Background(), "jobs/default/"+id+"/metrics")
		if err == nil {
			if d, err := contract.ParseMetrics(raw); err == nil {
				for _, pe := range d.Profile {
					if pe.GPUType == gpuType {
						return
					}
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no metrics entry of GPU type %s: %s", gpuType, raw)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestGPUTypeDeviceModelConstraint: with gpu_type_source = "device.model"
// the type comes from the device's name (the fake GPUs are all "mock", a
// type of its own), and Nomad accepts and satisfies the ${device.model}
// constraint the controller adds inside the device request: the job runs
// as decided.
func TestGPUTypeDeviceModelConstraint(t *testing.T) {
	e := newEnv(t)
	id := e.registerJob("devtype", nil)
	ctl := e.controller("devtype", func(cfg *jobs.Config) { cfg.GPUTypeSource = jobs.GPUTypeFromDevice })
	st, err := ctl.Round(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	js := jobStatus(t, st, id)
	if !js.Applied || js.GPUType != "mock" {
		t.Fatalf("round: %+v, want the job applied with GPU type mock", js)
	}
	e.waitRunning(id, mustPlacement(t, js.Decision.Placement))
	job, _, err := e.nomad.Jobs().Info(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The allocation that runs is of the version with the constraint (not
	// the submitted one, which Nomad would keep if it could not place the
	// new one).
	waitVersionRunning(t, e, id, *job.Version)
	for _, g := range job.TaskGroups {
		if g.Count == nil || *g.Count == 0 {
			continue
		}
		d := g.Tasks[0].Resources.Devices[0]
		if !slices.ContainsFunc(d.Constraints, func(c *nomadapi.Constraint) bool {
			return c.LTarget == "${device.model}" && c.Operand == "=" && c.RTarget == "mock"
		}) {
			t.Errorf("group %s: device constraints %+v, want ${device.model} = mock", *g.Name, d.Constraints)
		}
	}
}

// waitVersionRunning waits until an allocation of the job's version runs.
func waitVersionRunning(t *testing.T, e *env, id string, version uint64) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		allocs, _, err := e.nomad.Jobs().Allocations(id, false, nil)
		if err == nil {
			for _, a := range allocs {
				if a.JobVersion == version && a.ClientStatus == "running" && a.DesiredStatus == "run" {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no running allocation of job %s version %d (err %v)", id, version, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}
