package metrics_test

import (
	"fmt"
	"time"

	"github.com/pollux-nomad/pollux/metrics"
)

func ExampleParse() {
	doc, err := metrics.Parse([]byte(`{"version":1,"timestamp":"2026-12-02T14:00:00+01:00","batch_size":512,
		"progress":100,"grad_sqr":0.5,"grad_var":2,"profile":[
		{"num_nodes":1,"num_replicas":1,"local_bsz":128,"accum_steps":3,"compute_time":0.1,"step_time":0.11,"sync_time":0,"count":30},
		{"num_nodes":1,"num_replicas":1,"local_bsz":128,"accum_steps":1,"compute_time":0.2,"step_time":0.21,"sync_time":0,"count":10}]}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(doc.Timestamp)
	for _, p := range doc.ProfilePoints() {
		fmt.Printf("N=%d K=%d m=%g accum=%.3f optim=%.3f\n", p.Nodes, p.Replicas, p.LocalBsz, p.AccumStepTime, p.OptimStepTime)
	}
	_, err = metrics.Parse([]byte(`{"version":2}`))
	fmt.Println(err)
	// Output:
	// 2026-12-02 13:00:00 +0000 UTC
	// N=1 K=1 m=128 accum=0.125 optim=0.135
	// failed to parse metrics document: version: unsupported version 2, want 1
	// timestamp: must be set, in years 1 to 9999 UTC, got 0001-01-01T00:00:00Z
	// batch_size: must be finite and positive, got 0
	// profile: must have at least one entry
}

func ExampleMarshal() {
	b, err := metrics.Marshal(&metrics.Document{
		Version:   metrics.Version,
		Timestamp: time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC),
		BatchSize: 1024, Progress: 12345.6, GradSqr: 0.52, GradVar: 2.1,
		Profile: []metrics.ProfileEntry{{NumNodes: 1, NumReplicas: 2, LocalBsz: 128,
			ComputeTime: 0.101, StepTime: 0.124, SyncTime: 0.021, Count: 40}},
	})
	fmt.Println(string(b), err)
	// Output:
	// {"version":1,"timestamp":"2026-12-02T13:00:00Z","batch_size":1024,"progress":12345.6,"grad_sqr":0.52,"grad_var":2.1,"profile":[{"num_nodes":1,"num_replicas":2,"local_bsz":128,"accum_steps":0,"compute_time":0.101,"step_time":0.124,"sync_time":0.021,"count":40}]} <nil>
}
