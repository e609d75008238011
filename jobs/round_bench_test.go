package jobs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
	"github.com/pollux-nomad/pollux/jobs/jobstest"
	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/registry"
)

// BenchmarkRound times a new leader's first round over the stand-ins at
// 300 jobs on 8 nodes of 8 GPUs, 150 of them with a new metrics
// document: snapshot, fits, the scripted policy's allocation (the first
// 64 jobs get a GPU each), the plan and its writes (the others scaled to
// zero); and a steady round after it; each with the stand-in cluster's
// fast-path readers and without (slow). The stand-in cluster schedules
// in time quadratic in its jobs, so larger counts time the stand-in more
// than the controller.
func BenchmarkRound(b *testing.B) {
	for _, phase := range []string{"first", "steady"} {
		for _, slow := range []bool{false, true} {
			name := phase
			if slow {
				name += "/slow"
			}
			b.Run(name, func(b *testing.B) { benchRound(b, phase == "steady", slow) })
		}
	}
}

func benchRound(b *testing.B, steady, slow bool) {
	const n, withMetrics = 300, 150
	meta := map[string]string{
		contract.MetaEnabled: "true", contract.MetaInitBatchSize: "128", contract.MetaInitLR: "0.1",
		contract.MetaMaxBatchSize: "4096", contract.MetaLocalBszMin: "32", contract.MetaLocalBszMax: "1024",
	}
	doc := &contract.Metrics{Version: 1, Timestamp: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), BatchSize: 128, Progress: 1, GradSqr: 1, GradVar: 4}
	for _, k := range []int{1, 2} {
		for _, m := range []int{32, 64, 128} {
			compute := 0.02 + 0.001*float64(m)
			sync := 0.01 * float64(k-1)
			doc.Profile = append(doc.Profile, contract.ProfileEntry{NumNodes: 1, NumReplicas: k, LocalBsz: m,
				ComputeTime: compute, StepTime: compute + sync, SyncTime: sync, Count: 20})
		}
	}
	raw, err := contract.MarshalMetrics(doc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for range b.N {
		b.StopTimer()
		clock := jobstest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		cluster, kv := jobstest.NewCluster(clock), jobstest.NewKV(clock)
		for i := range 8 {
			cluster.AddNode(fmt.Sprintf("n%d", i), 8)
		}
		next := policy.Allocations{}
		for i := range n {
			ref := cluster.Submit(fmt.Sprintf("j%04d", i), meta, 1)
			if i < withMetrics {
				if err := kv.Put(ctx, "jobs/default/"+ref.ID+"/metrics", raw); err != nil {
					b.Fatal(err)
				}
			}
			if i < 64 {
				next[ref.String()] = []string{fmt.Sprintf("n%d", i/8)}
			}
		}
		var c jobs.Cluster = cluster
		if slow {
			c = cluster.Plain()
		}
		pol := &scripted{next: next}
		ctl, err := jobs.New(jobs.DefaultConfig(), jobs.Options{
			Cluster: c, KV: kv, Now: clock.Now, Instance: "bench",
			NewPolicy:  func(string, registry.Settings) (policy.Policy, error) { return pol, nil },
			ParkBudget: time.Hour,
		})
		if err != nil {
			b.Fatal(err)
		}
		ctl.TakeOver(ctx)
		if steady {
			if _, err := ctl.Round(ctx, true); err != nil {
				b.Fatal(err)
			}
			clock.Advance(time.Minute)
		}
		b.StartTimer()
		if _, err := ctl.Round(ctx, true); err != nil {
			b.Fatal(err)
		}
	}
}
