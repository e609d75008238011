package main

import (
	"testing"
	"time"
)

// TestStartDelays: a measured start latency becomes the simulator's
// first-allocation delay less half a round, capped at the job's restart
// time plus a round (longer is queueing), and never negative.
func TestStartDelays(t *testing.T) {
	got := startDelays(map[string]float64{"queued": 3000, "quick": 10, "mid": 120},
		map[string]time.Duration{"queued": 50 * time.Second, "quick": 50 * time.Second, "mid": 50 * time.Second}, 100*time.Second)
	want := map[string]time.Duration{"queued": 100 * time.Second, "quick": 0, "mid": 70 * time.Second}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("start delay of %s: %v, want %v", k, got[k], v)
		}
	}
}
