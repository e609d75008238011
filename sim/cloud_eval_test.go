package sim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/results"
	"github.com/pollux-nomad/pollux/sim"
	"github.com/pollux-nomad/pollux/workload"
)

// cloudSetting is one way to run a workload in the cost evaluation.
type cloudSetting struct {
	name, policy string
	cloud        func() *sim.Cloud // nil: the fixed 16 x 4 cluster
}

func autoscaled(strategy, rule string, low, high float64) func() *sim.Cloud {
	return func() *sim.Cloud {
		c := &sim.Cloud{MinNodes: 0, MaxNodes: 32, Boot: sim.DefaultNodeBoot, Strategy: strategy}
		c.Scaler.Rule, c.Scaler.Low, c.Scaler.High = rule, low, high
		return c
	}
}

// cloudSettings: Pollux on the testbed's fixed 16 x 4; Pollux autoscaled
// 0..32 x 4 with the default autoscaler (the marginal rule, band 0.5..0.8),
// with AdaptDL's band on the average utility, and with a higher marginal
// band (a smaller cluster); and baseline (b), Tiresias' rigid jobs with the
// queue-driven autoscaler.
var cloudSettings = []cloudSetting{
	{name: "pollux-fixed", policy: "pollux"},
	{name: "pollux-auto", policy: "pollux", cloud: autoscaled(sim.StrategyUtility, "", 0, 0)},
	{name: "pollux-auto-adaptdl", policy: "pollux", cloud: autoscaled(sim.StrategyUtility, "average", 0.35, 0.65)},
	{name: "pollux-auto-marg-high", policy: "pollux", cloud: autoscaled(sim.StrategyUtility, "marginal", 0.65, 0.9)},
	{name: "tiresias-auto", policy: "tiresias", cloud: autoscaled(sim.StrategyQueue, "", 0, 0)},
}

// heldOut are generated workloads at windows and seeds that neither the
// artifact nor TestQuality uses.
var heldOut = []struct {
	start float64
	seed  uint64
}{{200, 21}, {400, 22}, {600, 23}}

func runCloudSetting(t *testing.T, st cloudSetting, name string, jobs []workload.Job) results.Summary {
	t.Helper()
	pol, err := sim.NewPolicy(st.policy, 1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := sim.Config{}
	if st.cloud != nil {
		cfg.Cloud = st.cloud()
	}
	s, err := sim.New(cfg, applications(t), jobs, name, pol)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Run(context.Background(), nil)
	if err != nil {
		t.Fatalf("%s on %s: %v", st.name, name, err)
	}
	return results.Summarize(r)
}

// TestCloudCost is the cloud-mode evaluation (make cloud): GPU-hours and
// average JCT of every setting on the eight artifact workloads and three
// held-out generated ones, one simulation at a time. It needs
// POLLUX_CLOUD_EVAL=1 (about 25 minutes on two shared cores); with
// POLLUX_CLOUD_OUT=DIR it also writes DIR/cloud-summaries.jsonl, and
// POLLUX_CLOUD_SETTINGS=a,b runs those settings only (the comparisons
// need pollux-fixed, pollux-auto and tiresias-auto).
func TestCloudCost(t *testing.T) {
	if os.Getenv("POLLUX_CLOUD_EVAL") == "" {
		t.Skip("set POLLUX_CLOUD_EVAL=1 (make cloud) to run the cloud cost evaluation")
	}
	type wl struct {
		name string
		jobs []workload.Job
	}
	var wls []wl
	for i := 1; i <= 8; i++ {
		jobs, name := artifactWorkload(t, i)
		wls = append(wls, wl{name, jobs})
	}
	for _, g := range heldOut {
		jobs, name := generated(t, g.start, g.seed)
		wls = append(wls, wl{name, jobs})
	}
	var out *json.Encoder
	if dir := os.Getenv("POLLUX_CLOUD_OUT"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(filepath.Join(dir, "cloud-summaries.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		out = json.NewEncoder(f)
	}
	settings := cloudSettings
	if only := os.Getenv("POLLUX_CLOUD_SETTINGS"); only != "" {
		settings = nil
		for _, st := range cloudSettings {
			if slices.Contains(strings.Split(only, ","), st.name) {
				settings = append(settings, st)
			}
		}
	}
	sums := map[string]map[string]results.Summary{}
	for _, w := range wls {
		sums[w.name] = map[string]results.Summary{}
		for _, st := range settings {
			start := time.Now()
			s := runCloudSetting(t, st, w.name, w.jobs)
			if s.Completed != s.Jobs {
				t.Errorf("%s on %s: %d of %d jobs completed", st.name, w.name, s.Completed, s.Jobs)
			}
			sums[w.name][st.name] = s
			t.Logf("%-22s %-22s avg JCT %8.1f s  GPU-hours %8.1f  restarts/job %.2f  (%.0f s)", w.name, st.name, s.AvgJCT, s.GPUHours, s.RestartsPerJob, time.Since(start).Seconds())
			if out != nil {
				if err := out.Encode(map[string]any{"setting": st.name, "summary": s}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%-24s", "workload")
	for _, st := range settings {
		fmt.Fprintf(&sb, " | %-21s", st.name+" JCT s / GPU-h")
	}
	sb.WriteString("\n")
	mean := map[string][2]float64{}
	for _, w := range wls {
		fmt.Fprintf(&sb, "%-24s", w.name)
		for _, st := range settings {
			s := sums[w.name][st.name]
			fmt.Fprintf(&sb, " | %9.0f / %9.1f", s.AvgJCT, s.GPUHours)
			m := mean[st.name]
			m[0] += s.AvgJCT / float64(len(wls))
			m[1] += s.GPUHours / float64(len(wls))
			mean[st.name] = m
		}
		sb.WriteString("\n")
	}
	fmt.Fprintf(&sb, "%-24s", "mean")
	for _, st := range settings {
		fmt.Fprintf(&sb, " | %9.0f / %9.1f", mean[st.name][0], mean[st.name][1])
	}
	sb.WriteString("\n")
	base := mean["pollux-fixed"]
	if base[0] == 0 || mean["pollux-auto"][0] == 0 || mean["tiresias-auto"][0] == 0 {
		t.Log(sb.String())
		t.Fatal("the comparisons need pollux-fixed, pollux-auto and tiresias-auto")
	}
	for _, st := range settings {
		m := mean[st.name]
		fmt.Fprintf(&sb, "%-22s vs pollux-fixed: JCT %.3fx, GPU-hours %.3fx\n", st.name, m[0]/base[0], m[1]/base[1])
	}
	t.Log(sb.String())
	auto, rigid := mean["pollux-auto"], mean["tiresias-auto"]
	if auto[1] > 0.75*base[1] || auto[0] > 1.10*base[0] {
		t.Errorf("pollux-auto: GPU-hours %.3fx (want <= 0.75x) at avg JCT %.3fx (want <= 1.10x) of pollux on the fixed 16 x 4", auto[1]/base[1], auto[0]/base[0])
	}
	if auto[0] >= rigid[0] || auto[1] >= rigid[1] {
		t.Errorf("pollux-auto (JCT %.0f s, %.1f GPU-h) does not beat tiresias-auto (JCT %.0f s, %.1f GPU-h) on both", auto[0], auto[1], rigid[0], rigid[1])
	}
}

// TestCloudImageNetJob is the single-job case: one ImageNet job of the
// artifact's workloads alone, autoscaled 0..16 nodes, against fixed
// clusters of 1..16 nodes; its (time, GPU-hours) point must lie on or
// below the fixed sizes' curve (the GPU-hours interpolated at its time).
func TestCloudImageNetJob(t *testing.T) {
	if os.Getenv("POLLUX_CLOUD_EVAL") == "" {
		t.Skip("set POLLUX_CLOUD_EVAL=1 (make cloud) to run the cloud cost evaluation")
	}
	jobs := []workload.Job{{Name: "imagenet-0", Time: 0, Application: "imagenet", NumReplicas: 32, BatchSize: 6400}}
	run := func(cfg sim.Config) results.Summary {
		pol, err := sim.NewPolicy("pollux", 1)
		if err != nil {
			t.Fatal(err)
		}
		s, err := sim.New(cfg, applications(t), jobs, "imagenet-alone", pol)
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.Run(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return results.Summarize(r)
	}
	type point struct{ jct, gpuh float64 }
	var fixed []point
	var sb strings.Builder
	sb.WriteString("\nnodes   JCT h  GPU-hours\n")
	for n := 1; n <= 16; n++ {
		s := run(sim.Config{Nodes: n, GPUsPerNode: 4})
		fixed = append(fixed, point{s.AvgJCT, s.GPUHours})
		fmt.Fprintf(&sb, "%5d %7.2f %10.1f\n", n, s.AvgJCT/3600, s.GPUHours)
	}
	a := run(sim.Config{Cloud: &sim.Cloud{MinNodes: 0, MaxNodes: 16, Boot: sim.DefaultNodeBoot}})
	fmt.Fprintf(&sb, "auto  %7.2f %10.1f\n", a.AvgJCT/3600, a.GPUHours)
	// The fixed curve at the autoscaled JCT: linear between the two fixed
	// sizes whose JCTs bracket it (JCT falls as nodes grow).
	curve := math.NaN()
	for i := 0; i+1 < len(fixed); i++ {
		hi, lo := fixed[i], fixed[i+1]
		if a.AvgJCT <= hi.jct && a.AvgJCT >= lo.jct {
			f := (hi.jct - a.AvgJCT) / (hi.jct - lo.jct)
			curve = hi.gpuh + f*(lo.gpuh-hi.gpuh)
			break
		}
	}
	fmt.Fprintf(&sb, "fixed curve at the autoscaled JCT: %.1f GPU-hours\n", curve)
	t.Log(sb.String())
	if math.IsNaN(curve) {
		t.Errorf("autoscaled JCT %.0f s is outside the fixed sizes' JCTs", a.AvgJCT)
	} else if a.GPUHours > curve*1.0001 {
		t.Errorf("autoscaled point (%.0f s, %.1f GPU-h) lies above the fixed curve (%.1f GPU-h)", a.AvgJCT, a.GPUHours, curve)
	}
}
