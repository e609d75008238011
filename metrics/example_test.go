package metrics_test

import (
	"fmt"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/metrics"
)

func ExampleProfilePoints() {
	doc, err := contract.ParseMetrics([]byte(`{"version":1,"timestamp":"2026-12-02T14:00:00+01:00","batch_size":512,
		"progress":100,"grad_sqr":0.5,"grad_var":2,"profile":[
		{"num_nodes":1,"num_replicas":1,"local_bsz":128,"accum_steps":3,"compute_time":0.1,"step_time":0.11,"sync_time":0,"count":30},
		{"num_nodes":1,"num_replicas":1,"local_bsz":128,"accum_steps":1,"compute_time":0.2,"step_time":0.21,"sync_time":0,"count":10}]}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(doc.Timestamp)
	for _, p := range metrics.ProfilePoints(doc) {
		fmt.Printf("N=%d K=%d m=%g accum=%.3f optim=%.3f\n", p.Nodes, p.Replicas, p.LocalBsz, p.AccumStepTime, p.OptimStepTime)
	}
	_, err = contract.ParseMetrics([]byte(`{"version":2}`))
	fmt.Println(err)
	// Output:
	// 2026-12-02 13:00:00 +0000 UTC
	// N=1 K=1 m=128 accum=0.125 optim=0.135
	// failed to parse metrics document: version: unsupported version 2, want 1
	// timestamp: must be set, in years 1 to 9999 UTC, got 0001-01-01T00:00:00Z
	// batch_size: must be finite and positive, got 0
	// profile: must have at least one entry
}
