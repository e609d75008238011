package report_test

import (
	"strings"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/worker/go/report"
)

// TestGPUTypeFromEnvironment: POLLUX_GPU_TYPE wins over the controller's
// NOMAD_META_pollux_gpu_type, and steps observed without a type get it;
// a bad value is refused naming the variable.
func TestGPUTypeFromEnvironment(t *testing.T) {
	raw := rawClient(t)
	t.Setenv(report.EnvControllerGPUType, "a100")
	r := newReporter(t, raw, report.Config{InitBatchSize: 32, MinInterval: time.Hour})
	if err := r.Observe(report.StepConfig{NumNodes: 1, NumReplicas: 1, LocalBsz: 32}, 0.1, 0.2, 0); err != nil {
		t.Fatal(err)
	}
	t.Setenv(report.EnvGPUType, "Tesla T4")
	r2 := newReporter(t, raw, report.Config{Prefix: strings.TrimSuffix(r.Key(), "jobs/default/train/metrics"), InitBatchSize: 32, MinInterval: time.Hour})
	if err := r2.Observe(report.StepConfig{NumNodes: 1, NumReplicas: 1, LocalBsz: 32}, 0.3, 0.4, 0); err != nil {
		t.Fatal(err)
	}
	for _, x := range []*report.Reporter{r, r2} {
		if err := x.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	d, _ := readDoc(t, raw, r.Key())
	var got []string
	for _, e := range d.Profile {
		got = append(got, e.GPUType)
	}
	if strings.Join(got, ",") != "Tesla T4,a100" {
		t.Errorf("entry types %v, want [Tesla T4 a100]", got)
	}
	t.Setenv(report.EnvGPUType, "bad\"type")
	if _, err := report.New(t.Context(), report.Config{Consul: raw, JobID: "x"}); err == nil || !strings.Contains(err.Error(), report.EnvGPUType) {
		t.Errorf("bad POLLUX_GPU_TYPE: %v", err)
	}
}
