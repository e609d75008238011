package results_test

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/pollux-nomad/pollux/results"
)

func ExampleSummarize() {
	run := results.Run{
		Policy: "pollux", Workload: "demo", TotalGPUs: 4,
		Jobs: []results.JobResult{
			{Name: "cifar10-0", Application: "cifar10", Submitted: 0, Completed: true, Completion: 900, Restarts: 1},
			{Name: "ncf-1", Application: "ncf", Submitted: 60, Completed: true, Completion: 180},
		},
		Timeline: []results.Sample{
			{Time: 60, GPUsInUse: 4, JobGPUs: map[string]int{"cifar10-0": 3, "ncf-1": 1}},
			{Time: 120, GPUsInUse: 4, JobGPUs: map[string]int{"cifar10-0": 3, "ncf-1": 1}},
			{Time: 180, GPUsInUse: 2, JobGPUs: map[string]int{"cifar10-0": 2}},
		},
		OptimizeSeconds: []float64{0.1, 0.2, 0.3},
		Wall:            1500 * time.Millisecond,
	}
	out, err := json.MarshalIndent(results.Summarize(run), "", "  ")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(out))
	// Output:
	// {
	//   "policy": "pollux",
	//   "workload": "demo",
	//   "jobs": 2,
	//   "completed": 2,
	//   "avg_jct_s": 510,
	//   "p50_jct_s": 510,
	//   "p99_jct_s": 892.2,
	//   "makespan_s": 900,
	//   "restarts_per_job": 0.5,
	//   "gpu_utilization": 0.8333333333333334,
	//   "gpu_hours_per_job": 0,
	//   "rounds": 3,
	//   "optimize_ms_median": 200,
	//   "optimize_ms_p95": 290,
	//   "wall_s": 1.5,
	//   "gpu_hours": 0,
	//   "ftf_worst": 0,
	//   "ftf_share_above_1": 0
	// }
}

func ExampleQuantile() {
	jcts := []float64{600, 120, 3600, 1800}
	fmt.Printf("p50 %.1f s, p99 %.1f s\n", results.Quantile(jcts, 0.5), results.Quantile(jcts, 0.99))
	// Output: p50 1200.0 s, p99 3546.0 s
}

func ExampleWriteComparison() {
	sums := []results.Summary{
		{Policy: "pollux", Workload: "workload-6", AvgJCT: 2500},
		{Policy: "tiresias", Workload: "workload-6", AvgJCT: 3300},
	}
	// The artifact's published averages (data/reference-results.json).
	reference := map[string]float64{"pollux": 2446.1, "tiresias": 3469.7}
	if err := results.WriteComparison(os.Stdout, sums, reference); err != nil {
		fmt.Println(err)
	}
	// Output:
	// POLICY    WORKLOAD    AVG JCT          REFERENCE        DEVIATION
	// pollux    workload-6  2500 s (0.69 h)  2446 s (0.68 h)  +2.2%
	// tiresias  workload-6  3300 s (0.92 h)  3470 s (0.96 h)  -4.9%
}
