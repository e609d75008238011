package jobs

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/model"
	"github.com/pollux-nomad/pollux/policy"
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
	// NewPolicy creates a policy by name (default policy.New); tests pass
	// a scripted one.
	NewPolicy func(name string, s policy.Settings) (policy.Policy, error)
	// Bootstrap predicts a job's throughput on a GPU type it has not run
	// on (default SpeedRatioBootstrap).
	Bootstrap Bootstrapper
	// Traits returns what the named policy needs (default
	// policy.TraitsOf); tests of a scripted policy pass the traits it
	// stands in for.
	Traits func(name string) (policy.Traits, error)
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
type Controller struct {
	// profiles pools the profile points of the jobs that name the same
	// pollux_model, per GPU type, for a policy that wants shared
	// profiles (policy.Traits.SharedProfiles). It lives in memory: a new
	// leader refills it as it reads the jobs' metrics documents.
	profiles model.ProfilePool
	cluster  Cluster
	kv       KV
	log      hclog.Logger
	now      func() time.Time
	instance string
	metrics  *Telemetry

	mu      sync.Mutex
	cfg     Config
	pending *Config

	policies  map[string]cachedPolicy
	newPolicy func(name string, s policy.Settings) (policy.Policy, error)
	oracle    func(job Job, spec Spec) policy.Oracle
	fence     func(ctx context.Context) error
	// parkBudget is Options.ParkBudget.
	parkBudget time.Duration
	states     map[JobRef]*State
	round      int64
	lastTime   time.Time
	// dirty asks the next round to save every job's state (Consul lost
	// what it had, see TakeOver).
	dirty bool
	// kvErr is the round's first failure to reach Consul; once set, the
	// round makes no further KV calls and changes no job.
	kvErr error
	// orphans holds, per job whose keys outlive it, since when it has not
	// been listed; lastGC is the last garbage collection (gc.go).
	orphans map[JobRef]time.Time
	lastGC  time.Time
	// typer maps GPU model names to types; bootstrap predicts a job's
	// model on a GPU type it has not run on.
	typer     gpuTyper
	bootstrap Bootstrapper
	traitsOf  func(name string) (policy.Traits, error)

	// tree is the round's listing of the jobs' keys (fit phase only);
	// deferred the states to write at the end of the bookkeeping.
	tree     roundTree
	deferred map[JobRef]*State
	// decisions are the round's decision writes; published what each
	// job's decision key last received (kvbatch.go).
	decMu sync.Mutex
	// statusMu and kvMu guard the round's status counters and kvErr
	// while writes run concurrently (apply's scaleToZero).
	statusMu, kvMu sync.Mutex

	decisions []pendingDecision
	published map[JobRef]publishedDecision
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
		o.NewPolicy = policy.New
	}
	if o.Bootstrap == nil {
		o.Bootstrap = SpeedRatioBootstrap
	}
	if o.Traits == nil {
		o.Traits = policy.TraitsOf
	}
	return &Controller{
		cluster: o.Cluster, kv: o.KV, log: o.Logger.Named("controller"), now: o.Now,
		instance: o.Instance, metrics: o.Telemetry, cfg: cfg, states: map[JobRef]*State{}, oracle: o.Oracle, fence: o.Fence, parkBudget: cmp.Or(o.ParkBudget, DefaultParkBudget),
		policies: map[string]cachedPolicy{}, newPolicy: o.NewPolicy,
		typer: gpuTyper{log: o.Logger.Named("controller")}, bootstrap: o.Bootstrap, traitsOf: o.Traits,
	}, nil
}

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
	c.policies = map[string]cachedPolicy{}
	c.lastTime = time.Time{}
	c.orphans, c.lastGC = nil, time.Time{}
	c.published = nil
	if inv, ok := c.cluster.(Invalidator); ok {
		inv.Invalidate()
	}
}

// ListedReader is implemented by a Cluster that can read a job more
// cheaply right after ListJobs (nomad.Client: it reuses the spec read at
// the JobModifyIndex the list shows and one allocation listing for all
// jobs). A round's snapshot uses it when there.
type ListedReader interface {
	ReadListed(ctx context.Context, ref JobRef) (Job, error)
}

// ParkedReader is implemented by a ListedReader that can describe from
// its job list alone a job the controller scaled to zero (nomad.Client):
// Nomad moves a job's JobModifyIndex on every change of its spec, so
// while the list shows the index the controller's own write to zero
// produced (parkedAt, from the job's state), the spec is the one written
// and asks for no GPUs, and the list's meta, index and status are all a
// round needs. It reads the job as ReadListed does when the list shows
// another index or the job holds GPUs. A new leader's first round at
// thousands of waiting jobs then reads only the specs of the jobs that
// run, not one per job.
type ParkedReader interface {
	ReadParked(ctx context.Context, ref JobRef, parkedAt uint64) (Job, error)
}

// QueuedReader is implemented by a ListedReader that can describe from
// its job list alone a job its author submitted, nobody changed since,
// and Nomad queued without placing any of it (nomad.Client): such a job
// holds no GPUs and asks for at least one, which is all the policy needs
// besides its meta; its spec is read when a write needs it. It reads the
// job as ReadListed does otherwise. A controller adopting thousands of
// queued jobs then reads only the specs of the jobs that run.
type QueuedReader interface {
	ReadQueued(ctx context.Context, ref JobRef) (Job, error)
}

// ListedNodes is implemented by a Cluster that can list the nodes more
// cheaply given the jobs the round just listed (nomad.Client: it tells
// the GPUs those jobs hold from the GPUs of other jobs without listing
// every job again). A round's snapshot uses it when there.
type ListedNodes interface {
	NodesFor(ctx context.Context, managed []JobRef) ([]Node, error)
}

// Invalidator is implemented by a Cluster that caches what it read
// (nomad.Client): Invalidate makes the next round read everything again.
// The controller calls it when it forgets its own memory (a new term
// after someone else led).
type Invalidator interface {
	Invalidate()
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

// kvGet reads a key unless Consul already failed this round. A failure
// other than a missing key is remembered in kvErr.
func (c *Controller) kvGet(ctx context.Context, key string) ([]byte, uint64, error) {
	if c.kvErr != nil {
		return nil, 0, c.kvErr
	}
	raw, idx, err := c.kv.Get(ctx, key)
	if err != nil && !errors.Is(err, ErrNotFound) {
		c.kvFailed(err)
	}
	return raw, idx, err
}

// kvPut writes a key unless Consul already failed this round.
func (c *Controller) kvPut(ctx context.Context, key string, value []byte) error {
	c.kvMu.Lock()
	failed := c.kvErr
	c.kvMu.Unlock()
	if failed != nil {
		return failed
	}
	err := c.kv.Put(ctx, key, value)
	if err != nil {
		c.kvFailed(err)
	}
	return err
}

// kvDown reports whether err is the round's Consul failure, already
// logged once by kvFailed.
func (c *Controller) kvDown(err error) bool {
	c.kvMu.Lock()
	defer c.kvMu.Unlock()
	return c.kvErr != nil && errors.Is(err, c.kvErr)
}

func (c *Controller) kvFailed(err error) {
	c.kvMu.Lock()
	defer c.kvMu.Unlock()
	if c.kvErr == nil {
		c.kvErr = fmt.Errorf("consul unreachable this round: %w", err)
		c.log.Warn("consul failed; holding every job this round (no change without state and leadership checks)", "error", err)
		c.metrics.incError("consul")
	}
}

// policyFor returns the policy for cfg, keeping its state (the GA's
// population, Tiresias' queues) between rounds while the part of the
// settings it reads stays the same.
func (c *Controller) policyFor(cfg Config) (policy.Policy, error) {
	pc := policy.PolluxConfig{
		Population: cfg.Population, Generations: cfg.Generations, Seed: cfg.Seed,
		FairnessP: cfg.FairnessP, RestartPenalty: cfg.RestartPenalty.Seconds(),
		DisableInterferenceAvoidance: !cfg.InterferenceAvoidance,
	}
	if pc.RestartPenalty == 0 {
		pc.RestartPenalty = 1e-9 // 0 means "default" to the policy
	}
	s := policy.Relevant(cfg.Policy, policy.Settings{Pollux: pc})
	if p, ok := c.policies[cfg.Policy]; ok && p.settings == s {
		return p.policy, nil
	}
	p, err := c.newPolicy(cfg.Policy, s)
	if err != nil {
		return nil, err
	}
	c.policies[cfg.Policy] = cachedPolicy{settings: s, policy: p}
	return p, nil
}

// cachedPolicy is a policy kept between rounds with the settings it was
// made with.
type cachedPolicy struct {
	settings policy.Settings
	policy   policy.Policy
}

// entry is one job during a round.
type entry struct {
	job   Job
	spec  Spec
	state *State
	fit   *model.GoodputFunc
	st    *JobStatus
	// typed is the job's model per GPU type of the cluster (fitted or
	// predicted; nil when GPU types are off or it has no fit yet), and
	// gpuType the type it runs on ("" if none or untyped).
	typed   map[string]*model.GoodputFunc
	gpuType string
}

// round is one scheduling round in progress: what its phases found and
// decided, handed from one to the next.
type round struct {
	cfg    Config
	apply  bool
	traits policy.Traits
	start  time.Time
	status *Status
	// stats has one line per listed job, in list order (the status's).
	stats []*JobStatus
	// held counts, per node, the GPUs of jobs the policy may not move.
	held  map[string]int
	nodes []Node
	// nodeType is each node's GPU type and typeModels each type's GPU
	// model names (empty when GPU types are off).
	nodeType   map[string]string
	typeModels map[string][]string
	// entries are the jobs the policy schedules, in submission order
	// once the input is built.
	entries []*entry
	in      policy.Input
	next    policy.Allocations
	// pref is each job's GPU type chosen by the controller for a policy
	// that is not type-aware (nil otherwise, or when types are off).
	pref map[string]string
	// read holds every listed job as read (for the explanations).
	read []Job
}

// Round runs one scheduling round in named phases: snapshot (list and
// read jobs and nodes), fit (load state, reconcile pending writes, refit
// models), optimise (the policy), plan (what to change, in which order:
// no I/O), apply (unless dry-run or apply is false) and publish (the
// status). Each phase but publish is timed in the status.
func (c *Controller) Round(ctx context.Context, apply bool) (*Status, error) {
	r := c.begin(apply)
	t0 := c.now()
	// The jobs' keys in Consul are listed while Nomad is read: the two
	// are independent, and at thousands of jobs each takes a while.
	tree := make(chan roundTree, 1)
	go func() { tree <- c.readTree(ctx) }()
	if err := c.snapshot(ctx, r, tree); err != nil {
		return nil, err
	}
	c.lap(r, "snapshot", t0)
	t0 = c.now()
	c.fitJobs(ctx, r)
	c.accrue(ctx, r)
	c.flushStates(ctx)
	c.lap(r, "fit", t0)
	t0 = c.now()
	if err := c.optimize(ctx, r); err != nil {
		return nil, err
	}
	c.lap(r, "optimize", t0)
	t0 = c.now()
	p := c.plan(r)
	c.lap(r, "plan", t0)
	t0 = c.now()
	c.apply(ctx, r, p)
	c.flushDecisions(context.WithoutCancel(ctx))
	c.lap(r, "apply", t0)
	c.collectGarbage(ctx, r)
	c.lap(r, "total", r.start)
	c.publishStatus(ctx, r)
	return r.status, nil
}

// begin starts a round with the configuration in force.
func (c *Controller) begin(apply bool) *round {
	cfg := c.takeConfig()
	r := &round{cfg: cfg, apply: apply, start: c.now(), held: map[string]int{}}
	// cfg was validated, so the policy is known.
	r.traits, _ = c.traitsOf(cfg.Policy)
	c.round++
	c.kvErr = nil
	r.status = &Status{Round: c.round, Time: r.start.UTC(), Instance: c.instance, DryRun: cfg.DryRun || !apply, Timings: map[string]float64{}}
	return r
}

// lap records the time since t0 as the round's phase name.
func (c *Controller) lap(r *round, name string, t0 time.Time) {
	ms := float64(c.now().Sub(t0).Microseconds()) / 1000
	r.status.Timings[name] = ms
	c.metrics.observePhase(name, ms/1000)
}

// publishStatus records the round in the metrics and writes the status
// document. An interrupted round still records what it did (and its
// number, so that the next leader's rounds go on from it).
func (c *Controller) publishStatus(ctx context.Context, r *round) {
	c.explain(r.cfg, r.status, r.stats, r.read, r.entries, r.nodes, r.in, r.next)
	for _, st := range r.stats {
		r.status.Jobs = append(r.status.Jobs, *st)
	}
	c.metrics.observeRound(r.status)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := c.writeStatus(sctx, r.status); err != nil && !c.kvDown(err) {
		c.log.Warn("failed to write status", "error", err)
		c.metrics.incError("write_status")
	}
}

func metricsKey(ref JobRef) string  { return contract.MetricsKey(ref.Namespace, ref.ID) }
func stateKey(ref JobRef) string    { return contract.StateKey(ref.Namespace, ref.ID) }
func decisionKey(ref JobRef) string { return contract.DecisionKey(ref.Namespace, ref.ID) }
