package jobs

import (
	"context"
	"sync"
	"time"

	"github.com/pollux-nomad/pollux/model"
	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/registry"
)

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

// round is one scheduling round in progress, a value created by begin
// and dropped once its status is written: what its phases found and
// decided, handed from one to the next, and its I/O with Consul (kv).
// What must outlive a round lives on the Controller.
type round struct {
	// number is the round's number (in its status and decisions).
	number int64
	cfg    Config
	apply  bool
	traits registry.Traits
	start  time.Time
	// kv is the round's unit of work with Consul.
	kv *roundKV
	// statusMu guards status's counters and errors while apply writes
	// from several goroutines.
	statusMu sync.Mutex
	status   *Status
	// stats has one line per listed job, in list order (the status's).
	stats []*JobStatus
	// held counts, per node, the GPUs of jobs the policy may not move.
	held  map[string]int
	nodes []Node
	// nodeType is each node's GPU type and typeModels each type's GPU
	// model names (empty when GPU types are off); severalTypes is
	// SeveralGPUTypes(nodeType).
	nodeType     map[string]string
	typeModels   map[string][]string
	severalTypes bool
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
	tree := make(chan struct{})
	go func() {
		defer close(tree)
		r.kv.readTree(ctx)
	}()
	if err := c.snapshot(ctx, r, tree); err != nil {
		return nil, err
	}
	c.lap(r, "snapshot", t0)
	t0 = c.now()
	c.fitJobs(ctx, r)
	c.accrue(ctx, r)
	r.kv.flushStates(ctx)
	c.lap(r, "fit", t0)
	t0 = c.now()
	if err := c.optimize(ctx, r); err != nil {
		return nil, err
	}
	c.lap(r, "optimize", t0)
	t0 = c.now()
	c.autoscale(r)
	if r.cfg.Autoscale.Enabled {
		c.lap(r, "autoscale", t0)
		t0 = c.now()
	}
	in := c.planInput(r)
	p := MakePlan(in)
	c.lap(r, "plan", t0)
	t0 = c.now()
	c.apply(ctx, r, in, p)
	c.flushDecisions(context.WithoutCancel(ctx), r)
	c.lap(r, "apply", t0)
	c.collectGarbage(ctx, r)
	c.lap(r, "total", r.start)
	c.publishStatus(ctx, r)
	return r.status, nil
}

// begin starts a round with the configuration in force.
func (c *Controller) begin(apply bool) *round {
	cfg := c.takeConfig()
	c.round++
	r := &round{number: c.round, cfg: cfg, apply: apply, start: c.now(), held: map[string]int{}, kv: newRoundKV(c.kv, c.log, c.metrics)}
	// cfg was validated, so the policy is known.
	r.traits, _ = c.traitsOf(cfg.Policy)
	r.status = &Status{Round: c.round, Time: r.start.UTC(), Instance: c.instance, DryRun: cfg.DryRun || !apply, Timings: map[string]float64{}}
	if c.term != nil {
		r.status.Term = c.term()
	}
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
	c.explain(r)
	for _, st := range r.stats {
		r.status.Jobs = append(r.status.Jobs, *st)
	}
	c.metrics.observeRound(r.status)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := r.kv.writeStatus(sctx, r.status); err != nil && !r.kv.down(err) {
		c.log.Warn("failed to write status", "error", err)
		c.metrics.incError("write_status")
	}
}

// conflict counts a write that lost its check-and-set.
func (r *round) conflict() {
	r.statusMu.Lock()
	r.status.Conflicts++
	r.statusMu.Unlock()
}

// addError adds a line to the round's status errors.
func (r *round) addError(line string) {
	r.statusMu.Lock()
	r.status.Errors = append(r.status.Errors, line)
	r.statusMu.Unlock()
}
