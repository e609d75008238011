package report_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pollux-nomad/pollux/worker/go/report"
)

// TestConsulRestart stops the Consul agent a Reporter writes to, keeps
// observing while it is down, starts it again, and checks that the
// document ends up holding every sample exactly once: with a -dev agent,
// whose store is lost with the restart, and with a server that keeps its
// data.
func TestConsulRestart(t *testing.T) {
	tests := map[string]bool{"dev agent loses its data": false, "server keeps its data": true}
	for name, persistent := range tests {
		t.Run(name, func(t *testing.T) {
			a := startAgent(t, persistent)
			raw := a.client()
			r, err := report.New(t.Context(), report.Config{
				Consul: raw, Namespace: "default", JobID: "restart", InitBatchSize: 32,
				MinInterval: 200 * time.Millisecond, Logger: testLogger().Named(t.Name()),
			})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			k1 := report.StepConfig{NumNodes: 1, NumReplicas: 1, LocalBsz: 32}
			k2 := report.StepConfig{NumNodes: 1, NumReplicas: 2, LocalBsz: 32}
			samples := map[report.StepConfig][]float64{}
			observe := func(k report.StepConfig, x float64) {
				t.Helper()
				if err := r.Observe(k, x, 2*x, x/10); err != nil {
					t.Fatalf("Observe: %v", err)
				}
				samples[k] = append(samples[k], x)
			}
			for _, x := range []float64{0.1, 0.2, 0.3} {
				observe(k1, x)
			}
			if err := r.Flush(t.Context()); err != nil {
				t.Fatalf("Flush: %v", err)
			}

			a.stop()
			observe(k1, 0.4)
			observe(k1, 0.5)
			observe(k2, 0.25)
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			err = r.Flush(ctx)
			cancel()
			if err == nil {
				t.Fatalf("Flush succeeded with Consul down")
			}
			time.Sleep(500 * time.Millisecond) // the background writer fails and backs off too

			a.start()
			observe(k2, 0.35)
			want := map[report.StepConfig]int{}
			for k, xs := range samples {
				want[k] = len(xs)
			}
			// The background writer gets everything in.
			eventually(t, 15*time.Second, func() error {
				pair, _, err := raw.KV().Get(r.Key(), nil)
				if err != nil || pair == nil {
					return fmt.Errorf("no document yet (err %v)", err)
				}
				if diff := cmp.Diff(want, countsOf(t, raw, r.Key())); diff != "" {
					return fmt.Errorf("counts (-want +got):\n%s", diff)
				}
				return nil
			})
			if err := r.Close(t.Context()); err != nil {
				t.Fatalf("Close: %v", err)
			}
			d, _ := readDoc(t, raw, r.Key())
			got := entries(d)
			for k, xs := range samples {
				mean := 0.0
				for _, x := range xs {
					mean += x
				}
				mean /= float64(len(xs))
				e := got[k]
				if e.Count != len(xs) || !near(e.ComputeTime, mean, 1e-12) || !near(e.StepTime, 2*mean, 1e-12) || !near(e.SyncTime, mean/10, 1e-12) {
					t.Errorf("%+v: %+v, want count %d and means %v %v %v", k, e, len(xs), mean, 2*mean, mean/10)
				}
			}
		})
	}
}
