package jobs

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/model"
	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/registry"
)

// Options are the controller's dependencies.
type Options struct {
	Cluster Cluster
	KV      KV
	Logger  hclog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Instance names this controller in the status (hostname, alloc ID).
	Instance string
	// Telemetry receives the round's measurements (may be nil).
	Telemetry *Telemetry
	// Oracle gives the Optimus baseline a job's true remaining work and
	// step time (only needed with policy "optimus"; nil otherwise).
	Oracle func(job Job, spec Spec) policy.Oracle
	// Fence, if set, is called right before a round changes any job; an
	// error holds every job this round (nothing is applied). The agent
	// passes the leader lock's check, so that a controller that cannot
	// show it still holds the lock writes nothing.
	Fence func(ctx context.Context) error
	// Term, if set, returns the leader's current term number (the lock's
	// LockIndex, the pollux_term of the job versions it writes; 0 when it
	// holds none), which the status names beside the instance.
	Term func() uint64
	// NewPolicy creates a policy by name (default registry.New); tests pass
	// a scripted one.
	NewPolicy func(name string, s registry.Settings) (policy.Policy, error)
	// Bootstrap predicts a job's throughput on a GPU type it has not run
	// on (default SpeedRatioBootstrap).
	Bootstrap Bootstrapper
	// Traits returns what the named policy needs (default
	// registry.TraitsOf); tests of a scripted policy pass the traits it
	// stands in for.
	Traits func(name string) (registry.Traits, error)
	// Rounds, if set, keeps the last rounds whole (Config.RecordRounds of
	// them), for /v1/rounds and pollux replay.
	Rounds *RoundLog
	// ParkBudget bounds how long a round spends scaling the jobs the
	// policy leaves waiting to zero before it leaves the rest to the next
	// round (default DefaultParkBudget); writes begun are finished.
	ParkBudget time.Duration
}

// DefaultParkBudget is how long a round spends at most scaling waiting
// jobs to zero. A controller adopting 2,000 jobs Nomad queued at count 1
// must write each once (a check-and-set registration: about 100 per
// second on a 2-core machine's Nomad); spreading them over rounds keeps
// every round, the first too, within its interval.
const DefaultParkBudget = 4 * time.Second

// Controller runs scheduling rounds. Round is not safe for concurrent use;
// SetConfig may be called at any time and applies from the next round.
// A round's own state (its listing of keys, deferred writes, decisions,
// Consul failure, status) lives in its round value; the Controller keeps
// what outlives rounds.
type Controller struct {
	// Dependencies, fixed by New.
	cluster    Cluster
	kv         KV
	log        hclog.Logger
	now        func() time.Time
	instance   string
	metrics    *Telemetry
	newPolicy  func(name string, s registry.Settings) (policy.Policy, error)
	oracle     func(job Job, spec Spec) policy.Oracle
	fence      func(ctx context.Context) error
	term       func() uint64
	bootstrap  Bootstrapper
	traitsOf   func(name string) (registry.Traits, error)
	parkBudget time.Duration
	// rounds keeps the last rounds whole (nil: none kept).
	rounds *RoundLog

	// mu guards cfg, the configuration in force, and pending, the one
	// SetConfig gave for the next round.
	mu      sync.Mutex
	cfg     Config
	pending *Config

	// states is every scheduled job's state, read from Consul once and
	// then kept: restarts, the pending write, fitted models.
	states map[JobRef]*State
	// profiles pools the profile points of the jobs that name the same
	// pollux_model, per GPU type, for a policy that wants shared
	// profiles (registry.Traits.SharedProfiles). It lives in memory: a new
	// leader refills it as it reads the jobs' metrics documents.
	profiles model.ProfilePool
	// published is what each job's decision key last received
	// (kvbatch.go): a decision is written again only when it changed.
	published map[JobRef]publishedDecision
	// policies keeps each policy with its state (the GA's population,
	// Tiresias' queues) between rounds.
	policies map[string]*cachedPolicy
	// round is the last round's number; lastTime when it started (the
	// attained service accrues from it).
	round    int64
	lastTime time.Time
	// dirty asks the next round to save every job's state (Consul lost
	// what it had, see TakeOver).
	dirty bool
	// orphans holds, per job whose keys outlive it, since when it has not
	// been listed; lastGC is the last garbage collection (gc.go).
	orphans map[JobRef]time.Time
	lastGC  time.Time
	// typer maps GPU model names to types, remembering the names it
	// logged as unknown.
	typer gpuTyper
	// autoscaler publishes each node pool's desired node count (nil until
	// a round's configuration has an autoscaling block).
	autoscaler *ClusterAutoscaler
}

// New returns a controller with configuration cfg.
func New(cfg Config, o Options) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid configuration: %w", err)
	}
	if o.Cluster == nil || o.KV == nil {
		return nil, errors.New("controller needs a cluster and a KV store")
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Telemetry == nil {
		o.Telemetry = NewTelemetry()
	}
	if o.NewPolicy == nil {
		o.NewPolicy = registry.New
	}
	if o.Bootstrap == nil {
		o.Bootstrap = SpeedRatioBootstrap
	}
	if o.Traits == nil {
		o.Traits = registry.TraitsOf
	}
	return &Controller{
		cluster: o.Cluster, kv: o.KV, log: o.Logger.Named("controller"), now: o.Now,
		instance: o.Instance, metrics: o.Telemetry, cfg: cfg, states: map[JobRef]*State{}, oracle: o.Oracle, fence: o.Fence, term: o.Term, parkBudget: cmp.Or(o.ParkBudget, DefaultParkBudget),
		policies: map[string]*cachedPolicy{}, newPolicy: o.NewPolicy, rounds: o.Rounds,
		typer: gpuTyper{log: o.Logger.Named("controller")}, bootstrap: o.Bootstrap, traitsOf: o.Traits,
	}, nil
}

// Cluster returns the cluster the controller's rounds read and write,
// so that the agent (package jobs/agent) watches the same jobs for new
// submissions.
func (c *Controller) Cluster() Cluster { return c.cluster }

// Config returns the configuration in force.
func (c *Controller) Config() Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending != nil {
		return *c.pending
	}
	return c.cfg
}

// SetConfig replaces the configuration from the next round on.
func (c *Controller) SetConfig(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	c.mu.Lock()
	c.pending = &cfg
	c.mu.Unlock()
	return nil
}

// CheckConfig validates cfg as SetConfig does and, with autoscaling on
// and a cluster that lists its node pools (NodePoolLister), refuses a
// configured pool that Nomad does not have. A pool that scales from zero
// must exist (nomad node pool apply) before its first node. If the pools
// cannot be listed, the pool check is skipped and its error logged.
func (c *Controller) CheckConfig(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	l, ok := c.cluster.(NodePoolLister)
	if !cfg.Autoscale.Enabled || !ok {
		return nil
	}
	pools, err := l.NodePools(ctx)
	if err != nil {
		c.log.Warn("could not list node pools to check the autoscaling configuration", "error", err)
		return nil
	}
	if !slices.Contains(pools, "default") {
		// Every Nomad cluster has the pool "default": a token without
		// node_pool read sees a filtered list.
		c.log.Warn("the token cannot read the node pools (node_pool \"*\" read); autoscaling pools not checked", "visible", pools)
		return nil
	}
	return cfg.Autoscale.CheckPools(pools)
}

func (c *Controller) takeConfig() Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending != nil {
		c.cfg = *c.pending
		c.pending = nil
	}
	return c.cfg
}

// Forget drops the in-memory state so the next round reloads it from
// Consul.
func (c *Controller) Forget() {
	c.states = map[JobRef]*State{}
	c.policies = map[string]*cachedPolicy{}
	c.lastTime = time.Time{}
	c.orphans, c.lastGC = nil, time.Time{}
	c.published = nil
	if inv, ok := c.cluster.(Invalidator); ok {
		inv.Invalidate()
	}
}

// TakeOver prepares the controller for a new term as leader. Every
// leader writes its instance name to <prefix>term when its term begins,
// so the key tells whether anyone else led since this controller's last
// term. If nobody did (it lost the lock to a Consul outage, say), it keeps
// what it knows: fitted models, restart counts, pending writes and its GA
// population. If Consul has no term key at all (its data was lost), it
// keeps its memory too and saves every job's state again in the next
// round. Otherwise another controller led in between, and it reloads
// everything from Consul. Round numbers go on from the last status.
func (c *Controller) TakeOver(ctx context.Context) {
	prev, _, err := c.kv.Get(ctx, contract.TermKey)
	switch {
	case err == nil && string(prev) == c.instance && len(c.states) > 0:
		c.log.Info("resuming as leader with the state in memory: nobody led in between", "round", c.round, "jobs", len(c.states))
	case errors.Is(err, ErrNotFound) && len(c.states) > 0:
		c.log.Warn("consul has lost the leader's records; keeping the state in memory and saving it again", "jobs", len(c.states))
		c.dirty = true
	default:
		if err != nil && !errors.Is(err, ErrNotFound) {
			c.log.Warn("failed to read the last term; reloading state from consul", "error", err)
		}
		c.Forget()
	}
	if err := c.kv.Put(ctx, contract.TermKey, []byte(c.instance)); err != nil {
		c.log.Warn("failed to record the term", "error", err)
	}
	if raw, _, err := c.kv.Get(ctx, contract.StatusKey); err == nil {
		var st Status
		if json.Unmarshal(raw, &st) == nil {
			c.round = max(c.round, st.Round)
		}
	}
	c.lastTime = time.Time{}
}

// policyFor returns the policy for cfg with what its last round handed
// on (the GA's population, Tiresias' queues), kept between rounds while
// the part of the settings it reads stays the same.
func (c *Controller) policyFor(cfg Config) (*cachedPolicy, error) {
	s := registry.Relevant(cfg.Policy, registry.Settings{Pollux: cfg.PolluxConfig()})
	if p, ok := c.policies[cfg.Policy]; ok && p.settings == s {
		return p, nil
	}
	p, err := c.newPolicy(cfg.Policy, s)
	if err != nil {
		return nil, err
	}
	cp := &cachedPolicy{settings: s, policy: p}
	c.policies[cfg.Policy] = cp
	return cp, nil
}

// cachedPolicy is a policy kept between rounds with the settings it was
// made with and what its last round handed on (the next Input.Carry).
type cachedPolicy struct {
	settings registry.Settings
	policy   policy.Policy
	carry    policy.Carry
}

func metricsKey(ref JobRef) string  { return contract.MetricsKey(ref.Namespace, ref.ID) }
func stateKey(ref JobRef) string    { return contract.StateKey(ref.Namespace, ref.ID) }
func decisionKey(ref JobRef) string { return contract.DecisionKey(ref.Namespace, ref.ID) }
