package sim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/pollux-nomad/pollux/data"
	"github.com/pollux-nomad/pollux/results"
	"github.com/pollux-nomad/pollux/sim"
)

// siaReference is the Sia artifact's own run (data/sia/reference-results.json):
// per workload its summary and every job's JCT.
type siaReference struct {
	Cluster string `json:"cluster"`
	Summary map[string]struct {
		AvgJCT         float64 `json:"avg_jct_s"`
		RestartsPerJob float64 `json:"restarts_per_job"`
		PolicyMs       float64 `json:"policy_ms_median"`
	} `json:"summary"`
	JCT map[string]map[string]float64 `json:"jct_s"`
}

// TestSiaFidelity runs the sia policy under -rules sia on sia-philly-1..8
// on the artifact's 3-type cluster (t4 6×4, rtx2080ti 3×8, a100 2×8) and
// compares each workload's average JCT with the artifact's run: within 5%
// on every workload, and restarts per job within 10% on their mean. It
// logs the per-workload table (`make sia-fidelity` prints it). About 30 s
// on two cores; skipped with -short.
func TestSiaFidelity(t *testing.T) {
	if testing.Short() {
		t.Skip("runs eight simulations (about 30 s)")
	}
	raw, err := data.FS.ReadFile("sia/reference-results.json")
	if err != nil {
		t.Fatalf("read the Sia reference results: %v", err)
	}
	var ref siaReference
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatalf("parse the Sia reference results: %v", err)
	}
	groups, err := sim.ParseCluster(ref.Cluster)
	if err != nil {
		t.Fatalf("reference cluster %q: %v", ref.Cluster, err)
	}
	applications, err := sim.LoadTypedApplications(sim.RulesSia)
	if err != nil {
		t.Fatalf("load typed applications: %v", err)
	}
	const n = 8
	sums := make([]results.Summary, n)
	runs := make([]results.Run, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	slots := make(chan struct{}, max(runtime.NumCPU(), 1))
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			name := fmt.Sprintf("sia-philly-%d", i+1)
			jobs, wl, err := sim.LoadWorkload(name, applications)
			if err != nil {
				errs[i] = err
				return
			}
			pol, err := sim.NewPolicyFor("sia", 1, sim.RulesSia)
			if err != nil {
				errs[i] = err
				return
			}
			s, err := sim.New(sim.Config{Cluster: groups, Rules: sim.RulesSia}, applications, jobs, wl, pol)
			if err != nil {
				errs[i] = err
				return
			}
			runs[i], errs[i] = s.Run(context.Background(), nil)
			sums[i] = results.Summarize(runs[i])
		}()
	}
	wg.Wait()
	var b strings.Builder
	fmt.Fprintf(&b, "%-13s %9s %9s %7s %14s %13s %9s\n", "workload", "avg JCT s", "artifact", "dev", "restarts/job", "ms/round", "jobs ±25%")
	var ours, theirs, rOurs, rTheirs float64
	var bad []string
	for i := range n {
		name := fmt.Sprintf("sia-philly-%d", i+1)
		if errs[i] != nil {
			t.Fatalf("%s: %v", name, errs[i])
		}
		r, ok := ref.Summary[name]
		if !ok {
			t.Fatalf("%s: no reference", name)
		}
		s := sums[i]
		if s.Completed != s.Jobs {
			t.Errorf("%s: %d of %d jobs completed", name, s.Completed, s.Jobs)
		}
		dev := s.AvgJCT/r.AvgJCT - 1
		close := 0
		for _, j := range runs[i].Jobs {
			if want, ok := ref.JCT[name][j.Name]; ok && j.Completed && math.Abs(j.JCT()/want-1) <= 0.25 {
				close++
			}
		}
		fmt.Fprintf(&b, "%-13s %9.0f %9.0f %+6.1f%% %6.2f vs %4.2f %5.1f vs %5.1f %4d/%d\n", name, s.AvgJCT, r.AvgJCT, dev*100,
			s.RestartsPerJob, r.RestartsPerJob, s.OptimizeMsMedian, r.PolicyMs, close, s.Jobs)
		if math.Abs(dev) > 0.05 {
			bad = append(bad, fmt.Sprintf("%s %+.1f%%", name, dev*100))
		}
		ours += s.AvgJCT / n
		theirs += r.AvgJCT / n
		rOurs += s.RestartsPerJob / n
		rTheirs += r.RestartsPerJob / n
	}
	fmt.Fprintf(&b, "%-13s %9.0f %9.0f %+6.1f%% %6.2f vs %4.2f\n", "mean", ours, theirs, (ours/theirs-1)*100, rOurs, rTheirs)
	t.Log("\n" + b.String())
	if len(bad) > 0 {
		t.Errorf("average JCT more than 5%% from the artifact's: %s", strings.Join(bad, ", "))
	}
	if math.Abs(rOurs/rTheirs-1) > 0.10 {
		t.Errorf("restarts per job %.2f, artifact %.2f: more than 10%% apart", rOurs, rTheirs)
	}
}
