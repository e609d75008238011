package model

import (
	"fmt"
	"testing"
)

// BenchmarkFitPerfParams fits profiles of growing size drawn evenly from
// the cifar10 trace's distinct configurations.
func BenchmarkFitPerfParams(b *testing.B) {
	all := firstPoints(readPlacements(b, "cifar10"))
	for _, n := range []int{1, 3, 10, 30, 100} {
		pts := make([]ProfilePoint, n)
		for i := range pts {
			pts[i] = all[i*len(all)/n]
		}
		b.Run(fmt.Sprintf("points=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := FitPerfParams(pts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkOptimize(b *testing.B) {
	f := GoodputFunc{Perf: referenceFits["imagenet"], Grad: GradParams{Sqr: 1, Var: 3}, InitBatchSize: 200}
	bounds := Bounds{MaxBatchSize: 12800, MinLocalBsz: 20, MaxLocalBsz: 200, Accumulation: true}
	for _, shape := range [][2]int{{1, 1}, {1, 4}, {4, 16}, {16, 64}} {
		b.Run(fmt.Sprintf("nodes=%d/replicas=%d", shape[0], shape[1]), func(b *testing.B) {
			for b.Loop() {
				f.Optimize(shape[0], shape[1], bounds)
			}
		})
	}
}

// BenchmarkGoodputCache measures filling a cache for every shape of a
// cluster of 16 nodes × 4 GPUs (nodes ≤ 16, replicas ≤ 64), and lookups in
// a filled one.
func BenchmarkGoodputCache(b *testing.B) {
	f, bounds := testCacheFunc()
	fill := func(c *GoodputCache) {
		for k := 1; k <= 64; k++ {
			for n := 1; n <= min(k, 16); n++ {
				c.Goodput(n, k)
			}
		}
	}
	b.Run("fill-16x4", func(b *testing.B) {
		for b.Loop() {
			fill(NewGoodputCache(f, bounds))
		}
	})
	b.Run("lookup", func(b *testing.B) {
		c := NewGoodputCache(f, bounds)
		fill(c)
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			k := 1 + i%64
			c.Goodput(1+i%min(k, 16), k)
		}
	})
}
