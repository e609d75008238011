package jobs_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pollux-nomad/pollux/jobs"
	"github.com/pollux-nomad/pollux/jobs/statustext"
	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/registry"
)

const goodAutoscaling = `
interval = "60s"
autoscaling {
  low              = 0.4
  high             = 0.7
  scale_down_delay = "5m"
  pool "gpu" {
    gpus_per_node = 4
    max_nodes     = 8
  }
  pool "gpu" {
    gpu_type      = "a100"
    gpus_per_node = 8
    min_nodes     = 1
    max_nodes     = 2
  }
}
`

func TestParseAutoscaleHCL(t *testing.T) {
	cfg, err := jobs.ParseAutoscaleHCL([]byte(goodAutoscaling), "agent.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Enabled || cfg.Scaler.Low != 0.4 || cfg.Scaler.High != 0.7 || cfg.Scaler.ScaleDownDelay != 300 || len(cfg.Scaler.Pools) != 2 {
		t.Fatalf("got %+v", cfg)
	}
	if p := cfg.Scaler.Pools[1]; p.Name != "gpu/a100" || p.Template.GPUsPerNode != 8 || p.MinNodes != 1 || p.MaxNodes != 2 {
		t.Errorf("second pool %+v", p)
	}
	if err := cfg.CheckPools([]string{"default", "gpu"}); err != nil {
		t.Errorf("known pools refused: %v", err)
	}
	if err := cfg.CheckPools([]string{"default"}); err == nil || !strings.Contains(err.Error(), `autoscaling.pool "gpu": unknown node pool`) {
		t.Errorf("unknown pool: %v", err)
	}
	none, err := jobs.ParseAutoscaleHCL([]byte(`interval = "60s"`), "agent.hcl")
	if err != nil || none.Enabled {
		t.Errorf("no block: %+v, %v", none, err)
	}
}

func TestParseAutoscaleHCLRefusesBadValuesWithFileLineField(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"autoscaling {\n  high = 1.5\n  pool \"gpu\" {\n    gpus_per_node = 4\n    max_nodes = 2\n  }\n}\n", "agent.hcl:2,10-13: autoscaling.high: 1.5 is outside (0, 1)"},
		{"autoscaling {\n  low = 0\n  pool \"gpu\" {\n    gpus_per_node = 4\n    max_nodes = 2\n  }\n}\n", "agent.hcl:2,9-10: autoscaling.low: 0 is outside (0, 1)"},
		{"autoscaling {\n  pool \"gpu\" {\n    gpus_per_node = 4\n    min_nodes = 5\n    max_nodes = 2\n  }\n}\n", "agent.hcl:4,17-18: autoscaling.pool \"gpu\".min_nodes: 5 exceeds max_nodes 2"},
		{"autoscaling {\n  scale_down_delay = \"soon\"\n  pool \"gpu\" {\n    gpus_per_node = 4\n    max_nodes = 2\n  }\n}\n", "agent.hcl:2,22-28: autoscaling.scale_down_delay"},
		{"autoscaling {\n  pool \"gpu\" {\n    gpus_per_node = 4\n    max_nodes = 2\n    colour = 1\n  }\n}\n", "agent.hcl:5,5-11: Unsupported argument"},
		{"autoscaling {\n  low = 0.5\n}\n", "autoscaling: at least one pool is needed"},
		{"autoscaling {\n  low = 0.7\n  high = 0.6\n  pool \"gpu\" {\n    gpus_per_node = 4\n    max_nodes = 2\n  }\n}\n", "autoscaling.low: 0.7 must be below high 0.6"},
	} {
		_, err := jobs.ParseAutoscaleHCL([]byte(tc.src), "agent.hcl")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n got %v\nwant %q", tc.src, err, tc.want)
		}
	}
}

func TestClusterAutoscalerPublishesTheDesiredCount(t *testing.T) {
	cfg, err := jobs.ParseAutoscaleHCL([]byte(goodAutoscaling), "agent.hcl")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	a, err := jobs.NewClusterAutoscaler(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	// Six jobs that scale linearly to 4 GPUs on the 4-GPU pool with one
	// node: they want six nodes.
	var js []policy.Job
	for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
		js = append(js, policy.Job{ID: id, MaxReplicas: 4})
	}
	st := a.Round(time.Unix(1000, 0), js, []jobs.PoolNode{{NodePool: "gpu", ID: "n1"}, {NodePool: "gpu", Type: "a100", ID: "n2"}}, policy.Allocations{"a": {"n1"}})
	if len(st) != 2 || st[0].Desired != 6 || st[0].Nodes != 1 || st[1].Desired != 1 {
		t.Fatalf("status %+v", st)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "pollux_cluster_desired_nodes" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			got[l["node_pool"]+"/"+l["gpu_type"]] = m.GetGauge().GetValue()
		}
	}
	if want := map[string]float64{"gpu/": 6, "gpu/a100": 1}; len(got) != 2 || got["gpu/"] != want["gpu/"] || got["gpu/a100"] != want["gpu/a100"] {
		t.Errorf("pollux_cluster_desired_nodes = %v, want %v (the a100 pool at its minimum)", got, want)
	}
	if s := a.Status(); len(s) != 2 || s[0].Reason == "" {
		t.Errorf("Status() = %+v", s)
	}
}

// TestRoundPublishesDesiredNodes: with an autoscaling block in the agent's
// configuration, each round computes the pool's desired node count from
// the jobs the policy saw, publishes it as pollux_cluster_desired_nodes and
// puts it, with the utilities and the reason, in the status; without the
// block the series goes away.
func TestRoundPublishesDesiredNodes(t *testing.T) {
	f := newFixture(t, map[string]int{"n1": 4, "n2": 4})
	cfg, err := jobs.DefaultConfig().MergeHCL([]byte(`
autoscaling {
  pool "default" {
    gpus_per_node = 4
    max_nodes     = 8
  }
}
`), "agent.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Autoscale.Enabled {
		t.Fatal("the autoscaling block was not read")
	}
	// Three jobs without a model: each speeds up linearly to its first
	// allocation's cap (4 GPUs), so three 4-GPU nodes are wanted.
	for _, id := range []string{"a", "b", "c"} {
		f.submit(id, 4)
	}
	f.policy.set(map[string][]string{"a": {"n1", "n1", "n1", "n1"}, "b": {"n2", "n2", "n2", "n2"}})
	tel := jobs.NewTelemetry()
	c, err := jobs.New(cfg, jobs.Options{
		Cluster: f.cluster, KV: f.kv, Now: f.clock.Now, Instance: "i1", Fence: f.lock.Verify, Telemetry: tel,
		NewPolicy: func(string, registry.Settings) (policy.Policy, error) { return f.policy, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	st := f.round(c)
	if len(st.Autoscaling) != 1 {
		t.Fatalf("autoscaling status: %+v", st.Autoscaling)
	}
	a := st.Autoscaling[0]
	if a.NodePool != "default" || a.Nodes != 2 || a.Desired != 3 || a.Reason == "" || a.UtilityDesired <= 0 {
		t.Errorf("autoscaling status: %+v (want pool default, 2 nodes, 3 desired, a reason)", a)
	}
	if s := st.String(); !strings.Contains(s, "autoscaling: pool default: 2 nodes, desired 3") {
		t.Errorf("status text lacks the autoscaling line:\n%s", s)
	}
	var table strings.Builder
	if err := statustext.WriteStatusTable(&table, st, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "autoscaling: pool default: 2 nodes, desired 3; utility ") {
		t.Errorf("pollux status lacks the autoscaling line:\n%s", table.String())
	}
	var b strings.Builder
	if err := tel.WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	if want := `pollux_cluster_desired_nodes{gpu_type="",node_pool="default"} 3`; !strings.Contains(b.String(), want) {
		t.Errorf("metrics lack %s", want)
	}
	if err := c.SetConfig(jobs.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Minute)
	if st := f.round(c); len(st.Autoscaling) != 0 {
		t.Errorf("autoscaling status without the block: %+v", st.Autoscaling)
	}
	b.Reset()
	if err := tel.WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "pollux_cluster_desired_nodes{") {
		t.Errorf("the desired count is still published without the block")
	}
}

// TestMergeHCLRefusesBadAutoscaling: a bad autoscaling value in the
// agent's configuration file is refused with the file, line and field.
func TestMergeHCLRefusesBadAutoscaling(t *testing.T) {
	_, err := jobs.DefaultConfig().MergeHCL([]byte(`interval = "60s"
autoscaling {
  low = 1.5
  pool "gpu" {
    gpus_per_node = 4
    min_nodes     = 9
    max_nodes     = 8
  }
}
`), "agent.hcl")
	if err == nil {
		t.Fatal("bad autoscaling accepted")
	}
	for _, want := range []string{"agent.hcl:3", "autoscaling.low", "agent.hcl:6", "min_nodes: 9 exceeds max_nodes 8"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

// TestRoundEmptiesSurplusNodes: when a pool is above its desired count,
// the round names the nodes to empty (those holding the fewest GPUs) and
// the next round offers the policy no GPU on them, so that the
// autoscaler, which removes empty nodes, stops no job; once the pool is
// at its desired count again nothing is emptied.
func TestRoundEmptiesSurplusNodes(t *testing.T) {
	f := newFixture(t, map[string]int{"n1": 4, "n2": 4, "n3": 4})
	cfg, err := jobs.DefaultConfig().MergeHCL([]byte(`
autoscaling {
  scale_down_delay = "0s"
  pool "default" {
    gpus_per_node = 4
    min_nodes     = 1
    max_nodes     = 3
  }
}
`), "agent.hcl")
	if err != nil {
		t.Fatal(err)
	}
	// One job that scales to its first allocation's cap (4 GPUs): one node
	// is wanted. It runs on n1 and n3.
	f.submit("a", 4)
	f.policy.set(map[string][]string{"a": {"n1", "n1", "n3", "n3"}})
	c, err := jobs.New(cfg, jobs.Options{
		Cluster: f.cluster, KV: f.kv, Now: f.clock.Now, Instance: "i1", Fence: f.lock.Verify,
		NewPolicy: func(string, registry.Settings) (policy.Policy, error) { return f.policy, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	st := f.round(c)
	if len(st.Autoscaling) != 1 || st.Autoscaling[0].Desired != 1 {
		t.Fatalf("autoscaling status %+v, want one pool with 1 node desired", st.Autoscaling)
	}
	// n2 holds nothing, n1 and n3 two GPUs each: n2 and, of the tie, n3.
	if got := st.Autoscaling[0].Emptying; !slices.Equal(got, []string{"n2", "n3"}) {
		t.Fatalf("emptying %v, want [n2 n3]", got)
	}
	f.policy.set(map[string][]string{"a": {"n1", "n1", "n1", "n1"}})
	f.clock.Advance(time.Minute)
	st = f.round(c)
	free := map[string]int{}
	for _, n := range f.policy.lastInput().Nodes {
		free[n.ID] = n.GPUs
	}
	if free["n1"] != 4 || free["n2"] != 0 || free["n3"] != 0 {
		t.Errorf("the policy was offered %v, want all of n1 and nothing on the emptied n2, n3", free)
	}
	// The autoscaler removes the two nodes: nothing left to empty, and
	// every GPU of the pool is offered again.
	f.cluster.RemoveNode("n2")
	f.cluster.RemoveNode("n3")
	f.clock.Advance(time.Minute)
	st = f.round(c)
	if len(st.Autoscaling) != 1 || len(st.Autoscaling[0].Emptying) != 0 || st.Autoscaling[0].Nodes != 1 {
		t.Errorf("after the removal: %+v", st.Autoscaling)
	}
	f.clock.Advance(time.Minute)
	f.round(c)
	if n := f.policy.lastInput().Nodes; len(n) != 1 || n[0].GPUs != 4 {
		t.Errorf("the policy was offered %+v, want n1's 4 GPUs", n)
	}
}
