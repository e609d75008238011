package jobstest_test

import (
	"context"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
	"github.com/pollux-nomad/pollux/jobs/jobstest"
)

// TestConformance runs on the stand-ins the scenario e2e's
// TestStandInsMatchServers runs on real Consul and Nomad.
func TestConformance(t *testing.T) {
	clock := jobstest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cluster := jobstest.NewCluster(clock)
	cluster.AddNode("n1", 2)
	jobstest.Conformance(t, jobstest.Backend{
		Cluster: cluster,
		KV:      jobstest.NewKV(clock),
		NewJob: func(t testing.TB, name string) jobs.JobRef {
			return cluster.Submit(name, map[string]string{contract.MetaEnabled: "true"}, 1)
		},
		Edit: func(t testing.TB, ref jobs.JobRef, value string) {
			if err := cluster.Edit(ref, func(j *jobs.Job) { j.Meta["conformance"] = value }); err != nil {
				t.Fatal(err)
			}
		},
		Elapse: func(ctx context.Context, d time.Duration) {
			if err := clock.WaitTimer(ctx, d); err != nil {
				t.Fatal(err)
			}
			clock.Advance(d)
		},
	})
}
