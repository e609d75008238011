package results

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"
)

// jobsCSVColumns returns the header of the per-job CSV.
func jobsCSVColumns() []string {
	return []string{"name", "application", "submitted", "completion", "jct", "restarts", "gpu_seconds", "final_batch_size"}
}

// WriteJobsCSV writes one CSV row per job of r, in r.Jobs order, under the
// header name,application,submitted,completion,jct,restarts,gpu_seconds,
// final_batch_size. Times are in seconds; completion and jct are empty for
// jobs that did not complete. Numbers use the shortest decimal form that
// reads back exactly.
func WriteJobsCSV(w io.Writer, r Run) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(jobsCSVColumns()); err != nil {
		return fmt.Errorf("failed to write job results header: %w", err)
	}
	for _, j := range r.Jobs {
		completion, jct := "", ""
		if j.Completed {
			completion = formatFloat(j.Completion)
			jct = formatFloat(j.JCT())
		}
		rec := []string{
			j.Name,
			j.Application,
			formatFloat(j.Submitted),
			completion,
			jct,
			strconv.Itoa(j.Restarts),
			formatFloat(j.GPUSeconds),
			strconv.Itoa(j.FinalBatchSize),
		}
		if err := cw.Write(rec); err != nil {
			return fmt.Errorf("failed to write job result %q: %w", j.Name, err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("failed to write job results: %w", err)
	}
	return nil
}

// WriteTable writes the summaries as an aligned text table, one row per
// summary, with JCTs and makespan in hours (the average also in seconds,
// the unit of the artifact's published results), GPU utilisation in
// percent and policy time per round in milliseconds.
func WriteTable(w io.Writer, sums []Summary) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tWORKLOAD\tJOBS\tDONE\tAVG JCT (s)\tAVG JCT (h)\tP50 JCT (h)\tP99 JCT (h)\tMAKESPAN (h)\tRESTARTS/JOB\tGPU UTIL (%)\tROUNDS\tOPT P50 (ms)\tOPT P95 (ms)\tWALL (s)")
	for _, s := range sums {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.1f\t%d\t%.1f\t%.1f\t%.1f\n",
			s.Policy, s.Workload, s.Jobs, s.Completed,
			s.AvgJCT, s.AvgJCT/3600, s.P50JCT/3600, s.P99JCT/3600, s.Makespan/3600,
			s.RestartsPerJob, 100*s.GPUUtilization, s.Rounds,
			s.OptimizeMsMedian, s.OptimizeMsP95, s.WallSeconds)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("failed to write summary table: %w", err)
	}
	return nil
}

// WriteComparison writes, per summary, its average JCT beside a reference
// average JCT for the same policy (for example the artifact's published
// results in data/reference-results.json, in seconds) and the deviation
// 100·(avg − reference)/reference in percent, signed. Policies missing from
// reference (or with a reference ≤ 0) show "-".
func WriteComparison(w io.Writer, sums []Summary, reference map[string]float64) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tWORKLOAD\tAVG JCT\tREFERENCE\tDEVIATION")
	for _, s := range sums {
		ref, dev := "-", "-"
		if r, ok := reference[s.Policy]; ok && r > 0 && !math.IsInf(r, 0) {
			ref = fmt.Sprintf("%.0f s (%s)", r, hours(r))
			dev = fmt.Sprintf("%+.1f%%", 100*(s.AvgJCT-r)/r)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f s (%s)\t%s\t%s\n", s.Policy, s.Workload, s.AvgJCT, hours(s.AvgJCT), ref, dev)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("failed to write comparison table: %w", err)
	}
	return nil
}

// hours formats seconds as hours with two decimals ("0.68 h").
func hours(seconds float64) string {
	return fmt.Sprintf("%.2f h", seconds/3600)
}

// formatFloat formats v in the shortest decimal form that parses back to v.
func formatFloat(v float64) string {
	return strconv.FormatFloat(v, 'f', -1, 64)
}
