package jobs_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
	"github.com/pollux-nomad/pollux/policy"
)

// putRaw stores a raw metrics document of the job.
func (f *fixture) putRaw(ref jobs.JobRef, raw string) {
	f.t.Helper()
	if err := f.kv.Put(context.Background(), "jobs/"+ref.Namespace+"/"+ref.ID+"/metrics", []byte(raw)); err != nil {
		f.t.Fatal(err)
	}
}

// putProgress stores a valid metrics document with the given progress and,
// if restart is set, a restart object.
func (f *fixture) putProgress(ref jobs.JobRef, progress float64, restart *contract.Restart) {
	f.t.Helper()
	d := &contract.Metrics{Version: 1, Timestamp: f.clock.Now(), BatchSize: 128, Progress: progress, GradSqr: 1, GradVar: 4,
		Profile: []contract.ProfileEntry{{NumNodes: 1, NumReplicas: 2, LocalBsz: 64, ComputeTime: 0.1, StepTime: 0.12, SyncTime: 0.02, Count: 5}},
		Restart: restart}
	raw, err := contract.MarshalMetrics(d)
	if err != nil {
		f.t.Fatal(err)
	}
	f.putRaw(ref, string(raw))
}

func policyJob(t *testing.T, in policy.Input, ref jobs.JobRef) policy.Job {
	t.Helper()
	for _, j := range in.Jobs {
		if j.ID == ref.String() {
			return j
		}
	}
	t.Fatalf("job %s not in the policy's input", ref)
	return policy.Job{}
}

// TestRestartTimeMeasured: the controller measures a job's restart time
// from its write of an allocation to the first step on it (the worker's
// restart object, else the first document with new progress), passes the
// median of the samples to the policy capped at restart_time_max, keeps
// the samples across a change of leader, and skips an invalid restart
// object without losing the document.
func TestRestartTimeMeasured(t *testing.T) {
	f := newFixture(t, map[string]int{"n1": 4, "n2": 4})
	a := f.submit("a", 1)
	f.policy.set(map[string][]string{"a": {"n1", "n1"}})
	c := f.controller("first")
	f.round(c)
	written := f.clock.Now()
	if s := f.state(a); !s.RestartOpen || len(s.RestartSamples) != 0 {
		t.Fatalf("after the first write: open %v, samples %v", s.RestartOpen, s.RestartSamples)
	}
	if j := policyJob(t, f.policy.input(), a); j.RestartTime != 0 {
		t.Fatalf("restart time before any measurement: %v, want 0 (restart_penalty)", j.RestartTime)
	}

	// The worker started stepping 40 s after the write (its own restore
	// took 25 s of them).
	f.clock.Advance(60 * time.Second)
	f.putProgress(a, 10, &contract.Restart{RestoreTime: 25, At: written.Add(40 * time.Second)})
	f.round(c)
	s := f.state(a)
	if s.RestartOpen || len(s.RestartSamples) != 1 || s.RestartSamples[0] != 40 {
		t.Fatalf("after the first step: open %v, samples %v; want [40]", s.RestartOpen, s.RestartSamples)
	}
	if j := policyJob(t, f.policy.input(), a); j.RestartTime != 40 || j.NumRestarts != 0 || j.Held != 60 {
		t.Fatalf("restart time %v, restarts %d, held %v s; want 40, 0 (its first allocation), 60 s", j.RestartTime, j.NumRestarts, j.Held)
	}

	// A move: the reporter of this job writes no restart object now, so
	// the first document after the write whose progress changed gives
	// an upper bound. A document with the old progress does not count.
	f.putProgress(a, 20, nil)
	f.round(c) // reads the document of progress 20 before the write
	f.policy.set(map[string][]string{"a": {"n2", "n2"}})
	f.clock.Advance(60 * time.Second)
	f.round(c)
	moved := f.clock.Now()
	if s := f.state(a); !s.RestartOpen || s.Restarts != 1 {
		t.Fatalf("after the move: %+v", s)
	}
	f.clock.Advance(30 * time.Second)
	f.putProgress(a, 20, nil)
	f.round(c)
	if s := f.state(a); !s.RestartOpen {
		t.Fatalf("a document without new progress closed the measurement: %v", s.RestartSamples)
	}
	if j := policyJob(t, f.policy.input(), a); !j.Restoring || j.Held != 30 {
		t.Fatalf("job not restoring during its restart, or held %v s, want 30 s", j.Held)
	}
	f.clock.Advance(60 * time.Second)
	f.round(c) // 90 s after the write: more than twice the 40 s estimate
	if j := policyJob(t, f.policy.input(), a); j.Restoring {
		t.Fatalf("job still restoring 90 s after the write with a 40 s restart time")
	}
	f.putProgress(a, 21, nil)
	f.round(c)
	if s := f.state(a); s.RestartOpen || len(s.RestartSamples) != 2 || s.RestartSamples[1] != f.clock.Now().Sub(moved).Seconds() {
		t.Fatalf("after the move's first step: open %v, samples %v", s.RestartOpen, s.RestartSamples)
	}

	// An invalid restart object is skipped, the document is used.
	f.clock.Advance(time.Second)
	f.putRaw(a, `{"version":1,"timestamp":"`+f.clock.Now().Format(time.RFC3339)+`","batch_size":128,"progress":30,"grad_sqr":1,"grad_var":4,`+
		`"profile":[{"num_nodes":1,"num_replicas":2,"local_bsz":64,"accum_steps":0,"compute_time":0.1,"step_time":0.12,"sync_time":0.02,"count":9}],`+
		`"restart":{"restore_time":-5,"at":"`+f.clock.Now().Format(time.RFC3339)+`"}}`)
	f.round(c)
	if s := f.state(a); s.MetricsError != "" || s.Progress != 30 || len(s.RestartSamples) != 2 {
		t.Fatalf("invalid restart object: metrics error %q, progress %v, samples %v", s.MetricsError, s.Progress, s.RestartSamples)
	}

	// A new leader keeps the samples; restart_time_max caps the estimate.
	want := (40 + 90) / 2.0
	f.cfg.RestartTimeMax = time.Hour
	next := f.controller("second")
	next.TakeOver(context.Background())
	f.round(next)
	if j := policyJob(t, f.policy.input(), a); math.Abs(j.RestartTime-want) > 1e-9 {
		t.Fatalf("restart time after a change of leader %v, want %v", j.RestartTime, want)
	}
	f.cfg.RestartTimeMax = 50 * time.Second
	capped := f.controller("third")
	capped.TakeOver(context.Background())
	f.round(capped)
	if j := policyJob(t, f.policy.input(), a); j.RestartTime != 50 {
		t.Fatalf("capped restart time %v, want 50", j.RestartTime)
	}
}
