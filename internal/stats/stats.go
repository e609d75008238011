// Package stats holds the order statistics that the controller (jobs)
// and the reports (results) share, so that the controller needs no
// reporting package for a median.
package stats

import (
	"fmt"
	"math"
	"slices"
)

// Quantile returns the q-quantile (0 ≤ q ≤ 1) of xs, interpolating
// linearly between the two nearest order statistics: with x sorted and
// h = (n−1)·q, it is x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋]) (numpy's
// default "linear" method, Hyndman & Fan type 7). It returns NaN for an
// empty slice, does not modify xs, and panics if q is outside [0, 1].
func Quantile(xs []float64, q float64) float64 {
	if !(q >= 0 && q <= 1) {
		panic(fmt.Sprintf("stats: quantile %v outside [0, 1]", q))
	}
	if len(xs) == 0 {
		return math.NaN()
	}
	sorted := slices.Clone(xs)
	slices.Sort(sorted)
	return QuantileSorted(sorted, q)
}

// QuantileSorted is Quantile for a sorted, non-empty slice, which it
// neither copies nor checks.
func QuantileSorted(x []float64, q float64) float64 {
	h := float64(len(x)-1) * q
	lo := int(math.Floor(h))
	if lo >= len(x)-1 {
		return x[len(x)-1]
	}
	return x[lo] + (h-float64(lo))*(x[lo+1]-x[lo])
}
