package policy_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/pollux-nomad/pollux/policy"
	pt "github.com/pollux-nomad/pollux/policy/policytest"
)

// BenchmarkSiaOptimize measures one Sia round on the artifact's 3-type
// cluster (t4 6×4, rtx2080ti 3×8, a100 2×8: 64 GPUs) with 30 and 60 active
// jobs, and on it scaled 32 times (2048 GPUs, the scale_32x study) with
// 500 to 2000 jobs. Reported: the solver's nodes and relative gap.
func BenchmarkSiaOptimize(b *testing.B) {
	for _, size := range []struct{ k, jobs int }{{1, 30}, {1, 60}, {32, 500}, {32, 1000}, {32, 2000}} {
		b.Run(fmt.Sprintf("gpus=%d/jobs=%d", 64*size.k, size.jobs), func(b *testing.B) {
			in := pt.TypedClusterInput(1, pt.SiaCluster(size.k), size.jobs)
			p, err := policy.NewSia(policy.SiaConfig{})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			for b.Loop() {
				if _, err := p.Optimize(ctx, in); err != nil {
					b.Fatal(err)
				}
			}
			st := p.LastStats()
			b.ReportMetric(float64(st.Nodes), "bb-nodes/op")
			b.ReportMetric(st.Gap*100, "gap-%")
		})
	}
}
