// Package statustext writes the controller's round status (jobs.Status) as
// text for a terminal: the table of jobs of pollux status and one job's
// detail.
package statustext

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
)

// WriteStatusTable writes the status as a readable table: one line per job with
// its state, GPUs, placement (with its GPU type, if typed), batch size, LR, speedup and the reason for
// its allocation. now is used for ages (the status's own time if zero).
func WriteStatusTable(w io.Writer, s *jobs.Status, now time.Time) error {
	if now.IsZero() {
		now = s.Time
	}
	var b strings.Builder
	by := oneLine(s.Instance, 200)
	if s.Term > 0 {
		by += fmt.Sprintf(" (term %d)", s.Term)
	}
	fmt.Fprintf(&b, "round %d at %s by %s (dry run: %v): %d nodes, %d GPUs, %d conflicts; phases ms:%s\n",
		s.Round, s.Time.Format(time.RFC3339), by, s.DryRun, s.Nodes, s.GPUs, s.Conflicts, timingsText(s.Timings))
	for _, a := range s.Autoscaling {
		pool := oneLine(a.NodePool, 60)
		if a.GPUType != "" {
			pool += " (" + oneLine(a.GPUType, 60) + ")"
		}
		fmt.Fprintf(&b, "autoscaling: pool %s: %d nodes, desired %d; utility %.2f now, %.2f at the desired size: %s\n",
			pool, a.Nodes, a.Desired, a.UtilityNow, a.UtilityDesired, oneLine(a.Reason, 200))
		if len(a.Emptying) > 0 {
			fmt.Fprintf(&b, "autoscaling: pool %s: emptying for removal: %s\n", pool, oneLine(strings.Join(a.Emptying, ", "), 300))
		}
	}
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTATE\tGPUS\tPLACEMENT\tBATCH\tLR\tACCUM\tSPEEDUP\tRESTARTS\tAGE\tREASON")
	for _, j := range s.Jobs {
		batch, lr, accum, placement := "-", "-", "-", "-"
		if d := j.Decision; d != nil {
			batch, lr, accum = fmt.Sprint(d.BatchSize), fmt.Sprintf("%.4g", d.LR), fmt.Sprint(d.AccumSteps)
			if d.Placement != "" {
				placement = d.Placement
				if j.GPUType != "" {
					placement += " (" + j.GPUType + ")"
				}
			}
		}
		speedup, reason := "-", j.Error
		if x := j.Explain; x != nil {
			if x.Speedup > 0 {
				speedup = fmt.Sprintf("%.2f", x.Speedup)
			}
			reason = x.Reason + ": " + x.Message
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", oneLine(j.Job, 60), j.State, j.GPUs, oneLine(placement, 60),
			batch, lr, accum, speedup, j.Restarts, age(j.Submitted, now), oneLine(reason, 200))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, e := range s.Errors {
		b.WriteString("error: " + oneLine(e, 500) + "\n")
	}
	if s.Policy != "" {
		b.WriteString("policy: " + s.Policy)
		for i, st := range s.Settings {
			sep := ", "
			if i == 0 {
				sep = " ("
			}
			b.WriteString(sep + st.Key + " " + st.Value)
			if st.Set {
				b.WriteString("*")
			}
		}
		if len(s.Settings) > 0 {
			b.WriteString("; * set by the configuration, the others defaults for this cluster)")
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// FindJobStatus returns one job's line: job is "namespace/id", or an ID in any
// namespace; it fails when no job or several match.
func FindJobStatus(s *jobs.Status, job string) (jobs.JobStatus, error) {
	var found []jobs.JobStatus
	for _, j := range s.Jobs {
		if j.Job == job || strings.HasSuffix(j.Job, "/"+job) && !strings.Contains(job, "/") {
			found = append(found, j)
		}
	}
	switch {
	case len(found) == 0:
		return jobs.JobStatus{}, fmt.Errorf("job %q is not in round %d's status", job, s.Round)
	case len(found) > 1:
		return jobs.JobStatus{}, fmt.Errorf("job %q is ambiguous: name it namespace/id (%s, %s, ...)", job, found[0].Job, found[1].Job)
	}
	return found[0], nil
}

// WriteJobStatus writes one job's detail (FindJobStatus names it): its decision, the
// explanation with the numbers behind it, and where Nomad runs it.
func WriteJobStatus(w io.Writer, s *jobs.Status, job string, now time.Time) error {
	j, err := FindJobStatus(s, job)
	if err != nil {
		return err
	}
	if now.IsZero() {
		now = s.Time
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("job", oneLine(j.Job, 200))
	row("round", s.Round)
	row("state", j.State)
	row("gpus", j.GPUs)
	if d := j.Decision; d != nil {
		row("placement", oneLine(d.Placement, 500))
		row("batch size", fmt.Sprintf("%d (micro-batch %d, accumulation steps %d)", d.BatchSize, d.LocalBsz, d.AccumSteps))
		row("lr", fmt.Sprintf("%.6g", d.LR))
	}
	if len(j.Running) > 0 {
		row("nomad runs", contract.FormatPlacement(j.Running))
	}
	row("age", age(j.Submitted, now))
	if j.WaitingSince != nil {
		row("waiting for", now.Sub(*j.WaitingSince).Round(time.Second))
	}
	row("restarts", j.Restarts)
	if x := j.Explain; x != nil {
		row("reason", x.Reason)
		row("why", oneLine(x.Message, 1000))
		if x.Key != "" {
			row("meta key", x.Key)
		}
		if x.BaseGoodput > 0 {
			row("speedup", fmt.Sprintf("%.3f (one GPU less %.3f, one more %.3f)", x.Speedup, x.SpeedupLess, x.SpeedupMore))
			row("goodput", fmt.Sprintf("%.4g examples/s", x.Goodput))
			row("fair-share base", fmt.Sprintf("%.4g examples/s on %d GPUs, %d nodes", x.BaseGoodput, x.FairShareGPUs, x.FairShareNodes))
		}
		if x.Efficiency > 0 {
			row("efficiency", fmt.Sprintf("%.3f", x.Efficiency))
		}
		if x.MaxGPUs > 0 {
			row("bounds", fmt.Sprintf("%d..%d GPUs (cap: %s)", x.MinGPUs, x.MaxGPUs, x.CapBy))
		}
	} else if j.Error != "" {
		row("error", oneLine(j.Error, 1000))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = io.WriteString(w, b.String())
	return err
}

func timingsText(t map[string]float64) string {
	var b strings.Builder
	for _, k := range []string{"snapshot", "fit", "optimize", "plan", "apply", "total"} {
		if v, ok := t[k]; ok {
			fmt.Fprintf(&b, " %s=%.1f", k, v)
		}
	}
	return b.String()
}

func age(since *time.Time, now time.Time) string {
	if since == nil || since.IsZero() {
		return "-"
	}
	d := now.Sub(*since)
	switch {
	case d < 0:
		return "0s"
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return fmt.Sprintf("%.1fh", d.Hours())
	}
	return fmt.Sprintf("%.1fd", d.Hours()/24)
}

// oneLine keeps a job-supplied string on one line of a terminal table:
// control characters become spaces (no escape sequences reach the
// terminal) and it is cut at n bytes.
func oneLine(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return ' '
		}
		return r
	}, s)
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "") + "..."
	}
	return s
}
