package model

import "math"

// This file holds a small box-constrained limited-memory BFGS minimiser:
// projected quasi-Newton steps on the variables that are not held at a
// bound, with a weak-Wolfe line search along the projected path (the
// "two-metric projection" scheme of Bertsekas 1982, with the L-BFGS
// two-loop recursion of Nocedal and Wright, "Numerical Optimization", 2nd
// ed., Algorithm 7.4). gonum's optimize package has no bound constraints
// and imports gonum/stat/distmv, whose golang.org/x/tools dependency the
// module does not carry; a seven-parameter fit needs nothing more than
// this, and this one runs without goroutines or per-iteration allocation.

// boxSettings controls minimizeBox.
type boxSettings struct {
	// memory is the number of correction pairs kept (SciPy's default, 10).
	memory int
	// maxIter bounds the major iterations.
	maxIter int
	// maxEvals bounds the function evaluations.
	maxEvals int
	// fTol stops when (f_k − f_k+1)/max(|f_k|, |f_k+1|, 1) ≤ fTol
	// (SciPy L-BFGS-B's factr criterion; its default is 2.2e−9).
	fTol float64
	// pgTol stops when the largest component of the projected gradient is
	// at most pgTol (SciPy L-BFGS-B's pgtol; its default is 1e−5).
	pgTol float64
	// maxStep bounds the largest component of one trial step.
	maxStep float64
}

// boxResult is the outcome of minimizeBox.
type boxResult struct {
	f     float64
	iters int
	evals int
}

// objective evaluates f at x and writes its gradient into grad.
type objective func(x, grad []float64) float64

// Line-search constants: sufficient decrease, curvature and the
// evaluations allowed per search.
const (
	armijoC1   = 1e-4
	wolfeC2    = 0.9
	maxLSEvals = 40
)

// minimizeBox minimises fn over lower ≤ x ≤ upper from x, which must be
// feasible and which it overwrites with the best point found. It never
// returns a point worse than the start.
func minimizeBox(fn objective, x, lower, upper []float64, s boxSettings) boxResult {
	n := len(x)
	mem := s.memory
	buf := make([]float64, n*(5+2*mem)+2*mem)
	next := func(k int) []float64 { v := buf[:k:k]; buf = buf[k:]; return v }
	g, d, xt, gt, pg := next(n), next(n), next(n), next(n), next(n)
	sHist := make([][]float64, mem)
	yHist := make([][]float64, mem)
	for i := range mem {
		sHist[i], yHist[i] = next(n), next(n)
	}
	rho, alphaTmp := next(mem), next(mem)

	res := boxResult{}
	f := fn(x, g)
	res.evals = 1
	if !isFinite(f) {
		res.f = f
		return res
	}
	count, newest := 0, -1 // stored pairs; index of the newest
	for res.iters < s.maxIter && res.evals < s.maxEvals {
		// Projected gradient: zero where a bound blocks descent. Those
		// variables stay put this iteration.
		for i := range x {
			pg[i] = g[i]
			if (x[i] <= lower[i] && g[i] > 0) || (x[i] >= upper[i] && g[i] < 0) {
				pg[i] = 0
			}
		}
		if maxAbs(pg) <= s.pgTol {
			break
		}
		// d = −H·pg by the two-loop recursion, restricted to the free
		// variables.
		for i := range d {
			d[i] = -pg[i]
		}
		for k := range count {
			j := (newest - k + mem) % mem
			alphaTmp[j] = rho[j] * dot(sHist[j], d)
			axpy(-alphaTmp[j], yHist[j], d)
		}
		if count > 0 {
			scale := dot(sHist[newest], yHist[newest]) / dot(yHist[newest], yHist[newest])
			for i := range d {
				d[i] *= scale
			}
		} else {
			// First step, or after a reset: steepest descent scaled to
			// unit length.
			norm := math.Sqrt(dot(pg, pg))
			for i := range d {
				d[i] /= norm
			}
		}
		for k := count - 1; k >= 0; k-- {
			j := (newest - k + mem) % mem
			beta := rho[j] * dot(yHist[j], d)
			axpy(alphaTmp[j]-beta, sHist[j], d)
		}
		for i := range d {
			if pg[i] == 0 {
				d[i] = 0
			}
		}
		if !(dot(pg, d) < 0) {
			if count == 0 {
				break
			}
			count = 0 // not a descent direction: restart from steepest descent
			continue
		}
		stepMax := s.maxStep / maxAbs(d)
		ft, ok, evals := projectedSearch(fn, x, f, g, d, lower, upper, math.Min(1, stepMax), stepMax, xt, gt)
		res.evals += evals
		if !ok {
			if count == 0 {
				break
			}
			count = 0
			continue
		}
		// Store the correction pair if the curvature is positive.
		sy, yy := 0.0, 0.0
		for i := range x {
			si, yi := xt[i]-x[i], gt[i]-g[i]
			sy += si * yi
			yy += yi * yi
		}
		if sy > 1e-10*yy {
			newest = (newest + 1) % mem
			for i := range x {
				sHist[newest][i] = xt[i] - x[i]
				yHist[newest][i] = gt[i] - g[i]
			}
			rho[newest] = 1 / sy
			if count < mem {
				count++
			}
		}
		copy(x, xt)
		copy(g, gt)
		fOld := f
		f = ft
		res.iters++
		if fOld-f <= s.fTol*math.Max(math.Max(math.Abs(fOld), math.Abs(f)), 1) {
			break
		}
	}
	res.f = f
	return res
}

// projectedSearch looks along the projected path P(x + t·d) for a step
// satisfying the weak Wolfe conditions, sufficient decrease
// f(xt) ≤ f0 + c1·g0·(xt − x) and curvature φ'(t) ≥ c2·φ'(0), by doubling
// and bisection (Lewis and Overton, "Nonsmooth optimization via
// quasi-Newton methods", Math. Program. 2013, whose analysis covers losses
// with kinks such as this package's RMSE terms). t starts at step and never
// exceeds stepMax. On success it leaves the point in xt, its gradient in
// gt, and returns its value; it reports the evaluations used.
func projectedSearch(fn objective, x []float64, f0 float64, g0, d, lower, upper []float64, step, stepMax float64, xt, gt []float64) (float64, bool, int) {
	slope0 := dot(g0, d)
	lo, hi := 0.0, math.Inf(1)
	var fLo float64 // value at lo when lo > 0
	evals := 0
	eval := func(t float64) (f, decrease, slope float64) {
		for i := range x {
			xt[i] = math.Min(math.Max(x[i]+t*d[i], lower[i]), upper[i])
			decrease += g0[i] * (xt[i] - x[i])
		}
		evals++
		f = fn(xt, gt)
		for i := range x {
			if xt[i] > lower[i] && xt[i] < upper[i] {
				slope += gt[i] * d[i]
			}
		}
		return f, decrease, slope
	}
	t := step
	for evals < maxLSEvals {
		f, decrease, slope := eval(t)
		switch {
		case !isFinite(f) || f > f0+armijoC1*decrease || decrease >= 0:
			hi = t
		case slope < wolfeC2*slope0 && t < stepMax:
			lo, fLo = t, f
		default:
			return f, true, evals
		}
		if hi < math.Inf(1) {
			t = (lo + hi) / 2
		} else {
			t = math.Min(2*t, stepMax)
		}
		if hi-lo <= 1e-12*math.Max(1, lo) {
			break
		}
	}
	if lo > 0 {
		// The last step to satisfy sufficient decrease, without the
		// curvature condition: better than losing the progress.
		f, _, _ := eval(lo)
		if f == fLo {
			return f, true, evals
		}
	}
	return f0, false, evals
}

func isFinite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

func dot(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

func axpy(alpha float64, x, y []float64) {
	for i := range x {
		y[i] += alpha * x[i]
	}
}

func maxAbs(x []float64) float64 {
	m := 0.0
	for _, v := range x {
		m = math.Max(m, math.Abs(v))
	}
	return m
}
