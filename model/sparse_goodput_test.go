package model

import (
	"encoding/csv"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// firstGradStats reads the gradient statistics of the first epoch at the
// initial batch size M0 from data/traces/<app>/validation-<m0>.csv.
func firstGradStats(t *testing.T, app string, m0 int) GradParams {
	t.Helper()
	path := filepath.Join("..", "data", "traces", app, "validation-"+strconv.Itoa(m0)+".csv")
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil || len(rows) < 2 {
		t.Fatalf("read %s: %v", path, err)
	}
	sqr, err1 := strconv.ParseFloat(rows[1][3], 64)
	v, err2 := strconv.ParseFloat(rows[1][4], 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("%s: bad gradient statistics %v", path, rows[1])
	}
	return GradParams{Sqr: sqr, Var: v}
}

// TestSparseProfileGoodputDoesNotScalePerfectly: a job seen only on one
// GPU gets the reference's optimistic network prior (its throughput model
// predicts 2x on 2 GPUs at equal micro-batch, see TestPriorExploration),
// but the goodput the scheduler optimises must still not scale perfectly:
// the pinned compute intercept (prior 1) and the statistical efficiency of
// the larger batch keep the predicted speedup below linear.
func TestSparseProfileGoodputDoesNotScalePerfectly(t *testing.T) {
	tests := map[string]struct {
		m0, maxBatch, minLocal, maxLocal int
	}{
		"bert":        {m0: 12, maxBatch: 384, minLocal: 4, maxLocal: 12},
		"cifar10":     {m0: 128, maxBatch: 4096, minLocal: 32, maxLocal: 1024},
		"deepspeech2": {m0: 20, maxBatch: 640, minLocal: 10, maxLocal: 80},
		"imagenet":    {m0: 200, maxBatch: 12800, minLocal: 20, maxLocal: 200},
		"yolov3":      {m0: 8, maxBatch: 512, minLocal: 4, maxLocal: 8},
	}
	for app, tc := range tests {
		t.Run(app, func(t *testing.T) {
			var seen []ProfilePoint
			for _, r := range readPlacements(t, app) {
				if r.placement == "1" && int(r.localBsz) == tc.minLocal {
					seen = append(seen, r.point())
				}
			}
			if len(seen) == 0 {
				t.Fatalf("no one-GPU row at local_bsz %d", tc.minLocal)
			}
			perf, err := FitPerfParams(seen[:1])
			if err != nil {
				t.Fatal(err)
			}
			f := GoodputFunc{Perf: perf, Grad: firstGradStats(t, app, tc.m0), InitBatchSize: float64(tc.m0)}
			c := NewGoodputCache(f, Bounds{MaxBatchSize: tc.maxBatch, MinLocalBsz: tc.minLocal, MaxLocalBsz: tc.maxLocal, Accumulation: true})
			one := c.Goodput(1, 1)
			for _, k := range []int{2, 4} {
				s := c.Goodput(1, k) / one
				t.Logf("%s seen on 1 GPU: predicted goodput speedup on %d GPUs = %.3f", app, k, s)
				if s >= 0.99*float64(k) {
					t.Errorf("predicted goodput speedup on %d GPUs is %.3f, near-perfect from a one-GPU profile", k, s)
				}
				if s <= 1 {
					t.Errorf("predicted goodput speedup on %d GPUs is %.3f: more GPUs should still help", k, s)
				}
			}
		})
	}
}
