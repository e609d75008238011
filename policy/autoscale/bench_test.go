package autoscale_test

import (
	"fmt"
	"testing"

	"github.com/pollux-nomad/pollux/policy/autoscale"
	"github.com/pollux-nomad/pollux/policy/policytest"
)

// BenchmarkDecide measures one autoscaling decision on the inputs of
// policy's BenchmarkPolluxOptimize (4 GPUs per node; 64 GPUs with 45 jobs,
// 256 with 180, 1024 with 720), scoring every size up to twice the
// cluster, as AdaptDL's search over the nodes plus as many template nodes.
// Compare its time with BenchmarkPolluxOptimize's at the same size: the
// round with autoscaling is the two added.
func BenchmarkDecide(b *testing.B) {
	for _, size := range []struct{ nodes, jobs int }{{16, 45}, {64, 180}, {256, 720}} {
		b.Run(fmt.Sprintf("gpus=%d/jobs=%d", size.nodes*4, size.jobs), func(b *testing.B) {
			in := policytest.ClusterInput(1, size.nodes, 4, size.jobs)
			s, err := autoscale.NewScaler(autoscale.Config{Pools: []autoscale.Pool{{Name: "gpu", Template: autoscale.Template{GPUsPerNode: 4}, MaxNodes: 2 * size.nodes}}})
			if err != nil {
				b.Fatal(err)
			}
			now := 0.0
			for b.Loop() {
				now += 60
				s.Decide(autoscale.Input{Now: now, Jobs: in.Jobs, Nodes: map[string]int{"gpu": size.nodes}})
			}
		})
	}
}
