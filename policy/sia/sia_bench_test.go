package sia_test

import (
	"context"
	"fmt"
	"testing"

	pt "github.com/pollux-nomad/pollux/policy/policytest"
	"github.com/pollux-nomad/pollux/policy/sia"
)

// BenchmarkSiaOptimize measures one Sia round on the artifact's 3-type
// cluster (t4 6×4, rtx2080ti 3×8, a100 2×8: 64 GPUs) with 30 and 60 active
// jobs, and on it scaled 32 times (2048 GPUs, the scale_32x study) with
// 500 to 2000 jobs, configurations capped at the nodes the artifact
// profiled per type (as under -rules sia). Reported: the solver's
// branch-and-bound nodes and relative gap to its bound.
func BenchmarkSiaOptimize(b *testing.B) {
	for _, size := range []struct{ k, jobs int }{{1, 30}, {1, 60}, {32, 500}, {32, 1000}, {32, 2000}} {
		b.Run(fmt.Sprintf("gpus=%d/jobs=%d", 64*size.k, size.jobs), func(b *testing.B) {
			in := pt.TypedClusterInput(1, pt.SiaCluster(size.k), size.jobs)
			p, err := sia.New(sia.Config{MaxNodesByType: "a100=2,rtx2080ti=3,t4=16"})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			cpu0 := pt.ProcessCPU()
			n := 0
			for b.Loop() {
				if _, err := p.Optimize(ctx, in); err != nil {
					b.Fatal(err)
				}
				n++
			}
			// CPU time per round varies less with the machine's load.
			b.ReportMetric((pt.ProcessCPU()-cpu0).Seconds()*1e3/float64(n), "cpu-ms/op")
			st := p.LastStats()
			b.ReportMetric(float64(st.Nodes), "bb-nodes/op")
			b.ReportMetric(st.Gap*100, "gap-%")
		})
	}
}
