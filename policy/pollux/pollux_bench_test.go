package pollux_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/policytest"
	"github.com/pollux-nomad/pollux/policy/pollux"
)

// BenchmarkPolluxOptimize measures one scheduling round with the
// artifact's settings (population 100, 100 generations) on clusters of 4
// GPUs per node: the artifact's 64 GPUs with 30 to 60 active jobs, then
// 256, 1024 and 4096 GPUs with about 0.7 jobs per GPU. The policy is warm
// (seeded by the previous round's front, as in steady operation).
func BenchmarkPolluxOptimize(b *testing.B) {
	for _, size := range []struct{ nodes, jobs int }{{16, 30}, {16, 45}, {16, 60}, {64, 180}, {256, 720}, {1024, 2880}} {
		b.Run(fmt.Sprintf("gpus=%d/jobs=%d", size.nodes*4, size.jobs), func(b *testing.B) {
			p := benchmarkRounds(b, policytest.ClusterInput(1, size.nodes, 4, size.jobs))
			b.ReportMetric(float64(p.LastStats().Evaluations), "evals/op")
		})
	}
}

// benchmarkRounds times warm Pollux rounds (seed 1) on in, reporting the
// process's CPU time per round, which on a shared machine varies less
// with the load than the wall time, and returns the policy.
func benchmarkRounds(b *testing.B, in policy.Input) *pollux.Policy {
	p, err := pollux.New(pollux.Config{Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := p.Optimize(ctx, policytest.Warm(p, in, 1)); err != nil {
		b.Fatal(err)
	}
	cpu0 := policytest.ProcessCPU()
	n := 0
	b.ResetTimer()
	for b.Loop() {
		if _, err := p.Optimize(ctx, policytest.Warm(p, in, int64(n+2))); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.StopTimer()
	b.ReportMetric((policytest.ProcessCPU()-cpu0).Seconds()*1e3/float64(n), "cpu-ms/op")
	return p
}

// BenchmarkPolluxTypedOptimize measures one round of the type-aware
// Pollux on the Sia artifact's 3-type cluster (64 GPUs, 30 and 60 jobs)
// and on it scaled 32 times (2048 GPUs, Sia's scale_32x study, 500 to 5000
// jobs), warm as BenchmarkPolluxOptimize, on the inputs BenchmarkSiaOptimize
// uses.
func BenchmarkPolluxTypedOptimize(b *testing.B) {
	for _, size := range []struct{ k, jobs int }{{1, 30}, {1, 60}, {32, 500}, {32, 1000}, {32, 2000}, {32, 5000}} {
		b.Run(fmt.Sprintf("gpus=%d/jobs=%d", 64*size.k, size.jobs), func(b *testing.B) {
			benchmarkRounds(b, policytest.TypedClusterInput(1, policytest.SiaCluster(size.k), size.jobs))
		})
	}
}
