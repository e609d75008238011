package contract_test

import (
	"fmt"
	"time"

	"github.com/pollux-nomad/pollux/contract"
)

func ExampleMarshalMetrics() {
	b, err := contract.MarshalMetrics(&contract.Metrics{
		Version:   contract.MetricsVersion,
		Timestamp: time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC),
		BatchSize: 1024, Progress: 12345.6, GradSqr: 0.52, GradVar: 2.1,
		Profile: []contract.ProfileEntry{{NumNodes: 1, NumReplicas: 2, LocalBsz: 128,
			ComputeTime: 0.101, StepTime: 0.124, SyncTime: 0.021, Count: 40}},
	})
	fmt.Println(string(b), err)
	// Output:
	// {"version":1,"timestamp":"2026-12-02T13:00:00Z","batch_size":1024,"progress":12345.6,"grad_sqr":0.52,"grad_var":2.1,"profile":[{"num_nodes":1,"num_replicas":2,"local_bsz":128,"accum_steps":0,"compute_time":0.101,"step_time":0.124,"sync_time":0.021,"count":40}]} <nil>
}
