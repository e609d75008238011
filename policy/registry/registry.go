package registry

import (
	"fmt"
	"strings"

	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/baseline"
	"github.com/pollux-nomad/pollux/policy/pollux"
	"github.com/pollux-nomad/pollux/policy/sia"
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

// Traits describe what a policy needs from whoever runs it (the Nomad
// controller, the simulator, the demo), so that they can ask the policy
// instead of switching on its name.
type Traits struct {
	// UsesGoodput is true when the policy decides from the jobs' fitted
	// goodput models, so the runner must profile the jobs and fit them.
	UsesGoodput bool
	// AdaptiveBatch is true when a job's batch size is chosen for its
	// placement from its fitted model (Pollux, OSDI '21, §3.3). Otherwise
	// the job keeps the batch size it was submitted with (the trace's).
	AdaptiveBatch bool
	// NeedsOracle is true when every job must carry an Oracle (its true
	// remaining work and step time).
	NeedsOracle bool
	// Replicas says how a job's MaxReplicas is bounded.
	Replicas ReplicaBound
	// TypeAware is true when the policy reads policy.Node.Type and
	// policy.Job.TypedGoodput and never gives one job GPUs of two types.
	// A runner of a policy without it chooses each job's GPU type itself
	// and keeps the job on that type (the Nomad controller:
	// jobs/gputypes.go).
	TypeAware bool
	// ProjectedGoodput is true when, on a GPU type a job has not run on,
	// the policy wants Sia's projection (the fitted goodput of another type
	// times the ratio of one-GPU throughputs, model.Projected) in
	// policy.Job.TypedGoodput rather than the runner's bootstrapped model
	// (model.BootstrapPerf).
	ProjectedGoodput bool
	// StartReplicas is the most GPUs the policy gives a job that has not
	// been profiled yet when the runner leaves it to the policy (0: one).
	// Pollux: 4 (the controller's explore_start); Sia: one,
	// as its bootstrapping profiles one GPU of each type.
	StartReplicas int
	// TypedStartReplicas, if positive, replaces StartReplicas on a
	// cluster of several GPU types. Pollux: 16, with the policy's own
	// stand-in knee (PolluxConfig.StandInKnee) past 4 GPUs, so that a new
	// job takes more than 4 GPUs mostly where they would be idle.
	TypedStartReplicas int
	// SharedProfiles is true when the policy wants, on a cluster of
	// several GPU types, each job's throughput models fitted on the
	// profile points of every job of the same model (the runner's
	// model.ProfilePool; the controller's pollux_model meta key, the
	// simulator's application) rather than on the job's own points only.
	// Pollux: yes. Sia: no, as its artifact profiles each job on its own.
	SharedProfiles bool
}

// ReplicaBound is how a policy bounds the GPUs of one job.
type ReplicaBound int

const (
	// ExploreReplicas: at most ExploreFactor times the most GPUs the job
	// has been profiled on (at least 1), within Cap and BatchLimit.
	ExploreReplicas ReplicaBound = iota
	// RequestedReplicas: exactly the job's requested GPU count.
	RequestedReplicas
	// BatchReplicas: within Cap and BatchLimit only.
	BatchReplicas
)

// JobLimits are the numbers a job's MaxReplicas is computed from; which of
// them count is the policy's ReplicaBound.
type JobLimits struct {
	// Requested is the job's fixed GPU count (RequestedReplicas).
	Requested int
	// Cap is the most GPUs the runner lets any job have (cluster size,
	// operator cap, the job's own maximum).
	Cap int
	// BatchLimit is the most GPUs the job's batch size allows at the
	// smallest per-GPU batch.
	BatchLimit int
	// Profiled is the most GPUs the job has been profiled on, and Explore
	// the factor it may grow beyond that (ExploreReplicas).
	Profiled, Explore int
	// Start is the bound of a job not yet profiled (ExploreReplicas); 0
	// means 1.
	Start int
}

// MaxReplicas returns the job's GPU bound under this policy.
func (t Traits) MaxReplicas(l JobLimits) int {
	switch t.Replicas {
	case RequestedReplicas:
		return l.Requested
	case BatchReplicas:
		return min(l.Cap, l.BatchLimit)
	default:
		return min(l.Cap, max(l.Explore*l.Profiled, l.Start, 1), l.BatchLimit)
	}
}

// Settings configure the policies a runner creates by name; each policy
// reads its own part.
type Settings struct {
	Pollux   PolluxConfig
	Tiresias TiresiasConfig
	Sia      SiaConfig
}

// kind is one registered policy.
type kind struct {
	traits Traits
	// uses keeps the part of the settings the policy reads.
	uses func(Settings) Settings
	make func(Settings) (policy.Policy, error)
	// decode decodes the policy's Carry from JSON (nil: it hands
	// nothing on).
	decode func([]byte) (policy.Carry, error)
}

var kinds = map[string]kind{
	"pollux": {
		traits: Traits{UsesGoodput: true, AdaptiveBatch: true, TypeAware: true, Replicas: ExploreReplicas, StartReplicas: 4, TypedStartReplicas: 16, SharedProfiles: true},
		uses:   func(s Settings) Settings { return Settings{Pollux: s.Pollux} },
		make:   func(s Settings) (policy.Policy, error) { return pollux.New(s.Pollux) },
		decode: pollux.DecodeCarry,
	},
	"tiresias": {
		traits: Traits{Replicas: RequestedReplicas},
		uses:   func(s Settings) Settings { return Settings{Tiresias: s.Tiresias} },
		make:   func(s Settings) (policy.Policy, error) { return baseline.NewTiresias(s.Tiresias) },
		decode: baseline.DecodeTiresiasCarry,
	},
	"sia": {
		// Sia tunes each job's batch size for its configuration
		// (enable_bsz_tuning) and bounds its GPUs by twice the most it
		// has been profiled on, shared across types (cluster.py,
		// get_sia_multi_job_info with share_max_replicas).
		traits: Traits{UsesGoodput: true, AdaptiveBatch: true, TypeAware: true, Replicas: ExploreReplicas},
		uses:   func(s Settings) Settings { return Settings{Sia: s.Sia} },
		make:   func(s Settings) (policy.Policy, error) { return sia.New(s.Sia) },
	},
	"optimus": {
		traits: Traits{NeedsOracle: true, Replicas: BatchReplicas},
		uses:   func(Settings) Settings { return Settings{} },
		make:   func(Settings) (policy.Policy, error) { return baseline.NewOptimus(), nil },
	},
}

// Names lists the policies New knows, Pollux first.
func Names() []string { return []string{"pollux", "tiresias", "optimus", "sia"} }

func lookup(name string) (kind, error) {
	k, ok := kinds[name]
	if !ok {
		return kind{}, fmt.Errorf("unknown policy %q (want one of %s)", name, strings.Join(Names(), ", "))
	}
	return k, nil
}

// New returns a fresh policy by name, configured by its part of s.
func New(name string, s Settings) (policy.Policy, error) {
	k, err := lookup(name)
	if err != nil {
		return nil, err
	}
	return k.make(s)
}

// TraitsOf returns what the named policy needs.
func TraitsOf(name string) (Traits, error) {
	k, err := lookup(name)
	return k.traits, err
}

// Relevant returns the part of s the named policy reads (the zero
// Settings for an unknown name): a runner that keeps a policy between
// rounds recreates it only when this part changes.
func Relevant(name string, s Settings) Settings {
	k, err := lookup(name)
	if err != nil {
		return Settings{}
	}
	return k.uses(s)
}

// DecodeCarry decodes the JSON form of what policy name hands from one
// round to the next (Input.Carry); null, an empty document or a policy
// that hands nothing on gives nil.
func DecodeCarry(name string, raw []byte) (policy.Carry, error) {
	k, err := lookup(name)
	if err != nil {
		return nil, err
	}
	if k.decode == nil || len(raw) == 0 {
		return nil, nil
	}
	return k.decode(raw)
}
