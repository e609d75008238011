package model_test

import (
	"fmt"

	"github.com/pollux-nomad/pollux/model"
)

// A job tuned for M0 = 128 on one GPU, whose gradient noise scale is
// φ = 128·5.07/8.95 ≈ 72.5: the search trades throughput against the
// efficiency lost to larger batches. Across 4 nodes the all-reduce costs
// more than 16 GPUs add.
func ExampleGoodputFunc_Optimize() {
	f := model.GoodputFunc{
		Perf: model.PerfParams{AlphaC: 0.01733, BetaC: 7.018e-4, AlphaN: 0.1211, BetaN: 0.002393,
			AlphaR: 0.03161, BetaR: 0.001012, Gamma: 1.999},
		Grad:          model.GradParams{Sqr: 8.95, Var: 5.07},
		InitBatchSize: 128,
	}
	b := model.Bounds{MaxBatchSize: 4096, MinLocalBsz: 32, MaxLocalBsz: 1024, Accumulation: true}
	for _, shape := range [][2]int{{1, 1}, {1, 4}, {4, 16}} {
		c := f.Optimize(shape[0], shape[1], b)
		fmt.Printf("%d node(s), %2d GPUs: M=%4d m=%3d s=%d goodput=%.0f\n",
			shape[0], shape[1], c.BatchSize, c.LocalBsz, c.AccumSteps, c.Goodput)
	}
	// Output:
	// 1 node(s),  1 GPUs: M= 128 m=128 s=0 goodput=1194
	// 1 node(s),  4 GPUs: M= 140 m= 35 s=0 goodput=2458
	// 4 node(s), 16 GPUs: M= 864 m= 54 s=0 goodput=1127
}

// Efficiency falls as the batch grows past the noise scale:
// (φ + M0)/(φ + M) with φ = 100·3/1 = 300.
func ExampleEfficiency() {
	g := model.GradParams{Sqr: 1, Var: 3}
	for _, batch := range []float64{100, 200, 400, 1600} {
		fmt.Printf("M=%4.0f efficiency=%.3f gain=%.3f\n", batch, model.Efficiency(g, 100, batch), model.Gain(g, 100, batch))
	}
	// Output:
	// M= 100 efficiency=1.000 gain=1.000
	// M= 200 efficiency=0.800 gain=1.600
	// M= 400 efficiency=0.571 gain=2.286
	// M=1600 efficiency=0.211 gain=3.368
}
