// Package demo runs the closed loop on a real cluster: it submits a
// workload (a CSV in the simulator's format, time-compressed) as Nomad
// jobs whose tasks are emulated trainers (`pollux emulate`), runs the
// Pollux controller against the same Nomad and Consul, waits until every
// job completes and returns the outcome in the simulator's report format,
// so that the real run and `pollux simulate` can be compared.
package demo

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"sync"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/pollux-nomad/pollux/apps"
	"github.com/pollux-nomad/pollux/consul"
	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/emulate"
	"github.com/pollux-nomad/pollux/jobs"
	"github.com/pollux-nomad/pollux/jobs/agent"
	"github.com/pollux-nomad/pollux/nomad"
	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/registry"
	"github.com/pollux-nomad/pollux/results"
	"github.com/pollux-nomad/pollux/workload"
)

// Config configures one closed-loop run.
type Config struct {
	Jobs     []workload.Job
	Workload string
	Apps     map[string]*apps.Application
	// Speedup is emulated seconds per real second; the controller's
	// interval and restart penalty are scaled by it.
	Speedup float64
	// Binary is the pollux executable the tasks run (`emulate`).
	Binary string
	Device string
	Nomad  *nomadapi.Client
	Consul *consulapi.Client
	Logger hclog.Logger
	// Timeout bounds the whole run in real time.
	Timeout time.Duration
	// Policy drives the controller: "pollux" (default), "tiresias" or
	// "optimus" (with an oracle read from the profiles and the workers'
	// checkpoints, as the artifact's Optimus+Oracle).
	Policy string
	// Namespace is the Nomad namespace the jobs are registered in and
	// their KV keys are named by (default: NOMAD_NAMESPACE, else
	// "default").
	Namespace string
	// Measured, if set, receives what the run measured for the
	// simulator's side of the comparison.
	Measured *Measured
}

// Measured is what a closed-loop run measured that the simulator needs to
// model the same cluster, in emulated seconds.
type Measured struct {
	// RestartTimes is each job's restart time (by workload job name): the
	// median of the controller's samples (state restart_samples) times
	// the speedup. Jobs without a sample are absent.
	RestartTimes map[string]float64
	// RoundInterval is the median time between two controller rounds.
	RoundInterval float64
	// StartLatencies is each job's time from its submission to its first
	// training step (the worker's first restart object): the wait for a
	// round, Nomad's placement and the worker's start. Jobs whose first
	// start was not seen are absent.
	StartLatencies map[string]float64
}

// RestartDelays returns the measured restart times as the simulator's
// per-job delays (sim.Config.JobRestartDelay); a job without a sample gets
// the median of the others (none: absent, the simulator's default).
func (m *Measured) RestartDelays(names []string) map[string]time.Duration {
	var all []float64
	for _, v := range m.RestartTimes {
		all = append(all, v)
	}
	slices.Sort(all)
	out := map[string]time.Duration{}
	for _, n := range names {
		v, ok := m.RestartTimes[n]
		if !ok && len(all) > 0 {
			v, ok = all[len(all)/2], true
		}
		if ok {
			out[n] = time.Duration(v * float64(time.Second))
		}
	}
	return out
}

// namespace returns the Nomad namespace of the demo's jobs.
func (cfg Config) namespace() string {
	if cfg.Namespace != "" {
		return cfg.Namespace
	}
	if ns := os.Getenv("NOMAD_NAMESPACE"); ns != "" {
		return ns
	}
	return "default"
}

// Run submits the workload, drives it with the controller and returns
// the outcome, with times in emulated seconds on the workload's clock.
func Run(ctx context.Context, cfg Config) (results.Run, error) {
	if cfg.Speedup <= 0 || cfg.Binary == "" || len(cfg.Jobs) == 0 {
		return results.Run{}, errors.New("demo: speedup, binary and at least one job are required")
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	log = log.Named("demo")
	if cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
	}
	runID := fmt.Sprintf("%d", time.Now().Unix())
	prefix := "pollux-loop/" + runID + "/"
	cluster, err := nomad.New(cfg.Nomad, nomad.Config{Device: cfg.Device, Logger: log})
	if err != nil {
		return results.Run{}, err
	}
	kv, err := consul.New(cfg.Consul, consul.Config{Prefix: prefix, Logger: log, SessionTTL: 10 * time.Second})
	if err != nil {
		return results.Run{}, err
	}
	nodes, err := cluster.Nodes(ctx)
	if err != nil {
		return results.Run{}, err
	}
	total := 0
	for _, n := range nodes {
		total += n.GPUs
	}
	scale := func(d time.Duration) time.Duration { return time.Duration(float64(d) / cfg.Speedup) }
	jcfg := jobs.DefaultConfig()
	jcfg.Device, jcfg.KVPrefix = cfg.Device, prefix
	jcfg.Interval = max(scale(60*time.Second), time.Second)
	jcfg.RestartPenalty = scale(30 * time.Second)
	if cfg.Policy != "" {
		jcfg.Policy = cfg.Policy
	}
	ctrl, err := jobs.New(jcfg, jobs.Options{Cluster: cluster, KV: kv, Logger: log, Instance: "loop", Oracle: oracleFor(ctx, cfg, prefix)})
	if err != nil {
		return results.Run{}, err
	}

	start := time.Now()
	t0 := cfg.Jobs[0].Time
	for _, j := range cfg.Jobs {
		t0 = min(t0, j.Time)
	}
	emulated := func(t time.Time) float64 { return t0 + t.Sub(start).Seconds()*cfg.Speedup }
	run := results.Run{Policy: jcfg.Policy, Workload: cfg.Workload + " (real cluster)", TotalGPUs: total}
	var mu sync.Mutex
	agentCtx, stopAgent := context.WithCancel(ctx)
	defer stopAgent()
	agentDone := make(chan error, 1)
	go func() {
		agentDone <- agent.Run(agentCtx, agent.Options{
			Controller: ctrl, Leadership: kv.Leader(), KV: kv, Logger: log, Base: jcfg,
			OnRound: func(st *jobs.Status) {
				s := results.Sample{Time: emulated(time.Now()), JobGPUs: map[string]int{}}
				for _, js := range st.Jobs {
					s.GPUsInUse += js.GPUs
					if js.GPUs > 0 {
						s.JobGPUs[js.Job] = js.GPUs
					}
				}
				mu.Lock()
				run.Timeline = append(run.Timeline, s)
				run.OptimizeSeconds = append(run.OptimizeSeconds, st.Timings["optimize"]/1000)
				mu.Unlock()
			},
		})
	}()

	ids := make([]string, len(cfg.Jobs))
	submitted := make([]time.Time, len(cfg.Jobs))
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, id := range ids {
			if id != "" {
				_, _, _ = cfg.Nomad.Jobs().Deregister(id, true, (&nomadapi.WriteOptions{}).WithContext(cctx))
			}
		}
		_, _ = cfg.Consul.KV().DeleteTree(prefix, (&consulapi.WriteOptions{}).WithContext(cctx))
	}()
	// Submit at the compressed submission times, and wait for completion.
	next := 0
	completed := make([]time.Time, len(cfg.Jobs))
	firstStep := make([]time.Time, len(cfg.Jobs))
	done := 0
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for done < len(cfg.Jobs) {
		select {
		case <-ctx.Done():
			return run, fmt.Errorf("demo: %d of %d jobs completed: %w", done, len(cfg.Jobs), ctx.Err())
		case err := <-agentDone:
			return run, fmt.Errorf("demo: controller stopped: %v", err)
		case now := <-tick.C:
			for next < len(cfg.Jobs) && emulated(now) >= cfg.Jobs[next].Time {
				id, err := submit(ctx, cfg, prefix, runID, cfg.Jobs[next])
				if err != nil {
					return run, err
				}
				ids[next], submitted[next] = id, now
				log.Info("submitted", "job", cfg.Jobs[next].Name, "nomad_job", id, "emulated_time", cfg.Jobs[next].Time)
				next++
			}
			for i := range next {
				if !completed[i].IsZero() {
					continue
				}
				if cfg.Measured != nil && firstStep[i].IsZero() {
					if at, ok := restartAt(ctx, cfg.Consul, prefix, cfg.namespace(), ids[i]); ok {
						firstStep[i] = at
					}
				}
				cp, ok := checkpoint(ctx, cfg.Consul, prefix, cfg.namespace(), ids[i])
				if ok && cp.Done {
					completed[i] = cp.CompletedAt
					if completed[i].IsZero() {
						completed[i] = now
					}
					done++
					log.Info("completed", "job", cfg.Jobs[i].Name, "jct_s", completed[i].Sub(submitted[i]).Seconds()*cfg.Speedup, "done", done, "of", len(cfg.Jobs))
				}
			}
		}
	}
	stopAgent()
	<-agentDone
	for i, j := range cfg.Jobs {
		res := results.JobResult{Name: j.Name, Application: j.Application, Submitted: j.Time, Completed: true,
			Completion: j.Time + completed[i].Sub(submitted[i]).Seconds()*cfg.Speedup}
		if raw, _, err := kv.Get(ctx, contract.StateKey(cfg.namespace(), ids[i])); err == nil {
			var st jobs.State
			if json.Unmarshal(raw, &st) == nil {
				res.Restarts = st.Restarts
				if cfg.Measured != nil && !firstStep[i].IsZero() {
					if cfg.Measured.StartLatencies == nil {
						cfg.Measured.StartLatencies = map[string]float64{}
					}
					cfg.Measured.StartLatencies[j.Name] = max(firstStep[i].Sub(submitted[i]).Seconds(), 0) * cfg.Speedup
				}
				if cfg.Measured != nil && len(st.RestartSamples) > 0 {
					if cfg.Measured.RestartTimes == nil {
						cfg.Measured.RestartTimes = map[string]float64{}
					}
					cfg.Measured.RestartTimes[j.Name] = results.Quantile(st.RestartSamples, 0.5) * cfg.Speedup
				}
				res.GPUSeconds = st.AttainedService * cfg.Speedup
				if st.Decision != nil {
					res.FinalBatchSize = st.Decision.BatchSize
				}
			}
		}
		run.Jobs = append(run.Jobs, res)
	}
	sort.SliceStable(run.Timeline, func(a, b int) bool { return run.Timeline[a].Time < run.Timeline[b].Time })
	if cfg.Measured != nil && len(run.Timeline) > 1 {
		var gaps []float64
		for i := 1; i < len(run.Timeline); i++ {
			gaps = append(gaps, run.Timeline[i].Time-run.Timeline[i-1].Time)
		}
		cfg.Measured.RoundInterval = results.Quantile(gaps, 0.5)
	}
	run.Wall = time.Since(start)
	return run, nil
}

// submit registers one workload job as a Nomad batch job running an
// emulated trainer on one GPU; the controller reshapes it from there.
func submit(ctx context.Context, cfg Config, prefix, runID string, w workload.Job) (string, error) {
	job, err := buildJob(cfg, prefix, runID, w)
	if err != nil {
		return "", err
	}
	if _, _, err := cfg.Nomad.Jobs().Register(job, (&nomadapi.WriteOptions{}).WithContext(ctx)); err != nil {
		return "", fmt.Errorf("demo: failed to submit %s: %w", w.Name, err)
	}
	return *job.ID, nil
}

// buildJob returns the Nomad job of one workload job, in the demo's
// namespace.
func buildJob(cfg Config, prefix, runID string, w workload.Job) (*nomadapi.Job, error) {
	app := cfg.Apps[w.Application]
	if app == nil {
		return nil, fmt.Errorf("demo: job %s: unknown application %q", w.Name, w.Application)
	}
	id := "loop-" + runID + "-" + w.Name
	meta := map[string]string{
		"pollux_enabled":         "true",
		"pollux_init_batch_size": fmt.Sprint(app.InitBatchSize),
		"pollux_init_lr":         "0.1",
		"pollux_max_batch_size":  fmt.Sprint(app.MaxBatchSize),
		"pollux_local_bsz_min":   fmt.Sprint(app.MinLocalBsz),
		"pollux_local_bsz_max":   fmt.Sprint(app.MaxLocalBsz),
	}
	meta["pollux_app"] = app.Name
	traits, err := registry.TraitsOf(cmp.Or(cfg.Policy, "pollux"))
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	if traits.Replicas == registry.RequestedReplicas {
		// The trace's fixed GPU count.
		meta["pollux_min_gpus"], meta["pollux_max_gpus"] = fmt.Sprint(w.NumReplicas), fmt.Sprint(w.NumReplicas)
	}
	switch {
	case !traits.AdaptiveBatch:
		// The trace's batch size.
		meta["pollux_init_batch_size"] = fmt.Sprint(w.BatchSize)
		if app.Name == "ncf" && traits.Replicas != registry.RequestedReplicas {
			meta["pollux_max_gpus"] = "1"
		}
	case app.Name == "ncf":
		// As the artifact's simulator: NCF at M = 32768 on one GPU.
		meta["pollux_init_batch_size"], meta["pollux_max_batch_size"], meta["pollux_max_gpus"] = "32768", "32768", "1"
	}
	job := nomadapi.NewBatchJob(id, id, "global", 50)
	ns := cfg.namespace()
	job.Namespace = &ns
	job.Datacenters = []string{"*"}
	job.Meta = meta
	task := nomadapi.NewTask("train", "raw_exec").
		SetConfig("command", cfg.Binary).
		SetConfig("args", []string{"emulate", "-app", app.Name, "-speedup", fmt.Sprint(cfg.Speedup), "-kv-prefix", prefix, "-report-interval", "1s"})
	task.Env = map[string]string{"CONSUL_HTTP_ADDR": os.Getenv("CONSUL_HTTP_ADDR")}
	one := uint64(1)
	cpu, mem := 20, 32
	task.Resources = &nomadapi.Resources{CPU: &cpu, MemoryMB: &mem, Devices: []*nomadapi.RequestedDevice{{Name: cfg.Device, Count: &one}}}
	tg := nomadapi.NewTaskGroup("workers", 1).AddTask(task)
	zero, fail, no := 0, "fail", false
	tg.RestartPolicy = &nomadapi.RestartPolicy{Attempts: &zero, Mode: &fail}
	tg.ReschedulePolicy = &nomadapi.ReschedulePolicy{Attempts: &zero, Unlimited: &no}
	disk := 150
	tg.EphemeralDisk = &nomadapi.EphemeralDisk{SizeMB: &disk}
	job.AddTaskGroup(tg)
	return job, nil
}

func checkpoint(ctx context.Context, c *consulapi.Client, prefix, namespace, id string) (emulate.Checkpoint, bool) {
	var cp emulate.Checkpoint
	pair, _, err := c.KV().Get(prefix+contract.CheckpointKey(namespace, id), (&consulapi.QueryOptions{}).WithContext(ctx))
	if err != nil || pair == nil {
		return cp, false
	}
	return cp, json.Unmarshal(pair.Value, &cp) == nil
}

// restartAt returns the restart object's first-step time of a loop job's
// metrics document, if it has one.
func restartAt(ctx context.Context, c *consulapi.Client, prefix, namespace, id string) (time.Time, bool) {
	pair, _, err := c.KV().Get(prefix+contract.MetricsKey(namespace, id), (&consulapi.QueryOptions{}).WithContext(ctx))
	if err != nil || pair == nil {
		return time.Time{}, false
	}
	d, err := contract.ParseMetrics(pair.Value)
	if err != nil || d.Restart == nil {
		return time.Time{}, false
	}
	return d.Restart.At, true
}

// oracleFor gives Optimus the true remaining iterations and step time of a
// loop job, from its application's profile and its worker's checkpoint
// (the artifact's Optimus+Oracle reads the same from its traces).
func oracleFor(ctx context.Context, cfg Config, prefix string) func(jobs.Job, jobs.Spec) policy.Oracle {
	return func(j jobs.Job, spec jobs.Spec) policy.Oracle {
		app := cfg.Apps[j.Meta["pollux_app"]]
		if app == nil {
			return nil
		}
		cp, _ := checkpoint(ctx, cfg.Consul, prefix, j.Namespace, j.ID)
		return profileOracle{app: app, batch: spec.InitBatchSize, epoch: min(cp.Epoch, app.CompletionEpoch())}
	}
}

// profileOracle answers from an application's measured profile.
type profileOracle struct {
	app   *apps.Application
	batch int
	epoch int
}

// RemainingIterations is the optimizer steps left at the fixed batch size.
func (o profileOracle) RemainingIterations() float64 {
	ce := o.app.CompletionEpoch()
	if ce <= o.epoch {
		return 1
	}
	return o.app.Iteration(float64(o.batch), ce) - o.app.Iteration(float64(o.batch), o.epoch)
}

// StepTime is the measured time of one optimizer step on k GPUs packed
// four to a node (simulator/optimus.py, predict_step_time).
func (o profileOracle) StepTime(k int) float64 {
	var placement []int
	for left := k; left > 0; left -= 4 {
		placement = append(placement, min(left, 4))
	}
	local := (o.batch + k - 1) / k
	accum := (local+o.app.MaxLocalBsz-1)/o.app.MaxLocalBsz - 1
	if k == 1 {
		accum = max(1, accum)
	}
	atomic := (local + accum) / (accum + 1)
	atomic = max(min(atomic, o.app.MaxBatchSize/(k*(accum+1))), 1)
	step, sync, err := o.app.Throughput(placement, atomic)
	if err != nil {
		return math.Inf(1)
	}
	return step + (step-sync)*float64(accum)
}
