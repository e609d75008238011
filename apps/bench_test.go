package apps

import (
	"testing"

	"github.com/pollux-nomad/pollux/apps/internal/delaunay"
	"github.com/pollux-nomad/pollux/data"
)

func BenchmarkThroughput(b *testing.B) {
	all := artifact(b)
	a := all["cifar10"]
	b.Run("memoised", func(b *testing.B) {
		p := []int{4, 4, 4, 4, 2}
		if _, _, err := a.Throughput(p, 64); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			a.Throughput(p, 64)
		}
	})
	b.Run("cold/measured", func(b *testing.B) {
		rows := a.placements["1111"]
		for i := 0; b.Loop(); i++ {
			interp1(rows, 32+i%900)
		}
	})
	for _, name := range Names() {
		b.Run("cold/3d/"+name, func(b *testing.B) {
			a := all[name]
			for i := 0; b.Loop(); i++ {
				n := 5 + i%12
				a.interpolate3(n, n+i%(3*n+1), a.MinLocalBsz+i%(a.MaxLocalBsz-a.MinLocalBsz+1))
			}
		})
	}
}

func BenchmarkTriangulate(b *testing.B) {
	for _, name := range Names() {
		b.Run(name, func(b *testing.B) {
			a := artifact(b)[name]
			for b.Loop() {
				if _, err := delaunay.Triangulate(a.points); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkReadReference(b *testing.B) {
	for _, name := range Names() {
		b.Run(name, func(b *testing.B) {
			ref, err := ReferenceTessellation(name)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := readReference(ref, name); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkLoadAll(b *testing.B) {
	for b.Loop() {
		if _, err := LoadAll(data.Traces()); err != nil {
			b.Fatal(err)
		}
	}
}
