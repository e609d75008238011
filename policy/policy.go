package policy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
)

// GoodputModel gives a job's best predicted goodput for a placement shape,
// with the batch size, micro-batch and accumulation steps already optimised
// for that shape. model.GoodputCache implements it. The values are in
// examples per second at M0-equivalent statistical progress; only ratios
// matter to the policies.
type GoodputModel interface {
	// Goodput returns the best goodput on nodes nodes holding replicas GPUs
	// in total. It is called many times per round and must be cheap
	// (memoised) and safe to call from one goroutine at a time.
	Goodput(nodes, replicas int) float64
}

// Oracle gives Optimus+Oracle the true remaining work of a job and its true
// step time, as the Pollux artifact's Optimus baseline reads them from the
// measured traces rather than from a fitted model.
type Oracle interface {
	// RemainingIterations is the number of optimizer steps left until the
	// job completes at its fixed batch size (at least 1).
	RemainingIterations() float64
	// StepTime is the true time of one optimizer step (including
	// accumulation micro-steps) on replicas GPUs packed 4 per node.
	StepTime(replicas int) float64
}

// Job is one schedulable job as a policy sees it: a snapshot, never
// modified by the policy.
type Job struct {
	// ID identifies the job across rounds (Nomad namespace/job ID, or the
	// workload name in simulation).
	ID string
	// Goodput is the job's fitted goodput model; nil while the job has not
	// run yet (the policy then assumes linear speedup, as the reference).
	Goodput GoodputModel
	// Submitted is the submission (creation) time in seconds.
	Submitted float64
	// Age is now minus Submitted, in seconds.
	Age float64
	// AttainedService is the GPU-seconds the job has been allocated so far.
	AttainedService float64
	// MinReplicas and MaxReplicas bound the job's GPU count. For Tiresias,
	// MaxReplicas is the job's fixed (requested) GPU count.
	MinReplicas, MaxReplicas int
	// NumRestarts counts the reallocations after the first one.
	NumRestarts int
	// RestartTime is how long, in seconds, the job makes no progress when
	// it is (re)started on a new allocation: its measured
	// checkpoint-restore time where known. 0 means the policy's
	// configured default (Pollux: pollux.Config.RestartPenalty).
	RestartTime float64
	// Oracle is used by Optimus+Oracle only; other policies ignore it.
	Oracle Oracle
	// TypedGoodput is the job's goodput model per GPU type (Node.Type) on a
	// heterogeneous cluster: fitted on the types the job has run on,
	// predicted (bootstrapped) on the others. A type absent from the map,
	// or a nil map, falls back to Goodput. A job runs on one GPU type at a
	// time; moving it to another type is a restart.
	TypedGoodput map[string]GoodputModel
	// Restoring is true while the job is checkpointing and restoring
	// after its last (re)allocation, making no progress yet. Sia keeps
	// such a job's allocation (its simulator's preserve_ckpt_allocs);
	// other policies ignore it.
	Restoring bool
	// Held is how long, in seconds, the job has held its current
	// allocation: the time since the reallocation that gave it. 0 when it
	// holds no GPUs or the caller does not know; Pollux's FirstHold
	// uses it.
	Held float64
	// TypedMaxReplicas caps the GPUs of type t (Node.Type) the job may get
	// at TypedMaxReplicas[t] when that is below MaxReplicas; a type absent
	// from the map, or a nil map, is bounded by MaxReplicas alone, and 0
	// keeps the job off the type. It is for what a job cannot run on a
	// type beyond, whatever its model predicts: on a cluster of several
	// types the simulator sets it to the most GPUs of each type its
	// profiles were measured on (the Sia artifact's end at 16 A100s, 24
	// RTX 2080 Tis and 64 T4s, fewer than a large cluster has of the
	// first two). The type-aware policies (pollux, sia) honour it.
	TypedMaxReplicas map[string]int
	// ProbeSpeed is, on a heterogeneous cluster, the job's one-GPU
	// throughput per GPU type (Node.Type) as probed when it arrived, before
	// it has run (Sia, SOSP '23, §3.3 profiles one GPU of each type); only
	// the ratios matter. A policy may use it to choose the first type of a
	// job without a model; nil where no probes were taken.
	ProbeSpeed map[string]float64
}

// GoodputOn returns the job's goodput model on GPU type t: its typed model
// where there is one, else Goodput (which may be nil: not run yet).
func (j Job) GoodputOn(t string) GoodputModel {
	if m, ok := j.TypedGoodput[t]; ok && m != nil {
		return m
	}
	return j.Goodput
}

// MaxReplicasOn returns the most GPUs of type t the job may get:
// MaxReplicas, or TypedMaxReplicas[t] where that is lower.
func (j Job) MaxReplicasOn(t string) int {
	if c, ok := j.TypedMaxReplicas[t]; ok && c < j.MaxReplicas {
		return c
	}
	return j.MaxReplicas
}

// Node is a node whose GPUs the policy may hand out.
type Node struct {
	// ID identifies the node across rounds.
	ID string
	// GPUs is the number of GPUs the policy may use on this node.
	GPUs int
	// Type is the node's GPU type ("t4", "v100", "a100", "rtx6000",
	// "rtx2080ti", or an operator's name); "" on a cluster of one type. All
	// GPUs of a node are of its type.
	Type string
}

// GPUTypes returns the distinct GPU types of nodes, sorted.
func GPUTypes(nodes []Node) []string {
	seen := make(map[string]bool)
	var out []string
	for _, n := range nodes {
		if !seen[n.Type] {
			seen[n.Type] = true
			out = append(out, n.Type)
		}
	}
	sort.Strings(out)
	return out
}

// Allocations maps a job ID to the node ID of each of its GPUs, in rank
// order, with a node's GPUs contiguous (for example [a a a b]). A job absent
// from the map, or with an empty slice, holds no GPUs.
type Allocations map[string][]string

// Input is everything a policy sees in one scheduling round.
type Input struct {
	// Now is the current time in seconds (simulated or wall clock).
	Now float64
	// Jobs are the submitted, unfinished jobs in submission order.
	Jobs []Job
	// Nodes are the nodes available, in a stable order.
	Nodes []Node
	// Current is the allocation in force before this round.
	Current Allocations
	// Round numbers the round: the controller's round number (which a
	// new leader continues) or the simulator's count of rounds. With Seed
	// it seeds the round's random draws, so that a recorded input is
	// decided again exactly.
	Round int64
	// Seed seeds the round's random draws; 0 keeps the seed the policy
	// was configured with.
	Seed int64
	// Carry is what the policy's previous round handed on (Policy.Carry
	// after that round's Optimize), passed back unchanged; nil on a first
	// round. A policy decides from Input alone, Carry included, and
	// keeps nothing of its own between rounds.
	Carry Carry
}

// Carry is the state a policy hands from one round to the next (the
// genetic algorithm's final population, Tiresias' queues): the policy's
// own value, never changed once returned, encodable as JSON so that a
// round can be recorded and decided again (registry.DecodeCarry).
type Carry any

// Policy decides the allocation of GPUs to jobs for one round. Its
// decision is a function of the Input alone: what it hands from one round
// to the next (Tiresias' queues, the genetic algorithm's population) it
// returns as a Carry, which the caller passes back in the next round's
// Input.Carry. A Policy reuses buffers between calls and is not safe for
// concurrent use.
type Policy interface {
	// Name returns the policy's name ("pollux", "tiresias", "optimus").
	Name() string
	// Optimize returns the new allocation. Every returned allocation
	// respects node capacities and the jobs' replica bounds.
	Optimize(ctx context.Context, in Input) (Allocations, error)
	// Carry returns what the last Optimize handed on, for the next
	// round's Input.Carry; nil before the first call or for a policy that
	// hands nothing on.
	Carry() Carry
}

// Placement groups an allocation into GPUs per node in rank order, for
// example [a a a b] gives [3 1].
func Placement(alloc []string) []int {
	var out []int
	for i, n := range alloc {
		if i == 0 || n != alloc[i-1] {
			out = append(out, 1)
		} else {
			out[len(out)-1]++
		}
	}
	return out
}

// NumNodes returns the number of distinct nodes in alloc.
func NumNodes(alloc []string) int {
	seen := make(map[string]struct{}, len(alloc))
	for _, n := range alloc {
		seen[n] = struct{}{}
	}
	return len(seen)
}

// Equal reports whether two allocations of one job are the same.
func Equal(a, b []string) bool { return slices.Equal(a, b) }

// UsedGPUs counts the GPUs each node holds across all jobs.
func (a Allocations) UsedGPUs() map[string]int {
	used := make(map[string]int)
	for _, alloc := range a {
		for _, n := range alloc {
			used[n]++
		}
	}
	return used
}

// JobIDs returns the IDs of jobs holding at least one GPU, sorted.
func (a Allocations) JobIDs() []string {
	ids := make([]string, 0, len(a))
	for id, alloc := range a {
		if len(alloc) > 0 {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// Regime is the shape of a cluster that a policy's defaults depend on:
// how many GPUs it has and of how many types.
type Regime struct {
	// GPUs is the number of GPUs the policy may hand out.
	GPUs int
	// Types is the number of distinct GPU types; a cluster whose nodes
	// carry no type is one type.
	Types int
}

// SeveralTypes reports whether a cluster of types distinct GPU types
// counts as heterogeneous: the one definition the policies, the
// controller and the simulator share (a cluster whose GPUs are all of one
// named type is a cluster of one type).
func SeveralTypes(types int) bool { return types > 1 }

// SeveralTypes reports whether the cluster has several GPU types.
func (r Regime) SeveralTypes() bool { return SeveralTypes(r.Types) }

// RegimeOf returns the regime of a cluster made of nodes.
func RegimeOf(nodes []Node) Regime {
	r := Regime{Types: len(GPUTypes(nodes))}
	for _, n := range nodes {
		r.GPUs += n.GPUs
	}
	return r
}

// CheckInput reports every invalid job and node of in at once: empty or
// duplicate IDs, replica bounds, ages, services, restart counts and times
// that are negative or not finite, and nodes with GPUs outside
// [0, maxNodeGPUs].
func CheckInput(in Input, maxNodeGPUs int) error {
	var errs []error
	jobs := make(map[string]int, len(in.Jobs))
	for i, j := range in.Jobs {
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("job %q (index %d): %s", j.ID, i, fmt.Sprintf(format, args...)))
		}
		if j.ID == "" {
			bad("empty ID")
		} else if k, dup := jobs[j.ID]; dup {
			bad("same ID as job index %d", k)
		} else {
			jobs[j.ID] = i
		}
		if j.MinReplicas < 0 {
			bad("min replicas %d is negative", j.MinReplicas)
		}
		if j.MaxReplicas < 1 {
			bad("max replicas %d is below 1", j.MaxReplicas)
		}
		if j.MinReplicas > j.MaxReplicas {
			bad("min replicas %d exceed max replicas %d", j.MinReplicas, j.MaxReplicas)
		}
		for _, t := range sortedKeys(j.TypedMaxReplicas) {
			if c := j.TypedMaxReplicas[t]; c < 0 {
				bad("max replicas %d on GPU type %q is negative", c, t)
			}
		}
		if !(j.Age >= 0) || math.IsInf(j.Age, 0) {
			bad("age %v is not a finite non-negative number", j.Age)
		}
		if !(j.AttainedService >= 0) || math.IsInf(j.AttainedService, 0) {
			bad("attained service %v is not a finite non-negative number", j.AttainedService)
		}
		if math.IsNaN(j.Submitted) || math.IsInf(j.Submitted, 0) {
			bad("submission time %v is not finite", j.Submitted)
		}
		if j.NumRestarts < 0 {
			bad("restart count %d is negative", j.NumRestarts)
		}
		if !(j.RestartTime >= 0) || math.IsInf(j.RestartTime, 0) {
			bad("restart time %v is not a finite non-negative number", j.RestartTime)
		}
	}
	nodes := make(map[string]int, len(in.Nodes))
	for i, n := range in.Nodes {
		if n.ID == "" {
			errs = append(errs, fmt.Errorf("node at index %d: empty ID", i))
		} else if k, dup := nodes[n.ID]; dup {
			errs = append(errs, fmt.Errorf("node %q (index %d): same ID as node index %d", n.ID, i, k))
		} else {
			nodes[n.ID] = i
		}
		if n.GPUs < 0 || n.GPUs > maxNodeGPUs {
			errs = append(errs, fmt.Errorf("node %q (index %d): %d GPUs is outside [0, %d]", n.ID, i, n.GPUs, maxNodeGPUs))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid input: %w", err)
	}
	return nil
}

// sortedKeys returns the keys of m, sorted (so that errors list them in a
// stable order).
func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
