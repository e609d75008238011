package statustext

import (
	"strings"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
)

func testStatus() *jobs.Status {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	sub := t0.Add(-90 * time.Minute)
	return &jobs.Status{Round: 7, Time: t0, Instance: "host/alloc", Term: 12, Nodes: 2, GPUs: 8, Timings: map[string]float64{"total": 12.5},
		Policy: "pollux", Settings: []contract.Setting{{Key: "fairness_p", Value: "-1", Set: true}, {Key: "pollux.first_hold", Value: "off"}},
		Jobs: []jobs.JobStatus{
			{Job: "default/train", State: jobs.StateScheduled, GPUs: 2, Submitted: &sub, Restarts: 1,
				Decision: &jobs.Decision{BatchSize: 512, LocalBsz: 256, NumReplicas: 2, NumNodes: 1, LR: 0.2, Placement: "n1:2"},
				Explain:  &jobs.Explanation{Reason: contract.ReasonGoodput, Message: "2 GPUs: speedup 1.80", Speedup: 1.8, SpeedupLess: 1, SpeedupMore: 1.9, BaseGoodput: 100, Goodput: 180, FairShareGPUs: 2, FairShareNodes: 1}},
			{Job: "default/bad\x1b[31m", State: jobs.StateInvalid, Error: "pollux_init_lr: required",
				Explain: &jobs.Explanation{Reason: contract.ReasonInvalidMeta, Key: "pollux_init_lr", Message: "invalid meta pollux_init_lr"}},
			{Job: "other/train", State: jobs.StateScheduled},
		}}
}

func TestWriteTable(t *testing.T) {
	var b strings.Builder
	if err := WriteStatusTable(&b, testStatus(), time.Time{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"round 7", "by host/alloc (term 12)", "total=12.5", "REASON", "goodput: 2 GPUs: speedup 1.80", "1.80", "1.5h", "invalid_meta: invalid meta pollux_init_lr",
		"policy: pollux (fairness_p -1*, pollux.first_hold off; * set by the configuration"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("a control character of a job ID reached the table:\n%q", out)
	}
}

func TestWriteJob(t *testing.T) {
	st := testStatus()
	var b strings.Builder
	if err := WriteJobStatus(&b, st, "default/train", time.Time{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fair-share base", "1.800 (one GPU less 1.000, one more 1.900)", "n1:2", "micro-batch 256"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("detail lacks %q:\n%s", want, b.String())
		}
	}
	if err := WriteJobStatus(&b, st, "train", time.Time{}); err == nil || !strings.Contains(err.Error(), "ambiguous") {
		t.Errorf("ID in two namespaces: %v, want ambiguous", err)
	}
	if err := WriteJobStatus(&b, st, "nope", time.Time{}); err == nil || !strings.Contains(err.Error(), `"nope" is not in round 7`) {
		t.Errorf("unknown job: %v", err)
	}
}
