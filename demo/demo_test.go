package demo

import (
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/apps"
	"github.com/pollux-nomad/pollux/workload"
)

// TestJobsFollowNamespace: the demo's jobs are registered in the
// namespace of NOMAD_NAMESPACE (or Config.Namespace), the namespace its
// KV keys are named by; it used to read jobs/default/... whatever the
// namespace.
func TestJobsFollowNamespace(t *testing.T) {
	app := &apps.Application{Name: "cifar10", InitBatchSize: 128, MaxBatchSize: 4096, MinLocalBsz: 32, MaxLocalBsz: 1024}
	w := workload.Job{Name: "j1", Application: "cifar10", NumReplicas: 1, BatchSize: 128}
	tests := map[string]struct {
		env, cfg, want string
	}{
		"default":              {want: "default"},
		"from NOMAD_NAMESPACE": {env: "team-a", want: "team-a"},
		"config wins":          {env: "team-a", cfg: "team-b", want: "team-b"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Setenv("NOMAD_NAMESPACE", tc.env)
			cfg := Config{Apps: map[string]*apps.Application{"cifar10": app}, Binary: "pollux", Speedup: 100, Namespace: tc.cfg}
			job, err := buildJob(cfg, "pollux-loop/1/", "1", w)
			if err != nil {
				t.Fatal(err)
			}
			if job.Namespace == nil || *job.Namespace != tc.want {
				t.Errorf("job namespace %v, want %q", job.Namespace, tc.want)
			}
			if got := cfg.namespace(); got != tc.want {
				t.Errorf("keys named by namespace %q, want %q", got, tc.want)
			}
		})
	}
}

// TestMeasuredRestartDelays: measured restart times become the
// simulator's per-job delays; a job without a sample gets the median of
// the others.
func TestMeasuredRestartDelays(t *testing.T) {
	m := &Measured{RestartTimes: map[string]float64{"a": 100, "b": 150, "c": 400}}
	got := m.RestartDelays([]string{"a", "b", "c", "d"})
	want := map[string]time.Duration{"a": 100 * time.Second, "b": 150 * time.Second, "c": 400 * time.Second, "d": 150 * time.Second}
	if len(got) != len(want) {
		t.Fatalf("delays %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("delay of %s: %v, want %v", k, got[k], v)
		}
	}
	if got := (&Measured{}).RestartDelays([]string{"a"}); len(got) != 0 {
		t.Errorf("nothing measured: %v, want no delays (the simulator's default)", got)
	}
}
