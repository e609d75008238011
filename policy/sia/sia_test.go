package sia_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pollux-nomad/pollux/policy"
	pt "github.com/pollux-nomad/pollux/policy/policytest"
	"github.com/pollux-nomad/pollux/policy/sia"
)

func newSia(t *testing.T, cfg sia.Config) *sia.Policy {
	t.Helper()
	p, err := sia.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func runSia(t *testing.T, p *sia.Policy, in policy.Input) policy.Allocations {
	t.Helper()
	out, err := p.Optimize(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if err := pt.Check(in, out, pt.CheckOptions{NodeOrder: true}); err != nil {
		t.Fatalf("invalid allocation %v: %v", out, err)
	}
	return out
}

// typeOf returns the GPU type of a job's allocation ("" if none or mixed).
func typeOf(in policy.Input, alloc []string) string {
	typ := ""
	for i, id := range alloc {
		for _, n := range in.Nodes {
			if n.ID == id {
				if i > 0 && n.Type != typ {
					return "mixed"
				}
				typ = n.Type
			}
		}
	}
	return typ
}

var smallPools = []pt.TypedPool{
	{Type: "t4", Nodes: 2, GPUs: 4, Speed: 1},
	{Type: "a100", Nodes: 1, GPUs: 8, Speed: 3},
}

// TestSiaLoneJobTakesBestConfig: a lone linear job takes the configuration
// of highest goodput, 8 GPUs of the fastest type, in one node.
func TestSiaLoneJobTakesBestConfig(t *testing.T) {
	in := policy.Input{Nodes: pt.TypedNodes(smallPools...), Jobs: []policy.Job{
		{ID: "a", MaxReplicas: 64, Age: 600, TypedGoodput: pt.Typed(pt.Linear(), smallPools...)},
	}}
	out := runSia(t, newSia(t, sia.Config{}), in)
	if got := out["a"]; len(got) != 8 || typeOf(in, got) != "a100" {
		t.Fatalf("lone job got %v, want 8 GPUs of a100", got)
	}
}

// TestSiaConfigurationSpace: a job may hold 1, 2, 4 GPUs in one node or
// whole nodes, never 3 or 6 GPUs or a partial node beside a whole one:
// with max replicas 3, 5, 7 or 14 it gets 2, 4, 4 or 12.
func TestSiaConfigurationSpace(t *testing.T) {
	for maxR, want := range map[int]int{3: 2, 5: 4, 7: 4, 14: 12} {
		pools := []pt.TypedPool{{Type: "t4", Nodes: 4, GPUs: 4, Speed: 1}}
		in := policy.Input{Nodes: pt.TypedNodes(pools...), Jobs: []policy.Job{
			{ID: "a", MaxReplicas: maxR, Age: 600, TypedGoodput: pt.Typed(pt.Linear(), pools...)},
		}}
		out := runSia(t, newSia(t, sia.Config{}), in)
		if got := len(out["a"]); got != want {
			t.Errorf("max replicas %d: got %d GPUs, want %d", maxR, got, want)
		}
		if policy.NumNodes(out["a"]) != max(1, want/4) {
			t.Errorf("max replicas %d: %v is not 1 node or whole nodes", maxR, out["a"])
		}
	}
}

// TestSiaMaxNodesByType: a type's configurations span at most its limit.
func TestSiaMaxNodesByType(t *testing.T) {
	pools := []pt.TypedPool{{Type: "t4", Nodes: 6, GPUs: 4, Speed: 1}}
	in := policy.Input{Nodes: pt.TypedNodes(pools...), Jobs: []policy.Job{
		{ID: "a", MaxReplicas: 64, Age: 600, TypedGoodput: pt.Typed(pt.Linear(), pools...)},
	}}
	for limits, want := range map[string]int{"": 24, "t4=2": 8, "a100=1": 24, "t4=3,a100=1": 12} {
		out := runSia(t, newSia(t, sia.Config{MaxNodesByType: limits}), in)
		if len(out["a"]) != want {
			t.Errorf("limits %q: got %d GPUs, want %d", limits, len(out["a"]), want)
		}
	}
}

// TestSiaTypedMaxReplicas: a job's configurations on a type end at its
// cap there (Job.TypedMaxReplicas): alone and linear on four a100 nodes,
// it gets 32 GPUs without a cap, 16 with a cap of 16 and of 20, and
// none of a type capped at 0.
func TestSiaTypedMaxReplicas(t *testing.T) {
	pools := []pt.TypedPool{{Type: "a100", Nodes: 4, GPUs: 8, Speed: 3}}
	for _, tc := range []struct {
		caps map[string]int
		want int
	}{{nil, 32}, {map[string]int{"a100": 16}, 16}, {map[string]int{"a100": 20}, 16}, {map[string]int{"t4": 1}, 32}, {map[string]int{"a100": 0}, 0}} {
		in := policy.Input{Nodes: pt.TypedNodes(pools...), Jobs: []policy.Job{
			{ID: "a", MaxReplicas: 64, Age: 600, TypedMaxReplicas: tc.caps, TypedGoodput: pt.Typed(pt.Linear(), pools...)},
		}}
		out := runSia(t, newSia(t, sia.Config{}), in)
		if len(out["a"]) != tc.want {
			t.Errorf("caps %v: got %d GPUs, want %d", tc.caps, len(out["a"]), tc.want)
		}
	}
}

// TestSiaNewJobsGetOneGPU: jobs without a model may only run on 1 GPU of
// some type (worth 1), and with enough GPUs every one does.
func TestSiaNewJobsGetOneGPU(t *testing.T) {
	in := policy.Input{Nodes: pt.TypedNodes(smallPools...)}
	for i := range 10 {
		in.Jobs = append(in.Jobs, policy.Job{ID: fmt.Sprintf("j%d", i), MaxReplicas: 8})
	}
	out := runSia(t, newSia(t, sia.Config{}), in)
	for _, j := range in.Jobs {
		if len(out[j.ID]) != 1 {
			t.Errorf("%s got %v, want 1 GPU", j.ID, out[j.ID])
		}
	}
}

// TestSiaFairnessAndLambda: with p = −0.5 and λn = 1.1, 16 linear jobs
// on 16 GPUs cost less as 8 jobs on 2 GPUs (8·0.71 + 8·1.1 = 14.5) than as
// 16 jobs on 1 (16·1 = 16), so Sia runs half of them on 2 GPUs; with λn
// = 2 leaving a job out costs more and every job gets 1 GPU.
func TestSiaFairnessAndLambda(t *testing.T) {
	pools := []pt.TypedPool{{Type: "t4", Nodes: 4, GPUs: 4, Speed: 1}}
	in := policy.Input{Nodes: pt.TypedNodes(pools...)}
	for i := range 16 {
		in.Jobs = append(in.Jobs, policy.Job{ID: fmt.Sprintf("j%02d", i), MaxReplicas: 16, Age: 600, TypedGoodput: pt.Typed(pt.Linear(), pools...)})
	}
	for lambda, want := range map[float64]map[int]int{0: {2: 8, 0: 8}, 2: {1: 16}} {
		p := newSia(t, sia.Config{LambdaN: lambda})
		out := runSia(t, p, in)
		got := map[int]int{}
		for _, j := range in.Jobs {
			got[len(out[j.ID])]++
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("lambda_n %v: jobs by GPU count %v, want %v", lambda, got, want)
		}
	}
}

// TestSiaRestartFactorKeepsJob: a job that has restarted often keeps its
// configuration where moving would gain less than its restart factor
// costs, and moves when the gain is large.
func TestSiaRestartFactorKeepsJob(t *testing.T) {
	pools := []pt.TypedPool{{Type: "t4", Nodes: 2, GPUs: 4, Speed: 1}}
	mk := func(restarts int) policy.Input {
		return policy.Input{Nodes: pt.TypedNodes(pools...), Jobs: []policy.Job{
			{ID: "a", MaxReplicas: 8, Age: 1000, NumRestarts: restarts, TypedGoodput: pt.Typed(pt.Linear(), pools...)},
		}, Current: policy.Allocations{"a": {"t4-01", "t4-01"}}}
	}
	// Factor (1000 − 0·30)/(1030) = 0.97: 8 GPUs are worth 8·0.97 > 2.
	out := runSia(t, newSia(t, sia.Config{}), mk(0))
	if len(out["a"]) != 8 {
		t.Fatalf("fresh job: got %v, want 8 GPUs", out["a"])
	}
	// Factor (1000 − 33·30)/1030 ≈ 0.0097: 8·0.0097 < 2, it stays on 2
	// GPUs, on the same node.
	out = runSia(t, newSia(t, sia.Config{}), mk(33))
	if got := out["a"]; len(got) != 2 || got[0] != "t4-01" {
		t.Fatalf("job with many restarts: got %v, want its 2 GPUs on t4-01", got)
	}
}

// TestSiaRestartPenaltySource: the restart delay comes from the job's
// RestartTime, the artifact's table by name when asked, or 30 s.
func TestSiaRestartPenaltySource(t *testing.T) {
	pools := []pt.TypedPool{{Type: "t4", Nodes: 2, GPUs: 4, Speed: 1}}
	// Age 1000, 3 restarts: with δ = 250 (imagenet) the factor is
	// 250/1250 = 0.2 and 8 GPUs (8·0.2 = 1.6) lose to the 2 held; with
	// δ = 30 the factor is 0.88 and the job grows.
	mk := func(id string, rt float64) policy.Input {
		return policy.Input{Nodes: pt.TypedNodes(pools...), Jobs: []policy.Job{
			{ID: id, MaxReplicas: 8, Age: 1000, NumRestarts: 3, RestartTime: rt, TypedGoodput: pt.Typed(pt.Linear(), pools...)},
		}, Current: policy.Allocations{id: {"t4-00", "t4-00"}}}
	}
	cases := []struct {
		id       string
		rt       float64
		artifact bool
		want     int
	}{
		{"imagenet-1", 0, true, 2},
		{"imagenet-1", 0, false, 8},
		{"cifar10-1", 250, false, 2},
		{"cifar10-1", 250, true, 8},
	}
	for _, c := range cases {
		out := runSia(t, newSia(t, sia.Config{ArtifactRestartPenalties: c.artifact}), mk(c.id, c.rt))
		if len(out[c.id]) != c.want {
			t.Errorf("%+v: got %d GPUs, want %d", c, len(out[c.id]), c.want)
		}
	}
}

// TestSiaKeepsRestoringJob: a job still restoring keeps its allocation
// even where the programme would rather give its GPUs to a newcomer.
func TestSiaKeepsRestoringJob(t *testing.T) {
	pools := []pt.TypedPool{{Type: "t4", Nodes: 1, GPUs: 4, Speed: 1}}
	// "old" gains nothing from its 4 GPUs (Flat), so without the rule
	// it would make room for the newcomer.
	in := policy.Input{Nodes: pt.TypedNodes(pools...), Jobs: []policy.Job{
		{ID: "old", MaxReplicas: 4, Age: 600, Restoring: true, TypedGoodput: pt.Typed(pt.Flat(), pools...)},
		{ID: "new", MaxReplicas: 4},
	}, Current: policy.Allocations{"old": {"t4-00", "t4-00", "t4-00", "t4-00"}}}
	out := runSia(t, newSia(t, sia.Config{}), in)
	if len(out["old"]) != 4 || len(out["new"]) != 0 {
		t.Fatalf("restoring job not kept: %v", out)
	}
	out = runSia(t, newSia(t, sia.Config{IgnoreRestoring: true}), in)
	if len(out["new"]) != 1 {
		t.Fatalf("with IgnoreRestoring the newcomer should get a GPU: %v", out)
	}
}

// TestSiaNormalisesPerJob: normalising by each job's slowest config makes
// a job that scales badly on slow GPUs but well on fast ones go to the
// fast ones, and a job that gains little from the fast type leave it to
// the other.
func TestSiaNormalisesPerJob(t *testing.T) {
	pools := []pt.TypedPool{
		{Type: "t4", Nodes: 1, GPUs: 4, Speed: 1},
		{Type: "a100", Nodes: 1, GPUs: 4, Speed: 1},
	}
	in := policy.Input{Nodes: pt.TypedNodes(pools...), Jobs: []policy.Job{
		// "fast" runs 5x faster on a100, "same" equally on both.
		{ID: "fast", MaxReplicas: 4, Age: 600, TypedGoodput: map[string]policy.GoodputModel{
			"t4": pt.Linear(), "a100": pt.Scaled{Model: pt.Linear(), Factor: 5}}},
		{ID: "same", MaxReplicas: 4, Age: 600, TypedGoodput: pt.Typed(pt.Linear(), pools...)},
	}}
	out := runSia(t, newSia(t, sia.Config{}), in)
	if typeOf(in, out["fast"]) != "a100" || typeOf(in, out["same"]) != "t4" {
		t.Fatalf("got fast on %q, same on %q; want a100 and t4", typeOf(in, out["fast"]), typeOf(in, out["same"]))
	}
}

// TestSiaObjectiveMatchesArtifact: the reported objective is Σ A·x +
// λn·(unallocated) with A = round(g^p, 2).
func TestSiaObjectiveMatchesArtifact(t *testing.T) {
	pools := []pt.TypedPool{{Type: "t4", Nodes: 1, GPUs: 4, Speed: 1}}
	in := policy.Input{Nodes: pt.TypedNodes(pools...), Jobs: []policy.Job{
		{ID: "a", MaxReplicas: 4, Age: 600, TypedGoodput: pt.Typed(pt.Linear(), pools...)},
	}}
	p := newSia(t, sia.Config{})
	runSia(t, p, in)
	// Alone, a takes 4 GPUs: A = round(4^−0.5, 2) = 0.5.
	if got := p.LastStats().Objective; math.Abs(got-0.5) > 1e-9 {
		t.Fatalf("objective %v, want 0.5", got)
	}
	for i := range 5 {
		in.Jobs = append(in.Jobs, policy.Job{ID: fmt.Sprintf("n%d", i), MaxReplicas: 4})
	}
	runSia(t, p, in)
	// Six jobs, four GPUs: a keeps 4 (0.5 + 5·1.1 = 6.0) rather than
	// four jobs on 1 GPU each (4·1 + 2·1.1 = 6.2).
	if got := p.LastStats().Objective; math.Abs(got-6.0) > 1e-9 {
		t.Fatalf("objective %v, want 6.0", got)
	}
}

// TestSiaKeepsNodes: a job keeping its configuration keeps its nodes.
func TestSiaKeepsNodes(t *testing.T) {
	in := pt.TypedClusterInput(3, pt.SiaCluster(1), 40)
	p := newSia(t, sia.Config{})
	out := runSia(t, p, in)
	in.Current = out
	out2 := runSia(t, p, in)
	for id, a := range out {
		if len(out2[id]) == len(a) && typeOf(in, a) == typeOf(in, out2[id]) && !policy.Equal(a, out2[id]) {
			t.Errorf("%s kept %d GPUs of %s but moved: %v -> %v", id, len(a), typeOf(in, a), a, out2[id])
		}
	}
}

// TestSiaValidOnRandomInputs: random inputs (nodes of assorted sizes and
// types, messy current allocations) give valid allocations, each job on
// one type.
func TestSiaValidOnRandomInputs(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	types := []string{"t4", "a100", "rtx2080ti"}
	for n := range 300 {
		in := pt.RandomInput(rng, pt.RandomOptions{Messy: n%3 == 0})
		for i := range in.Nodes {
			in.Nodes[i].Type = types[rng.IntN(len(types))]
		}
		for i := range in.Jobs {
			if in.Jobs[i].Goodput != nil && rng.IntN(2) == 0 {
				in.Jobs[i].TypedGoodput = map[string]policy.GoodputModel{
					types[rng.IntN(3)]: pt.Scaled{Model: in.Jobs[i].Goodput, Factor: 2}}
			}
			in.Jobs[i].Restoring = rng.IntN(4) == 0
		}
		out, err := newSia(t, sia.Config{}).Optimize(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		if err := pt.Check(in, out, pt.CheckOptions{NodeOrder: true}); err != nil {
			t.Fatalf("input %d: %v", n, err)
		}
		for id, a := range out {
			if typeOf(in, a) == "mixed" {
				t.Fatalf("input %d: %s spans types: %v", n, id, a)
			}
		}
	}
}

// TestSiaLargeClusterSolver: at 64 GPUs the exact programme runs; at 2048
// GPUs the branch and bound, whose allocation is valid and within 1% of
// the linear relaxation's bound.
func TestSiaLargeClusterSolver(t *testing.T) {
	p := newSia(t, sia.Config{})
	runSia(t, p, pt.TypedClusterInput(1, pt.SiaCluster(1), 60))
	if st := p.LastStats(); st.Solver != "dp" || st.Gap != 0 {
		t.Fatalf("64 GPUs: stats %+v, want the exact dynamic programme", st)
	}
	runSia(t, p, pt.TypedClusterInput(1, pt.SiaCluster(32), 1200))
	if st := p.LastStats(); st.Solver != "bb" || st.Gap > 0.01 {
		t.Fatalf("2048 GPUs: stats %+v, want branch and bound within 1%%", st)
	}
}

// TestSiaConfigValidation: bad settings are refused, naming each.
func TestSiaConfigValidation(t *testing.T) {
	_, err := sia.New(sia.Config{FairnessP: -500, LambdaN: -1, RestartPenalty: -3, Workers: -1, MaxNodesByType: "t4=0"})
	if err == nil {
		t.Fatal("invalid settings accepted")
	}
	for _, want := range []string{"fairness p", "lambda_n", "restart penalty", "workers", "t4=0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if _, err := sia.New(sia.Config{FairnessP: 1}); err != nil {
		t.Errorf("p = 1 with the default lambda_n: %v", err)
	}
}

// TestSiaPreferCurrent: a job with no model holding 1 GPU is indifferent
// between 1 GPU of any type (all cost 1); PreferCurrent keeps it where it
// is.
func TestSiaPreferCurrent(t *testing.T) {
	for _, node := range []string{"t4-00", "t4-01", "a100-00"} {
		in := policy.Input{Nodes: pt.TypedNodes(smallPools...), Jobs: []policy.Job{{ID: "a", MaxReplicas: 8}},
			Current: policy.Allocations{"a": {node}}}
		out := runSia(t, newSia(t, sia.Config{PreferCurrent: true}), in)
		if !policy.Equal(out["a"], []string{node}) {
			t.Errorf("on %s: got %v, want it kept", node, out["a"])
		}
	}
}
