package model

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestGoodputFunc(t *testing.T) {
	f := GoodputFunc{Perf: testPerf, Grad: GradParams{Sqr: 1, Var: 3}, InitBatchSize: 100}
	// 1 node, 4 GPUs, m = 25, s = 1: M = 200, T_iter = 0.35 + (0.35 + 0.24).
	wantThroughput := 200 / (0.35 + 0.35 + 0.24)
	if got := f.Throughput(1, 4, 25, 1); !closeTo(got, wantThroughput, floatTol) {
		t.Errorf("Throughput = %.17g, want %.17g", got, wantThroughput)
	}
	if got := f.Efficiency(200); !closeTo(got, 0.8, floatTol) {
		t.Errorf("Efficiency(200) = %.17g, want 0.8", got)
	}
	if got := f.Goodput(1, 4, 25, 1); !closeTo(got, 0.8*wantThroughput, floatTol) {
		t.Errorf("Goodput = %.17g, want %.17g (relative tolerance %g)", got, 0.8*wantThroughput, floatTol)
	}
}

// TestOptimize checks the batch-size search on cases small enough to
// follow by hand (γ = 1, so times add). Candidates are M_i =
// M_start·(M_max/M_start)^(i/49), i = 0…49.
func TestOptimize(t *testing.T) {
	noNoise := GradParams{Sqr: 1, Var: 0}   // efficiency M0/M: smallest batch wins
	pureNoise := GradParams{Sqr: 0, Var: 1} // efficiency 1: goodput = throughput
	tests := map[string]struct {
		grad            GradParams
		m0              float64
		nodes, replicas int
		bounds          Bounds
		want            Choice
	}{
		"no gradient noise picks the smallest batch": {
			// M = max(32, 8·2) = 32, m = 16: goodput = 32/(0.26 + 0.2 + 0.02e-8).
			grad: noNoise, m0: 32, nodes: 1, replicas: 2,
			bounds: Bounds{MaxBatchSize: 512, MinLocalBsz: 8, MaxLocalBsz: 64, Accumulation: true},
			want:   Choice{Goodput: 32 / (0.26 + 0.2 + 0.02e-8), BatchSize: 32, LocalBsz: 16, AccumSteps: 0},
		},
		"pure noise without accumulation picks the largest valid micro-batch": {
			// local_i = 8·16^(i/49); the largest ≤ 64 is i = 36: 61.35, so
			// m = 62; goodput = 4·62/(0.72 + 0.6).
			grad: pureNoise, m0: 32, nodes: 2, replicas: 4,
			bounds: Bounds{MaxBatchSize: 512, MinLocalBsz: 8, MaxLocalBsz: 64},
			want:   Choice{Goodput: 248 / 1.32, BatchSize: 248, LocalBsz: 62, AccumSteps: 0},
		},
		"a single GPU above M0 takes at least one accumulation step": {
			// Every M in (32, 64] gets s = 1 although m = M would fit;
			// M = 63.55 (i = 48) is the first to reach m = 32, and s = 1
			// amortises the 1e−8 network time, so it beats M = 32, s = 0.
			grad: pureNoise, m0: 32, nodes: 1, replicas: 1,
			bounds: Bounds{MaxBatchSize: 64, MinLocalBsz: 8, MaxLocalBsz: 64, Accumulation: true},
			want:   Choice{Goodput: 64 / (0.84 + 1e-8 + 1e-16), BatchSize: 64, LocalBsz: 32, AccumSteps: 1},
		},
		"accumulation splits a large local batch": {
			// With pure noise the largest M wins: M = 512 on 2 GPUs, local
			// 256 = 4 × 64, so s = 3, m = 64; T_iter = 3·0.74 + 0.74 + 0.2.
			grad: pureNoise, m0: 32, nodes: 1, replicas: 2,
			bounds: Bounds{MaxBatchSize: 512, MinLocalBsz: 8, MaxLocalBsz: 64, Accumulation: true},
			want:   Choice{Goodput: 512 / (4*0.74 + 0.2 + 0.02e-8), BatchSize: 512, LocalBsz: 64, AccumSteps: 3},
		},
		"zero bounds default to M0 and m in [1, M0]": {
			grad: noNoise, m0: 32, nodes: 1, replicas: 2,
			want: Choice{Goodput: 32 / (0.26 + 0.2 + 0.02e-8), BatchSize: 32, LocalBsz: 16, AccumSteps: 0},
		},
		"no valid micro-batch": {
			grad: noNoise, m0: 32, nodes: 1, replicas: 2,
			bounds: Bounds{MaxBatchSize: 512, MinLocalBsz: 100, MaxLocalBsz: 50},
			want:   Choice{},
		},
		"maximum batch below M0": {
			grad: noNoise, m0: 32, nodes: 1, replicas: 2,
			bounds: Bounds{MaxBatchSize: 16, MinLocalBsz: 1, MaxLocalBsz: 16},
			want:   Choice{},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := GoodputFunc{Perf: testPerf, Grad: tc.grad, InitBatchSize: tc.m0}
			got := f.Optimize(tc.nodes, tc.replicas, tc.bounds)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateApprox(floatTol, 0)); diff != "" {
				t.Errorf("Optimize mismatch, relative tolerance %g (-want +got):\n%s", floatTol, diff)
			}
			if got.Goodput > 0 {
				if g := f.Goodput(tc.nodes, tc.replicas, float64(got.LocalBsz), got.AccumSteps); !closeTo(g, got.Goodput, floatTol) {
					t.Errorf("Goodput of the choice = %.17g, want the reported %.17g", g, got.Goodput)
				}
			}
		})
	}
}

// TestOptimizeIsBestCandidate compares Optimize with every candidate of
// the search evaluated through Goodput, on the reference parameters.
func TestOptimizeIsBestCandidate(t *testing.T) {
	f := GoodputFunc{Perf: referenceFits["cifar10"], Grad: GradParams{Sqr: 8.95, Var: 5.07}, InitBatchSize: 128}
	b := Bounds{MaxBatchSize: 4096, MinLocalBsz: 32, MaxLocalBsz: 1024, Accumulation: true}
	for _, shape := range [][2]int{{1, 1}, {1, 4}, {2, 8}, {4, 16}, {16, 64}} {
		n, k := shape[0], shape[1]
		got := f.Optimize(n, k, b)
		start := math.Max(128, 32*float64(k))
		for i := range numCandidates {
			batch := start * math.Pow(4096/start, float64(i)/(numCandidates-1))
			local := batch / float64(k)
			s := math.Ceil(local/1024-1e-8) - 1
			if k == 1 && local > 128+1e-8 {
				s = math.Max(s, 1)
			}
			m := math.Ceil(local/(s+1) - 1e-8)
			if m < 32 || m > 1024 {
				continue
			}
			if g := f.Goodput(n, k, m, int(s)); g > got.Goodput*(1+1e-12) {
				t.Errorf("(%d, %d): candidate M=%g (m=%g, s=%g) has goodput %.10g above the chosen %+v", n, k, batch, m, s, g, got)
			}
		}
	}
}

func TestOptimizeDoesNotAllocate(t *testing.T) {
	f := GoodputFunc{Perf: referenceFits["imagenet"], Grad: GradParams{Sqr: 1, Var: 3}, InitBatchSize: 200}
	b := Bounds{MaxBatchSize: 12800, MinLocalBsz: 20, MaxLocalBsz: 200, Accumulation: true}
	if n := testing.AllocsPerRun(100, func() { f.Optimize(4, 16, b) }); n != 0 {
		t.Errorf("Optimize allocates %v times per call, want 0", n)
	}
}

func TestOptimizePanicsOnBadShape(t *testing.T) {
	tests := map[string][2]int{
		"zero nodes":               {0, 1},
		"more nodes than replicas": {3, 2},
		"negative":                 {-1, -1},
	}
	f := GoodputFunc{Perf: testPerf, Grad: GradParams{Sqr: 1, Var: 1}, InitBatchSize: 32}
	for name, shape := range tests {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("Optimize(%d, %d) did not panic", shape[0], shape[1])
				}
			}()
			f.Optimize(shape[0], shape[1], Bounds{})
		})
	}
}
