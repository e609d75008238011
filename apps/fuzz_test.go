package apps

import (
	"math"
	"strings"
	"testing"
)

// FuzzLoadPlacements feeds arbitrary placements.csv content to Load: it
// must fail cleanly or give an application whose lookups do not panic.
func FuzzLoadPlacements(f *testing.F) {
	f.Add(profileFS(nil)["app/placements.csv"].Data)
	f.Add([]byte("placement,local_bsz,step_time,sync_time\n1,4,0.1,0\n1,4,0.2,0\n"))
	f.Add([]byte("placement,local_bsz,step_time,sync_time\n\"1,4,0.1,0\n"))
	f.Add([]byte("local_bsz,placement,sync_time,step_time\n4,1,0,0.1\n8,1,0,0.2\n"))
	f.Fuzz(func(t *testing.T, placements []byte) {
		a, err := Load(profileFS(map[string]string{"app/placements.csv": string(placements)}), "app", Options{MaxEpochs: 2})
		if err != nil {
			checkLoadError(t, err)
			return
		}
		checkLookups(t, a)
	})
}

// FuzzLoadScalability feeds arbitrary scalability.csv content to Load.
func FuzzLoadScalability(f *testing.F) {
	f.Add(profileFS(nil)["app/scalability.csv"].Data)
	f.Add([]byte("num_nodes,num_replicas,local_bsz,step_time,sync_time\n2,8,4,1e308,0\n"))
	f.Add([]byte("\ufeffsync_time,step_time,local_bsz,num_replicas,num_nodes\r\n0.4,0.5,4,6,6\r\n"))
	f.Add([]byte("num_nodes,num_replicas,local_bsz,step_time,sync_time\n6,3,4,0.5,0.4\n6,6"))
	f.Fuzz(func(t *testing.T, scalability []byte) {
		a, err := Load(profileFS(map[string]string{"app/scalability.csv": string(scalability)}), "app", Options{MaxEpochs: 2})
		if err != nil {
			checkLoadError(t, err)
			return
		}
		checkLookups(t, a)
	})
}

// FuzzLoadValidation feeds arbitrary validation-8.csv content to Load.
func FuzzLoadValidation(f *testing.F) {
	f.Add(profileFS(nil)["app/validation-8.csv"].Data)
	f.Add([]byte("progress,iteration,metric,grad_sqr,grad_var\n10,10,0.5,0,0\n10,10,-1e308,1e308,1e308\n"))
	f.Add([]byte("grad_var,grad_sqr,metric,iteration,progress\r\n2,1,0.5,10,10\r\n2,1,0.6,20,20"))
	f.Add([]byte("progress,iteration,metric,grad_sqr,grad_var\n20,10,0.5,1,2\n10,20,0.6,1,2\n"))
	f.Fuzz(func(t *testing.T, validation []byte) {
		a, err := Load(profileFS(map[string]string{"app/validation-8.csv": string(validation)}), "app", Options{MaxEpochs: 2})
		if err != nil {
			checkLoadError(t, err)
			return
		}
		checkLookups(t, a)
		for e := 0; e <= a.MaxEpochs; e++ {
			if p := a.Progress(e); math.IsNaN(p) || p < 0 || (e > 0 && p < a.Progress(e-1)) {
				t.Errorf("Progress(%d) = %v", e, p)
			}
		}
	})
}

// checkLoadError asserts that a Load error names a file of the profile
// (or the profile) and is short.
func checkLoadError(t *testing.T, err error) {
	t.Helper()
	if msg := err.Error(); !strings.HasPrefix(msg, "app/") && !strings.HasPrefix(msg, "failed to load app") && !strings.HasPrefix(msg, "failed to open app/") {
		t.Errorf("error %.200q names no file", msg)
	}
	if len(err.Error()) > 1<<10 {
		t.Errorf("error message is %d bytes", len(err.Error()))
	}
}

// checkLookups asserts that a loaded application's lookups do not panic
// and give finite answers. Errors are fine (a degenerate profile cannot
// be triangulated); panics and non-finite answers are not.
func checkLookups(t *testing.T, a *Application) {
	t.Helper()
	for _, p := range [][]int{{1}, {2}, {1, 1}, {4, 4, 4, 4, 4, 4}} {
		for _, m := range []int{a.MinLocalBsz, a.MaxLocalBsz} {
			step, sync, err := a.Throughput(p, m)
			if err == nil && (math.IsNaN(step) || math.IsInf(step, 0) || math.IsNaN(sync) || math.IsInf(sync, 0)) {
				t.Errorf("%v at %d: (%v, %v)", p, m, step, sync)
			}
		}
	}
	for _, m := range []float64{1, float64(a.InitBatchSize), 20, float64(a.MaxBatchSize), 1e9} {
		sqr, v := a.GradStats(m, a.MaxEpochs-1)
		it := a.Iteration(m, 0)
		if math.IsNaN(sqr) || math.IsNaN(v) || math.IsNaN(it) {
			t.Errorf("at batch %v: grad (%v, %v), iteration %v", m, sqr, v, it)
		}
	}
}
