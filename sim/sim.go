package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/pollux-nomad/pollux/apps"
	"github.com/pollux-nomad/pollux/model"
	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/registry"
	"github.com/pollux-nomad/pollux/results"
	"github.com/pollux-nomad/pollux/workload"
)

// Config configures a simulation. The zero value gives the artifact's
// cluster: 16 nodes of 4 GPUs, 60 s rounds, 30 s restarts, no interference.
type Config struct {
	// RecordRound, when set, is called after every round the policy
	// decided with the policy's input and its decision as it returned it
	// (before the simulator applies it), to record the round.
	RecordRound func(in policy.Input, out policy.Allocations) error
	// Nodes is the number of nodes (default 16) of an untyped cluster.
	Nodes int
	// GPUsPerNode is the GPUs per node (default 4) of an untyped cluster.
	GPUsPerNode int
	// Cluster, when not empty, is a typed cluster (ParseCluster) and
	// replaces Nodes and GPUsPerNode: its nodes carry their GPU type
	// (policy.Node.Type, node IDs "<type>-<i>"), and a job's true step
	// times come from its application's profile on the type it runs on.
	// Every application of the workload needs a profile for every type
	// (apps.LoadTypedAll). A job runs on one type at a time: if a policy
	// places it across types, it runs on the type that holds most of its
	// GPUs (the first such in its allocation on a tie) and the others are
	// taken back, as the Sia artifact does for heterogeneity-unaware
	// policies (sia-simulator/cluster_unaware.py, repair_allocations_mip).
	Cluster []NodeGroup
	// Rules selects the simulator semantics: RulesPollux (default) or
	// RulesSia. RulesSia also sets, where left zero, AppRestartDelay to
	// SiaRestartDelays, ExploreFactor to 2 and ExploreStart to the
	// policy's own first allocation (registry.Traits.StartReplicas: 4 for
	// pollux, 1 for sia and the others; on a cluster of several GPU types
	// TypedStartReplicas where set: 16 for pollux).
	Rules Rules
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
	// JobRestartDelay, where it names a job (the workload's name column),
	// replaces AppRestartDelay and RestartDelay for that job: restart
	// times measured on a real cluster (the closed-loop demo).
	JobRestartDelay map[string]time.Duration
	// JobStartDelay, where it names a job, is charged on the job's first
	// allocation instead of its restart delay: on a real cluster a new
	// job's first start also waits for the scheduler's placement.
	JobStartDelay map[string]time.Duration
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
	// ExploreStart bounds the first allocation of an adaptive job that
	// has not been profiled yet (ExploreFactor scales from what it was
	// profiled on). Default 4 (one node of the artifact's cluster, as the
	// controller's explore_start; the Pollux artifact starts a job on one
	// GPU); under RulesSia the policy's registry.Traits.StartReplicas (4
	// for pollux, 1 for sia, whose bootstrapping profiles one GPU of each
	// type, as Sia's simulator does), or on several GPU types its
	// TypedStartReplicas (16 for pollux, whose stand-in speedup of a job
	// without a model bends past 4 GPUs: PolluxConfig.StandInKnee). With 4 a job skips the
	// 1 -> 4 restart: on the eight artifact workloads (seed 1) restarts
	// per job drop from 2.05 to 1.50 at the same average JCT.
	ExploreStart int
	// ShareProfiles says whether a job's throughput models are fitted on
	// the profile points of every job of its application (one
	// model.ProfilePool per simulation, keyed by application, as the
	// controller pools jobs that declare the same pollux_model) instead of
	// its own points only: for its policy's view and for its own batch
	// size. ShareDefault (the zero value) shares on a cluster of several
	// GPU types for a policy with registry.Traits.SharedProfiles (pollux)
	// and nowhere else; ShareOn and ShareOff force it.
	ShareProfiles Share
	// MaxTime stops a simulation that has not finished (default 60 days of
	// simulated time).
	MaxTime time.Duration
	// Cloud, when not nil, makes the cluster a cloud one whose nodes an
	// autoscaler adds and removes (cloud.go).
	Cloud *Cloud
}

// Share is Config.ShareProfiles.
type Share int

const (
	// ShareDefault shares profiles on a cluster of several GPU types for
	// a policy whose traits ask for it (registry.Traits.SharedProfiles).
	ShareDefault Share = iota
	// ShareOn shares profiles among the jobs of an application.
	ShareOn
	// ShareOff fits every job on its own points only.
	ShareOff
)

// ParseShare reads a ShareProfiles setting: "auto" (or ""), "on" or "off".
func ParseShare(s string) (Share, error) {
	switch s {
	case "", "auto":
		return ShareDefault, nil
	case "on":
		return ShareOn, nil
	case "off":
		return ShareOff, nil
	}
	return 0, fmt.Errorf("want auto, on or off, got %q", s)
}

func (c Config) withDefaults() Config {
	if c.Nodes == 0 {
		c.Nodes = 16
	}
	if c.GPUsPerNode == 0 {
		c.GPUsPerNode = 4
	}
	if len(c.Cluster) == 0 {
		c.Cluster = []NodeGroup{{Nodes: c.Nodes, GPUsPerNode: c.GPUsPerNode}}
	}
	if c.Rules == "" {
		c.Rules = RulesPollux
	}
	if c.Rules == RulesSia {
		if c.AppRestartDelay == nil {
			c.AppRestartDelay = SiaRestartDelays
		}
		if c.ExploreFactor == 0 {
			c.ExploreFactor = 2
		}
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
	c.MaxReplicas = min(c.MaxReplicas, c.totalGPUs())
	if c.ExploreFactor == 0 {
		c.ExploreFactor = 4
	}
	if c.ExploreStart == 0 {
		c.ExploreStart = 4
	}
	if c.MaxTime == 0 {
		c.MaxTime = 60 * 24 * time.Hour
	}
	return c
}

// totalGPUs is the cluster's GPU count (after withDefaults).
func (c Config) totalGPUs() int {
	if c.Cloud != nil {
		return c.Cloud.maxGPUs(c.Cluster)
	}
	n := 0
	for _, g := range c.Cluster {
		n += g.Nodes * g.GPUsPerNode
	}
	return n
}

// Validate reports every problem with the configuration.
func (c Config) Validate() error {
	var errs []error
	if _, err := ParseRules(string(c.Rules)); err != nil {
		errs = append(errs, err)
	}
	seen := map[string]bool{}
	for i, g := range c.Cluster {
		switch {
		case g.Type == "":
			errs = append(errs, fmt.Errorf("cluster group %d: empty GPU type", i+1))
		case seen[g.Type]:
			errs = append(errs, fmt.Errorf("cluster group %d: GPU type %q given twice", i+1, g.Type))
		}
		seen[g.Type] = true
		if g.Nodes < 1 || g.GPUsPerNode < 1 || g.GPUsPerNode > 9 {
			errs = append(errs, fmt.Errorf("cluster group %d (%s): want at least 1 node and 1 to 9 GPUs per node, got %dx%d", i+1, g.Type, g.Nodes, g.GPUsPerNode))
		}
	}
	if c.Nodes < 0 || c.GPUsPerNode < 0 || c.MaxReplicas < 0 || c.ExploreFactor < 0 || c.ExploreStart < 0 {
		errs = append(errs, errors.New("nodes, gpus per node, max replicas, explore factor and explore start must not be negative"))
	}
	if c.GPUsPerNode > 9 {
		errs = append(errs, fmt.Errorf("gpus per node: at most 9 supported by the profiles' placement format, got %d", c.GPUsPerNode))
	}
	if c.Interval < 0 || c.RestartDelay < 0 || c.MaxTime < 0 {
		errs = append(errs, errors.New("interval, restart delay and max time must not be negative"))
	}
	for name, d := range c.JobStartDelay {
		if d < 0 {
			errs = append(errs, fmt.Errorf("start delay of job %q: must not be negative, got %s", name, d))
		}
	}
	for name, d := range c.JobRestartDelay {
		if d < 0 {
			errs = append(errs, fmt.Errorf("restart delay of job %q: must not be negative, got %s", name, d))
		}
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
	traits   registry.Traits
	pol      policy.Policy
	workload string
	jobs     []*job
	nodes    []policy.Node
	nodeIdx  map[string]int
	alloc    policy.Allocations
	now      float64
	// types are the cluster's GPU types in Config.Cluster order ([""] on
	// an untyped cluster); gpusPerNode and typeGPUs per type.
	types       []string
	gpusPerNode map[string]int
	typeGPUs    map[string]int
	// netScale[app][src][dst] scales a source type's network terms to the
	// destination type for bootstrapped models (netScales).
	netScale map[string]map[string]map[string]model.NetworkScale
	// realloc counts the run's reallocations by kind.
	realloc Reallocations
	// cloud is the cloud cluster (nil on a fixed one); roundJobs the
	// policy's view of the jobs in the last round.
	cloud     *cloudState
	roundJobs []policy.Job
	// rounds counts the rounds the policy decided (the next Input.Round
	// is rounds+1), and carry is what its last one handed on.
	rounds int64
	carry  policy.Carry
}

// New prepares a simulation of the workload jobs under pol. applications
// must hold every application the workload names.
func New(cfg Config, applications map[string]*apps.Application, jobs []workload.Job, workloadName string, pol policy.Policy) (*Simulator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid simulator config: %w", err)
	}
	traits, err := registry.TraitsOf(pol.Name())
	if err != nil {
		return nil, err
	}
	if cfg.Rules == RulesSia && cfg.ExploreStart == 0 {
		cfg.ExploreStart = max(traits.StartReplicas, 1)
		// Validate rejects a type given twice: each group is a type.
		if traits.TypedStartReplicas > 0 && policy.SeveralTypes(len(cfg.Cluster)) {
			cfg.ExploreStart = traits.TypedStartReplicas
		}
	}
	cfg = cfg.withDefaults()
	s := &Simulator{
		cfg:      cfg,
		traits:   traits,
		pol:      pol,
		workload: workloadName,
		alloc:    policy.Allocations{},
		nodeIdx:  make(map[string]int, cfg.Nodes),
	}
	s.gpusPerNode, s.typeGPUs = map[string]int{}, map[string]int{}
	for _, g := range cfg.Cluster {
		s.types = append(s.types, g.Type)
		s.gpusPerNode[g.Type] = g.GPUsPerNode
		s.typeGPUs[g.Type] = g.Nodes * g.GPUsPerNode
		for i := range g.Nodes {
			id := strconv.Itoa(i)
			if g.Type != "" {
				id = g.Type + "-" + id
			}
			s.nodeIdx[id] = len(s.nodes)
			s.nodes = append(s.nodes, policy.Node{ID: id, GPUs: g.GPUsPerNode, Type: g.Type})
		}
	}
	if cfg.Cloud != nil {
		if err := s.initCloud(); err != nil {
			return nil, err
		}
	}
	if policy.SeveralTypes(len(s.types)) && traits.UsesGoodput && !traits.ProjectedGoodput {
		if s.netScale, err = netScales(applications, s.types); err != nil {
			return nil, err
		}
	}
	if cfg.ShareProfiles < ShareDefault || cfg.ShareProfiles > ShareOff {
		return nil, fmt.Errorf("sim: ShareProfiles: unknown value %d (want ShareDefault, ShareOn or ShareOff)", cfg.ShareProfiles)
	}
	var pool *model.ProfilePool
	if cfg.ShareProfiles == ShareOn || cfg.ShareProfiles == ShareDefault && traits.SharedProfiles && policy.SeveralTypes(len(cfg.Cluster)) {
		pool = &model.ProfilePool{}
	}
	for i, w := range jobs {
		app, ok := applications[w.Application]
		if !ok {
			return nil, fmt.Errorf("job %d (%s): unknown application %q", i+1, w.Name, w.Application)
		}
		for _, t := range s.types {
			if !app.HasType(t) {
				return nil, fmt.Errorf("job %d (%s): application %s has no profile for GPU type %q (it has %v)", i+1, w.Name, app.Name, t, app.Types())
			}
		}
		j := &job{
			name: w.Name, app: app, submitted: w.Time,
			traceBatch: w.BatchSize, rules: cfg.Rules, calib: 1,
			completion: -1, restarts: -1,
			profile:    make(map[profileKey]struct{}),
			points:     map[string][]model.ProfilePoint{},
			perf:       map[string]*model.PerfParams{},
			maxProfile: map[string]int{},
			pool:       pool,
		}
		if cfg.Rules == RulesSia {
			if sd, ok := SiaSlowdowns[app.Name]; ok {
				j.calib = 1 / sd
			}
		}
		// How the job is configured depends on the policy that drives it
		// (simulator.py, Cluster.__init__): a fixed-size job runs on its
		// trace's num_replicas, a job whose batch size the policy does not
		// adapt keeps its trace's batch_size, and an adaptive one is
		// profiled and fitted (NCF stays at M = 32768).
		if traits.Replicas == registry.RequestedReplicas {
			j.fixedGPUs = w.NumReplicas
		}
		if !traits.AdaptiveBatch {
			j.fixedBatch = w.BatchSize
		} else if app.Name == "ncf" {
			// Sia tunes NCF's batch size too but shows the policy its
			// trace batch size of 32768 (cluster.py, Cluster.__init__).
			if cfg.Rules == RulesSia {
				j.traceBatch = 32768
			} else {
				j.fixedBatch = 32768
			}
		}
		j.fit = traits.UsesGoodput
		if (!traits.AdaptiveBatch && j.fixedBatch < 1) || (traits.Replicas == registry.RequestedReplicas && j.fixedGPUs < 1) {
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
		TotalGPUs: s.cfg.totalGPUs(),
	}
	if len(s.types) > 1 || s.types[0] != "" {
		run.TypeGPUs = s.typeGPUs
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
		if s.cloud != nil {
			s.cloudAfter()
		}
		sample := results.Sample{Time: s.now, JobGPUs: make(map[string]int, len(s.alloc)), GPUsUp: s.gpusUp()}
		if run.TypeGPUs != nil {
			sample.TypeGPUsInUse = map[string]int{}
		}
		for id, a := range s.alloc {
			sample.GPUsInUse += len(a)
			sample.JobGPUs[id] = len(a)
			if sample.TypeGPUsInUse != nil && len(a) > 0 {
				sample.TypeGPUsInUse[s.nodes[s.nodeIdx[a[0]]].Type] += len(a)
			}
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
	s.finishTimeFairness(&run)
	run.GPUHours, run.Cost = s.billing()
	run.Autoscaled = s.cloud != nil
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
	if s.cloud != nil {
		s.cloudBefore()
	}
	in := policy.Input{Now: s.now, Nodes: s.nodes, Current: policy.Allocations{}}
	for _, j := range s.jobs {
		if j.submitted <= s.now && !j.done() {
			proj := s.bootstrap
			if s.traits.ProjectedGoodput {
				proj = s.project
			}
			pj := j.info(s.traits, s.now, s.cfg.MaxReplicas, registry.JobLimits{Explore: s.cfg.ExploreFactor, Start: s.cfg.ExploreStart}, s.types, proj)
			pj.RestartTime = s.restartDelay(j)
			// Still checkpointing/restoring from the last reallocation
			// (Sia's scaling_underway: job.rescale_time > 0).
			pj.Restoring = len(j.placement) > 0 && j.rescaleLeft > 0
			if len(j.placement) > 0 {
				pj.Held = s.now - j.lastRealloc
			}
			in.Jobs = append(in.Jobs, pj)
			if a := s.alloc[j.name]; len(a) > 0 {
				in.Current[j.name] = a
			}
		}
	}
	s.roundJobs = in.Jobs
	if len(in.Jobs) == 0 || len(in.Nodes) == 0 {
		return -1, nil
	}
	s.alloc = in.Current
	s.rounds++
	in.Round, in.Carry = s.rounds, s.carry
	t0 := time.Now()
	next, err := s.pol.Optimize(ctx, in)
	if err != nil {
		return 0, fmt.Errorf("policy %s failed at t=%.0fs: %w", s.pol.Name(), s.now, err)
	}
	s.carry = s.pol.Carry()
	opt := time.Since(t0).Seconds()
	if s.cfg.RecordRound != nil {
		if err := s.cfg.RecordRound(in, next); err != nil {
			return 0, fmt.Errorf("failed to record round %d at t=%.0fs: %w", in.Round, s.now, err)
		}
	}
	if err := s.check(in, next); err != nil {
		return 0, fmt.Errorf("policy %s returned an invalid allocation at t=%.0fs: %w", s.pol.Name(), s.now, err)
	}
	next = s.oneTypeEach(next)
	for _, j := range s.jobs {
		old, cur := s.alloc[j.name], next[j.name]
		if policy.Equal(old, cur) {
			continue
		}
		t := ""
		if len(cur) > 0 {
			t = s.nodes[s.nodeIdx[cur[0]]].Type
		}
		placement := policy.Placement(cur)
		if t != "" {
			placement = siaPlacement(t, placement)
		}
		if s.cfg.Rules == RulesSia {
			// Sia restarts a job only when its GPU type or the shape of
			// its placement changes (cluster.py optimize_policy; job.py
			// reallocate compares placement tuples, migrate the type).
			if len(old) > 0 && len(cur) > 0 && t == j.gpuType && slices.Equal(placement, j.placement) {
				continue
			}
		}
		delay := s.restartDelay(j)
		if d, ok := s.cfg.JobStartDelay[j.name]; ok && j.restarts < 0 {
			delay = d.Seconds()
		}
		s.countRealloc(j, old, cur, delay)
		j.reallocate(t, placement, delay)
	}
	s.alloc = policy.Allocations{}
	for id, a := range next {
		if len(a) > 0 {
			s.alloc[id] = a
		}
	}
	return opt, nil
}

// oneTypeEach keeps, of an allocation spanning GPU types, only the GPUs of
// the type holding most of them (the first such type in the allocation on
// a tie), as the Sia artifact's cluster_unaware.py (repair_allocations_mip)
// does; the GPUs taken back stay idle this round.
func (s *Simulator) oneTypeEach(next policy.Allocations) policy.Allocations {
	if len(s.types) == 1 {
		return next
	}
	var out policy.Allocations
	for id, a := range next {
		if len(a) == 0 {
			continue
		}
		first := s.nodes[s.nodeIdx[a[0]]].Type
		mixed := false
		for _, n := range a[1:] {
			if s.nodes[s.nodeIdx[n]].Type != first {
				mixed = true
				break
			}
		}
		if !mixed {
			continue
		}
		if out == nil {
			out = make(policy.Allocations, len(next))
			for k, v := range next {
				out[k] = v
			}
		}
		count := map[string]int{}
		var order []string
		for _, n := range a {
			t := s.nodes[s.nodeIdx[n]].Type
			if count[t] == 0 {
				order = append(order, t)
			}
			count[t]++
		}
		best := order[0]
		for _, t := range order[1:] {
			if count[t] > count[best] {
				best = t
			}
		}
		kept := make([]string, 0, count[best])
		for _, n := range a {
			if s.nodes[s.nodeIdx[n]].Type == best {
				kept = append(kept, n)
			}
		}
		out[id] = kept
	}
	if out == nil {
		return next
	}
	return out
}

// siaPlacement reshapes a placement on more nodes of type t than the type
// was profiled on to that many nodes, ceil(GPUs / nodes) GPUs each and the
// rest on the last, as the Sia artifact's Cluster.optimize_policy.
func siaPlacement(t string, p []int) []int {
	maxNodes, ok := SiaMaxPhysicalNodes[t]
	if !ok || len(p) <= maxNodes {
		return p
	}
	k := 0
	for _, g := range p {
		k += g
	}
	per := (k + maxNodes - 1) / maxNodes
	var out []int
	for k > 0 {
		n := min(per, k)
		out = append(out, n)
		k -= n
	}
	return out
}

// netScales estimates, per application and pair of the cluster's GPU
// types, how the network terms of a job's model carry over from one type
// to another: model.NetworkScaleBetween over the other applications'
// models fitted to their whole measured profiles on both types. It stands
// for what a cluster learns from the jobs that ran on both types; the
// job's own application is left out.
func netScales(applications map[string]*apps.Application, types []string) (map[string]map[string]map[string]model.NetworkScale, error) {
	fits := map[string]map[string]model.PerfParams{}
	var names []string
	for name, a := range applications {
		names = append(names, name)
		fits[name] = map[string]model.PerfParams{}
		for _, t := range types {
			var pts []model.ProfilePoint
			for _, m := range a.Measured(t) {
				k := 0
				for _, g := range m.Placement {
					k += g
				}
				pts = append(pts, model.ProfilePoint{Nodes: len(m.Placement), Replicas: k, LocalBsz: float64(m.LocalBsz),
					AccumStepTime: math.Max(m.StepTime-m.SyncTime, 1e-6), OptimStepTime: m.StepTime})
			}
			if len(pts) == 0 {
				continue
			}
			p, err := model.FitPerfParams(pts)
			if err != nil {
				return nil, fmt.Errorf("failed to fit the profile of %s on %s: %w", name, t, err)
			}
			fits[name][t] = p
		}
	}
	sort.Strings(names)
	out := map[string]map[string]map[string]model.NetworkScale{}
	for _, name := range names {
		out[name] = map[string]map[string]model.NetworkScale{}
		for _, src := range types {
			out[name][src] = map[string]model.NetworkScale{}
			for _, dst := range types {
				var pairs [][2]model.PerfParams
				for _, other := range names {
					ps, ok1 := fits[other][src]
					pd, ok2 := fits[other][dst]
					if other != name && ok1 && ok2 {
						pairs = append(pairs, [2]model.PerfParams{ps, pd})
					}
				}
				out[name][src][dst] = model.NetworkScaleBetween(pairs)
			}
		}
	}
	return out, nil
}

// bootstrap predicts a job's goodput on a GPU type it has not run on:
// model.BootstrapPerf from its fit on the type it has the most points on
// (the first in cluster order on a tie), two one-GPU probes on the target
// (the job's true step times at the type's smallest and largest
// micro-batch, as if profiled when it arrived; not charged any time) and
// the network scale of netScales.
func (s *Simulator) bootstrap(j *job, target string, fitted map[string]policy.GoodputModel) policy.GoodputModel {
	best := ""
	for _, t := range s.types {
		if _, ok := fitted[t]; ok && (best == "" || len(j.points[t]) > len(j.points[best])) {
			best = t
		}
	}
	if best == "" {
		return nil
	}
	src := j.perfOn(best)
	e, ok := j.boot[target]
	if !ok || e.src != *src {
		lo, hi := j.localBounds(target)
		var probes []model.ProfilePoint
		for _, m := range []int{lo, hi} {
			if mx, ok := j.app.MaxLocalBszMeasured(target, []int{1}); ok {
				m = min(m, mx)
			}
			step, sync, err := j.app.ThroughputOn(target, []int{1}, m)
			if err != nil {
				continue
			}
			probes = append(probes, model.ProfilePoint{Nodes: 1, Replicas: 1, LocalBsz: float64(m), AccumStepTime: step - sync, OptimStepTime: step})
		}
		perf, err := model.BootstrapPerf(*src, probes, s.netScale[j.app.Name][best][target])
		e = bootEntry{src: *src, perf: perf, ok: err == nil}
		if j.boot == nil {
			j.boot = map[string]bootEntry{}
		}
		j.boot[target] = e
	}
	if !e.ok {
		return s.project(j, target, fitted)
	}
	f := model.GoodputFunc{Perf: e.perf, Grad: j.grad, InitBatchSize: float64(j.app.InitBatchSize)}
	return &model.BootstrappedCache{GoodputCache: model.NewGoodputCache(f, j.policyBounds(target))}
}

// project predicts a job's goodput on a GPU type it has no fit on: Sia's
// projection (model.Projected) from the first fitted type in cluster
// order (under RulesSia in the Sia artifact's order, siaOrder), scaled by
// the ratio of the application's one-GPU throughputs.
func (s *Simulator) project(j *job, target string, fitted map[string]policy.GoodputModel) policy.GoodputModel {
	order := s.types
	if s.cfg.Rules == RulesSia {
		order = siaOrder(s.types)
	}
	for _, src := range order {
		m, ok := fitted[src]
		if !ok {
			continue
		}
		ratio := 1.0
		if a, b := j.app.OneGPUThroughput(target), j.app.OneGPUThroughput(src); a > 0 && b > 0 {
			ratio = a / b
		}
		return &model.Projected{Source: m, Ratio: ratio, SourceGPUsPerNode: s.gpusPerNode[src]}
	}
	return nil
}

// restartDelay is the job's restart delay in seconds.
func (s *Simulator) restartDelay(j *job) float64 {
	if d, ok := s.cfg.JobRestartDelay[j.name]; ok {
		return d.Seconds()
	}
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
		if len(b.TypedMaxReplicas) > 0 {
			perType := map[string]int{}
			for _, n := range a {
				if i, ok := s.nodeIdx[n]; ok {
					perType[s.nodes[i].Type]++
				}
			}
			for _, t := range s.types {
				if perType[t] > b.MaxReplicasOn(t) {
					return fmt.Errorf("job %q: %d GPUs of type %s, at most %d", id, perType[t], t, b.MaxReplicasOn(t))
				}
			}
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

// siaTypeOrder is the order of the GPU types in the Sia artifact's
// default cluster (simulator_config.py, cluster_nnodes: aws, dgx-ext,
// rtx), followed by its other types; the artifact takes the first type
// with a model in this order as the source of a projection (sia.py,
// _compute_goodputs_v2).
var siaTypeOrder = []string{"t4", "a100", "rtx2080ti", "v100", "rtx6000"}

// siaOrder sorts types by siaTypeOrder, unknown types last in their order.
func siaOrder(types []string) []string {
	var out []string
	for _, t := range siaTypeOrder {
		if slices.Contains(types, t) {
			out = append(out, t)
		}
	}
	for _, t := range types {
		if !slices.Contains(siaTypeOrder, t) {
			out = append(out, t)
		}
	}
	return out
}
