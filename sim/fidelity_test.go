package sim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/pollux-nomad/pollux/apps"
	"github.com/pollux-nomad/pollux/data"
	"github.com/pollux-nomad/pollux/results"
	"github.com/pollux-nomad/pollux/sim"
	"github.com/pollux-nomad/pollux/workload"
)

// published is the artifact's average JCT per policy and workload
// (data/reference-results.json).
func published(t *testing.T) map[string]map[string]float64 {
	t.Helper()
	raw, err := data.FS.ReadFile("reference-results.json")
	if err != nil {
		t.Fatalf("read reference results: %v", err)
	}
	var doc struct {
		AvgJCT map[string]map[string]float64 `json:"avg_jct_s"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("parse reference results: %v", err)
	}
	return doc.AvgJCT
}

var (
	appsOnce sync.Once
	appsVal  map[string]*apps.Application
	appsErr  error

	runMu    sync.Mutex
	runCache = map[string]*cachedRun{}
	// cpu limits concurrent simulations to the machine's cores.
	cpu = make(chan struct{}, max(runtime.NumCPU(), 1))
)

type cachedRun struct {
	once sync.Once
	run  results.Run
	sum  results.Summary
	err  error
}

func applications(t testing.TB) map[string]*apps.Application {
	t.Helper()
	appsOnce.Do(func() { appsVal, appsErr = sim.LoadApplications("") })
	if appsErr != nil {
		t.Fatalf("load applications: %v", appsErr)
	}
	return appsVal
}

// simulate runs (once per test binary) one policy on one workload.
func simulate(t *testing.T, policyName, name string, jobs []workload.Job) results.Summary {
	t.Helper()
	return simulateRun(t, policyName, name, jobs).sum
}

func simulateRun(t *testing.T, policyName, name string, jobs []workload.Job) *cachedRun {
	t.Helper()
	key := policyName + "/" + name
	runMu.Lock()
	c, ok := runCache[key]
	if !ok {
		c = &cachedRun{}
		runCache[key] = c
	}
	runMu.Unlock()
	c.once.Do(func() {
		cpu <- struct{}{}
		defer func() { <-cpu }()
		pol, err := sim.NewPolicy(policyName, 1)
		if err != nil {
			c.err = err
			return
		}
		s, err := sim.New(sim.Config{}, applications(t), jobs, name, pol)
		if err != nil {
			c.err = err
			return
		}
		r, err := s.Run(context.Background(), nil)
		if err != nil {
			c.err = err
			return
		}
		c.run = r
		c.sum = results.Summarize(r)
	})
	if c.err != nil {
		t.Fatalf("simulate %s: %v", key, c.err)
	}
	return c
}

// publishedJCTs is the artifact's per-job JCT (data/reference-jcts.json).
func publishedJCTs(t *testing.T) map[string]map[string]map[string]float64 {
	t.Helper()
	raw, err := data.FS.ReadFile("reference-jcts.json")
	if err != nil {
		t.Fatalf("read reference JCTs: %v", err)
	}
	var doc struct {
		JCTs map[string]map[string]map[string]float64 `json:"jcts"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("parse reference JCTs: %v", err)
	}
	return doc.JCTs
}

func artifactWorkload(t *testing.T, i int) ([]workload.Job, string) {
	t.Helper()
	name := fmt.Sprintf("workload-%d", i)
	jobs, _, err := sim.LoadWorkload(name, applications(t))
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	return jobs, name
}

// TestFidelity replays the eight artifact workloads with the two
// baselines and compares the average JCT with the published one.
func TestFidelity(t *testing.T) {
	if testing.Short() {
		t.Log("short mode: fidelity runs workload 6 only")
	}
	ref := published(t)
	perJob := publishedJCTs(t)
	tolerance := map[string]float64{"tiresias": 0.05, "optimus": 0.05}
	type row struct {
		policy, workload string
		got, want        float64
	}
	var mu sync.Mutex
	var rows []row
	t.Run("runs", func(t *testing.T) {
		for _, p := range []string{"tiresias", "optimus"} {
			for i := 1; i <= 8; i++ {
				if testing.Short() && i != 6 {
					continue
				}
				t.Run(fmt.Sprintf("%s/workload-%d", p, i), func(t *testing.T) {
					t.Parallel()
					jobs, name := artifactWorkload(t, i)
					c := simulateRun(t, p, name, jobs)
					sum := c.sum
					want := ref[p][name]
					// The baselines are deterministic, so the replay should
					// match the artifact job by job, not just on average.
					exact := 0
					for _, j := range c.run.Jobs {
						if w, ok := perJob[p][name][j.Name]; ok && j.Completed && math.Abs(j.JCT()-w) < 0.5 {
							exact++
						}
					}
					if exact < len(c.run.Jobs)*95/100 {
						t.Errorf("only %d of %d jobs have the artifact's JCT", exact, len(c.run.Jobs))
					}
					t.Logf("%d of %d jobs have exactly the artifact's JCT", exact, len(c.run.Jobs))
					if sum.Completed != sum.Jobs {
						t.Errorf("%d of %d jobs completed", sum.Completed, sum.Jobs)
					}
					dev := (sum.AvgJCT - want) / want
					mu.Lock()
					rows = append(rows, row{p, name, sum.AvgJCT, want})
					mu.Unlock()
					if math.Abs(dev) > tolerance[p] {
						t.Errorf("avg JCT %.1f s, published %.1f s: deviation %+.2f%% over the ±%.0f%% bound", sum.AvgJCT, want, 100*dev, 100*tolerance[p])
					}
				})
			}
		}
	})
	sort.Slice(rows, func(a, b int) bool {
		if rows[a].policy != rows[b].policy {
			return rows[a].policy > rows[b].policy
		}
		return rows[a].workload < rows[b].workload
	})
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%-9s %-11s %10s %10s %9s\n", "policy", "workload", "sim s", "published", "dev")
	for _, r := range rows {
		fmt.Fprintf(&sb, "%-9s %-11s %10.1f %10.1f %+8.2f%%\n", r.policy, r.workload, r.got, r.want, 100*(r.got-r.want)/r.want)
	}
	t.Log(sb.String())
}
