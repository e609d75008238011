package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/jobs"
	"github.com/pollux-nomad/pollux/jobs/jobstest"
)

// TestStandInsMatchServers runs on real Consul and Nomad the scenario
// jobs/jobstest's TestConformance runs on the in-memory stand-ins the
// controller's unit tests use: KV check-and-set and blocking-read index
// semantics, and the check-and-set of a job's rewrite on its
// JobModifyIndex (a stale index or an operator's edit is a conflict).
func TestStandInsMatchServers(t *testing.T) {
	e := newEnv(t)
	jobstest.Conformance(t, jobstest.Backend{
		Cluster: e.cluster,
		KV:      e.kv,
		NewJob: func(t testing.TB, name string) jobs.JobRef {
			return ref(e.registerJob(name, nil))
		},
		Edit: func(t testing.TB, r jobs.JobRef, value string) {
			job, _, err := e.nomad.Jobs().Info(r.ID, nil)
			if err != nil {
				t.Fatalf("read %s: %v", r, err)
			}
			job.Meta["conformance"] = value
			if _, _, err := e.nomad.Jobs().Register(job, nil); err != nil {
				t.Fatalf("edit %s: %v", r, err)
			}
		},
		// The server's own clock lets the wait pass.
		Elapse: func(context.Context, time.Duration) {},
	})
}
