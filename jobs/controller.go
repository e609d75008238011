package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pollux-nomad/pollux/metrics"
	"github.com/pollux-nomad/pollux/model"
	"github.com/pollux-nomad/pollux/policy"
)

// Job states shown in the status document and metrics.
const (
	StateScheduled = "scheduled" // in the policy's input this round
	StateInvalid   = "invalid"   // malformed meta or job spec: left untouched
	StateStopped   = "stopped"   // stopped or dead: ignored
	StateError     = "error"     // could not be read: held
)

// JobStatus is one job's line in the round's status.
type JobStatus struct {
	Job   string `json:"job"`
	State string `json:"state"`
	// Error is why the job is invalid, held, or why its metrics were
	// rejected.
	Error    string    `json:"error,omitempty"`
	GPUs     int       `json:"gpus"`
	Decision *Decision `json:"decision,omitempty"`
	Changed  bool      `json:"changed,omitempty"`
	Applied  bool      `json:"applied,omitempty"`
	Conflict bool      `json:"conflict,omitempty"`
	Fitted   bool      `json:"fitted,omitempty"`
	// Explain is why the job has its allocation or waits (explain.go).
	Explain *Explanation `json:"explain,omitempty"`
	// Running is what Nomad runs for the job, per node.
	Running []NodeGPUs `json:"running,omitempty"`
	// Submitted is when the job was first registered; WaitingSince, for a
	// job with no GPU, since when it has had none.
	Submitted    *time.Time `json:"submitted,omitempty"`
	WaitingSince *time.Time `json:"waiting_since,omitempty"`
	// Restarts counts the job's reallocations after the first.
	Restarts int `json:"restarts,omitempty"`
}

// Status is the summary of one round, written to <prefix>status.
type Status struct {
	Round     int64       `json:"round"`
	Time      time.Time   `json:"time"`
	Instance  string      `json:"instance"`
	DryRun    bool        `json:"dry_run"`
	Nodes     int         `json:"nodes"`
	GPUs      int         `json:"gpus"`
	Jobs      []JobStatus `json:"jobs"`
	Conflicts int         `json:"conflicts"`
	Errors    []string    `json:"errors,omitempty"`
	// Phase timings in milliseconds: snapshot, fit, optimize, apply, total.
	Timings map[string]float64 `json:"timings_ms"`
	// NodeMap lists the nodes with their GPUs (explain.go).
	NodeMap []NodeStatus `json:"node_map,omitempty"`
}

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
}

// Controller runs scheduling rounds. Round is not safe for concurrent use;
// SetConfig may be called at any time and applies from the next round.
type Controller struct {
	cluster  Cluster
	kv       KV
	log      hclog.Logger
	now      func() time.Time
	instance string
	metrics  *Telemetry

	mu      sync.Mutex
	cfg     Config
	pending *Config

	pol      *policy.PolluxPolicy
	polCfg   policy.PolluxConfig
	baseline policy.Policy
	oracle   func(job Job, spec Spec) policy.Oracle
	fence    func(ctx context.Context) error
	states   map[JobRef]*State
	round    int64
	lastTime time.Time
	// dirty asks the next round to save every job's state (Consul lost
	// what it had, see TakeOver).
	dirty bool
	// kvErr is the round's first failure to reach Consul; once set, the
	// round makes no further KV calls and changes no job.
	kvErr error
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
	return &Controller{
		cluster: o.Cluster, kv: o.KV, log: o.Logger.Named("controller"), now: o.Now,
		instance: o.Instance, metrics: o.Telemetry, cfg: cfg, states: map[JobRef]*State{}, oracle: o.Oracle, fence: o.Fence,
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
	c.pol = nil
	c.baseline = nil
	c.lastTime = time.Time{}
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
	prev, _, err := c.kv.Get(ctx, TermKey)
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
	if err := c.kv.Put(ctx, TermKey, []byte(c.instance)); err != nil {
		c.log.Warn("failed to record the term", "error", err)
	}
	if raw, _, err := c.kv.Get(ctx, "status"); err == nil {
		var st Status
		if json.Unmarshal(raw, &st) == nil {
			c.round = max(c.round, st.Round)
		}
	}
	c.lastTime = time.Time{}
}

// TermKey is the KV key (under the prefix) naming the instance whose
// leadership term began last.
const TermKey = "term"

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
	if c.kvErr != nil {
		return c.kvErr
	}
	err := c.kv.Put(ctx, key, value)
	if err != nil {
		c.kvFailed(err)
	}
	return err
}

// kvDown reports whether err is the round's Consul failure, already
// logged once by kvFailed.
func (c *Controller) kvDown(err error) bool { return c.kvErr != nil && errors.Is(err, c.kvErr) }

func (c *Controller) kvFailed(err error) {
	if c.kvErr == nil {
		c.kvErr = fmt.Errorf("consul unreachable this round: %w", err)
		c.log.Warn("consul failed; holding every job this round (no change without state and leadership checks)", "error", err)
		c.metrics.incError("consul")
	}
}

// policyFor returns the policy for cfg, keeping its state (the GA's
// population, Tiresias' queues) between rounds while the settings stay.
func (c *Controller) policyFor(cfg Config) (policy.Policy, error) {
	switch cfg.Policy {
	case "tiresias", "optimus":
		if c.baseline == nil || c.baseline.Name() != cfg.Policy {
			if cfg.Policy == "tiresias" {
				t, err := policy.NewTiresias(policy.TiresiasConfig{})
				if err != nil {
					return nil, err
				}
				c.baseline = t
			} else {
				c.baseline = policy.NewOptimus()
			}
		}
		return c.baseline, nil
	}
	return c.polluxFor(cfg)
}

// polluxFor returns the Pollux policy for cfg, keeping its population
// between rounds while the GA settings stay the same.
func (c *Controller) polluxFor(cfg Config) (*policy.PolluxPolicy, error) {
	pc := policy.PolluxConfig{
		Population: cfg.Population, Generations: cfg.Generations, Seed: cfg.Seed,
		FairnessP: cfg.FairnessP, RestartPenalty: cfg.RestartPenalty.Seconds(),
		DisableInterferenceAvoidance: !cfg.InterferenceAvoidance,
	}
	if pc.RestartPenalty == 0 {
		pc.RestartPenalty = 1e-9 // 0 means "default" to the policy
	}
	if c.pol != nil && c.polCfg == pc {
		return c.pol, nil
	}
	p, err := policy.NewPollux(pc)
	if err != nil {
		return nil, err
	}
	c.pol, c.polCfg = p, pc
	return p, nil
}

// entry is one job during a round.
type entry struct {
	job   Job
	spec  Spec
	state *State
	fit   *model.GoodputFunc
	st    *JobStatus
	// held, if set, says why the job keeps its allocation this round
	// (its state could not be read, ...).
	held string
}

// Round runs one scheduling round: snapshot, fit, optimise, diff, apply
// (unless dry-run or apply is false), publish decisions and status.
func (c *Controller) Round(ctx context.Context, apply bool) (*Status, error) {
	cfg := c.takeConfig()
	start := c.now()
	c.round++
	c.kvErr = nil
	status := &Status{Round: c.round, Time: start.UTC(), Instance: c.instance, DryRun: cfg.DryRun || !apply, Timings: map[string]float64{}}
	lap := func(name string, t0 time.Time) {
		ms := float64(c.now().Sub(t0).Microseconds()) / 1000
		status.Timings[name] = ms
		c.metrics.observePhase(name, ms/1000)
	}

	// 1. Snapshot jobs and nodes.
	t0 := c.now()
	refs, _, err := c.cluster.ListJobs(ctx, 0, 0)
	if err != nil {
		c.metrics.incError("list_jobs")
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	nodes, err := c.cluster.Nodes(ctx)
	if err != nil {
		c.metrics.incError("list_nodes")
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	listed := make(map[JobRef]bool, len(refs))
	for _, r := range refs {
		listed[r] = true
	}
	for r := range c.states {
		if !listed[r] {
			delete(c.states, r) // deleted or untagged; its keys in Consul stay
		}
	}
	var entries []*entry
	var stats []*JobStatus
	held := map[string]int{}
	read, readErrs := c.readJobs(ctx, refs)
	for i, ref := range refs {
		st := &JobStatus{Job: ref.String()}
		stats = append(stats, st)
		job, err := read[i], readErrs[i]
		if err != nil {
			st.State, st.Error = StateError, err.Error()
			c.log.Warn("failed to read job", "job_id", ref.String(), "error", err)
			c.metrics.incError("read_job")
			continue
		}
		// Dead is also what Nomad calls a batch job the controller scaled to
		// zero (no groups with a count, no allocations): that one waits for
		// GPUs and stays scheduled.
		scaledToZero := len(job.Placement) == 0 && !job.Unshaped && job.Problem == ""
		if job.Stopped || (job.Status == "dead" && !scaledToZero) {
			for _, r := range job.Running {
				held[r.Node] += r.GPUs
			}
			st.State = StateStopped
			continue
		}
		// A tagged job the controller will not schedule keeps whatever GPUs
		// Nomad gave it: they are not the policy's to hand out.
		holdGPUs := func() {
			for _, r := range job.Running {
				held[r.Node] += r.GPUs
			}
		}
		if job.Problem != "" {
			holdGPUs()
			st.State, st.Error = StateInvalid, job.Problem
			c.log.Warn("job skipped: cannot manage its spec", "job_id", ref.String(), "reason", job.Problem)
			continue
		}
		spec, err := ParseSpec(job.Meta)
		if err != nil {
			holdGPUs()
			st.State, st.Error = StateInvalid, err.Error()
			c.log.Warn("job skipped: invalid pollux meta", "job_id", ref.String(), "error", err)
			continue
		}
		entries = append(entries, &entry{job: job, spec: spec, st: st})
	}
	lap("snapshot", t0)

	// 2. Load state and refit models from new metrics.
	t0 = c.now()
	scheduled := entries[:0]
	for _, e := range entries {
		s, err := c.loadState(ctx, e.job.JobRef)
		if err != nil {
			// Without its state the job's restarts, pending write and model
			// are unknown: hold it as it is rather than guess.
			for _, r := range e.job.Running {
				held[r.Node] += r.GPUs
			}
			e.st.State, e.st.Error = StateError, "held: "+err.Error()
			continue
		}
		e.state = s
		c.reconcile(ctx, e)
		c.refit(ctx, e)
		if c.dirty {
			c.saveState(ctx, e.job.JobRef, e.state)
		}
		e.st.State = StateScheduled
		scheduled = append(scheduled, e)
	}
	entries = scheduled
	if c.kvErr == nil {
		c.dirty = false
	}
	lap("fit", t0)

	// Attained service since the last round.
	if !c.lastTime.IsZero() {
		dt := start.Sub(c.lastTime).Seconds()
		for _, e := range entries {
			for _, r := range e.job.Running {
				e.state.AttainedService += float64(r.GPUs) * dt
			}
		}
	}
	c.lastTime = start

	// 3. Optimise.
	t0 = c.now()
	in := c.input(cfg, start, entries, nodes, held)
	for _, n := range in.Nodes {
		status.GPUs += n.GPUs
	}
	status.Nodes = len(in.Nodes)
	pol, err := c.policyFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to create policy: %w", err)
	}
	next := policy.Allocations{}
	if len(in.Jobs) > 0 {
		next, err = optimizeSafely(ctx, pol, in)
		if err != nil {
			c.metrics.incError("optimize")
			return nil, fmt.Errorf("failed to optimize: %w", err)
		}
	}
	lap("optimize", t0)

	// 4-5. Diff and apply; publish decisions.
	t0 = c.now()
	order := make(map[string]int, len(in.Nodes))
	for i, n := range in.Nodes {
		order[n.ID] = i
	}
	// Apply shrinking jobs first: they free GPUs the growing ones need
	// (Nomad retries a blocked placement by itself, but later).
	growth := func(e *entry) int { return len(next[e.job.JobRef.String()]) - len(AllocOf(e.job.Placement)) }
	sort.SliceStable(entries, func(i, j int) bool { return growth(entries[i]) < growth(entries[j]) })
	// Change nothing that cannot be vouched for: Consul must have answered
	// every call of this round, and the lock must still be ours.
	hold := ""
	if c.kvErr != nil {
		hold = c.kvErr.Error()
	} else if c.fence != nil && apply && !cfg.DryRun {
		if err := c.fence(ctx); err != nil {
			hold = err.Error()
			c.metrics.incError("fence")
		}
	}
	if hold != "" {
		status.Errors = append(status.Errors, "no job changed this round: "+hold)
		c.log.Warn("holding every job this round", "reason", hold)
	}
	// Nomad keeps a destructive update's old allocation until the new one
	// is placed. A job whose new GPUs are still held by a job that only
	// moves away later in this round (a swap of nodes, or a cycle of
	// them) would therefore wait for it forever, and it for this one. Such
	// jobs are set aside, stopped (scaled to zero) once every other change
	// is written, and then placed.
	writes := apply && !cfg.DryRun && hold == ""
	free := newOccupancy(in.Nodes, entries)
	var blocked []*entry
	interrupted := func(done, left int) bool {
		if ctx.Err() == nil {
			return false
		}
		// Shutting down or lost the lock: the writes done so far are
		// recorded; the rest are left for the next leader's round.
		c.log.Info("round interrupted; leaving the remaining jobs as they are", "applied", done, "left", left, "error", ctx.Err())
		return true
	}
	for i, e := range entries {
		if interrupted(i, len(entries)-i) {
			blocked = nil
			break
		}
		alloc := next[e.job.JobRef.String()]
		want := PlacementOf(alloc)
		if writes && !unchanged(e, want) && !free.fits(e, want) {
			blocked = append(blocked, e)
			continue
		}
		running := e.job.Running
		c.settle(ctx, cfg, apply, e, alloc, status, hold)
		if e.st.Applied {
			free.move(running, want)
		}
	}
	var placeAfter []*entry
	for i, e := range blocked {
		if interrupted(i, len(blocked)-i) {
			break
		}
		if c.vacate(ctx, e, status) {
			free.move(e.job.Running, nil)
			placeAfter = append(placeAfter, e)
			continue
		}
		// Not stopped (changed meanwhile, or Nomad failed): moving it now
		// would deadlock, so it keeps its placement until the next round.
		why := "could not stop it ahead of its move"
		if e.st.Error != "" {
			why += ": " + e.st.Error
		}
		c.settle(ctx, cfg, apply, e, next[e.job.JobRef.String()], status, why)
	}
	for i, e := range placeAfter {
		if interrupted(i, len(placeAfter)-i) {
			break
		}
		c.settle(ctx, cfg, apply, e, next[e.job.JobRef.String()], status, hold)
	}
	lap("apply", t0)
	lap("total", start)

	c.explain(cfg, status, stats, read, entries, nodes, in, next)
	for _, st := range stats {
		status.Jobs = append(status.Jobs, *st)
	}
	c.metrics.observeRound(status)
	// An interrupted round still records what it did (and its number, so
	// that the next leader's rounds go on from it).
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if raw, err := json.Marshal(status); err == nil {
		if err := c.kvPut(sctx, "status", raw); err != nil && !c.kvDown(err) {
			c.log.Warn("failed to write status", "error", err)
			c.metrics.incError("write_status")
		}
	}
	return status, nil
}

// optimizeSafely runs the policy and turns a panic (a bug, or input the
// policy did not foresee) into an error, so that one bad round holds the
// jobs as they are instead of bringing the controller down.
func optimizeSafely(ctx context.Context, pol policy.Policy, in policy.Input) (out policy.Allocations, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("policy %s panicked: %v", pol.Name(), r)
		}
	}()
	return pol.Optimize(ctx, in)
}

// readConcurrency bounds the parallel job reads of a round's snapshot.
const readConcurrency = 8

// readJobs reads the jobs concurrently (each read is a few HTTP calls, so
// a round with many jobs is bound by latency, not by CPU), keeping order.
func (c *Controller) readJobs(ctx context.Context, refs []JobRef) ([]Job, []error) {
	out := make([]Job, len(refs))
	errs := make([]error, len(refs))
	sem := make(chan struct{}, readConcurrency)
	var wg sync.WaitGroup
	for i, ref := range refs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out[i], errs[i] = c.cluster.ReadJob(ctx, ref)
		}()
	}
	wg.Wait()
	return out, errs
}

// loadState returns the job's state from memory, else from Consul, else
// (no key, or an unreadable one) a fresh one. It fails only when Consul
// cannot be read: a fresh state then would overwrite the real one.
func (c *Controller) loadState(ctx context.Context, ref JobRef) (*State, error) {
	if s, ok := c.states[ref]; ok {
		return s, nil
	}
	s := &State{Version: stateVersion}
	raw, _, err := c.kvGet(ctx, stateKey(ref))
	switch {
	case err == nil:
		if loaded, perr := parseState(raw); perr != nil {
			c.log.Warn("ignoring unreadable state", "job_id", ref.String(), "error", perr)
		} else {
			s = loaded
			c.log.Info("resumed job state from consul", "job_id", ref.String(), "profile_points", s.ProfilePoints, "restarts", s.Restarts)
		}
	case errors.Is(err, ErrNotFound):
	default:
		return nil, fmt.Errorf("failed to read state: %w", err)
	}
	c.states[ref] = s
	return s, nil
}

// reconcile settles a write recorded as pending (the controller that made
// it died, or its answer was lost): if the job now has the pending
// placement at a newer index, the write happened and its bookkeeping is
// completed; otherwise it did not, and this round decides afresh.
func (c *Controller) reconcile(ctx context.Context, e *entry) {
	p := e.state.Pending
	if p == nil {
		return
	}
	log := c.log.With("job_id", e.job.JobRef.String(), "pending_round", p.Round)
	if e.job.JobModifyIndex != p.ReadIndex && SamePlacement(PlacementOf(p.Allocation), e.job.Placement) {
		c.commit(e.state, p.Allocation, p.Decision, e.job.JobModifyIndex, p.At)
		log.Info("completed the bookkeeping of an interrupted write: the job has its new placement", "placement", FormatPlacement(e.job.Placement), "job_modify_index", e.job.JobModifyIndex)
	} else {
		e.state.Pending = nil
		log.Info("an interrupted write did not happen; deciding again", "read_index", p.ReadIndex, "job_modify_index", e.job.JobModifyIndex)
	}
	c.saveState(ctx, e.job.JobRef, e.state)
}

// commit records an applied write in a job's state.
func (c *Controller) commit(s *State, alloc []string, d *Decision, index uint64, at time.Time) {
	if len(s.Allocation) > 0 {
		s.Restarts++
	}
	s.Allocation = alloc
	s.Decision = d
	s.AppliedIndex = index
	s.AppliedAt = at
	s.Pending = nil
}

// refit reads the job's metrics document and refits the model when the
// document is new. A bad document keeps the previous fit.
func (c *Controller) refit(ctx context.Context, e *entry) {
	ref := e.job.JobRef
	raw, idx, err := c.kvGet(ctx, metricsKey(ref))
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		c.log.Debug("failed to read metrics; keeping the previous model", "job_id", ref.String(), "error", err)
		c.metrics.incError("read_metrics")
	case idx != e.state.MetricsIndex:
		doc, perr := metrics.Parse(raw)
		if perr == nil {
			var perf model.PerfParams
			points := doc.ProfilePoints()
			perf, perr = model.FitPerfParams(points)
			if perr == nil {
				// A fit the state parser would refuse (extreme but finite
				// timings) must not be saved: the next leader would drop
				// the whole state with it.
				if verr := perf.Validate(); verr != nil {
					perr = fmt.Errorf("fitted model out of range: %w", verr)
				}
			}
			if perr == nil {
				grad := doc.GradParams()
				e.state.Perf, e.state.Grad = &perf, &grad
				e.state.ProfilePoints = len(points)
				e.state.MaxProfiled = 0
				for _, p := range points {
					e.state.MaxProfiled = max(e.state.MaxProfiled, p.Replicas)
				}
				e.state.MetricsError = ""
				e.st.Fitted = true
			}
		}
		e.state.MetricsIndex = idx
		if perr != nil {
			e.state.MetricsError = perr.Error()
			c.log.Warn("rejected metrics document; keeping the previous model", "job_id", ref.String(), "error", perr)
			c.metrics.incError("bad_metrics")
		}
		c.saveState(ctx, ref, e.state)
	}
	e.st.Error = e.state.MetricsError
	if e.state.Perf != nil && e.state.Grad != nil {
		e.fit = &model.GoodputFunc{Perf: *e.state.Perf, Grad: *e.state.Grad, InitBatchSize: float64(e.spec.InitBatchSize)}
	}
}

// saveState persists a job's state; it reports whether the write
// succeeded.
func (c *Controller) saveState(ctx context.Context, ref JobRef, s *State) bool {
	raw, err := json.Marshal(s)
	if err == nil {
		err = c.kvPut(ctx, stateKey(ref), raw)
	}
	if err != nil {
		if !c.kvDown(err) {
			c.log.Warn("failed to persist state", "job_id", ref.String(), "error", err)
			c.metrics.incError("write_state")
		}
		return false
	}
	return true
}

// input builds the policy's view of the cluster.
func (c *Controller) input(cfg Config, now time.Time, entries []*entry, nodes []Node, held map[string]int) policy.Input {
	in := policy.Input{Now: float64(now.Unix()), Current: policy.Allocations{}}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].ID < nodes[j].ID })
	total := 0
	for _, n := range nodes {
		free := max(n.GPUs-n.UsedByOthers-held[n.ID], 0)
		in.Nodes = append(in.Nodes, policy.Node{ID: n.ID, GPUs: free})
		total += free
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].job.SubmitTime.Before(entries[j].job.SubmitTime) })
	for _, e := range entries {
		maxGPUs := total
		if e.spec.MaxGPUs > 0 {
			maxGPUs = min(maxGPUs, e.spec.MaxGPUs)
		}
		if cfg.MaxGPUsPerJob > 0 {
			maxGPUs = min(maxGPUs, cfg.MaxGPUsPerJob)
		}
		switch cfg.Policy {
		case "tiresias":
			// A fixed-size job: its requested GPUs (pollux_max_gpus, else
			// pollux_min_gpus).
			maxGPUs = e.spec.MinGPUs
			if e.spec.MaxGPUs > 0 {
				maxGPUs = e.spec.MaxGPUs
			}
		case "optimus":
			maxGPUs = min(maxGPUs, e.spec.MaxBatchSize/e.spec.LocalBszMin)
		default:
			maxGPUs = min(maxGPUs, max(cfg.ExploreFactor*e.state.MaxProfiled, 1), e.spec.MaxBatchSize/e.spec.LocalBszMin)
		}
		pj := policy.Job{
			ID:              e.job.JobRef.String(),
			Submitted:       float64(e.job.SubmitTime.Unix()),
			Age:             now.Sub(e.job.SubmitTime).Seconds(),
			AttainedService: e.state.AttainedService,
			MinReplicas:     e.spec.MinGPUs,
			MaxReplicas:     max(maxGPUs, 0),
			NumRestarts:     e.state.Restarts,
		}
		if pj.MinReplicas > pj.MaxReplicas {
			pj.MinReplicas = pj.MaxReplicas
		}
		if e.fit != nil {
			pj.Goodput = model.NewGoodputCache(*e.fit, e.spec.Bounds())
		}
		if cfg.Policy == "optimus" && c.oracle != nil {
			pj.Oracle = c.oracle(e.job, e.spec)
		}
		in.Jobs = append(in.Jobs, pj)
		if a := AllocOf(e.job.Placement); len(a) > 0 {
			in.Current[pj.ID] = a
		}
	}
	return in
}

// unchanged reports whether the job's spec already asks for placement
// want. An unshaped job given nothing is not unchanged: as submitted it
// asks Nomad for GPUs on its own, so it must be scaled to zero.
func unchanged(e *entry, want []NodeGPUs) bool {
	return SamePlacement(want, e.job.Placement) && !(len(want) == 0 && e.job.Unshaped)
}

// settle compares the policy's allocation for one job with the job's spec,
// applies a change with check-and-set, and publishes the decision.
func (c *Controller) settle(ctx context.Context, cfg Config, apply bool, e *entry, alloc []string, status *Status, hold string) {
	ref := e.job.JobRef
	log := c.log.With("job_id", ref.String())
	want := PlacementOf(alloc)
	fit := e.fit
	if cfg.Policy != "pollux" {
		fit = nil // the baselines keep the job's batch size
	}
	d := Decide(e.spec, fit, want, c.round)
	e.st.Decision, e.st.GPUs = &d, d.NumReplicas
	c.metrics.setJobGPUs(ref.String(), d.NumReplicas)
	if unchanged(e, want) {
		c.checkPlaced(ctx, e)
		c.publish(ctx, ref, d)
		return
	}
	e.st.Changed = true
	if cfg.DryRun || !apply {
		log.Info("would reallocate (dry run)", "from", FormatPlacement(e.job.Placement), "to", d.Placement, "batch_size", d.BatchSize)
		return
	}
	if hold != "" {
		e.st.Error = "held: " + hold
		return
	}
	from := FormatPlacement(e.job.Placement)
	idx, ok := c.write(ctx, e, alloc, d, status)
	if !ok {
		return
	}
	e.st.Applied = true
	c.publish(context.WithoutCancel(ctx), ref, d)
	log.Info("reallocated", "from", from, "to", d.Placement, "batch_size", d.BatchSize,
		"local_bsz", d.LocalBsz, "accum_steps", d.AccumSteps, "lr", d.LR, "job_modify_index", idx)
}

// vacate scales a job to zero ahead of its new placement (see the apply
// loop in Round: a swap of GPUs between jobs). The job is consistent
// meanwhile: no groups and the meta of a zero-GPU decision. It reports
// whether the write happened.
func (c *Controller) vacate(ctx context.Context, e *entry, status *Status) bool {
	d := Decide(e.spec, nil, nil, c.round)
	from := FormatPlacement(e.job.Placement)
	idx, ok := c.write(ctx, e, nil, d, status)
	if ok {
		c.log.Info("stopped the job first: its new GPUs are held by a job that moves away in the same round", "job_id", e.job.JobRef.String(), "from", from, "job_modify_index", idx)
	}
	return ok
}

// write applies one decision to the job with check-and-set and records it
// in the job's state (write-ahead: the intent is saved first). On success
// the entry describes the job as written. It returns the job's new
// JobModifyIndex and whether the write happened; a refused or failed write
// is recorded in the job's status.
func (c *Controller) write(ctx context.Context, e *entry, alloc []string, d Decision, status *Status) (uint64, bool) {
	ref := e.job.JobRef
	log := c.log.With("job_id", ref.String())
	want := PlacementOf(alloc)
	// A write that has begun is finished and recorded even if the round is
	// cancelled (SIGTERM, lost lock) meanwhile: a request cut off half-way
	// would leave the outcome unknown. The check-and-set keeps it safe.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), applyTimeout)
	defer cancel()
	// Write-ahead: record the intent, so that whoever runs the next round
	// can tell whether this write happened if this process dies during it.
	e.state.Pending = &PendingApply{Round: c.round, ReadIndex: e.job.JobModifyIndex, Allocation: alloc, Decision: &d, At: c.now()}
	if !c.saveState(actx, ref, e.state) {
		e.state.Pending = nil
		e.st.Error = "held: cannot record the write in consul first"
		return 0, false
	}
	idx, err := c.cluster.Apply(actx, Change{Job: ref, JobModifyIndex: e.job.JobModifyIndex, Placement: want, Meta: d.Meta()})
	switch {
	case errors.Is(err, ErrConflict):
		e.st.Conflict = true
		status.Conflicts++
		c.metrics.incConflict()
		e.state.Pending = nil
		c.saveState(actx, ref, e.state)
		log.Warn("job changed since it was read; keeping the operator's version and deciding again next round", "read_index", e.job.JobModifyIndex)
		return 0, false
	case err != nil:
		// Pending stays: the write may have happened (a timeout), and the
		// next round's reconcile tells.
		e.st.Error = err.Error()
		status.Errors = append(status.Errors, fmt.Sprintf("%s: %v", ref, err))
		c.metrics.incError("apply")
		log.Error("failed to apply allocation", "error", err)
		return 0, false
	}
	c.commit(e.state, alloc, &d, idx, c.now())
	c.saveState(actx, ref, e.state)
	e.job.JobModifyIndex, e.job.Placement, e.job.Unshaped = idx, want, false
	return idx, true
}

// applyTimeout bounds one job's write with its bookkeeping.
const applyTimeout = 30 * time.Second

// placementGrace is how long after an apply a job may still wait for
// Nomad to place it before the controller reports it.
const placementGrace = 30 * time.Second

// checkPlaced reports a job whose spec asks for a placement that Nomad has
// not run. Right after an apply a blocked evaluation is normal (another
// job of the same round still holds the GPUs, and Nomad retries when they
// free up), so it is only reported placementGrace after the apply, with
// Nomad's reason when the cluster can tell.
func (c *Controller) checkPlaced(ctx context.Context, e *entry) {
	if len(e.job.Placement) == 0 || SamePerNode(e.job.Placement, e.job.Running) {
		return
	}
	if c.now().Sub(e.state.AppliedAt) < placementGrace {
		return // Nomad is still moving allocations around
	}
	reason := "nomad runs " + FormatPlacement(e.job.Running) + ", spec asks for " + FormatPlacement(e.job.Placement)
	if placer, ok := c.cluster.(Placer); ok {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		placed, why, err := placer.Placed(pctx, e.job.JobRef, e.job.JobModifyIndex)
		cancel()
		if err == nil && placed {
			return // placed, allocations still starting
		}
		if why != "" {
			reason = why
		}
	}
	e.st.Error = "not placed: " + reason
	c.metrics.incError("unplaced")
	c.log.Warn("nomad has not placed the job as decided", "job_id", e.job.JobRef.String(), "reason", reason)
}

// SamePerNode compares placements as GPUs per node, ignoring rank order.
func SamePerNode(a, b []NodeGPUs) bool {
	m := map[string]int{}
	for _, n := range a {
		m[n.Node] += n.GPUs
	}
	for _, n := range b {
		m[n.Node] -= n.GPUs
	}
	for _, v := range m {
		if v != 0 {
			return false
		}
	}
	return true
}

// publish writes the decision key so workers can adopt it without a
// restart.
func (c *Controller) publish(ctx context.Context, ref JobRef, d Decision) {
	raw, err := json.Marshal(d)
	if err == nil {
		err = c.kvPut(ctx, decisionKey(ref), raw)
	}
	if err != nil && !c.kvDown(err) {
		c.log.Warn("failed to publish decision", "job_id", ref.String(), "error", err)
		c.metrics.incError("write_decision")
	}
}

func jobKey(ref JobRef, leaf string) string {
	return "jobs/" + ref.Namespace + "/" + ref.ID + "/" + leaf
}
func metricsKey(ref JobRef) string  { return jobKey(ref, "metrics") }
func stateKey(ref JobRef) string    { return jobKey(ref, "state") }
func decisionKey(ref JobRef) string { return jobKey(ref, "decision") }

// String renders the status as a readable table.
func (s *Status) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "round %d at %s by %s (dry run: %v): %d nodes, %d GPUs, %d conflicts\n",
		s.Round, s.Time.Format(time.RFC3339), s.Instance, s.DryRun, s.Nodes, s.GPUs, s.Conflicts)
	for _, j := range s.Jobs {
		line := fmt.Sprintf("  %-40s %-10s gpus=%-3d", j.Job, j.State, j.GPUs)
		if j.Decision != nil {
			line += fmt.Sprintf(" batch=%d local=%d accum=%d lr=%.4g placement=%s", j.Decision.BatchSize, j.Decision.LocalBsz, j.Decision.AccumSteps, j.Decision.LR, j.Decision.Placement)
		}
		if j.Changed {
			line += " [changed]"
		}
		if j.Conflict {
			line += " [conflict]"
		}
		if j.Error != "" {
			line += " error: " + j.Error
		}
		b.WriteString(line + "\n")
	}
	for _, e := range s.Errors {
		b.WriteString("  error: " + e + "\n")
	}
	return b.String()
}
