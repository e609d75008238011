package jobs_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/registry"
)

const (
	t4Model   = "Tesla T4"
	a100Model = "NVIDIA A100-SXM4-40GB"
)

// typedFixture is a fixture whose two nodes have different GPU models,
// with GPU types read from the device's model name; its scripted policy
// stands in for a goodput policy that is not type-aware (the controller
// chooses the types).
func typedFixture(t *testing.T, gpus int) *fixture {
	f := newFixture(t, map[string]int{"n1": gpus, "n2": gpus})
	f.cluster.SetGPUModel("n1", t4Model)
	f.cluster.SetGPUModel("n2", a100Model)
	f.cfg.GPUTypeSource = jobs.GPUTypeFromDevice
	f.traits = &registry.Traits{UsesGoodput: true, AdaptiveBatch: true, Replicas: registry.ExploreReplicas}
	return f
}

// profile returns metrics entries of one GPU type whose compute time is
// slow times a base model's.
func profile(gpuType string, slow float64) []contract.ProfileEntry {
	var out []contract.ProfileEntry
	for _, k := range []int{1, 2} {
		for _, m := range []int{32, 64, 128} {
			compute := slow * (0.02 + 0.001*float64(m))
			sync := 0.0
			if k > 1 {
				sync = 0.01
			}
			out = append(out, contract.ProfileEntry{NumNodes: 1, NumReplicas: k, LocalBsz: m,
				ComputeTime: compute, StepTime: compute + sync, SyncTime: sync, Count: 20, GPUType: gpuType})
		}
	}
	return out
}

func (f *fixture) putMetrics(ref jobs.JobRef, entries ...[]contract.ProfileEntry) {
	f.t.Helper()
	d := &contract.Metrics{Version: 1, Timestamp: f.clock.Now(), BatchSize: 128, Progress: 10, GradSqr: 1, GradVar: 4}
	for _, e := range entries {
		d.Profile = append(d.Profile, e...)
	}
	raw, err := contract.MarshalMetrics(d)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.kv.Put(context.Background(), "jobs/"+ref.Namespace+"/"+ref.ID+"/metrics", raw); err != nil {
		f.t.Fatal(err)
	}
}

// TestGPUTypesOneTypePerJob: a policy that is not type-aware gives a job
// GPUs on both types; the controller keeps it on the type it runs on,
// with the policy's GPU count, tells the policy each node's type, and
// writes the type into the decision and the constraint.
func TestGPUTypesOneTypePerJob(t *testing.T) {
	f := typedFixture(t, 4)
	a := f.submit("a", 1)
	if run := f.job(a).Running; len(run) != 1 || run[0].Node != "n1" {
		t.Fatalf("the stand-in placed the submitted job on %v, want n1", run)
	}
	f.policy.set(map[string][]string{"a": {"n1", "n1", "n2"}})
	st := f.round(f.controller("c"))
	in := f.policy.input()
	types := map[string]string{}
	for _, n := range in.Nodes {
		types[n.ID] = n.Type
	}
	if types["n1"] != "t4" || types["n2"] != "a100" {
		t.Fatalf("policy input node types %v, want n1 t4 and n2 a100", types)
	}
	line := jobLine(t, st, a)
	if !line.Applied || line.GPUType != "t4" || line.Decision.Placement != "n1:3" || line.Decision.GPUType != "t4" {
		t.Fatalf("job line %+v (decision %+v), want 3 GPUs on n1 of type t4", line, line.Decision)
	}
	if got := f.cluster.GPUModels(a); !slices.Equal(got, []string{t4Model}) {
		t.Errorf("type constraint %v, want [%s]", got, t4Model)
	}
	if got := f.job(a).Meta[contract.MetaGPUType]; got != "t4" {
		t.Errorf("meta %s = %q, want t4", contract.MetaGPUType, got)
	}
	if s := f.state(a); s.GPUType != "t4" {
		t.Errorf("state gpu_type %q, want t4", s.GPUType)
	}
	var nodeTypes []string
	for _, n := range st.NodeMap {
		nodeTypes = append(nodeTypes, n.ID+"="+n.GPUType)
	}
	if !slices.Equal(nodeTypes, []string{"n1=t4", "n2=a100"}) {
		t.Errorf("status node map types %v", nodeTypes)
	}
}

// TestGPUTypesFitPerTypeAndMove: the job's metrics are fitted per GPU
// type; the type it has not run on is predicted from the speed prior and
// the controller moves it there (a100 is predicted faster); once it has
// measured a100 slower, it is fitted there too and moves back.
func TestGPUTypesFitPerTypeAndMove(t *testing.T) {
	f := typedFixture(t, 4)
	a := f.submit("a", 1)
	c := f.controller("c")
	f.policy.set(map[string][]string{"a": {"n1"}})
	f.round(c)
	f.putMetrics(a, profile(t4Model, 1))
	f.clock.Advance(time.Minute)
	st := f.round(c)
	line := jobLine(t, st, a)
	if line.Models["t4"] != "fitted" || line.Models["a100"] != "predicted" {
		t.Fatalf("models %v, want t4 fitted and a100 predicted", line.Models)
	}
	if s := f.state(a); len(s.Typed) != 1 || s.Typed["t4"].ProfilePoints != 6 {
		t.Fatalf("state typed fits %+v, want t4 with 6 points", s.Typed)
	}
	in := f.policy.input()
	pj := in.Jobs[0]
	if len(pj.TypedGoodput) != 2 || pj.Goodput == nil {
		t.Fatalf("policy job %+v: want models on both types", pj)
	}
	if g4, g100 := pj.TypedGoodput["t4"].Goodput(1, 1), pj.TypedGoodput["a100"].Goodput(1, 1); !(g100 > 1.5*g4) {
		t.Errorf("predicted a100 goodput %g, t4 %g: want the speed prior's ratio (2)", g100, g4)
	}
	if pj.Goodput.Goodput(1, 1) != pj.TypedGoodput["a100"].Goodput(1, 1) {
		t.Errorf("the policy sees the job's model on %v, want a100's", pj.Goodput.Goodput(1, 1))
	}
	if line.Decision.Placement != "n2:1" || line.Decision.GPUType != "a100" || !line.Applied {
		t.Fatalf("decision %+v, want the job moved to the a100 node n2", line.Decision)
	}
	if got := f.cluster.GPUModels(a); !slices.Equal(got, []string{a100Model}) {
		t.Errorf("type constraint %v, want [%s]", got, a100Model)
	}

	// On a100 it measures 3x slower than on t4: fitted, it moves back.
	f.putMetrics(a, profile(t4Model, 1), profile("a100", 3))
	f.policy.set(map[string][]string{"a": {"n2"}})
	f.clock.Advance(time.Minute)
	st = f.round(c)
	line = jobLine(t, st, a)
	if line.Models["t4"] != "fitted" || line.Models["a100"] != "fitted" {
		t.Fatalf("models %v, want both fitted", line.Models)
	}
	s := f.state(a)
	if len(s.Typed) != 2 || !(s.Typed["a100"].Perf.BetaC > 2*s.Typed["t4"].Perf.BetaC) {
		t.Fatalf("typed fits %+v: want a100's compute slope about 3x t4's", s.Typed)
	}
	if line.Decision.Placement != "n1:1" || line.GPUType != "t4" {
		t.Fatalf("decision %+v, want the job back on the t4 node", line.Decision)
	}
	if s.Restarts != 2 {
		t.Errorf("restarts %d, want 2 (two moves)", s.Restarts)
	}
}

// TestGPUTypesTrimWhenTypeIsFull: the chosen type has fewer free GPUs
// than the policy gave: the job gets what that type has, never GPUs of
// two types.
func TestGPUTypesTrimWhenTypeIsFull(t *testing.T) {
	f := typedFixture(t, 2)
	a := f.submit("a", 1)
	f.policy.set(map[string][]string{"a": {"n2", "n2", "n1", "n1"}})
	st := f.round(f.controller("c"))
	line := jobLine(t, st, a)
	if line.Decision.Placement != "n1:2" || line.GPUType != "t4" {
		t.Fatalf("decision %+v, want the 2 GPUs of the t4 node the job runs on", line.Decision)
	}
}

// TestGPUTypesTypeAwarePolicy: a type-aware policy's choice of type is
// kept (even away from the type the controller would prefer), and an
// allocation that mixes types is cut to the type with most of its GPUs.
func TestGPUTypesTypeAwarePolicy(t *testing.T) {
	f := typedFixture(t, 4)
	f.traits.TypeAware = true
	a := f.submit("a", 1) // runs on n1 (t4)
	b := f.submit("b", 1)
	f.policy.set(map[string][]string{"a": {"n2", "n2"}, "b": {"n1", "n2", "n2"}})
	st := f.round(f.controller("c"))
	if line := jobLine(t, st, a); line.Decision.Placement != "n2:2" || line.GPUType != "a100" {
		t.Errorf("a: decision %+v, want the policy's 2 GPUs on the a100 node", line.Decision)
	}
	if line := jobLine(t, st, b); line.Decision.Placement != "n2:2" || line.GPUType != "a100" {
		t.Errorf("b: decision %+v, want its a100 GPUs only", line.Decision)
	}
	if in := f.policy.input(); in.Nodes[0].Type != "t4" || in.Nodes[1].Type != "a100" {
		t.Errorf("policy input nodes %+v", in.Nodes)
	}
}

// TestGPUTypesOffByDefault: without a source nothing is typed, and the
// policy's allocation is applied as it is, across nodes.
func TestGPUTypesOffByDefault(t *testing.T) {
	f := newFixture(t, map[string]int{"n1": 2, "n2": 2})
	f.cluster.SetGPUModel("n1", t4Model)
	f.cluster.SetGPUModel("n2", a100Model)
	a := f.submit("a", 1)
	f.policy.set(map[string][]string{"a": {"n1", "n1", "n2"}})
	st := f.round(f.controller("c"))
	line := jobLine(t, st, a)
	if line.Decision.Placement != "n1:2,n2:1" || line.GPUType != "" || line.Decision.GPUType != "" || f.cluster.GPUModels(a) != nil {
		t.Fatalf("untyped: line %+v decision %+v", line, line.Decision)
	}
	if _, ok := f.job(a).Meta[contract.MetaGPUType]; ok {
		t.Errorf("untyped job has %s", contract.MetaGPUType)
	}
}

// TestGPUTypeNames: model names map through the operator's map, then the
// built-in rules, else are their own type.
func TestGPUTypeNames(t *testing.T) {
	f := typedFixture(t, 1)
	f.cluster.SetGPUModel("n1", "Quadro RTX 6000")
	f.cluster.SetGPUModel("n2", "Mystery GPU")
	f.cluster.AddNode("n3", 1)
	f.cluster.SetGPUModel("n3", "Tesla V100-SXM2-16GB")
	f.cfg.GPUTypeMap = map[string]string{"Tesla V100-SXM2-16GB": "v100-16"}
	st := f.round(f.controller("c"))
	var got []string
	for _, n := range st.NodeMap {
		got = append(got, n.GPUType)
	}
	if want := []string{"rtx6000", "Mystery GPU", "v100-16"}; !slices.Equal(got, want) {
		t.Errorf("types %v, want %v", got, want)
	}
}

// TestGPUTypeConfig: the new keys in JSON and HCL, and their refusals.
func TestGPUTypeConfig(t *testing.T) {
	js := `{"gpu_type_source":"meta.gpu_type","gpu_type_map":{"Tesla T4":"t4","L4":"l4"},"gpu_type_speed":{"l4":1.3}}`
	hcl := "gpu_type_source = \"meta.gpu_type\"\ngpu_type_map = {\n  \"Tesla T4\" = \"t4\"\n  L4 = \"l4\"\n}\ngpu_type_speed = { l4 = 1.3 }\n"
	a, err := jobs.DefaultConfig().MergeJSON([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	b, err := jobs.DefaultConfig().MergeHCL([]byte(hcl), "t.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if a.GPUTypeSource != "meta.gpu_type" || a.GPUTypeMap["L4"] != "l4" || a.GPUTypeSpeed["l4"] != 1.3 ||
		b.GPUTypeSource != a.GPUTypeSource || b.GPUTypeMap["Tesla T4"] != "t4" || b.GPUTypeSpeed["l4"] != 1.3 {
		t.Fatalf("json %+v\nhcl %+v", a, b)
	}
	for doc, want := range map[string]string{
		`{"gpu_type_source":"node.gpu"}`:       `gpu_type_source: want "", "device.model"`,
		`{"gpu_type_source":"meta."}`:          "gpu_type_source: the meta key must be",
		`{"gpu_type_source":"attr.a b"}`:       "gpu_type_source: the attr key must be",
		`{"gpu_type_map":{"Tesla T4":"t\"4"}}`: `gpu_type_map: type of "Tesla T4"`,
		`{"gpu_type_map":{"":"t4"}}`:           `gpu_type_map: model name ""`,
		`{"gpu_type_speed":{"a100":0}}`:        `gpu_type_speed: speed of "a100" must be in (0`,
		`{"gpu_type_speed":{"a100":"fast"}}`:   "gpu_type_speed",
		`{"gpu_type_map":{"Tesla T4":4}}`:      "gpu_type_map",
	} {
		if _, err := jobs.DefaultConfig().MergeJSON([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one containing %q", doc, err, want)
		}
	}
	if _, err := jobs.DefaultConfig().MergeHCL([]byte("gpu_type_source = \"gpu\"\n"), "t.hcl"); err == nil || !strings.Contains(err.Error(), "t.hcl:1") || !strings.Contains(err.Error(), "gpu_type_source") {
		t.Errorf("HCL refusal without file, line and field: %v", err)
	}
}

// TestGPUTypesSharedProfiles: jobs that name one pollux_model share their
// measurements per GPU type. b ran only on t4 and a only on a100 (where it
// measured 3x slower than b on t4): b's a100 model is "shared", fitted on
// a's points (slower than its t4 model), and a has a t4 model from b's.
// c names no model and keeps the bootstrapped prediction (faster on a100,
// the speed prior), and a policy without SharedProfiles pools nothing.
func TestGPUTypesSharedProfiles(t *testing.T) {
	for _, share := range []bool{true, false} {
		f := typedFixture(t, 4)
		f.traits.TypeAware = true
		f.traits.SharedProfiles = share
		meta := func(model string) map[string]string {
			m := map[string]string{
				contract.MetaEnabled: "true", contract.MetaInitBatchSize: "128", contract.MetaInitLR: "0.1",
				contract.MetaMaxBatchSize: "4096", contract.MetaLocalBszMin: "32", contract.MetaLocalBszMax: "1024",
			}
			if model != "" {
				m[contract.MetaModel] = model
			}
			return m
		}
		a := f.cluster.Submit("a", meta("resnet"), 1)
		b := f.cluster.Submit("b", meta("resnet"), 1)
		c := f.cluster.Submit("c", meta(""), 1)
		f.policy.set(map[string][]string{"a": {"n2"}, "b": {"n1"}, "c": {"n1"}})
		ctl := f.controller("c")
		f.round(ctl)
		f.putMetrics(a, profile("a100", 3))
		f.putMetrics(b, profile(t4Model, 1))
		f.putMetrics(c, profile(t4Model, 1))
		f.clock.Advance(time.Minute)
		st := f.round(ctl)
		models := func(ref jobs.JobRef) map[string]policy.GoodputModel {
			for _, j := range f.policy.input().Jobs {
				if j.ID == ref.String() {
					return j.TypedGoodput
				}
			}
			t.Fatalf("job %s not in the policy input", ref)
			return nil
		}
		lb, lc := jobLine(t, st, b), jobLine(t, st, c)
		if lc.Models["t4"] != "fitted" || lc.Models["a100"] != "predicted" {
			t.Errorf("share %v: c's models %v, want t4 fitted and a100 predicted", share, lc.Models)
		}
		if mc := models(c); !(mc["a100"].Goodput(1, 1) > mc["t4"].Goodput(1, 1)) {
			t.Errorf("share %v: c's predicted a100 goodput %g not above t4's %g (the speed prior)", share, mc["a100"].Goodput(1, 1), mc["t4"].Goodput(1, 1))
		}
		mb := models(b)
		if !share {
			if lb.Models["a100"] != "predicted" || lb.Models["t4"] != "fitted" {
				t.Errorf("not shared: b's models %v, want t4 fitted and a100 predicted", lb.Models)
			}
			continue
		}
		if lb.Models["a100"] != "shared" || lb.Models["t4"] != "shared" {
			t.Fatalf("shared: b's models %v, want both shared", lb.Models)
		}
		if g4, g100 := mb["t4"].Goodput(1, 1), mb["a100"].Goodput(1, 1); !(g100 < 0.6*g4) {
			t.Errorf("shared: b's a100 goodput %g, t4 %g: want a100 about 3x slower, as a measured", g100, g4)
		}
		if la := jobLine(t, st, a); la.Models["t4"] != "shared" {
			t.Errorf("shared: a's models %v, want t4 shared from b", la.Models)
		}
		// What others measured is not the job's own profile: b's state
		// keeps its own t4 fit only.
		if s := f.state(b); len(s.Typed) != 1 || s.Typed["t4"].ProfilePoints != 6 {
			t.Errorf("shared: b's state typed fits %+v, want its own t4 fit of 6 points", s.Typed)
		}
	}
}

// TestSharedProfilesOneType: on a cluster of one GPU type jobs keep their
// own fits even when they name one pollux_model (sharing there was
// measured slower): two jobs that measured different configurations
// predict differently.
func TestSharedProfilesOneType(t *testing.T) {
	for _, source := range []string{"", jobs.GPUTypeFromDevice} {
		t.Run("source="+source, func(t *testing.T) { sharedProfilesOneType(t, source) })
	}
}

// sharedProfilesOneType runs TestSharedProfilesOneType with the GPU type
// source set or not: a cluster whose GPUs are all of one type is one type
// either way.
func sharedProfilesOneType(t *testing.T, source string) {
	f := newFixture(t, map[string]int{"n1": 4, "n2": 4})
	if source != "" {
		f.cluster.SetGPUModel("n1", t4Model)
		f.cluster.SetGPUModel("n2", t4Model)
		f.cfg.GPUTypeSource = source
	}
	f.traits = &registry.Traits{UsesGoodput: true, AdaptiveBatch: true, Replicas: registry.ExploreReplicas, SharedProfiles: true}
	meta := map[string]string{
		contract.MetaEnabled: "true", contract.MetaInitBatchSize: "128", contract.MetaInitLR: "0.1",
		contract.MetaMaxBatchSize: "4096", contract.MetaLocalBszMin: "32", contract.MetaLocalBszMax: "1024",
		contract.MetaModel: "bert",
	}
	a := f.cluster.Submit("a", meta, 1)
	b := f.cluster.Submit("b", meta, 1)
	f.policy.set(map[string][]string{"a": {"n1"}, "b": {"n2"}})
	ctl := f.controller("c")
	f.round(ctl)
	// a measured 1 and 2 GPUs, b 4 GPUs on two nodes (slow network).
	var far []contract.ProfileEntry
	for _, m := range []int{32, 128} {
		compute := 0.02 + 0.001*float64(m)
		far = append(far, contract.ProfileEntry{NumNodes: 2, NumReplicas: 4, LocalBsz: m,
			ComputeTime: compute, StepTime: compute + 0.2, SyncTime: 0.2, Count: 20})
	}
	f.putMetrics(a, profile("", 1))
	f.putMetrics(b, far)
	f.clock.Advance(time.Minute)
	f.round(ctl)
	f.clock.Advance(time.Minute)
	st := f.round(ctl)
	for _, ref := range []jobs.JobRef{a, b} {
		for typ, src := range jobLine(t, st, ref).Models {
			if src == "shared" {
				t.Errorf("job %s's model on %s is %q: one type must not pool", ref.ID, typ, src)
			}
		}
	}
	goodput := map[string]float64{}
	for _, j := range f.policy.input().Jobs {
		if j.Goodput == nil {
			t.Fatalf("job %s has no model", j.ID)
		}
		goodput[j.ID] = j.Goodput.Goodput(2, 4)
	}
	if ga, gb := goodput[a.String()], goodput[b.String()]; ga == gb {
		t.Errorf("a and b predict the same %g on 4 GPUs over 2 nodes: one type must not pool", ga)
	}
}

// TestSeveralGPUTypes: only two distinct non-empty types make a cluster
// of several types.
func TestSeveralGPUTypes(t *testing.T) {
	for _, c := range []struct {
		nodeType map[string]string
		want     bool
	}{
		{nil, false},
		{map[string]string{"n1": "", "n2": ""}, false},
		{map[string]string{"n1": "t4", "n2": "t4"}, false},
		{map[string]string{"n1": "t4", "n2": ""}, false},
		{map[string]string{"n1": "t4", "n2": "a100"}, true},
		{map[string]string{"n1": "", "n2": "t4", "n3": "a100"}, true},
	} {
		if got := jobs.SeveralGPUTypes(c.nodeType); got != c.want {
			t.Errorf("SeveralGPUTypes(%v) = %v, want %v", c.nodeType, got, c.want)
		}
	}
}
