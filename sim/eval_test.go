package sim_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/pollux"
	"github.com/pollux-nomad/pollux/policy/registry"
	"github.com/pollux-nomad/pollux/results"
	"github.com/pollux-nomad/pollux/sim"
	"github.com/pollux-nomad/pollux/workload"
)

// TestEval is the measurement harness behind the Quality and Performance
// tables: it runs a grid of simulations and prints one JSON line per run.
// It is skipped unless POLLUX_EVAL lists the workloads, comma-separated:
// "workload-N" (an artifact workload), "philly:START:SEED" (160 jobs drawn
// from the Philly trace, 8-hour window from START hours) or
// "big:NODES:JOBS:HOURS:SEED[:START]" (JOBS jobs drawn over an HOURS-hour
// window from START hours, default 2, on NODES nodes of 4 GPUs). POLLUX_EVAL_SEEDS lists Pollux seeds (default
// 1), POLLUX_EVAL_POLICIES the policies (default pollux),
// POLLUX_EVAL_CONFIG a registry.PolluxConfig as JSON (Seed is overridden),
// POLLUX_EVAL_APP_RESTART per-application restart delays
// ("imagenet=250s,cifar10=25s", sim.Config.AppRestartDelay) and
// POLLUX_EVAL_EXPLORE sim.Config.ExploreFactor, POLLUX_EVAL_START
// sim.Config.ExploreStart, POLLUX_EVAL_RULES=sia
// Sia's simulator rules on a T4 cluster of the same size (as pollux
// simulate -rules sia; artifact workloads only) and POLLUX_EVAL_LABEL a
// label copied into every line.
func TestEval(t *testing.T) {
	spec := os.Getenv("POLLUX_EVAL")
	if spec == "" {
		t.Skip("set POLLUX_EVAL to run the measurement harness")
	}
	seeds := []int64{1}
	if s := os.Getenv("POLLUX_EVAL_SEEDS"); s != "" {
		seeds = nil
		for _, f := range strings.Split(s, ",") {
			v, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				t.Fatalf("POLLUX_EVAL_SEEDS: %v", err)
			}
			seeds = append(seeds, v)
		}
	}
	policies := []string{"pollux"}
	if s := os.Getenv("POLLUX_EVAL_POLICIES"); s != "" {
		policies = strings.Split(s, ",")
	}
	var base registry.PolluxConfig
	if s := os.Getenv("POLLUX_EVAL_CONFIG"); s != "" {
		if err := json.Unmarshal([]byte(s), &base); err != nil {
			t.Fatalf("POLLUX_EVAL_CONFIG: %v", err)
		}
	}
	label := os.Getenv("POLLUX_EVAL_LABEL")
	var appDelay map[string]time.Duration
	if s := os.Getenv("POLLUX_EVAL_APP_RESTART"); s != "" {
		appDelay = map[string]time.Duration{}
		for _, kv := range strings.Split(s, ",") {
			app, dur, _ := strings.Cut(kv, "=")
			d, err := time.ParseDuration(dur)
			if err != nil {
				t.Fatalf("POLLUX_EVAL_APP_RESTART %q: %v", kv, err)
			}
			appDelay[app] = d
		}
	}
	appsOf := applications(t)
	siaRules := os.Getenv("POLLUX_EVAL_RULES") == "sia"
	if siaRules {
		var err error
		if appsOf, err = sim.LoadTypedApplications(sim.RulesSia); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	for _, w := range strings.Split(spec, ",") {
		jobs, name, cfg := evalWorkload(t, w)
		if siaRules {
			var err error
			if jobs, name, err = sim.LoadWorkload(w, appsOf); err != nil {
				t.Fatalf("POLLUX_EVAL_RULES=sia takes embedded workloads: %v", err)
			}
			cfg.Rules = sim.RulesSia
			cfg.Cluster = []sim.NodeGroup{{Type: "t4", Nodes: cmp.Or(cfg.Nodes, 16), GPUsPerNode: 4}}
			cfg.Nodes = 0
		}
		cfg.AppRestartDelay = appDelay
		if e := os.Getenv("POLLUX_EVAL_EXPLORE"); e != "" {
			v, err := strconv.Atoi(e)
			if err != nil {
				t.Fatalf("POLLUX_EVAL_EXPLORE: %v", err)
			}
			cfg.ExploreFactor = v
		}
		if e := os.Getenv("POLLUX_EVAL_START"); e != "" {
			v, err := strconv.Atoi(e)
			if err != nil {
				t.Fatalf("POLLUX_EVAL_START: %v", err)
			}
			cfg.ExploreStart = v
		}
		for _, p := range policies {
			for _, seed := range seeds {
				if p != "pollux" && seed != seeds[0] {
					continue
				}
				t.Run(fmt.Sprintf("%s/%s/%d", name, p, seed), func(t *testing.T) {
					t.Parallel()
					cpu <- struct{}{}
					defer func() { <-cpu }()
					var pol policy.Policy
					var err error
					if p == "pollux" {
						c := base
						c.Seed = seed
						pol, err = pollux.New(c)
					} else {
						pol, err = sim.NewPolicy(p, seed)
					}
					if err != nil {
						t.Fatal(err)
					}
					s, err := sim.New(cfg, appsOf, jobs, name, pol)
					if err != nil {
						t.Fatal(err)
					}
					r, err := s.Run(context.Background(), nil)
					if err != nil {
						t.Fatal(err)
					}
					sum := results.Summarize(r)
					byApp := map[string][2]float64{} // restarts, jobs
					for _, j := range r.Jobs {
						v := byApp[j.Application]
						byApp[j.Application] = [2]float64{v[0] + float64(j.Restarts), v[1] + 1}
					}
					rstApp := map[string]float64{}
					for app, v := range byApp {
						rstApp[app] = v[0] / v[1]
					}
					line, _ := json.Marshal(map[string]any{
						"label": label, "workload": name, "policy": p, "seed": seed,
						"gpus": r.TotalGPUs, "jobs": sum.Jobs, "completed": sum.Completed,
						"avg_jct": sum.AvgJCT, "p99_jct": sum.P99JCT, "makespan": sum.Makespan,
						"restarts_per_job": sum.RestartsPerJob, "opt_ms_median": sum.OptimizeMsMedian,
						"opt_ms_p95": sum.OptimizeMsP95, "rounds": sum.Rounds, "wall_s": sum.WallSeconds, "restarts_by_app": rstApp,
						"p50_jct": sum.P50JCT, "reallocations": s.Reallocations(),
					})
					mu.Lock()
					fmt.Println("EVAL " + string(line))
					mu.Unlock()
				})
			}
		}
	}
}

// evalWorkload resolves one POLLUX_EVAL entry.
func evalWorkload(t *testing.T, w string) ([]workload.Job, string, sim.Config) {
	t.Helper()
	f := strings.Split(w, ":")
	num := func(i int) float64 {
		if i >= len(f) {
			t.Fatalf("workload %q: missing field %d", w, i)
		}
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			t.Fatalf("workload %q: %v", w, err)
		}
		return v
	}
	switch f[0] {
	case "philly":
		jobs, name := generatedN(t, 160, num(1), 8, uint64(num(2)))
		return jobs, name, sim.Config{}
	case "big":
		nodes, n, hours, seed := int(num(1)), int(num(2)), num(3), uint64(num(4))
		start := 2.0
		if len(f) > 5 {
			start = num(5)
		}
		jobs, _ := generatedN(t, n, start, hours, seed)
		name := fmt.Sprintf("big-%dgpus-%djobs-%gh-seed%d", nodes*4, n, hours, seed)
		if start != 2 {
			name += fmt.Sprintf("-start%g", start)
		}
		return jobs, name, sim.Config{Nodes: nodes}
	default:
		i, err := strconv.Atoi(strings.TrimPrefix(w, "workload-"))
		if err != nil {
			t.Fatalf("workload %q: want workload-N, philly:START:SEED or big:NODES:JOBS:HOURS:SEED", w)
		}
		jobs, name := artifactWorkload(t, i)
		return jobs, name, sim.Config{}
	}
}
