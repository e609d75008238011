package emulate

import (
	"context"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/pollux-nomad/pollux/apps"
	"github.com/pollux-nomad/pollux/data"
	"github.com/pollux-nomad/pollux/worker/go/report"
)

func TestShapeAndAdvance(t *testing.T) {
	all, err := apps.LoadAll(data.Traces())
	if err != nil {
		t.Fatal(err)
	}
	app := all["cifar10"]
	tests := map[string]struct {
		alloc     report.Allocation
		placement []int
		local     int
	}{
		"unshaped job: one GPU at M0": {alloc: report.Allocation{}, placement: []int{1}, local: 128},
		"controller's placement":      {alloc: report.Allocation{Placement: "a:4,b:2", LocalBsz: 64, AccumSteps: 1}, placement: []int{4, 2}, local: 64},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, err := newShape(app, tc.alloc)
			if err != nil {
				t.Fatal(err)
			}
			if len(s.placement) != len(tc.placement) || s.localBsz != tc.local {
				t.Fatalf("shape %+v, want placement %v and micro-batch %d", s, tc.placement, tc.local)
			}
			for i := range tc.placement {
				if s.placement[i] != tc.placement[i] {
					t.Fatalf("placement %v, want %v", s.placement, tc.placement)
				}
			}
		})
	}
	if _, err := newShape(app, report.Allocation{Placement: "a:x"}); err == nil {
		t.Error("a malformed placement was accepted")
	}

	// Advancing: progress grows at the profile's goodput, epochs follow the
	// artifact's thresholds, and it completes.
	cc, err := consulapi.NewClient(&consulapi.Config{Address: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := report.New(ctx, report.Config{Consul: cc, JobID: "unit", MinInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newShape(app, report.Allocation{})
	var cp Checkpoint
	done, err := s.advance(r, &cp, 60)
	if err != nil || done || cp.Progress <= 0 {
		t.Fatalf("after 60 s: done %v, err %v, checkpoint %+v", done, err, cp)
	}
	first := cp.Progress
	for i := 0; i < 100000 && !done; i++ {
		done, err = s.advance(r, &cp, 60)
		if err != nil {
			t.Fatal(err)
		}
	}
	if !done || cp.Epoch <= app.CompletionEpoch() || cp.Progress < app.Progress(app.MaxEpochs) {
		t.Errorf("not complete: %+v (first minute %.1f)", cp, first)
	}
	t.Logf("cifar10 on one GPU completes after %.0f emulated seconds", cp.SimSeconds)
}
