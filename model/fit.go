package model

import (
	"errors"
	"fmt"
	"math"
)

// ErrNoProfile is returned by FitPerfParams when it is given no points.
var ErrNoProfile = errors.New("no profile points")

// Fitting constants (artifact goodput.py, fit_perf_params and _obj_fn;
// pollux-reference.md §1).
const (
	// gammaRegWeight weighs the L2 pull of γ towards 1.
	gammaRegWeight = 1e-3
	// retroRegWeight weighs the penalty on (β/α)² of both links, which
	// prefers an optimistic model with little retrogression.
	retroRegWeight = 1e-2
	// interNodePrior is the factor by which the inter-node parameters must
	// exceed the intra-node ones when no multi-node point was seen.
	interNodePrior = 1.1
)

// Indices of the parameters in the fitting vector, in PerfParams order.
const (
	iAlphaC = iota
	iBetaC
	iAlphaN
	iBetaN
	iAlphaR
	iBetaR
	iGamma
	numParams
)

// fitInit is the artifact's starting point x0 = (0.1, 0.01, 0.1, 0.01, 0.1,
// 0.01, 1.001).
var fitInit = [numParams]float64{0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1.001}

// ProfilePoint is one observed configuration: mean time of a compute-only
// micro-step and of a synchronising optimizer step.
type ProfilePoint struct {
	// Nodes is the number of nodes N (at least 1).
	Nodes int `json:"nodes"`
	// Replicas is the number of GPUs K (at least Nodes).
	Replicas int `json:"replicas"`
	// LocalBsz is the per-GPU micro-batch m (positive).
	LocalBsz float64 `json:"local_bsz"`
	// AccumStepTime is the mean seconds of a micro-step without
	// synchronisation (the artifact's accum_step_time; positive).
	AccumStepTime float64 `json:"accum_step_time"`
	// OptimStepTime is the mean seconds of a synchronising optimizer step
	// (the artifact's optim_step_time; positive).
	OptimStepTime float64 `json:"optim_step_time"`
}

// validate reports the first problem of the point.
func (p ProfilePoint) validate() error {
	switch {
	case p.Nodes < 1:
		return fmt.Errorf("nodes must be at least 1, got %d", p.Nodes)
	case p.Replicas < p.Nodes:
		return fmt.Errorf("replicas must be at least nodes (%d), got %d", p.Nodes, p.Replicas)
	case !finitePositive(p.LocalBsz):
		return fmt.Errorf("local_bsz must be finite and positive, got %g", p.LocalBsz)
	case !finitePositive(p.AccumStepTime):
		return fmt.Errorf("accum_step_time must be finite and positive, got %g", p.AccumStepTime)
	case !finitePositive(p.OptimStepTime):
		return fmt.Errorf("optim_step_time must be finite and positive, got %g", p.OptimStepTime)
	}
	return nil
}

func finitePositive(x float64) bool { return x > 0 && !math.IsInf(x, 1) }

// FitPerfParams fits the throughput model to the points as the artifact does
// (Pollux, OSDI '21, "Modeling System Throughput"; artifact goodput.py,
// fit_perf_params; pollux-reference.md §1). It minimises
//
//	L(θ) = RMSE(log T̂_grad, log t_accum) + RMSE(log T̂_optstep, log t_optim)
//	     + 1e−3·(γ−1)² + 1e−2·((β_n/α_n)² + (β_r/α_r)²)
//
// from x0 = (0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1.001) within α, β ≥ 1e−8 and
// γ ∈ [1, 10], with these priors pinning parameters that the points cannot
// identify:
//
//  1. one distinct LocalBsz: α_c = mean(AccumStepTime)/2;
//  2. no point with Nodes > 1: α_n = β_n = 1e−8 during the fit, then
//     α_n ← max(α_n, 1.1·α_r) and β_n ← max(β_n, 1.1·β_r);
//  3. no point with Nodes = 1 and Replicas > 1: α_r = β_r = 1e−8;
//  4. no point with Replicas > 2: β_n = β_r = 1e−8.
//
// Where the artifact uses SciPy's L-BFGS-B (through autograd), this uses a
// projected L-BFGS with an analytic gradient, on log α and log β (bounded
// below by log 1e−8) and γ (within [1, 10]); pinned parameters are held
// fixed. It first minimises smoothed losses, each RMSE replaced by sqrt(mean
// r² + ε²) for ε = 1e−3, 1e−5, 1e−7, then the exact one. It reaches the
// artifact's offline fits of the six applications and, on small profiles,
// usually a loss as low or lower than SciPy's; where the points do not
// identify the parameters, the two minimisers may stop at different optima.
// It is deterministic and does not modify points.
//
// A job seen only on a single GPU keeps every network parameter at its
// floor (1.1e−8 for α_n), so it is predicted to scale perfectly across GPUs
// until it has been observed on several: this is the paper's optimistic,
// exploration-driving prior, which the artifact bounds by capping a job at
// twice the GPUs it was profiled on.
func FitPerfParams(points []ProfilePoint) (PerfParams, error) {
	if len(points) == 0 {
		return PerfParams{}, fmt.Errorf("failed to fit throughput model: %w", ErrNoProfile)
	}
	for i, p := range points {
		if err := p.validate(); err != nil {
			return PerfParams{}, fmt.Errorf("failed to fit throughput model: point %d: %w", i, err)
		}
	}
	prob := newFitProblem(points)
	theta, err := prob.solve()
	if err != nil {
		return PerfParams{}, fmt.Errorf("failed to fit throughput model: %w", err)
	}
	if !prob.multiNode {
		theta[iAlphaN] = math.Max(theta[iAlphaN], interNodePrior*theta[iAlphaR])
		theta[iBetaN] = math.Max(theta[iBetaN], interNodePrior*theta[iBetaR])
	}
	return fromVector(theta), nil
}

// fromVector converts a fitting vector to PerfParams.
func fromVector(v [numParams]float64) PerfParams {
	return PerfParams{
		AlphaC: v[iAlphaC], BetaC: v[iBetaC],
		AlphaN: v[iAlphaN], BetaN: v[iBetaN],
		AlphaR: v[iAlphaR], BetaR: v[iBetaR],
		Gamma: v[iGamma],
	}
}

// Link classes of a profile point, selecting the network parameters.
const (
	linkNone  = iota // a single GPU: constant 1e−8 network time
	linkIntra        // one node, several GPUs: α_r, β_r
	linkInter        // several nodes: α_n, β_n
)

// fitPoint is a profile point prepared for the loss: indices of its
// micro-batch size and of its placement shape among the distinct ones.
type fitPoint struct {
	bsz, shape         int
	logAccum, logOptim float64
}

// fitShape is a distinct (link, K) of the profile, which fixes the network
// time.
type fitShape struct {
	link  int
	retro float64 // max(K−2, 1e−8)
}

// fitScratch is one point's optimizer-step prediction and residuals
// between the two passes of the loss.
type fitScratch struct {
	lo, wg, r1, r2 float64
}

// fitProblem is the fitting loss over the free parameters.
type fitProblem struct {
	points []fitPoint
	bszs   []float64  // distinct micro-batch sizes
	shapes []fitShape // distinct placement shapes
	// multiNode records a point with several nodes (prior 2).
	multiNode bool
	// fixed holds the value of every parameter; free ones are overwritten
	// from the optimisation vector.
	fixed [numParams]float64
	// free lists the indices of the parameters being optimised.
	free []int
	// smooth is ε of the smoothed loss, in which each RMSE becomes
	// sqrt(mean r² + ε²); 0 for the exact loss.
	smooth float64
	// Scratch space of the loss: per point, per micro-batch size
	// (T_grad and its log), per shape (T_sync and its log).
	scratch  []fitScratch
	tg, lg   []float64
	ts, ls   []float64
	dTg, dTs []float64
}

func newFitProblem(points []ProfilePoint) *fitProblem {
	f := &fitProblem{points: make([]fitPoint, len(points)), fixed: fitInit}
	bszIndex := map[float64]int{}
	shapeIndex := map[fitShape]int{}
	intra, retro := false, false
	sumAccum := 0.0
	for i, p := range points {
		sh := fitShape{retro: math.Max(float64(p.Replicas-2), retrogressFloor)}
		switch {
		case p.Nodes > 1:
			sh.link = linkInter
			f.multiNode = true
		case p.Replicas > 1:
			sh.link = linkIntra
			intra = true
		}
		if p.Replicas > 2 {
			retro = true
		}
		bi, ok := bszIndex[p.LocalBsz]
		if !ok {
			bi = len(f.bszs)
			bszIndex[p.LocalBsz] = bi
			f.bszs = append(f.bszs, p.LocalBsz)
		}
		si, ok := shapeIndex[sh]
		if !ok {
			si = len(f.shapes)
			shapeIndex[sh] = si
			f.shapes = append(f.shapes, sh)
		}
		f.points[i] = fitPoint{bsz: bi, shape: si, logAccum: math.Log(p.AccumStepTime), logOptim: math.Log(p.OptimStepTime)}
		sumAccum += p.AccumStepTime
	}
	nb, ns := len(f.bszs), len(f.shapes)
	buf := make([]float64, 3*nb+3*ns)
	f.tg, f.lg, f.dTg = buf[:nb:nb], buf[nb:2*nb:2*nb], buf[2*nb:3*nb:3*nb]
	buf = buf[3*nb:]
	f.ts, f.ls, f.dTs = buf[:ns:ns], buf[ns:2*ns:2*ns], buf[2*ns:]
	f.scratch = make([]fitScratch, len(points))

	pinned := [numParams]bool{}
	pin := func(i int, v float64) { f.fixed[i], pinned[i] = v, true }
	if nb == 1 { // prior 1
		pin(iAlphaC, sumAccum/float64(len(points))/2)
	}
	if !f.multiNode { // prior 2 (the 1.1× rule follows the fit)
		pin(iAlphaN, paramFloor)
		pin(iBetaN, paramFloor)
	}
	if !intra { // prior 3
		pin(iAlphaR, paramFloor)
		pin(iBetaR, paramFloor)
	}
	if !retro { // prior 4
		pin(iBetaN, paramFloor)
		pin(iBetaR, paramFloor)
	}
	for i := range numParams {
		if !pinned[i] {
			f.free = append(f.free, i)
		}
	}
	return f
}

// The fit works in coordinates where α and β are their logarithms, which
// puts parameters of very different magnitude (β_c of ncf is ~6e−7, α_n of
// bert ~1.4) on one scale and turns their bound 1e−8 into the box bound
// log 1e−8; γ stays as it is, within [1, 10].

// toParam maps fitting coordinate x of parameter i to the parameter.
func toParam(i int, x float64) float64 {
	if i == iGamma {
		return x
	}
	return math.Max(math.Exp(x), paramFloor)
}

// fromParam maps parameter value v of parameter i to its fitting
// coordinate.
func fromParam(i int, v float64) float64 {
	if i == iGamma {
		return v
	}
	return math.Log(v)
}

// paramDeriv is d(parameter)/d(coordinate) at parameter value v.
func paramDeriv(i int, v float64) float64 {
	if i == iGamma {
		return 1
	}
	return v
}

// coordBounds returns the bounds of parameter i's fitting coordinate.
func coordBounds(i int) (lo, hi float64) {
	if i == iGamma {
		return gammaMin, gammaMax
	}
	return math.Log(paramFloor), math.Inf(1)
}

// fitSettings are the minimiser's settings, SciPy L-BFGS-B's defaults where
// it has them: memory 10, relative reduction factr·eps ≈ 2.2e−9, projected
// gradient 1e−5. A trial step changes no coordinate by more than 1 (a
// factor e for α and β): longer steps can throw a parameter so far below
// its useful range that the loss is flat there and the fit stalls.
var fitSettings = boxSettings{
	memory:   10,
	maxIter:  500,
	maxEvals: 3000,
	fTol:     2.2e-9,
	pgTol:    1e-5,
	maxStep:  1,
}

// fitRestarts bounds the extra runs of the minimiser from its own result
// with a fresh memory, made while they still lower the loss; the loss has
// kinks (an RMSE of zero) where the quasi-Newton memory goes stale.
const fitRestarts = 3

// fitSmoothing are the ε of the smoothed losses minimised, in turn, before
// the exact one (a continuation): at an exact fit an RMSE term has a kink
// at zero, along which quasi-Newton steps crawl; each smoothed loss is
// differentiable and within 2ε of the exact one.
var fitSmoothing = [...]float64{1e-3, 1e-5, 1e-7}

// solve runs the minimiser and returns the full parameter vector.
func (f *fitProblem) solve() ([numParams]float64, error) {
	theta := f.fixed
	if len(f.free) == 0 {
		return theta, nil
	}
	k := len(f.free)
	x, lower, upper := make([]float64, k), make([]float64, k), make([]float64, k)
	for j, i := range f.free {
		x[j] = fromParam(i, f.fixed[i])
		lower[j], upper[j] = coordBounds(i)
	}
	for _, eps := range fitSmoothing {
		f.smooth = eps
		minimizeBox(f.evaluate, x, lower, upper, fitSettings)
	}
	f.smooth = 0
	res := minimizeBox(f.evaluate, x, lower, upper, fitSettings)
	for r := 0; r < fitRestarts; r++ {
		again := minimizeBox(f.evaluate, x, lower, upper, fitSettings)
		improved := res.f-again.f > fitSettings.fTol*math.Max(math.Abs(res.f), 1)
		res = again
		if !improved {
			break
		}
	}
	if !isFinite(res.f) {
		return theta, fmt.Errorf("failed to minimise loss: non-finite loss %g", res.f)
	}
	for j, i := range f.free {
		theta[i] = toParam(i, x[j])
	}
	return theta, nil
}

// evaluate returns the loss at the optimisation vector x and writes its
// gradient with respect to x into grad.
func (f *fitProblem) evaluate(x, grad []float64) float64 {
	theta := f.fixed
	for j, i := range f.free {
		theta[i] = toParam(i, x[j])
	}
	var g [numParams]float64
	loss := f.loss(&theta, &g)
	for j, i := range f.free {
		grad[j] = g[i] * paramDeriv(i, theta[i])
	}
	return loss
}

// loss returns L(θ) and writes dL/dθ into grad (artifact goodput.py,
// _obj_fn). Writing r1_i = log T̂_grad,i − log t_accum,i and r2_i = log
// T̂_optstep,i − log t_optim,i, with RMSE_k = sqrt(mean r_k² + ε²) (ε = 0
// for the exact loss):
//
//	dRMSE_k/dr_k,i = r_k,i/(n·RMSE_k)
//	d log T̂_grad/dT_grad = 1/T_grad
//	d log T̂_optstep/dT_grad = w_g/T_grad,  d/dT_sync = w_s/T_sync
//	d log T̂_optstep/dγ = (w_g·log T_grad + w_s·log T_sync − log T̂_optstep)/γ
//
// where w_g = T_grad^γ/(T_grad^γ + T_sync^γ) and w_s = 1 − w_g.
func (f *fitProblem) loss(theta, grad *[numParams]float64) float64 {
	n := float64(len(f.points))
	gamma := theta[iGamma]
	// Times shared by the points of one micro-batch size or one shape.
	for b, m := range f.bszs {
		f.tg[b] = theta[iAlphaC] + theta[iBetaC]*m
		f.lg[b] = math.Log(f.tg[b])
		f.dTg[b] = 0
	}
	for s, sh := range f.shapes {
		alpha, beta := paramFloor, paramFloor
		switch sh.link {
		case linkInter:
			alpha, beta = theta[iAlphaN], theta[iBetaN]
		case linkIntra:
			alpha, beta = theta[iAlphaR], theta[iBetaR]
		}
		f.ts[s] = alpha + beta*sh.retro
		f.ls[s] = math.Log(f.ts[s])
		f.dTs[s] = 0
	}
	// First pass: predictions and residuals.
	var ss1, ss2 float64
	for i, p := range f.points {
		lg, ls := f.lg[p.bsz], f.ls[p.shape]
		lo, wg := logGammaNorm(lg, ls, gamma)
		e := &f.scratch[i]
		e.lo, e.wg = lo, wg
		e.r1, e.r2 = lg-p.logAccum, lo-p.logOptim
		ss1 += e.r1 * e.r1
		ss2 += e.r2 * e.r2
	}
	eps2 := f.smooth * f.smooth
	rmse1, rmse2 := math.Sqrt(ss1/n+eps2), math.Sqrt(ss2/n+eps2)
	var c1, c2 float64 // dRMSE/dr = r·c; 0 at an exact fit
	if rmse1 > 0 {
		c1 = 1 / (n * rmse1)
	}
	if rmse2 > 0 {
		c2 = 1 / (n * rmse2)
	}
	// Second pass: the gradient, through dL/dT_grad per micro-batch size
	// and dL/dT_sync per shape.
	*grad = [numParams]float64{}
	for i, p := range f.points {
		e := &f.scratch[i]
		d1, d2 := e.r1*c1, e.r2*c2
		lg, ls := f.lg[p.bsz], f.ls[p.shape]
		ws := 1 - e.wg
		f.dTg[p.bsz] += d1 + d2*e.wg
		f.dTs[p.shape] += d2 * ws
		grad[iGamma] += d2 * (e.wg*lg + ws*ls - e.lo) / gamma
	}
	for b, m := range f.bszs {
		d := f.dTg[b] / f.tg[b]
		grad[iAlphaC] += d
		grad[iBetaC] += d * m
	}
	for s, sh := range f.shapes {
		if sh.link == linkNone {
			continue
		}
		ia, ib := iAlphaR, iBetaR
		if sh.link == linkInter {
			ia, ib = iAlphaN, iBetaN
		}
		d := f.dTs[s] / f.ts[s]
		grad[ia] += d
		grad[ib] += d * sh.retro
	}
	gm1 := gamma - 1
	qn := theta[iBetaN] / theta[iAlphaN]
	qr := theta[iBetaR] / theta[iAlphaR]
	grad[iGamma] += 2 * gammaRegWeight * gm1
	grad[iAlphaN] -= 2 * retroRegWeight * qn * qn / theta[iAlphaN]
	grad[iBetaN] += 2 * retroRegWeight * qn / theta[iAlphaN]
	grad[iAlphaR] -= 2 * retroRegWeight * qr * qr / theta[iAlphaR]
	grad[iBetaR] += 2 * retroRegWeight * qr / theta[iAlphaR]
	return rmse1 + rmse2 + gammaRegWeight*gm1*gm1 + retroRegWeight*(qn*qn+qr*qr)
}

// logGammaNorm returns log((e^a)^γ + (e^b)^γ)/γ, stably (artifact
// goodput.py, _predict_log_optim_time), and the weight
// w_a = (e^a)^γ/((e^a)^γ + (e^b)^γ) of its first term.
func logGammaNorm(a, b, gamma float64) (float64, float64) {
	if a >= b {
		e := math.Exp(gamma * (b - a))
		return a + math.Log1p(e)/gamma, 1 / (1 + e)
	}
	e := math.Exp(gamma * (a - b))
	return b + math.Log1p(e)/gamma, e / (1 + e)
}
