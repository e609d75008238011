package model

import "math"

// GoodputSource is a goodput model per placement shape, as the policy
// package's GoodputModel (GoodputCache implements it).
type GoodputSource interface {
	Goodput(nodes, replicas int) float64
}

// Projected is Sia's bootstrapped goodput on a GPU type a job has not run
// on: the goodput of a type it has a model on, at the same number of GPUs
// packed on ceil(replicas / SourceGPUsPerNode) nodes of that type, times
// Ratio, the ratio of the application's one-GPU throughputs on the target
// and the source type (Sia SOSP '23; sia-simulator/sia.py,
// SiaPolicy._compute_goodputs_v2 with project_throughputs).
//
// It implements the policy package's GoodputModel; Bootstrapped tells a
// policy that wants to treat projections differently from fitted models.
type Projected struct {
	// Source is the model on the source type.
	Source GoodputSource
	// Ratio multiplies the source's goodput.
	Ratio float64
	// SourceGPUsPerNode is the GPUs per node of the source type.
	SourceGPUsPerNode int
}

// Goodput returns Source's goodput at replicas GPUs on the fewest source
// nodes, times Ratio; 0 for 0 replicas.
func (p *Projected) Goodput(nodes, replicas int) float64 {
	if replicas <= 0 {
		return 0
	}
	n := 1
	if p.SourceGPUsPerNode > 0 {
		n = int(math.Ceil(float64(replicas) / float64(p.SourceGPUsPerNode)))
	}
	return p.Source.Goodput(n, replicas) * p.Ratio
}

// Bootstrapped reports that the model is a prediction for a type the job
// has not run on, not a fit to its own measurements there.
func (p *Projected) Bootstrapped() bool { return true }
