package sim_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/pollux-nomad/pollux/results"
	"github.com/pollux-nomad/pollux/sim"
	"github.com/pollux-nomad/pollux/workload"
)

// TestCloudDiag compares where the GPU-hours go on one workload:
// POLLUX_CLOUD_DIAG names it (workload-N or philly-START-SEED);
// POLLUX_CLOUD_DIAG_SETTINGS lists settings as name=rule:low:high (rule
// "fixed" for the fixed 16 x 4, "queue" for Tiresias with the queue
// autoscaler). It prints per application the jobs' GPU-hours and JCTs and
// per hour the GPUs up and in use.
func TestCloudDiag(t *testing.T) {
	spec := os.Getenv("POLLUX_CLOUD_DIAG")
	if spec == "" {
		t.Skip("set POLLUX_CLOUD_DIAG to compare cloud settings on one workload")
	}
	var jobs []workload.Job
	var name string
	switch {
	case spec == "imagenet":
		jobs, name = []workload.Job{{Name: "imagenet-0", Application: "imagenet", NumReplicas: 32, BatchSize: 6400}}, "imagenet-alone"
	case strings.HasPrefix(spec, "workload-"):
		i, _ := strconv.Atoi(strings.TrimPrefix(spec, "workload-"))
		jobs, name = artifactWorkload(t, i)
	default:
		var start float64
		var seed uint64
		fmt.Sscanf(spec, "philly-start%f-seed%d", &start, &seed)
		jobs, name = generated(t, start, seed)
	}
	settings := os.Getenv("POLLUX_CLOUD_DIAG_SETTINGS")
	if settings == "" {
		settings = "fixed=fixed,auto=::"
	}
	maxNodes := 32
	if spec == "imagenet" {
		maxNodes = 16
	}
	for _, st := range strings.Split(settings, ",") {
		label, def, _ := strings.Cut(st, "=")
		parts := strings.Split(def, ":")
		cs := cloudSetting{name: label, policy: "pollux"}
		switch parts[0] {
		case "fixed":
		case "queue":
			cs.policy, cs.cloud = "tiresias", autoscaled(sim.StrategyQueue, "", 0, 0)
		default:
			lo, _ := strconv.ParseFloat(parts[1], 64)
			hi, _ := strconv.ParseFloat(parts[2], 64)
			cs.cloud = func() *sim.Cloud {
				c := autoscaled(sim.StrategyUtility, parts[0], lo, hi)()
				c.MaxNodes = maxNodes
				return c
			}
		}
		pol, err := sim.NewPolicy(cs.policy, 1)
		if err != nil {
			t.Fatal(err)
		}
		cfg := sim.Config{}
		if cs.cloud != nil {
			cfg.Cloud = cs.cloud()
		}
		s, err := sim.New(cfg, applications(t), jobs, name, pol)
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.Run(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		sum := results.Summarize(r)
		var sb strings.Builder
		fmt.Fprintf(&sb, "\n== %s (%s): avg JCT %.0f s, GPU-hours %.1f, makespan %.1f h, restarts/job %.2f\n", label, def, sum.AvgJCT, sum.GPUHours, sum.Makespan/3600, sum.RestartsPerJob)
		type agg struct {
			n            int
			gpuh, jct, w float64
		}
		byApp := map[string]*agg{}
		for _, j := range r.Jobs {
			a := byApp[j.Application]
			if a == nil {
				a = &agg{}
				byApp[j.Application] = a
			}
			a.n++
			a.gpuh += j.GPUSeconds / 3600
			a.jct += (j.Completion - j.Submitted) / 3600
		}
		var appsSorted []string
		for a := range byApp {
			appsSorted = append(appsSorted, a)
		}
		sort.Strings(appsSorted)
		for _, a := range appsSorted {
			v := byApp[a]
			fmt.Fprintf(&sb, "  %-12s n=%3d GPU-h %7.1f  sum JCT %7.1f h\n", a, v.n, v.gpuh, v.jct)
		}
		// Per hour: mean GPUs up, mean GPUs in use.
		hours := map[int][3]float64{}
		maxH := 0
		for _, smp := range r.Timeline {
			h := int(smp.Time / 3600)
			v := hours[h]
			v[0] += float64(smp.GPUsUp)
			v[1] += float64(smp.GPUsInUse)
			v[2]++
			hours[h] = v
			maxH = max(maxH, h)
		}
		sb.WriteString("  hour: up/used\n  ")
		for h := 0; h <= maxH; h++ {
			v := hours[h]
			if v[2] == 0 {
				continue
			}
			up := v[0] / v[2]
			if r.Autoscaled == false {
				up = float64(r.TotalGPUs)
			}
			fmt.Fprintf(&sb, "%d:%.0f/%.0f ", h, up, v[1]/v[2])
		}
		sb.WriteString("\n")
		if len(r.Jobs) == 1 {
			last := [2]int{-1, -1}
			for _, smp := range r.Timeline {
				if v := [2]int{smp.GPUsUp, smp.GPUsInUse}; v != last {
					fmt.Fprintf(&sb, "  t=%.2fh up %d used %d\n", smp.Time/3600, v[0], v[1])
					last = v
				}
			}
		}
		t.Log(sb.String())
	}
}

// TestCloudBound estimates the least GPU-hours any schedule of one
// workload could spend at a given average JCT: each job alone on a
// dedicated constant allocation of k GPUs (no waiting, no boot, no
// restarts for resizing), k chosen per job to minimise GPU-hours plus
// lambda times JCT, swept over lambda. POLLUX_CLOUD_BOUND names the
// workload. The curves come from single-job Pollux runs per application.
func TestCloudBound(t *testing.T) {
	spec := os.Getenv("POLLUX_CLOUD_BOUND")
	if spec == "" {
		t.Skip("set POLLUX_CLOUD_BOUND to estimate a workload's cost frontier")
	}
	sizes := []int{1, 2, 4, 8, 16, 32, 64}
	type pt struct{ jct, gpuh float64 }
	curves := map[string][]pt{}
	for _, w := range strings.Split(spec, ",") {
		i, _ := strconv.Atoi(strings.TrimPrefix(w, "workload-"))
		jobs, _ := artifactWorkload(t, i)
		count := map[string]int{}
		for _, j := range jobs {
			count[j.Application]++
			if _, ok := curves[j.Application]; ok {
				continue
			}
			var c []pt
			for _, k := range sizes {
				cfg := sim.Config{Nodes: 1, GPUsPerNode: k}
				if k > 4 {
					cfg = sim.Config{Nodes: k / 4, GPUsPerNode: 4}
				}
				pol, err := sim.NewPolicy("pollux", 1)
				if err != nil {
					t.Fatal(err)
				}
				one := j
				one.Time = 0
				s, err := sim.New(cfg, applications(t), []workload.Job{one}, "alone", pol)
				if err != nil {
					t.Fatal(err)
				}
				r, err := s.Run(context.Background(), nil)
				if err != nil {
					t.Fatal(err)
				}
				// The GPUs the job held, not the cluster's: a lower bound.
				jr := r.Jobs[0]
				c = append(c, pt{(jr.Completion - jr.Submitted) / 3600, jr.GPUSeconds / 3600})
			}
			curves[j.Application] = c
			var sb strings.Builder
			for n, p := range c {
				fmt.Fprintf(&sb, " k=%d: %.2f h %.1f GPU-h;", sizes[n], p.jct, p.gpuh)
			}
			t.Logf("%s:%s", j.Application, sb.String())
		}
		var sb strings.Builder
		for _, lambda := range []float64{0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 1e9} {
			var gpuh, jct float64
			for app, n := range count {
				best := math.Inf(1)
				var bp pt
				for _, p := range curves[app] {
					if c := p.gpuh + lambda*p.jct; c < best {
						best, bp = c, p
					}
				}
				gpuh += float64(n) * bp.gpuh
				jct += float64(n) * bp.jct
			}
			fmt.Fprintf(&sb, "%s lambda %6g: GPU-hours %.1f, avg JCT %.0f s\n", w, lambda, gpuh, jct*3600/float64(len(jobs)))
		}
		t.Log("\n" + sb.String())
	}
}
