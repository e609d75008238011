package results

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// floatTol is the tolerance of float comparisons in these tests: the
// expected values are hand-computed decimals.
const floatTol = 1e-9

func TestJCT(t *testing.T) {
	j := JobResult{Submitted: 120, Completed: true, Completion: 3720}
	if got, want := j.JCT(), 3600.0; got != want {
		t.Errorf("JCT() = %v, want %v", got, want)
	}
}

func TestSummarize(t *testing.T) {
	tests := map[string]struct {
		run  Run
		want Summary
	}{
		"three of four completed": {
			run: Run{
				Policy: "pollux", Workload: "hand", TotalGPUs: 4,
				Jobs: []JobResult{
					{Name: "a", Submitted: 0, Completed: true, Completion: 100, Restarts: 1},
					{Name: "b", Submitted: 10, Completed: true, Completion: 310},
					{Name: "c", Submitted: 20, Completed: true, Completion: 1020, Restarts: 2},
					{Name: "d", Submitted: 50, Restarts: 1}, // never completes
				},
				Timeline: []Sample{
					{Time: -10, GPUsInUse: 0}, // before any submission: not counted
					{Time: 0, GPUsInUse: 1},
					{Time: 60, GPUsInUse: 3},
					{Time: 120, GPUsInUse: 2},
					{Time: 400, GPUsInUse: 4},
				},
				OptimizeSeconds: []float64{0.040, 0.010, 0.030, 0.020},
				Wall:            90 * time.Second,
			},
			// JCTs 100, 300, 1000: mean 1400/3; p50 = 300;
			// p99: h = 2·0.99 = 1.98 → 300 + 0.98·700 = 986.
			// Makespan 1020 − 0. Restarts (1+0+2+1)/4.
			// Utilisation (1/4 + 3/4 + 2/4 + 4/4)/4 = 0.625.
			// Optimize ms sorted 10,20,30,40: median 25; p95: h = 2.85 →
			// 30 + 0.85·10 = 38.5.
			want: Summary{
				Policy: "pollux", Workload: "hand", Jobs: 4, Completed: 3,
				AvgJCT: 1400.0 / 3, P50JCT: 300, P99JCT: 986, Makespan: 1020,
				RestartsPerJob: 1, GPUUtilization: 0.625, Rounds: 5,
				OptimizeMsMedian: 25, OptimizeMsP95: 38.5, WallSeconds: 90,
			},
		},
		"active boundaries": {
			run: Run{
				Policy: "tiresias", Workload: "edges", TotalGPUs: 8,
				Jobs: []JobResult{
					{Name: "a", Submitted: 60, Completed: true, Completion: 120},
					{Name: "b", Submitted: 180, Completed: true, Completion: 300},
				},
				Timeline: []Sample{
					{Time: 0, GPUsInUse: 8},   // nothing submitted yet: skipped
					{Time: 60, GPUsInUse: 2},  // a submitted at 60: active
					{Time: 120, GPUsInUse: 8}, // a completed at 120: idle, skipped
					{Time: 180, GPUsInUse: 6}, // b submitted at 180: active
					{Time: 300, GPUsInUse: 8}, // b completed: skipped
				},
			},
			// JCTs 60, 120: mean 90, p50 90, p99 = 60 + 0.99·60 = 119.4.
			// Utilisation (2/8 + 6/8)/2 = 0.5.
			want: Summary{
				Policy: "tiresias", Workload: "edges", Jobs: 2, Completed: 2,
				AvgJCT: 90, P50JCT: 90, P99JCT: 119.4, Makespan: 300, // last completion at 300
				GPUUtilization: 0.5, Rounds: 5,
			},
		},
		"nothing completed": {
			run: Run{
				Policy: "optimus", Workload: "stuck", TotalGPUs: 2,
				Jobs:     []JobResult{{Name: "a", Submitted: 5, Restarts: 3}},
				Timeline: []Sample{{Time: 60, GPUsInUse: 1}, {Time: 120, GPUsInUse: 2}},
			},
			want: Summary{
				Policy: "optimus", Workload: "stuck", Jobs: 1, Completed: 0,
				RestartsPerJob: 3, GPUUtilization: 0.75, Rounds: 2,
			},
		},
		"empty run": {
			run:  Run{Policy: "pollux"},
			want: Summary{Policy: "pollux"},
		},
		"zero capacity": {
			run: Run{
				Jobs:     []JobResult{{Name: "a", Completed: true, Completion: 10}},
				Timeline: []Sample{{Time: 0, GPUsInUse: 3}},
			},
			want: Summary{Jobs: 1, Completed: 1, AvgJCT: 10, P50JCT: 10, P99JCT: 10, Makespan: 10, Rounds: 1},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			before := cloneRun(tc.run)
			got := Summarize(tc.run)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateApprox(0, floatTol)); diff != "" {
				t.Errorf("Summarize mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tc.run); diff != "" {
				t.Errorf("Summarize modified its input (-before +after):\n%s", diff)
			}
		})
	}
}

// cloneRun deep-copies the slices of a run.
func cloneRun(r Run) Run {
	r.Jobs = slices.Clone(r.Jobs)
	r.Timeline = slices.Clone(r.Timeline)
	r.OptimizeSeconds = slices.Clone(r.OptimizeSeconds)
	return r
}

func TestSummaryJSONFields(t *testing.T) {
	// docs/contracts.md §5: the fields of `pollux simulate -json`.
	want := []string{
		"avg_jct_s", "completed", "ftf_share_above_1", "ftf_worst", "gpu_hours", "gpu_hours_per_job", "gpu_utilization", "jobs", "makespan_s",
		"optimize_ms_median", "optimize_ms_p95", "p50_jct_s", "p99_jct_s",
		"policy", "restarts_per_job", "rounds", "wall_s", "workload",
	}
	raw, err := json.Marshal(Summarize(Run{Policy: "pollux", Workload: "w", Jobs: []JobResult{{Completed: true, Completion: 1}}}))
	if err != nil {
		t.Fatalf("json.Marshal: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	var got []string
	for k := range m {
		got = append(got, k)
	}
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("JSON fields mismatch (-want +got):\n%s", diff)
	}
}

func TestWriteJobsCSV(t *testing.T) {
	tests := map[string]struct {
		run  Run
		want string
	}{
		"completed and unfinished": {
			run: Run{Jobs: []JobResult{
				{Name: "cifar10-0", Application: "cifar10", Submitted: 53, Completed: true, Completion: 853.5, Restarts: 2, GPUSeconds: 1234.25, FinalBatchSize: 2048},
				{Name: "bert,1", Application: "bert", Submitted: 60, Restarts: 0, GPUSeconds: 0, FinalBatchSize: 12},
			}},
			want: "name,application,submitted,completion,jct,restarts,gpu_seconds,final_batch_size\n" +
				"cifar10-0,cifar10,53,853.5,800.5,2,1234.25,2048\n" +
				"\"bert,1\",bert,60,,,0,0,12\n",
		},
		"no jobs": {
			run:  Run{},
			want: "name,application,submitted,completion,jct,restarts,gpu_seconds,final_batch_size\n",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteJobsCSV(&buf, tc.run); err != nil {
				t.Fatalf("WriteJobsCSV: %v", err)
			}
			if diff := cmp.Diff(tc.want, buf.String()); diff != "" {
				t.Errorf("CSV mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// handSummaries are two summaries with round numbers for the table tests.
func handSummaries() []Summary {
	return []Summary{
		{Policy: "pollux", Workload: "workload-6", Jobs: 160, Completed: 160, AvgJCT: 2446.1, P50JCT: 1800, P99JCT: 36394, Makespan: 58642,
			RestartsPerJob: 1.25, GPUUtilization: 0.6123, Rounds: 978, OptimizeMsMedian: 151.2, OptimizeMsP95: 402.75, WallSeconds: 61.5},
		{Policy: "tiresias", Workload: "workload-6", Jobs: 160, Completed: 159, AvgJCT: 3600, P50JCT: 900, P99JCT: 46336, Makespan: 78609,
			RestartsPerJob: 0.5, GPUUtilization: 0.5, Rounds: 1311, OptimizeMsMedian: 0.04, OptimizeMsP95: 0.1, WallSeconds: 3},
	}
}

func TestWriteTable(t *testing.T) {
	tests := map[string]struct {
		sums []Summary
		want string
	}{
		"two policies": {
			sums: handSummaries(),
			want: "" +
				"POLICY    WORKLOAD    JOBS  DONE  AVG JCT (s)  AVG JCT (h)  P50 JCT (h)  P99 JCT (h)  MAKESPAN (h)  RESTARTS/JOB  GPU UTIL (%)  ROUNDS  OPT P50 (ms)  OPT P95 (ms)  WALL (s)\n" +
				"pollux    workload-6  160   160   2446         0.68         0.50         10.11        16.29         1.25          61.2          978     151.2         402.8         61.5\n" +
				"tiresias  workload-6  160   159   3600         1.00         0.25         12.87        21.84         0.50          50.0          1311    0.0           0.1           3.0\n",
		},
		"header only": {
			sums: nil,
			want: "POLICY  WORKLOAD  JOBS  DONE  AVG JCT (s)  AVG JCT (h)  P50 JCT (h)  P99 JCT (h)  MAKESPAN (h)  RESTARTS/JOB  GPU UTIL (%)  ROUNDS  OPT P50 (ms)  OPT P95 (ms)  WALL (s)\n",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteTable(&buf, tc.sums); err != nil {
				t.Fatalf("WriteTable: %v", err)
			}
			if diff := cmp.Diff(tc.want, buf.String()); diff != "" {
				t.Errorf("table mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWriteComparison(t *testing.T) {
	sums := append(handSummaries(), Summary{Policy: "optimus", Workload: "workload-6", AvgJCT: 5000})
	// data/reference-results.json, workload-6.
	reference := map[string]float64{"pollux": 2446.1, "tiresias": 3469.7}
	want := "" +
		"POLICY    WORKLOAD    AVG JCT          REFERENCE        DEVIATION\n" +
		"pollux    workload-6  2446 s (0.68 h)  2446 s (0.68 h)  +0.0%\n" +
		"tiresias  workload-6  3600 s (1.00 h)  3470 s (0.96 h)  +3.8%\n" +
		"optimus   workload-6  5000 s (1.39 h)  -                -\n"
	var buf bytes.Buffer
	if err := WriteComparison(&buf, sums, reference); err != nil {
		t.Fatalf("WriteComparison: %v", err)
	}
	if diff := cmp.Diff(want, buf.String()); diff != "" {
		t.Errorf("comparison mismatch (-want +got):\n%s", diff)
	}
}

func TestWriteComparisonSign(t *testing.T) {
	tests := map[string]struct {
		avg, ref float64
		want     string
	}{
		"slower":  {avg: 110, ref: 100, want: "+10.0%"},
		"faster":  {avg: 75, ref: 100, want: "-25.0%"},
		"no ref":  {avg: 75, ref: 0, want: "-"},
		"exactly": {avg: 100, ref: 100, want: "+0.0%"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			err := WriteComparison(&buf, []Summary{{Policy: "p", AvgJCT: tc.avg}}, map[string]float64{"p": tc.ref})
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			fields := strings.Fields(lines[len(lines)-1])
			if got := fields[len(fields)-1]; got != tc.want {
				t.Errorf("deviation %q, want %q in\n%s", got, tc.want, buf.String())
			}
		})
	}
}
