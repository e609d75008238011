package sim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/pollux"
	"github.com/pollux-nomad/pollux/policy/registry"
	"github.com/pollux-nomad/pollux/results"
	"github.com/pollux-nomad/pollux/sim"
)

// tracer wraps a policy and records, per job, every change of its
// allocation with what the policy saw.
type tracer struct {
	policy.Policy
	log map[string][]string
}

func (tr *tracer) Optimize(ctx context.Context, in policy.Input) (policy.Allocations, error) {
	out, err := tr.Policy.Optimize(ctx, in)
	if err != nil {
		return out, err
	}
	for _, j := range in.Jobs {
		old, cur := in.Current[j.ID], out[j.ID]
		if policy.Equal(old, cur) {
			continue
		}
		model := "-"
		if j.Goodput != nil {
			model = fmt.Sprintf("g1=%.0f gK=%.0f g64=%.0f", j.Goodput.Goodput(1, 1), j.Goodput.Goodput(max(policy.NumNodes(cur), 1), max(len(cur), 1)), j.Goodput.Goodput(16, 64))
		}
		tr.log[j.ID] = append(tr.log[j.ID], fmt.Sprintf("t=%6.0f age=%6.0f held=%5.0f %2d/%d -> %2d/%d max=%d rst=%d %s",
			in.Now, j.Age, j.Held, len(old), policy.NumNodes(old), len(cur), policy.NumNodes(cur), j.MaxReplicas, j.NumRestarts, model))
	}
	return out, nil
}

// TestDiag traces the reallocations of one simulation: POLLUX_DIAG is an
// entry of POLLUX_EVAL (for example big:256:640:8:21); it prints the
// reallocations by kind and the trajectories of the POLLUX_DIAG_TOP (5)
// most restarted jobs. POLLUX_DIAG_CONFIG is a registry.PolluxConfig as JSON
// (Seed is 1); POLLUX_DIAG_TIRESIAS=1 runs Tiresias on it first;
// POLLUX_DIAG_APP traces jobs of one application (from its median one).
func TestDiag(t *testing.T) {
	spec := os.Getenv("POLLUX_DIAG")
	if spec == "" {
		t.Skip("set POLLUX_DIAG to trace a simulation's reallocations")
	}
	top := 5
	if s := os.Getenv("POLLUX_DIAG_TOP"); s != "" {
		top, _ = strconv.Atoi(s)
	}
	jobs, name, cfg := evalWorkload(t, spec)
	if os.Getenv("POLLUX_DIAG_TIRESIAS") != "" {
		p, err := sim.NewPolicy("tiresias", 1)
		if err != nil {
			t.Fatal(err)
		}
		s, err := sim.New(cfg, applications(t), jobs, name, p)
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.Run(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		ti := results.Summarize(r)
		fmt.Printf("%s tiresias: avg %.0f p50 %.0f p99 %.0f gpu-h/job %.2f\n", name, ti.AvgJCT, ti.P50JCT, ti.P99JCT, ti.GPUHoursPerJob)
		byApp(r)
	}
	var pc registry.PolluxConfig
	if s := os.Getenv("POLLUX_DIAG_CONFIG"); s != "" {
		if err := json.Unmarshal([]byte(s), &pc); err != nil {
			t.Fatalf("POLLUX_DIAG_CONFIG: %v", err)
		}
	}
	pc.Seed = 1
	inner, err := pollux.New(pc)
	if err != nil {
		t.Fatal(err)
	}
	tr := &tracer{Policy: inner, log: map[string][]string{}}
	s, err := sim.New(cfg, applications(t), jobs, name, tr)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Run(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	sum := results.Summarize(r)
	fmt.Printf("%s: avg %.0f p50 %.0f p99 %.0f restarts/job %.2f gpu-h/job %.2f\n", name, sum.AvgJCT, sum.P50JCT, sum.P99JCT, sum.RestartsPerJob, sum.GPUHoursPerJob)
	fmt.Printf("reallocations: %+v\n", s.Reallocations())
	byApp(r)
	ids := make([]string, 0, len(tr.log))
	for id := range tr.log {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(a, b int) bool { return len(tr.log[ids[a]]) > len(tr.log[ids[b]]) })
	app := map[string]string{}
	for _, j := range r.Jobs {
		app[j.Name] = j.Application
	}
	if a := os.Getenv("POLLUX_DIAG_APP"); a != "" {
		var keep []string
		for _, id := range ids {
			if app[id] == a {
				keep = append(keep, id)
			}
		}
		// The median ones of the application, by changes.
		ids = keep[len(keep)/2:]
	}
	for _, id := range ids[:min(top, len(ids))] {
		fmt.Printf("%s (%s): %d changes\n  %s\n", id, app[id], len(tr.log[id]), strings.Join(tr.log[id], "\n  "))
	}
}

// byApp prints per application the jobs, median and mean JCT and mean
// restarts of a run.
func byApp(r results.Run) {
	jcts := map[string][]float64{}
	rst := map[string]int{}
	for _, j := range r.Jobs {
		if j.Completed {
			jcts[j.Application] = append(jcts[j.Application], j.JCT())
		}
		rst[j.Application] += j.Restarts
	}
	apps := make([]string, 0, len(jcts))
	for a := range jcts {
		apps = append(apps, a)
	}
	sort.Strings(apps)
	for _, a := range apps {
		v := jcts[a]
		sort.Float64s(v)
		sum := 0.0
		for _, x := range v {
			sum += x
		}
		fmt.Printf("  %-12s jobs %4d p50 %7.0f avg %7.0f restarts/job %.2f\n", a, len(v), v[len(v)/2], sum/float64(len(v)), float64(rst[a])/float64(len(v)))
	}
}
