package jobs_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pollux-nomad/pollux/jobs"
	"github.com/pollux-nomad/pollux/policy"
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
		{"autoscaling {\n  low = 0.5\n}\n", "autoscaling: at least one pool block is needed"},
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
