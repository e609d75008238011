package policy

import (
	"github.com/pollux-nomad/pollux/policy/baseline"
	"github.com/pollux-nomad/pollux/policy/internal/core"
	"github.com/pollux-nomad/pollux/policy/pollux"
	"github.com/pollux-nomad/pollux/policy/sia"
)

// The types every policy shares. They are declared in policy/internal/core,
// below both this package and the policies it registers, so that the
// policies (policy/pollux, policy/sia, policy/baseline) can use them and
// this package can import the policies without a cycle; outside the
// policy tree they are read under these names.
type (
	// GoodputModel gives a job's best predicted goodput for a placement
	// shape (core.GoodputModel).
	GoodputModel = core.GoodputModel
	// Oracle gives Optimus+Oracle a job's true remaining work and step
	// time (core.Oracle).
	Oracle = core.Oracle
	// Job is one schedulable job as a policy sees it (core.Job).
	Job = core.Job
	// Node is a node whose GPUs a policy may hand out (core.Node).
	Node = core.Node
	// Allocations maps a job ID to the node ID of each of its GPUs
	// (core.Allocations).
	Allocations = core.Allocations
	// Input is everything a policy sees in one round (core.Input).
	Input = core.Input
	// Carry is the state a policy hands from one round to the next
	// (core.Carry).
	Carry = core.Carry
	// Policy decides the allocation of GPUs to jobs for one round
	// (core.Policy).
	Policy = core.Policy
	// Regime is the shape of a cluster (GPUs, GPU types) that a policy's
	// defaults depend on (core.Regime).
	Regime = core.Regime
)

// The configurations of the registered policies, as Settings holds them.
type (
	// PolluxConfig configures Pollux (pollux.Config).
	PolluxConfig = pollux.Config
	// SiaConfig configures Sia (sia.Config).
	SiaConfig = sia.Config
	// TiresiasConfig configures Tiresias (baseline.TiresiasConfig).
	TiresiasConfig = baseline.TiresiasConfig
)

// GPUTypes returns the distinct GPU types of nodes, sorted.
func GPUTypes(nodes []Node) []string { return core.GPUTypes(nodes) }

// SeveralTypes reports whether a cluster of types distinct GPU types
// counts as heterogeneous (more than one): the one definition the
// policies, the controller and the simulator share. A cluster whose GPUs
// are all of one named type is a cluster of one type.
func SeveralTypes(types int) bool { return core.SeveralTypes(types) }

// RegimeOf returns the regime of a cluster made of nodes.
func RegimeOf(nodes []Node) Regime { return core.RegimeOf(nodes) }

// Placement groups an allocation into GPUs per node in rank order, for
// example [a a a b] gives [3 1].
func Placement(alloc []string) []int { return core.Placement(alloc) }

// NumNodes returns the number of distinct nodes in alloc.
func NumNodes(alloc []string) int { return core.NumNodes(alloc) }

// Equal reports whether two allocations of one job are the same.
func Equal(a, b []string) bool { return core.Equal(a, b) }
