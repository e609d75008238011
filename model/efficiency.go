package model

import (
	"fmt"
	"math"
)

// GradParams are the gradient-noise statistics (Pollux, OSDI '21, "Modeling
// Statistical Efficiency"; artifact adascale.py and goodput.py, GradParams):
// Sqr ≈ |g|², the squared norm of the true gradient, and Var ≈ the variance of
// a gradient estimated from a batch of the initial size M0 (McCandlish et al.
// 2018, "An Empirical Model of Large-Batch Training"). The gradient noise scale
// is φ = M0·Var/Sqr.
type GradParams struct {
	// Sqr estimates the squared norm of the (preconditioned) gradient.
	Sqr float64 `json:"sqr"`
	// Var estimates the variance of a size-M0 batch gradient.
	Var float64 `json:"var"`
}

// Gain is the AdaScale gain ratio of a batch of size batch over the initial
// batch size initBatch: how many initial-size iterations one iteration at batch
// is worth (Pollux, OSDI '21, "Modeling Statistical Efficiency"; artifact
// goodput.py, GoodputFunction.efficiency; Johnson et al. 2020, "AdaScale SGD"):
//
//	r = M/M0,  gain = (var + sqr)/(var/r + sqr),  1 if var/r + sqr ≤ 0
func Gain(g GradParams, initBatch, batch float64) float64 {
	scale := batch / initBatch
	denom := g.Var/scale + g.Sqr
	if !(denom > 0) {
		return 1
	}
	return (g.Var + g.Sqr) / denom
}

// Efficiency is the statistical efficiency of a batch of size batch relative to
// initBatch, the progress per example relative to training at the initial batch
// size (Pollux, OSDI '21, "Modeling Statistical Efficiency"; artifact
// goodput.py, GoodputFunction.efficiency):
//
//	EFFICIENCY(M) = gain/r = (φ + M0)/(φ + M),  r = M/M0
//
// It is 1 at M = M0 and decreases with M. It is meant for M ≥ M0, as the
// artifact asserts.
func Efficiency(g GradParams, initBatch, batch float64) float64 {
	return Gain(g, initBatch, batch) * initBatch / batch
}

// LRScaling is a learning-rate scaling rule: how the learning rate tuned
// for the initial batch size is adapted to a larger batch (docs/contracts.md §1,
// pollux_lr_scaling).
type LRScaling string

// The learning-rate scaling rules.
const (
	// AdaScale scales the learning rate by the gain ratio (the artifact's
	// rule for SGD; Pollux, OSDI '21, Table 1).
	AdaScale LRScaling = "adascale"
	// Linear scales the learning rate by r = M/M0 (Goyal et al. 2017).
	Linear LRScaling = "linear"
	// Sqrt scales the learning rate by √r (the artifact's rule for Adam and
	// AdamW).
	Sqrt LRScaling = "sqrt"
	// AdamScale scales the learning rate by the square root of the gain
	// ratio, for adaptive optimizers (Adam, AdamW: square-root scaling,
	// Malladi et al., NeurIPS 2022; AdaptDL's AdamScale).
	AdamScale LRScaling = "adamscale"
	// LEGW scales the learning rate by √r after a warm-up that the worker
	// applies (You et al., SC '19); the controller's decision carries √r.
	LEGW LRScaling = "legw"
	// NoScaling keeps the initial learning rate.
	NoScaling LRScaling = "none"
)

// ParseLRScaling returns the rule named s, one of "adascale", "adamscale",
// "linear", "sqrt", "legw" and "none"; an empty s means the default,
// AdaScale.
func ParseLRScaling(s string) (LRScaling, error) {
	switch r := LRScaling(s); r {
	case AdaScale, AdamScale, Linear, Sqrt, LEGW, NoScaling:
		return r, nil
	case "":
		return AdaScale, nil
	default:
		return "", fmt.Errorf("failed to parse learning-rate scaling rule %q: want one of adascale, adamscale, linear, sqrt, legw, none", s)
	}
}

// ScaleLR returns the learning rate for total batch size batch under rule,
// given the learning rate lr0 tuned for initBatch (artifact adascale.py,
// AdaScale.step; r = batch/initBatch):
//
//	adascale: lr0·gain(r)   adamscale: lr0·√gain(r)   linear: lr0·r
//	sqrt, legw: lr0·√r      none: lr0
//
// It panics on an unknown rule, which ParseLRScaling would have rejected.
func ScaleLR(rule LRScaling, lr0 float64, g GradParams, initBatch, batch float64) float64 {
	switch rule {
	case AdaScale:
		return lr0 * Gain(g, initBatch, batch)
	case AdamScale:
		return lr0 * math.Sqrt(Gain(g, initBatch, batch))
	case Linear:
		return lr0 * batch / initBatch
	case Sqrt, LEGW:
		return lr0 * math.Sqrt(batch/initBatch)
	case NoScaling:
		return lr0
	default:
		panic(fmt.Sprintf("model: unknown learning-rate scaling rule %q", string(rule)))
	}
}
