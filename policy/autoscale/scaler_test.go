package autoscale

import (
	"fmt"
	"math"
	"math/rand"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/pollux-nomad/pollux/policy"
)

// amdahl is a goodput model with serial fraction a: k/(1+a(k-1)) times
// scale, minus a penalty per extra node.
type amdahl struct {
	a, scale, nodePenalty float64
}

func (m amdahl) Goodput(nodes, k int) float64 {
	return m.scale * float64(k) / (1 + m.a*float64(k-1)) * (1 - m.nodePenalty*float64(nodes-1))
}

func linearJobs(n, maxReplicas int) []policy.Job {
	var out []policy.Job
	for i := range n {
		out = append(out, policy.Job{ID: fmt.Sprintf("j%02d", i), MinReplicas: 0, MaxReplicas: maxReplicas})
	}
	return out
}

func onePool(minN, maxN int) Config {
	return Config{Pools: []Pool{{Name: "gpu", Template: Template{GPUsPerNode: 4}, MinNodes: minN, MaxNodes: maxN}}}
}

func TestValidateNamesEveryBadField(t *testing.T) {
	cfg := Config{
		Low: 0.7, High: 1.2, ScaleUpCooldown: -1,
		Pools: []Pool{
			{Name: "a", Template: Template{GPUsPerNode: 4}, MinNodes: 5, MaxNodes: 3},
			{Name: "a", Template: Template{GPUsPerNode: 0}, MinNodes: -1, MaxNodes: 0},
			{Name: "", Template: Template{GPUsPerNode: 4}, MaxNodes: 1},
		},
	}
	err := cfg.Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, want := range []string{
		"high: utility band bound 1.2 is outside (0, 1)",
		"scale_up_cooldown",
		`pool 1 ("a"): min_nodes 5 exceeds max_nodes 3`,
		`pool 2 ("a"): same name as pool 1`,
		`pool 2 ("a"): gpus_per_node 0 is below 1`,
		`pool 2 ("a"): min_nodes -1 is negative`,
		`pool 2 ("a"): max_nodes 0 is below 1`,
		`pool 3 (""): empty name`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if err := (Config{Low: 0.6, High: 0.5, Pools: onePool(0, 4).Pools}).Validate(); err == nil || !strings.Contains(err.Error(), "low 0.6 must be below high 0.5") {
		t.Errorf("inverted band: got %v", err)
	}
	if _, err := NewScaler(onePool(0, 4)); err != nil {
		t.Errorf("valid config refused: %v", err)
	}
}

func TestUtilitiesOfLinearJobs(t *testing.T) {
	// Two jobs of linear speedup up to 4 GPUs each on 4-GPU nodes: one or
	// two nodes are fully used, the third node idles.
	u := Utilities(linearJobs(2, 4), Template{GPUsPerNode: 4}, 3)
	want := []float64{0, 1, 1, 8.0 / 12}
	for n := range want {
		if math.Abs(u[n]-want[n]) > 1e-12 {
			t.Errorf("utility at %d nodes = %v, want %v", n, u[n], want[n])
		}
	}
}

func TestUtilitiesFallWithSizeForSublinearJobs(t *testing.T) {
	var jobs []policy.Job
	for i := range 6 {
		jobs = append(jobs, policy.Job{ID: fmt.Sprint(i), MaxReplicas: 64, Goodput: amdahl{a: 0.05 * float64(i+1), scale: 10, nodePenalty: 0.02}})
	}
	u := Utilities(jobs, Template{GPUsPerNode: 4}, 32)
	if math.Abs(u[1]-1) > 1e-9 {
		t.Errorf("one node for six jobs: utility %v, want 1 (four jobs on one GPU each)", u[1])
	}
	for n := 2; n <= 32; n++ {
		if u[n] > u[n-1]+1e-9 {
			t.Errorf("utility rises from %d to %d nodes: %v -> %v", n-1, n, u[n-1], u[n])
		}
		if u[n] <= 0 || u[n] > 1+1e-9 {
			t.Errorf("utility at %d nodes = %v, want in (0, 1]", n, u[n])
		}
	}
}

func TestUtilitiesStepOverANodeBoundaryDip(t *testing.T) {
	// A job whose goodput drops by 30% when it spans two nodes: five GPUs
	// are worse than four, eight are better.
	j := policy.Job{ID: "x", MaxReplicas: 8, Goodput: amdahl{a: 0, scale: 1, nodePenalty: 0.3}}
	u := Utilities([]policy.Job{j}, Template{GPUsPerNode: 4}, 2)
	if math.Abs(u[2]-0.7) > 1e-9 {
		t.Errorf("utility at 2 nodes = %v, want 0.7 (8 GPUs at 70%% efficiency)", u[2])
	}
}

func TestDecideGrowsForWorkAndShrinksAfterTheDelay(t *testing.T) {
	s, err := NewScaler(onePool(0, 32))
	if err != nil {
		t.Fatal(err)
	}
	// 40 linear one-node jobs: utility 1 up to 40 nodes, so the pool
	// grows to its maximum at once.
	d := s.Decide(Input{Now: 0, Jobs: linearJobs(40, 4), Nodes: map[string]int{"gpu": 2}})
	if d[0].Desired != 32 || d[0].Current != 2 {
		t.Fatalf("40 linear jobs: %+v, want 2 -> 32", d[0])
	}
	// Two jobs left: 2 nodes wanted, but the pool waits for the delay.
	few := linearJobs(2, 4)
	for _, now := range []float64{60, 300, 659} {
		d = s.Decide(Input{Now: now, Jobs: few})
		if d[0].Desired != 32 || d[0].Wanted != 2 {
			t.Fatalf("t=%v: %+v, want to keep 32 while wanting 2", now, d[0])
		}
	}
	d = s.Decide(Input{Now: 660, Jobs: few})
	if d[0].Desired != 2 {
		t.Fatalf("after the delay: %+v, want 2", d[0])
	}
	// No jobs: the minimum, again after the delay.
	s.Decide(Input{Now: 700})
	if d = s.Decide(Input{Now: 1300}); d[0].Desired != 0 || d[0].Reason != "no jobs" {
		t.Fatalf("no jobs: %+v, want 0", d[0])
	}
}

func TestDecideShrinksToTheLargestSizeWantedDuringTheDelay(t *testing.T) {
	s, _ := NewScaler(onePool(1, 32))
	s.Decide(Input{Now: 0, Jobs: linearJobs(20, 4), Nodes: map[string]int{"gpu": 0}})
	s.Decide(Input{Now: 60, Jobs: linearJobs(3, 4)})
	// 5 jobs at 20 nodes: utility 0.25, below the band.
	s.Decide(Input{Now: 120, Jobs: linearJobs(5, 4)})
	d := s.Decide(Input{Now: 660, Jobs: linearJobs(2, 4)})
	if d[0].Desired != 5 {
		t.Fatalf("%+v: want 8, the most wanted since the shrink began", d[0])
	}
}

func TestDecideKeepsASizeInTheBand(t *testing.T) {
	// One job at 50% efficiency on 8 GPUs and 100% on 4: at 2 nodes the
	// utility is 0.5, in the band; from 1 node it would not shrink.
	j := policy.Job{ID: "x", MaxReplicas: 8, Goodput: amdahl{a: 1.0 / 7, scale: 1}}
	u := Utilities([]policy.Job{j}, Template{GPUsPerNode: 4}, 4)
	if u[2] < DefaultLow || u[2] > DefaultHigh {
		t.Fatalf("test premise: utility at 2 nodes %v not in the band", u[2])
	}
	cfg := onePool(0, 4)
	cfg.Rule = RuleAverage
	s, _ := NewScaler(cfg)
	d := s.Decide(Input{Jobs: []policy.Job{j}, Nodes: map[string]int{"gpu": 2}})
	if d[0].Desired != 2 || !strings.Contains(d[0].Reason, "in the band") {
		t.Fatalf("%+v: want to keep 2 nodes", d[0])
	}
}

func TestDecideRaisesAPoolBelowItsMinimum(t *testing.T) {
	s, _ := NewScaler(onePool(3, 8))
	if d := s.Decide(Input{Nodes: map[string]int{"gpu": 0}}); d[0].Desired != 3 {
		t.Fatalf("%+v: want the minimum 3", d[0])
	}
}

func TestDecideScaleUpCooldown(t *testing.T) {
	cfg := onePool(0, 32)
	cfg.ScaleUpCooldown = 300
	s, _ := NewScaler(cfg)
	s.Decide(Input{Now: 0, Jobs: linearJobs(2, 4)})
	d := s.Decide(Input{Now: 60, Jobs: linearJobs(10, 4)})
	if d[0].Desired != 2 || d[0].Wanted != 10 {
		t.Fatalf("within the cooldown: %+v, want to stay at 2", d[0])
	}
	if d = s.Decide(Input{Now: 300, Jobs: linearJobs(10, 4)}); d[0].Desired != 10 {
		t.Fatalf("after the cooldown: %+v, want 10", d[0])
	}
}

func TestDecideCountsEachJobInOnePool(t *testing.T) {
	cfg := Config{Rule: RuleAverage, Pools: []Pool{
		{Name: "t4", Template: Template{GPUsPerNode: 4, Type: "t4"}, MaxNodes: 8},
		{Name: "a100", Template: Template{GPUsPerNode: 8, Type: "a100"}, MaxNodes: 2},
	}}
	s, err := NewScaler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fastOnA100 := policy.Job{ID: "a", MaxReplicas: 8, TypedGoodput: map[string]policy.GoodputModel{
		"t4": amdahl{scale: 1}, "a100": amdahl{scale: 5},
	}}
	probedT4 := policy.Job{ID: "b", MaxReplicas: 4, ProbeSpeed: map[string]float64{"t4": 2, "a100": 1}}
	runsOnA100 := policy.Job{ID: "c", MaxReplicas: 4}
	d := s.Decide(Input{Jobs: []policy.Job{fastOnA100, probedT4, runsOnA100}, JobPool: map[string]string{"c": "a100"}})
	if d[0].Jobs != 1 || d[1].Jobs != 2 {
		t.Fatalf("jobs per pool %d, %d; want 1 on t4 (b), 2 on a100 (a, c)", d[0].Jobs, d[1].Jobs)
	}
	if d[0].Desired != 1 || d[1].Desired != 2 {
		t.Errorf("average rule: desired %d t4, %d a100; want 1 and 2", d[0].Desired, d[1].Desired)
	}
	// The marginal rule (the default) does not pay for the second a100
	// node, which would add 4 GPUs of work for 8 GPUs (0.5 per GPU, below
	// the middle of its band, 0.65).
	cfg.Rule = ""
	s, _ = NewScaler(cfg)
	if got := s.Config(); got.Rule != RuleMarginal || got.Low != DefaultMarginalLow || got.High != DefaultMarginalHigh {
		t.Errorf("defaults %+v, want the marginal rule and its band", got)
	}
	d = s.Decide(Input{Jobs: []policy.Job{fastOnA100, probedT4, runsOnA100}, JobPool: map[string]string{"c": "a100"}})
	if d[1].Desired != 1 {
		t.Errorf("marginal rule: desired %d a100 nodes, want 1", d[1].Desired)
	}
}

// TestDecideIsDeterministic: the same rounds give the same decisions, for
// random workloads of every seed tried.
func TestDecideIsDeterministic(t *testing.T) {
	for seed := int64(1); seed <= 5; seed++ {
		run := func() [][]Decision {
			rng := rand.New(rand.NewSource(seed))
			cfg := onePool(0, 32)
			cfg.ScaleDownDelay = -1
			s, _ := NewScaler(cfg)
			var out [][]Decision
			for r := range 30 {
				var jobs []policy.Job
				for i := range rng.Intn(12) {
					jobs = append(jobs, policy.Job{ID: fmt.Sprint(i), MaxReplicas: 1 + rng.Intn(32),
						Goodput: amdahl{a: rng.Float64() * 0.3, scale: 1 + rng.Float64(), nodePenalty: rng.Float64() * 0.1}})
				}
				out = append(out, s.Decide(Input{Now: float64(60 * r), Jobs: jobs, Nodes: map[string]int{"gpu": 4}}))
			}
			return out
		}
		a, b := run(), run()
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d: two runs differ", seed)
		}
		sizes := map[int]bool{}
		for _, d := range a {
			sizes[d[0].Desired] = true
			if d[0].Desired < 0 || d[0].Desired > 32 {
				t.Fatalf("seed %d: desired %d outside [0, 32]", seed, d[0].Desired)
			}
		}
		if len(sizes) < 2 {
			t.Errorf("seed %d: the size never changed over 30 random rounds: %v", seed, sizes)
		}
	}
}

func TestQueueAddsNodesForPendingRequestsAndRemovesIdleOnes(t *testing.T) {
	q, err := NewQueue(QueueConfig{Pool: Pool{Name: "gpu", Template: Template{GPUsPerNode: 4}, MaxNodes: 6}})
	if err != nil {
		t.Fatal(err)
	}
	// 8 + 2 + 2 + 1 GPUs pending, one ready node with 2 free, one booting:
	// 8 takes the booting node and one new, 2 fits the ready node, the
	// second 2 and the 1 share the rest of a new node.
	d := q.Decide(QueueInput{Now: 0, Pending: []int{2, 8, 1, 2}, Nodes: []NodeUse{{ID: "a", Used: 2}}, Booting: 1})
	if d.Launch != 2 || len(d.Remove) != 0 {
		t.Fatalf("%+v: want 2 launched", d)
	}
	// At the maximum no more nodes.
	d = q.Decide(QueueInput{Now: 60, Pending: []int{16}, Nodes: []NodeUse{{ID: "a", Used: 4}, {ID: "b", Used: 4}, {ID: "c", Used: 4}}})
	if d.Launch != 0 {
		t.Fatalf("%+v: 16 GPUs would exceed 6 nodes", d)
	}
	// Idle for 10 minutes: removed; a busy node is not.
	nodes := []NodeUse{{ID: "a", Used: 0}, {ID: "b", Used: 1}}
	if d = q.Decide(QueueInput{Now: 100, Nodes: nodes}); len(d.Remove) != 0 {
		t.Fatalf("%+v: removed a node idle for 0 s", d)
	}
	if d = q.Decide(QueueInput{Now: 699, Nodes: nodes}); len(d.Remove) != 0 {
		t.Fatalf("%+v: removed a node idle for 599 s", d)
	}
	if d = q.Decide(QueueInput{Now: 700, Nodes: nodes}); !reflect.DeepEqual(d.Remove, []string{"a"}) {
		t.Fatalf("%+v: want a removed", d)
	}
}

func TestQueueKeepsItsMinimum(t *testing.T) {
	q, _ := NewQueue(QueueConfig{Pool: Pool{Name: "gpu", Template: Template{GPUsPerNode: 4}, MinNodes: 2, MaxNodes: 6}, IdleDelay: 60})
	nodes := []NodeUse{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	q.Decide(QueueInput{Now: 0, Nodes: nodes})
	d := q.Decide(QueueInput{Now: 60, Nodes: nodes})
	if len(d.Remove) != 1 {
		t.Fatalf("%+v: want one of three idle nodes removed (minimum 2)", d)
	}
	if d = q.Decide(QueueInput{Now: 0, Nodes: nil}); d.Launch != 2 {
		t.Fatalf("%+v: want 2 launched to reach the minimum", d)
	}
}

func TestDecideLeavesASizePastSaturationEvenInTheBand(t *testing.T) {
	// One job that can use 8 GPUs at efficiency 1: at 4 nodes the utility
	// is 0.5, in the band, but two of the nodes can never be used.
	j := policy.Job{ID: "x", MaxReplicas: 8}
	cfg := onePool(0, 8)
	cfg.ScaleDownDelay = -1
	s, _ := NewScaler(cfg)
	if d := s.Decide(Input{Jobs: []policy.Job{j}, Nodes: map[string]int{"gpu": 4}}); d[0].Desired != 2 {
		t.Fatalf("%+v: want 2, the nodes the job can use", d[0])
	}
}

func TestMarginalRuleStopsWhereTheNextNodeAddsTooLittle(t *testing.T) {
	// One job with serial fraction 0.1: the speedup per GPU of the n-th
	// 4-GPU node falls as n grows; the rule takes the last node adding at
	// least 0.5 (the middle of 0.35..0.65).
	j := policy.Job{ID: "x", MaxReplicas: 64, Goodput: amdahl{a: 0.1, scale: 1}}
	u := Utilities([]policy.Job{j}, Template{GPUsPerNode: 4}, 16)
	m := marginal(u)
	want := 0
	for n := 1; n <= 16; n++ {
		if m[n] >= 0.5 {
			want = n
		}
	}
	if want < 1 || want >= 16 || m[want+1] >= 0.5 {
		t.Fatalf("test premise: marginal utilities %v", m)
	}
	cfg := onePool(0, 16)
	cfg.Rule, cfg.Low, cfg.High = RuleMarginal, 0.35, 0.65
	s, _ := NewScaler(cfg)
	d := s.Decide(Input{Jobs: []policy.Job{j}, Nodes: map[string]int{"gpu": 16}})
	// Shrinking waits for the delay: Wanted is the rule's answer.
	if d[0].Wanted != want {
		t.Fatalf("%+v: want %d nodes (marginal utilities %v)", d[0], want, m)
	}
	// At that size the band holds it: the last node adds >= 0.35, the
	// next would add <= 0.65.
	s2, _ := NewScaler(cfg)
	if d := s2.Decide(Input{Jobs: []policy.Job{j}, Nodes: map[string]int{"gpu": want}}); d[0].Desired != want || !strings.Contains(d[0].Reason, "in the band") {
		t.Fatalf("%+v: want to keep %d", d[0], want)
	}
	if err := (Config{Rule: "median", Pools: cfg.Pools}).Validate(); err == nil || !strings.Contains(err.Error(), `rule: unknown "median"`) {
		t.Errorf("unknown rule: %v", err)
	}
}

func TestSurplus(t *testing.T) {
	ids := []string{"n1", "n2", "n3", "n4"}
	used := map[string]int{"n1": 4, "n2": 0, "n3": 2, "n4": 0}
	for _, tc := range []struct {
		desired int
		want    []string
	}{
		{4, nil},
		{5, nil},
		{3, []string{"n4"}},       // the empty node of the larger ID
		{2, []string{"n2", "n4"}}, // both empty ones
		{1, []string{"n2", "n3", "n4"}},
		{0, []string{"n1", "n2", "n3", "n4"}},
	} {
		if got := Surplus(ids, used, tc.desired); !slices.Equal(got, tc.want) {
			t.Errorf("desired %d: Surplus = %v, want %v", tc.desired, got, tc.want)
		}
	}
	// The caller's slice is left as it was.
	if !slices.Equal(ids, []string{"n1", "n2", "n3", "n4"}) {
		t.Errorf("ids changed: %v", ids)
	}
}
