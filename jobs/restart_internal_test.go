package jobs

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pollux-nomad/pollux/contract"
)

// A restart is measured from the job's new allocation's creation when the
// write was recorded earlier (the controller paused between its record and
// the write, or a new leader completed an interrupted write's bookkeeping
// with the record's time), and from the record otherwise.
func TestRestartFromAllocationStart(t *testing.T) {
	c := &Controller{log: hclog.NewNullLogger()}
	recorded := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	step := recorded.Add(25 * time.Second) // first step on the new allocation
	cases := []struct {
		name    string
		started time.Time
		want    float64
	}{
		{"paused 20s before the write", recorded.Add(20 * time.Second), 5},
		{"allocation created right after the record", recorded.Add(200 * time.Millisecond), 24.8},
		{"unknown allocation start", time.Time{}, 25},
		{"allocation older than the record (the previous one)", recorded.Add(-time.Minute), 25},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &State{AppliedAt: recorded}
			openRestart(s, []string{"n1"})
			doc := &contract.Metrics{Timestamp: step, Progress: 10, Restart: &contract.Restart{At: step, RestoreTime: 3}}
			c.observeRestartAt(JobRef{Namespace: "default", ID: "a"}, s, doc, tc.started)
			if len(s.RestartSamples) != 1 || s.RestartOpen {
				t.Fatalf("samples %v, open %v; want one sample, closed", s.RestartSamples, s.RestartOpen)
			}
			if got := s.RestartSamples[0]; got < tc.want-1e-9 || got > tc.want+1e-9 {
				t.Errorf("restart = %gs, want %gs", got, tc.want)
			}
		})
	}
}
