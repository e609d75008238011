package stats

import (
	"math"
	"slices"
	"testing"
)

// floatTol is the tolerance of float comparisons in these tests: the
// expected values are hand-computed decimals.
const floatTol = 1e-9

func TestQuantile(t *testing.T) {
	tests := map[string]struct {
		xs   []float64
		q    float64
		want float64
	}{
		// Values as numpy.percentile(xs, 100q) computes them.
		"median of even count": {xs: []float64{4, 1, 3, 2}, q: 0.5, want: 2.5},
		"p99 of 1..10":         {xs: []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, q: 0.99, want: 9.91},
		"p95 of 1..10":         {xs: []float64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, q: 0.95, want: 9.55},
		"minimum":              {xs: []float64{3, -1, 2}, q: 0, want: -1},
		"maximum":              {xs: []float64{3, -1, 2}, q: 1, want: 3},
		"single":               {xs: []float64{7}, q: 0.3, want: 7},
		"ties":                 {xs: []float64{5, 5, 5, 9}, q: 0.5, want: 5},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			in := slices.Clone(tc.xs)
			got := Quantile(in, tc.q)
			if math.Abs(got-tc.want) > floatTol {
				t.Errorf("Quantile(%v, %v) = %v, want %v (±%g)", tc.xs, tc.q, got, tc.want, floatTol)
			}
			if !slices.Equal(tc.xs, in) {
				t.Errorf("Quantile modified its input: %v -> %v", tc.xs, in)
			}
			sorted := slices.Sorted(slices.Values(tc.xs))
			if s := QuantileSorted(sorted, tc.q); s != got {
				t.Errorf("QuantileSorted(%v, %v) = %v, Quantile %v", sorted, tc.q, s, got)
			}
		})
	}
	t.Run("empty is NaN", func(t *testing.T) {
		if got := Quantile(nil, 0.5); !math.IsNaN(got) {
			t.Errorf("Quantile(nil) = %v, want NaN", got)
		}
	})
	t.Run("out of range panics", func(t *testing.T) {
		defer func() {
			if recover() == nil {
				t.Error("Quantile(xs, 1.5) did not panic")
			}
		}()
		Quantile([]float64{1}, 1.5)
	})
}
