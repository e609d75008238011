package model

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// goodputModel is the policy package's GoodputModel interface, restated so
// that model does not import policy.
type goodputModel interface {
	Goodput(nodes, replicas int) float64
}

var _ goodputModel = (*GoodputCache)(nil)

func testCacheFunc() (GoodputFunc, Bounds) {
	f := GoodputFunc{Perf: referenceFits["bert"], Grad: GradParams{Sqr: 4.1e11, Var: 3.8e13}, InitBatchSize: 12}
	return f, Bounds{MaxBatchSize: 384, MinLocalBsz: 4, MaxLocalBsz: 12, Accumulation: true}
}

func TestGoodputCache(t *testing.T) {
	f, b := testCacheFunc()
	c := NewGoodputCache(f, b)
	if got := c.Goodput(0, 0); got != 0 {
		t.Errorf("Goodput(0, 0) = %g, want 0", got)
	}
	if diff := cmp.Diff(Choice{}, c.Choice(0, 0)); diff != "" {
		t.Errorf("Choice(0, 0) mismatch (-want +got):\n%s", diff)
	}
	// Ask large shapes first so that the table grows out of order.
	shapes := [][2]int{{3, 1024}, {16, 64}, {1, 1}, {1, 4}, {2, 8}, {1, 1024}, {2, 2}, {3, 1024}}
	for _, s := range shapes {
		want := f.Optimize(s[0], s[1], b)
		if diff := cmp.Diff(want, c.Choice(s[0], s[1])); diff != "" {
			t.Errorf("Choice(%d, %d) mismatch (-want +got):\n%s", s[0], s[1], diff)
		}
		if got := c.Goodput(s[0], s[1]); got != want.Goodput {
			t.Errorf("Goodput(%d, %d) = %g, want %g", s[0], s[1], got, want.Goodput)
		}
	}
	if n := testing.AllocsPerRun(100, func() { c.Goodput(2, 8) }); n != 0 {
		t.Errorf("a memoised Goodput allocates %v times, want 0", n)
	}
}

func TestGoodputCachePanicsOnBadShape(t *testing.T) {
	tests := map[string][2]int{
		"zero nodes, some replicas": {0, 3},
		"more nodes than replicas":  {2, 1},
		"negative":                  {-1, -1},
	}
	f, b := testCacheFunc()
	for name, shape := range tests {
		t.Run(name, func(t *testing.T) {
			c := NewGoodputCache(f, b)
			defer func() {
				if recover() == nil {
					t.Errorf("Goodput(%d, %d) did not panic", shape[0], shape[1])
				}
			}()
			c.Goodput(shape[0], shape[1])
		})
	}
}
