package model

import (
	"errors"
	"fmt"
	"math"
)

// Bounds of the throughput-model parameters and the constants of the
// network-time formula (Pollux, OSDI '21, "Modeling System Throughput";
// artifact goodput.py, fit_perf_params and _predict_network_time).
const (
	// paramFloor is the lower bound of every α and β parameter, the value a
	// pinned (unobserved) parameter takes, and the network time of a job on
	// a single GPU.
	paramFloor = 1e-8
	// gammaMin and gammaMax bound the overlap exponent γ.
	gammaMin = 1.0
	gammaMax = 10.0
	// retrogressFloor replaces K−2 in the retrogression term when K ≤ 2.
	retrogressFloor = 1e-8
)

// PerfParams are the seven throughput-model parameters (AlphaC, BetaC: compute;
// AlphaN, BetaN: inter-node sync; AlphaR, BetaR: intra-node sync; Gamma:
// overlap exponent), the paper's θ_sys = (α_grad, β_grad, α^node_sync,
// β^node_sync, α^local_sync, β^local_sync, γ) (Pollux, OSDI '21, "Modeling
// System Throughput"; artifact goodput.py, PerfParams). Times are in seconds,
// batch sizes in examples.
//
// The zero value is not a usable model; see Validate.
type PerfParams struct {
	// AlphaC is the constant term of a micro-step's compute time.
	AlphaC float64 `json:"alpha_c"`
	// BetaC is the per-example term of a micro-step's compute time.
	BetaC float64 `json:"beta_c"`
	// AlphaN is the constant term of the all-reduce time across nodes.
	AlphaN float64 `json:"alpha_n"`
	// BetaN is the per-extra-replica retrogression of the all-reduce time
	// across nodes.
	BetaN float64 `json:"beta_n"`
	// AlphaR is the constant term of the all-reduce time within one node.
	AlphaR float64 `json:"alpha_r"`
	// BetaR is the per-extra-replica retrogression of the all-reduce time
	// within one node.
	BetaR float64 `json:"beta_r"`
	// Gamma is the overlap exponent of compute and synchronisation, in
	// [1, 10]: 1 means no overlap, 10 almost perfect overlap.
	Gamma float64 `json:"gamma"`
}

// AccumStepTime is the predicted time of one micro-step (forward and
// backward pass without synchronisation) with localBsz examples per GPU:
//
//	T_grad(m) = α_c + β_c·m
//
// (Pollux, OSDI '21, "Modeling System Throughput"; artifact goodput.py,
// _predict_accum_time).
func (p PerfParams) AccumStepTime(localBsz float64) float64 {
	return p.AlphaC + p.BetaC*localBsz
}

// SyncTime is the predicted time of the gradient all-reduce of a job with
// replicas GPUs on nodes nodes (Pollux, OSDI '21, "Modeling System Throughput";
// artifact goodput.py, _predict_network_time):
//
//	T_sync = α_n + β_n·max(K−2, 1e−8)   if N > 1
//	T_sync = α_r + β_r·max(K−2, 1e−8)   if N = 1 and K > 1
//	T_sync = 1e−8 + 1e−8·max(K−2, 1e−8) otherwise (a single GPU: ≈ 0)
func (p PerfParams) SyncTime(nodes, replicas int) float64 {
	alpha, beta := paramFloor, paramFloor
	switch {
	case nodes > 1:
		alpha, beta = p.AlphaN, p.BetaN
	case replicas > 1:
		alpha, beta = p.AlphaR, p.BetaR
	}
	return alpha + beta*math.Max(float64(replicas-2), retrogressFloor)
}

// OptimStepTime is the predicted time of one synchronising optimizer step:
// the compute and synchronisation times combined as a γ-norm,
//
//	T_optstep = (T_grad^γ + T_sync^γ)^(1/γ)
//
// (Pollux, OSDI '21, "Modeling System Throughput"; artifact goodput.py,
// _predict_log_optim_time). The artifact evaluates it in log space; here it
// is evaluated as the equal scaled form max·(1 + (min/max)^γ)^(1/γ), which
// likewise cannot overflow for large γ.
func (p PerfParams) OptimStepTime(nodes, replicas int, localBsz float64) float64 {
	return gammaNorm(p.AccumStepTime(localBsz), p.SyncTime(nodes, replicas), p.Gamma)
}

// IterTime is the predicted time of one optimizer iteration with accumSteps
// gradient-accumulation micro-steps before the synchronising step:
//
//	T_iter = s·T_grad + T_optstep
//
// (Pollux, OSDI '21, "Modeling System Throughput"; artifact goodput.py,
// GoodputFunction.throughput).
func (p PerfParams) IterTime(nodes, replicas int, localBsz float64, accumSteps int) float64 {
	tGrad := p.AccumStepTime(localBsz)
	return float64(accumSteps)*tGrad + gammaNorm(tGrad, p.SyncTime(nodes, replicas), p.Gamma)
}

// Throughput is the predicted number of examples processed per second:
//
//	THROUGHPUT = M / T_iter,  M = K·m·(s+1)
//
// (Pollux, OSDI '21, "Modeling System Throughput"; artifact goodput.py,
// GoodputFunction.throughput).
func (p PerfParams) Throughput(nodes, replicas int, localBsz float64, accumSteps int) float64 {
	batch := float64(replicas) * localBsz * float64(accumSteps+1)
	return batch / p.IterTime(nodes, replicas, localBsz, accumSteps)
}

// Validate reports every parameter that is not finite or lies outside the
// fitting bounds: α and β in [1e−8, ∞), γ in [1, 10] (artifact goodput.py,
// fit_perf_params).
func (p PerfParams) Validate() error {
	var errs []error
	for _, f := range []struct {
		name  string
		value float64
	}{
		{"alpha_c", p.AlphaC}, {"beta_c", p.BetaC},
		{"alpha_n", p.AlphaN}, {"beta_n", p.BetaN},
		{"alpha_r", p.AlphaR}, {"beta_r", p.BetaR},
	} {
		if math.IsNaN(f.value) || math.IsInf(f.value, 0) || f.value < paramFloor {
			errs = append(errs, fmt.Errorf("%s: must be finite and at least %g, got %g", f.name, paramFloor, f.value))
		}
	}
	if math.IsNaN(p.Gamma) || p.Gamma < gammaMin || p.Gamma > gammaMax {
		errs = append(errs, fmt.Errorf("gamma: must be in [%g, %g], got %g", gammaMin, gammaMax, p.Gamma))
	}
	return errors.Join(errs...)
}

// gammaNorm returns (a^γ + b^γ)^(1/γ) for a, b ≥ 0, scaled by the larger of
// the two so that it cannot overflow.
func gammaNorm(a, b, gamma float64) float64 {
	if a < b {
		a, b = b, a
	}
	switch {
	case a == 0:
		return 0
	case gamma == 1:
		return a + b
	}
	return a * math.Pow(1+math.Pow(b/a, gamma), 1/gamma)
}
