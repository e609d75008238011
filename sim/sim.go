package sim

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/pollux-nomad/pollux/apps"
	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/results"
	"github.com/pollux-nomad/pollux/workload"
)

// Config configures a simulation. The zero value gives the artifact's
// cluster: 16 nodes of 4 GPUs, 60 s rounds, 30 s restarts, no interference.
type Config struct {
	// Nodes is the number of nodes (default 16).
	Nodes int
	// GPUsPerNode is the GPUs per node (default 4).
	GPUsPerNode int
	// Interval is the scheduling interval (default 60 s).
	Interval time.Duration
	// RestartDelay is the time a reallocated job makes no progress
	// (default 30 s, the artifact's re-scale countdown).
	RestartDelay time.Duration
	// AppRestartDelay, where it names a job's application, replaces
	// RestartDelay for that job (measured restart costs differ by
	// application: 25–250 s in Sia's artifact). The policy is told each
	// job's delay (policy.Job.RestartTime).
	AppRestartDelay map[string]time.Duration
	// Interference is the slowdown of a distributed job sharing a node with
	// another distributed job (default 0, as the artifact's evaluation).
	Interference float64
	// MaxReplicas caps any job's GPU count (default 64, the artifact's cap,
	// or the cluster size if smaller).
	MaxReplicas int
	// ExploreFactor bounds how fast an adaptive job may grow: at most
	// ExploreFactor times the most GPUs it has been profiled on. Default
	// 4; the artifact uses 2 (simulator.py, get_pollux_job_info). With 4,
	// large jobs reach their best size in fewer restarts: over the eight
	// artifact workloads the mean average JCT drops by about 2.5% and
	// restarts per job from 4.0 to 3.4 (measured with this simulator).
	ExploreFactor int
	// MaxTime stops a simulation that has not finished (default 60 days of
	// simulated time).
	MaxTime time.Duration
}

func (c Config) withDefaults() Config {
	if c.Nodes == 0 {
		c.Nodes = 16
	}
	if c.GPUsPerNode == 0 {
		c.GPUsPerNode = 4
	}
	if c.Interval == 0 {
		c.Interval = 60 * time.Second
	}
	if c.RestartDelay == 0 {
		c.RestartDelay = 30 * time.Second
	}
	if c.MaxReplicas == 0 {
		c.MaxReplicas = 64
	}
	c.MaxReplicas = min(c.MaxReplicas, c.Nodes*c.GPUsPerNode)
	if c.ExploreFactor == 0 {
		c.ExploreFactor = 4
	}
	if c.MaxTime == 0 {
		c.MaxTime = 60 * 24 * time.Hour
	}
	return c
}

// Validate reports every problem with the configuration.
func (c Config) Validate() error {
	var errs []error
	if c.Nodes < 0 || c.GPUsPerNode < 0 || c.MaxReplicas < 0 || c.ExploreFactor < 0 {
		errs = append(errs, errors.New("nodes, gpus per node, max replicas and explore factor must not be negative"))
	}
	if c.GPUsPerNode > 9 {
		errs = append(errs, fmt.Errorf("gpus per node: at most 9 supported by the profiles' placement format, got %d", c.GPUsPerNode))
	}
	if c.Interval < 0 || c.RestartDelay < 0 || c.MaxTime < 0 {
		errs = append(errs, errors.New("interval, restart delay and max time must not be negative"))
	}
	for app, d := range c.AppRestartDelay {
		if d < 0 {
			errs = append(errs, fmt.Errorf("restart delay of application %q: must not be negative, got %s", app, d))
		}
	}
	if c.Interference < 0 || c.Interference >= 1 {
		errs = append(errs, fmt.Errorf("interference: must be in [0, 1), got %g", c.Interference))
	}
	return errors.Join(errs...)
}

// Progress is reported after every round.
type Progress struct {
	// Time is the simulated time in seconds.
	Time float64
	// Done and Total count completed and all jobs.
	Done, Total int
	// Active counts submitted, unfinished jobs.
	Active int
	// GPUsInUse counts allocated GPUs.
	GPUsInUse int
}

// Simulator replays a workload on a simulated cluster under one policy.
type Simulator struct {
	cfg      Config
	traits   policy.Traits
	pol      policy.Policy
	workload string
	jobs     []*job
	nodes    []policy.Node
	nodeIdx  map[string]int
	alloc    policy.Allocations
	now      float64
}

// New prepares a simulation of the workload jobs under pol. applications
// must hold every application the workload names.
func New(cfg Config, applications map[string]*apps.Application, jobs []workload.Job, workloadName string, pol policy.Policy) (*Simulator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid simulator config: %w", err)
	}
	cfg = cfg.withDefaults()
	traits, err := policy.TraitsOf(pol.Name())
	if err != nil {
		return nil, err
	}
	s := &Simulator{
		cfg:      cfg,
		traits:   traits,
		pol:      pol,
		workload: workloadName,
		alloc:    policy.Allocations{},
		nodeIdx:  make(map[string]int, cfg.Nodes),
	}
	for i := range cfg.Nodes {
		id := strconv.Itoa(i)
		s.nodes = append(s.nodes, policy.Node{ID: id, GPUs: cfg.GPUsPerNode})
		s.nodeIdx[id] = i
	}
	for i, w := range jobs {
		app, ok := applications[w.Application]
		if !ok {
			return nil, fmt.Errorf("job %d (%s): unknown application %q", i+1, w.Name, w.Application)
		}
		j := &job{
			name: w.Name, app: app, submitted: w.Time,
			completion: -1, restarts: -1,
			profile: make(map[profileKey]struct{}),
		}
		// How the job is configured depends on the policy that drives it
		// (simulator.py, Cluster.__init__): a fixed-size job runs on its
		// trace's num_replicas, a job whose batch size the policy does not
		// adapt keeps its trace's batch_size, and an adaptive one is
		// profiled and fitted (NCF stays at M = 32768).
		if traits.Replicas == policy.RequestedReplicas {
			j.fixedGPUs = w.NumReplicas
		}
		if !traits.AdaptiveBatch {
			j.fixedBatch = w.BatchSize
		} else if app.Name == "ncf" {
			j.fixedBatch = 32768
		}
		j.fit = traits.UsesGoodput
		if (!traits.AdaptiveBatch && j.fixedBatch < 1) || (traits.Replicas == policy.RequestedReplicas && j.fixedGPUs < 1) {
			return nil, fmt.Errorf("job %d (%s): %s needs num_replicas and batch_size ≥ 1", i+1, w.Name, pol.Name())
		}
		s.jobs = append(s.jobs, j)
	}
	return s, nil
}

// Run simulates until every job completes, calling onRound (if not nil)
// after each round, and returns the outcome.
func (s *Simulator) Run(ctx context.Context, onRound func(Progress)) (results.Run, error) {
	start := time.Now()
	run := results.Run{
		Policy:    s.pol.Name(),
		Workload:  s.workload,
		TotalGPUs: s.cfg.Nodes * s.cfg.GPUsPerNode,
	}
	interval := s.cfg.Interval.Seconds()
	for !s.allDone() {
		if err := ctx.Err(); err != nil {
			return run, err
		}
		if s.now > s.cfg.MaxTime.Seconds() {
			return run, fmt.Errorf("simulation did not finish within %s of simulated time", s.cfg.MaxTime)
		}
		opt, err := s.round(ctx, interval)
		if err != nil {
			return run, err
		}
		sample := results.Sample{Time: s.now, JobGPUs: make(map[string]int, len(s.alloc))}
		for id, a := range s.alloc {
			sample.GPUsInUse += len(a)
			sample.JobGPUs[id] = len(a)
		}
		run.Timeline = append(run.Timeline, sample)
		if opt >= 0 {
			run.OptimizeSeconds = append(run.OptimizeSeconds, opt)
		}
		if onRound != nil {
			onRound(s.progress(sample.GPUsInUse))
		}
	}
	for _, j := range s.jobs {
		run.Jobs = append(run.Jobs, results.JobResult{
			Name:           j.name,
			Application:    j.app.Name,
			Submitted:      j.submitted,
			Completed:      j.done(),
			Completion:     j.completion,
			Restarts:       max(j.restarts, 0),
			GPUSeconds:     j.attained,
			FinalBatchSize: j.batchSize(),
		})
	}
	run.Wall = time.Since(start)
	return run, nil
}

// round advances every job by one interval, then asks the policy for the
// next allocation and applies what changed. It returns the policy's
// wall-clock time in seconds, or -1 if no job was active.
func (s *Simulator) round(ctx context.Context, interval float64) (float64, error) {
	busy := s.interferingNodes()
	for _, j := range s.jobs {
		inter := 0.0
		if s.cfg.Interference > 0 && len(j.placement) > 1 {
			for _, n := range s.alloc[j.name] {
				if busy[n] {
					inter = s.cfg.Interference
					break
				}
			}
		}
		if err := j.step(interval, inter); err != nil {
			return 0, fmt.Errorf("failed to simulate round at t=%.0fs: %w", s.now, err)
		}
	}
	s.now += interval
	in := policy.Input{Now: s.now, Nodes: s.nodes, Current: policy.Allocations{}}
	for _, j := range s.jobs {
		if j.submitted <= s.now && !j.done() {
			pj := j.info(s.traits, s.now, s.cfg.MaxReplicas, s.cfg.ExploreFactor)
			pj.RestartTime = s.restartDelay(j)
			in.Jobs = append(in.Jobs, pj)
			if a := s.alloc[j.name]; len(a) > 0 {
				in.Current[j.name] = a
			}
		}
	}
	if len(in.Jobs) == 0 {
		return -1, nil
	}
	s.alloc = in.Current
	t0 := time.Now()
	next, err := s.pol.Optimize(ctx, in)
	if err != nil {
		return 0, fmt.Errorf("policy %s failed at t=%.0fs: %w", s.pol.Name(), s.now, err)
	}
	opt := time.Since(t0).Seconds()
	if err := s.check(in, next); err != nil {
		return 0, fmt.Errorf("policy %s returned an invalid allocation at t=%.0fs: %w", s.pol.Name(), s.now, err)
	}
	for _, j := range s.jobs {
		old, cur := s.alloc[j.name], next[j.name]
		if !policy.Equal(old, cur) {
			j.reallocate(policy.Placement(cur), s.restartDelay(j))
		}
	}
	s.alloc = policy.Allocations{}
	for id, a := range next {
		if len(a) > 0 {
			s.alloc[id] = a
		}
	}
	return opt, nil
}

// restartDelay is the job's restart delay in seconds.
func (s *Simulator) restartDelay(j *job) float64 {
	if d, ok := s.cfg.AppRestartDelay[j.app.Name]; ok {
		return d.Seconds()
	}
	return s.cfg.RestartDelay.Seconds()
}

// check verifies capacities and bounds of a policy's answer.
func (s *Simulator) check(in policy.Input, next policy.Allocations) error {
	bounds := make(map[string]policy.Job, len(in.Jobs))
	for _, j := range in.Jobs {
		bounds[j.ID] = j
	}
	ids := make([]string, 0, len(next))
	for id := range next {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		a := next[id]
		if len(a) == 0 {
			continue
		}
		b, ok := bounds[id]
		if !ok {
			return fmt.Errorf("job %q is not active", id)
		}
		if len(a) > b.MaxReplicas || len(a) < b.MinReplicas {
			return fmt.Errorf("job %q: %d GPUs outside [%d, %d]", id, len(a), b.MinReplicas, b.MaxReplicas)
		}
	}
	used := next.UsedGPUs()
	for n, u := range used {
		i, ok := s.nodeIdx[n]
		if !ok {
			return fmt.Errorf("unknown node %q", n)
		}
		if u > s.nodes[i].GPUs {
			return fmt.Errorf("node %s: %d GPUs allocated, capacity %d", n, u, s.nodes[i].GPUs)
		}
	}
	return nil
}

// interferingNodes are the nodes shared by more than one distributed job.
func (s *Simulator) interferingNodes() map[string]bool {
	if s.cfg.Interference == 0 {
		return nil
	}
	count := map[string]int{}
	for _, a := range s.alloc {
		if policy.NumNodes(a) > 1 {
			seen := map[string]bool{}
			for _, n := range a {
				if !seen[n] {
					seen[n] = true
					count[n]++
				}
			}
		}
	}
	busy := map[string]bool{}
	for n, c := range count {
		if c > 1 {
			busy[n] = true
		}
	}
	return busy
}

func (s *Simulator) allDone() bool {
	for _, j := range s.jobs {
		if !j.done() {
			return false
		}
	}
	return true
}

func (s *Simulator) progress(gpus int) Progress {
	p := Progress{Time: s.now, Total: len(s.jobs), GPUsInUse: gpus}
	for _, j := range s.jobs {
		switch {
		case j.done():
			p.Done++
		case j.submitted <= s.now:
			p.Active++
		}
	}
	return p
}
