package metrics

import (
	"math"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/contract/contracttest"
	"github.com/pollux-nomad/pollux/model"
)

// readDoc parses one of the contract's example documents.
func readDoc(t testing.TB, name string) *contract.Metrics {
	t.Helper()
	raw, err := os.ReadFile("../contract/testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	d, err := contract.ParseMetrics(raw)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestParseAbsurdButFinite checks that extreme finite values, which the
// contract allows, parse and give a fit that fails cleanly or predicts a
// finite goodput: they cannot poison the scheduler with NaN or Inf.
func TestParseAbsurdButFinite(t *testing.T) {
	tests := map[string]string{
		"step_time 1e308":         contracttest.DocJSON(nil, contracttest.Entry("step_time", "1e308"), contracttest.Entry("num_replicas", "4", "step_time", "1e308")),
		"all times 1e308":         contracttest.DocJSON(nil, contracttest.Entry("step_time", "1e308", "compute_time", "1e308", "sync_time", "1e308")),
		"times 5e-324":            contracttest.DocJSON(nil, contracttest.Entry("step_time", "5e-324", "compute_time", "5e-324"), contracttest.Entry("num_replicas", "4", "step_time", "5e-324", "compute_time", "5e-324")),
		"count max int64":         contracttest.DocJSON(nil, contracttest.Entry("count", "9223372036854775807"), contracttest.Entry("local_bsz", "128", "count", "9223372036854775807")),
		"local_bsz max int64":     contracttest.DocJSON(nil, contracttest.Entry("local_bsz", "9223372036854775807")),
		"batch size 1e308":        contracttest.DocJSON(map[string]string{"batch_size": "1e308", "progress": "1e308"}, contracttest.Entry()),
		"grad_var 1e308 alone":    contracttest.DocJSON(map[string]string{"grad_sqr": "0", "grad_var": "1e308"}, contracttest.Entry()),
		"grad_sqr tiny":           contracttest.DocJSON(map[string]string{"grad_sqr": "5e-324", "grad_var": "1e300"}, contracttest.Entry()),
		"replicas max int64":      contracttest.DocJSON(nil, contracttest.Entry("num_nodes", "9223372036854775807", "num_replicas", "9223372036854775807")),
		"accum_steps max int64":   contracttest.DocJSON(nil, contracttest.Entry("accum_steps", "9223372036854775807")),
		"timestamp in year 9999":  contracttest.DocJSON(map[string]string{"timestamp": `"9999-12-31T23:59:59.999999999Z"`}, contracttest.Entry()),
		"unknown fields are kept": contracttest.DocJSON(map[string]string{"extra": `{"deep":[1,2,{"x":null}]}`}, contracttest.Entry()),
	}
	for name, input := range tests {
		t.Run(name, func(t *testing.T) {
			d, err := contract.ParseMetrics([]byte(input))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			perf, err := model.FitPerfParams(ProfilePoints(d))
			if err != nil {
				return // a clean refusal; the previous model stays in use
			}
			// perf may fail perf.Validate (times below ~2e-8 s fit an
			// alpha_c under its floor: a model issue), but must not make
			// the goodput NaN or infinite.
			f := model.GoodputFunc{Perf: perf, Grad: GradParams(d), InitBatchSize: 128}
			for _, k := range []int{1, 2, 8, 64} {
				c := f.Optimize(1, k, model.Bounds{MaxBatchSize: 1 << 14, MinLocalBsz: 1, MaxLocalBsz: 1024, Accumulation: true})
				if math.IsNaN(c.Goodput) || math.IsInf(c.Goodput, 0) || c.Goodput < 0 {
					t.Errorf("goodput on %d GPUs = %+v", k, c)
				}
			}
		})
	}
}

// TestParseLargeProfile checks that a document with 4000 entries, under
// the cap and the size limit, is accepted and gives one point per entry
// (its speed is BenchmarkParseMetrics's business).
func TestParseLargeProfile(t *testing.T) {
	doc := []byte(contracttest.DocJSON(nil, contracttest.ManyEntries(4000)...))
	if len(doc) > contract.MaxMetricsSize {
		t.Fatalf("test document is %d bytes, over the limit", len(doc))
	}
	for range 2 {
		d, err := contract.ParseMetrics(doc)
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Profile) != 4000 || len(ProfilePoints(d)) != 4000 {
			t.Fatalf("%d entries, %d points", len(d.Profile), len(ProfilePoints(d)))
		}
	}
}

func TestProfilePointsAndGradParams(t *testing.T) {
	multiNodeDoc := readDoc(t, "multi-node.json")
	const tol = 1e-12
	want := []model.ProfilePoint{
		// 300 steps at (0.175, 0.176) and 100 at (0.179, 0.180).
		{Nodes: 1, Replicas: 1, LocalBsz: 256, AccumStepTime: 0.176, OptimStepTime: 0.177},
		{Nodes: 1, Replicas: 4, LocalBsz: 128, AccumStepTime: 0.095, OptimStepTime: 0.140},
		{Nodes: 2, Replicas: 8, LocalBsz: 256, AccumStepTime: 0.180, OptimStepTime: 0.310},
	}
	if diff := cmp.Diff(want, ProfilePoints(multiNodeDoc), cmpopts.EquateApprox(tol, 0)); diff != "" {
		t.Errorf("ProfilePoints mismatch, relative tolerance %g (-want +got):\n%s", tol, diff)
	}
	if diff := cmp.Diff(model.GradParams{Sqr: 4e-7, Var: 1.5e21}, GradParams(multiNodeDoc)); diff != "" {
		t.Errorf("GradParams mismatch (-want +got):\n%s", diff)
	}
	// The points feed the fit directly.
	if _, err := model.FitPerfParams(ProfilePoints(multiNodeDoc)); err != nil {
		t.Errorf("FitPerfParams(ProfilePoints()): %v", err)
	}
}
