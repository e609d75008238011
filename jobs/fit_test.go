package jobs_test

import (
	"fmt"
	"testing"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
	"github.com/pollux-nomad/pollux/metrics"
	"github.com/pollux-nomad/pollux/model"
)

// TestFitsOfManyJobs: when many metrics documents are new in one round
// the controller fits them on all cores (fitAll), GPU types or not;
// every job's saved model must be the one fitting its own document alone
// gives, a bad document must be rejected for its job only, and a
// document that did not change must not be refitted.
func TestFitsOfManyJobs(t *testing.T) {
	t.Run("untyped", func(t *testing.T) { fitsOfManyJobs(t, false) })
	t.Run("typed", func(t *testing.T) { fitsOfManyJobs(t, true) })
}

// fitsOfManyJobs runs TestFitsOfManyJobs on an untyped cluster, or on
// one of two GPU types whose jobs' entries all name the a100 model: each
// job's model is then its a100 fit, the same as fitting its document
// alone gives.
func fitsOfManyJobs(t *testing.T, typed bool) {
	f := newFixture(t, map[string]int{"n1": 4, "n2": 4})
	if typed {
		f.cluster.SetGPUModel("n1", t4Model)
		f.cluster.SetGPUModel("n2", a100Model)
		f.cfg.GPUTypeSource = jobs.GPUTypeFromDevice
	}
	const n = 40
	refs := make([]jobs.JobRef, n)
	docs := make([]*contract.Metrics, n)
	for i := range n {
		refs[i] = f.submit(fmt.Sprintf("j%02d", i), 1)
		k := 1 + float64(i)/10
		docs[i] = &contract.Metrics{Version: 1, Timestamp: f.clock.Now(), BatchSize: 128, Progress: 1, GradSqr: 1, GradVar: 4,
			Profile: []contract.ProfileEntry{
				{NumNodes: 1, NumReplicas: 1, LocalBsz: 64, ComputeTime: 0.1 * k, StepTime: 0.1 * k, SyncTime: 0, Count: 5},
				{NumNodes: 1, NumReplicas: 2, LocalBsz: 64, ComputeTime: 0.1 * k, StepTime: 0.13 * k, SyncTime: 0.03 * k, Count: 5},
				{NumNodes: 2, NumReplicas: 4, LocalBsz: 32, ComputeTime: 0.06 * k, StepTime: 0.11 * k, SyncTime: 0.05 * k, Count: 5},
			}}
		if typed {
			for k := range docs[i].Profile {
				docs[i].Profile[k].GPUType = a100Model
			}
		}
		if i == 7 {
			f.putRaw(refs[i], `{"version": 1, "profile": "not a list"}`)
			continue
		}
		raw, err := contract.MarshalMetrics(docs[i])
		if err != nil {
			t.Fatal(err)
		}
		f.putRaw(refs[i], string(raw))
	}
	c := f.controller("one")
	f.round(c)
	for i, ref := range refs {
		s := f.state(ref)
		if i == 7 {
			if s.Perf != nil || s.MetricsError == "" {
				t.Errorf("%s: bad document gave a model %+v (error %q)", ref, s.Perf, s.MetricsError)
			}
			continue
		}
		want, err := model.FitPerfParams(metrics.ProfilePoints(docs[i]))
		if err != nil {
			t.Fatal(err)
		}
		if s.Perf == nil || model.PerfParams(*s.Perf) != want {
			t.Errorf("%s: model %+v, want %+v", ref, s.Perf, want)
		}
		if typed && (len(s.Typed) != 1 || model.PerfParams(s.Typed["a100"].Perf) != want || s.Typed["a100"].ProfilePoints != 3) {
			t.Errorf("%s: typed fits %+v, want a100's alone, of 3 points", ref, s.Typed)
		}
		if !typed && s.Typed != nil {
			t.Errorf("%s: typed fits %+v on an untyped cluster", ref, s.Typed)
		}
		if s.MetricsError != "" {
			t.Errorf("%s: metrics error %q", ref, s.MetricsError)
		}
	}
	// Unchanged documents: the models stay, with the same metrics index.
	before := f.state(refs[3]).MetricsIndex
	f.round(c)
	if s := f.state(refs[3]); s.MetricsIndex != before || s.Perf == nil {
		t.Errorf("second round: metrics index %d (was %d), model %v", s.MetricsIndex, before, s.Perf)
	}
}
