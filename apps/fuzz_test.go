package apps

import (
	"math"
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
			return
		}
		// Errors are fine (a degenerate profile cannot be triangulated);
		// panics and non-finite answers are not.
		for _, p := range [][]int{{1}, {2}, {1, 1}, {4, 4, 4, 4, 4, 4}} {
			for _, m := range []int{a.MinLocalBsz, a.MaxLocalBsz} {
				step, sync, err := a.Throughput(p, m)
				if err == nil && (math.IsNaN(step) || math.IsInf(step, 0) || math.IsNaN(sync) || math.IsInf(sync, 0)) {
					t.Errorf("%v at %d: (%v, %v)", p, m, step, sync)
				}
			}
		}
	})
}
