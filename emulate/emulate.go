// Package emulate is an emulated training job: a real process, run by
// Nomad as a task of a Pollux-tagged job, that trains one of the six
// profiled applications at the speed the measured profile gives for its
// placement and batch size (the same dynamics as the simulator, package
// sim), reports real metrics through package report, checkpoints its
// progress to Consul KV so that a restart after a reallocation resumes
// where it left off, and returns when the application reaches its
// completion point.
package emulate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/pollux-nomad/pollux/apps"
	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/worker/go/report"
)

// Checkpoint is the training state kept at
// <prefix>jobs/<namespace>/<job-id>/checkpoint.
type Checkpoint struct {
	// Progress is the statistical progress (scale-invariant iterations,
	// as the artifact counts them) and Epoch the epochs completed.
	Progress float64 `json:"progress"`
	Epoch    int     `json:"epoch"`
	// Done is set when the application reached its completion point.
	Done bool `json:"done"`
	// Starts counts the worker's incarnations; ResumedFrom is the progress
	// the latest one found in the checkpoint (0 for a fresh start).
	Starts      int     `json:"starts"`
	ResumedFrom float64 `json:"resumed_from"`
	// SimSeconds is the training time so far in emulated seconds.
	SimSeconds float64 `json:"sim_seconds"`
	// CompletedAt is the wall-clock time training completed.
	CompletedAt time.Time `json:"completed_at,omitzero"`
}

// Config configures one emulated worker.
type Config struct {
	App *apps.Application
	// Speedup is emulated seconds per real second (default 1).
	Speedup float64
	// Tick is the real time between two training updates (default 100ms).
	Tick time.Duration
	// Consul, Prefix, Namespace and JobID locate the checkpoint key.
	Consul                *consulapi.Client
	Prefix, Namespace, ID string
	// Rank is this worker's rank; only rank 0 trains and reports, the
	// others wait for the checkpoint to say done.
	Rank int
	// Reporter reports metrics (rank 0).
	Reporter *report.Reporter
	// GPUType is the GPU type the worker runs on (logged; the reporter
	// writes it into the profile entries) and GPUSpeed its per-GPU speed
	// relative to the profiles' (default 1): compute time is divided by it.
	GPUType  string
	GPUSpeed float64
	Logger   hclog.Logger
}

// Run trains until completion (nil), or until ctx ends (its error).
func Run(ctx context.Context, cfg Config) error {
	if cfg.App == nil || cfg.Consul == nil || cfg.ID == "" {
		return errors.New("emulate: application, consul client and job ID are required")
	}
	if cfg.Speedup <= 0 {
		cfg.Speedup = 1
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.GPUSpeed <= 0 {
		cfg.GPUSpeed = 1
	}
	started := time.Now() // about the process start: Run is called first thing
	log := cfg.Logger.Named("emulate").With("app", cfg.App.Name, "rank", cfg.Rank, "gpu_type", cfg.GPUType)
	key := cfg.Prefix + contract.CheckpointKey(cfg.Namespace, cfg.ID)
	kv := cfg.Consul.KV()
	if cfg.Rank != 0 {
		return waitDone(ctx, kv, key, log)
	}
	if cfg.Reporter == nil {
		return errors.New("emulate: rank 0 needs a reporter")
	}
	cp, err := readCheckpoint(ctx, kv, key)
	if err != nil {
		return err
	}
	if cp.Done {
		log.Info("training already complete")
		return nil
	}
	cp.Starts++
	cp.ResumedFrom = cp.Progress
	log.Info("starting", "resumed_from", cp.Progress, "epoch", cp.Epoch, "start", cp.Starts)

	alloc, err := cfg.Reporter.Allocation()
	if err != nil {
		return err
	}
	shape, err := newShape(cfg.App, alloc)
	if err != nil {
		return err
	}
	shape.speed = cfg.GPUSpeed
	decisions := cfg.Reporter.Decisions(ctx)
	tick := time.NewTicker(cfg.Tick)
	defer tick.Stop()
	last := time.Now()
	lastSave := time.Time{}
	// Training starts now: report how long the start and the checkpoint
	// restore took (the controller measures the job's restart time from
	// it).
	if err := cfg.Reporter.Restarted(last.Sub(started).Seconds(), last); err != nil {
		log.Warn("failed to record the restart", "error", err)
	}
	for {
		select {
		case <-ctx.Done():
			_ = saveCheckpoint(context.Background(), kv, key, cp)
			return ctx.Err()
		case d := <-decisions:
			// Adopt a new batch configuration for the same placement
			// without a restart.
			if d.Placement == shape.placementString && d.LocalBsz > 0 {
				shape.localBsz, shape.accumSteps = d.LocalBsz, d.AccumSteps
				log.Info("adopted decision", "batch_size", d.BatchSize, "local_bsz", d.LocalBsz, "accum_steps", d.AccumSteps)
			}
			continue
		case now := <-tick.C:
			dt := now.Sub(last).Seconds() * cfg.Speedup
			last = now
			done, err := shape.advance(cfg.Reporter, &cp, dt)
			if err != nil {
				return err
			}
			if done {
				cp.Done = true
				cp.CompletedAt = now.UTC()
				if err := saveCheckpoint(ctx, kv, key, cp); err != nil {
					return err
				}
				if err := cfg.Reporter.Close(ctx); err != nil {
					log.Warn("failed to write the last metrics", "error", err)
				}
				log.Info("training complete", "epochs", cp.Epoch, "emulated_seconds", cp.SimSeconds)
				return nil
			}
			if now.Sub(lastSave) > time.Second {
				if err := saveCheckpoint(ctx, kv, key, cp); err != nil {
					log.Warn("failed to checkpoint", "error", err)
				} else {
					lastSave = now
				}
			}
		}
	}
}

// shape is the worker's current configuration.
type shape struct {
	app             *apps.Application
	placement       []int
	placementString string
	localBsz        int
	accumSteps      int
	// speed divides the profile's compute time (the GPU type's speed).
	speed float64
}

// newShape reads the allocation the worker was started with; a job that
// the controller has not shaped yet runs on one GPU at M0.
func newShape(app *apps.Application, a report.Allocation) (*shape, error) {
	s := &shape{app: app, placementString: a.Placement, localBsz: a.LocalBsz, accumSteps: a.AccumSteps}
	for _, part := range strings.Split(a.Placement, ",") {
		if part == "" {
			continue
		}
		i := strings.LastIndexByte(part, ':')
		g, err := strconv.Atoi(part[i+1:])
		if i < 0 || err != nil || g < 1 {
			return nil, fmt.Errorf("emulate: bad placement %q", a.Placement)
		}
		s.placement = append(s.placement, g)
	}
	if len(s.placement) == 0 {
		s.placement = []int{1}
	}
	if s.localBsz == 0 {
		k := s.replicas()
		local := (app.InitBatchSize + k - 1) / k
		s.accumSteps = (local+app.MaxLocalBsz-1)/app.MaxLocalBsz - 1
		s.localBsz = max((local+s.accumSteps)/(s.accumSteps+1), app.MinLocalBsz)
	}
	return s, nil
}

func (s *shape) replicas() int {
	k := 0
	for _, g := range s.placement {
		k += g
	}
	return k
}

// advance trains for dt emulated seconds, as the simulator's job.step
// does, and reports what a real worker would measure.
func (s *shape) advance(r *report.Reporter, cp *Checkpoint, dt float64) (bool, error) {
	app := s.app
	k := s.replicas()
	local := min(max(s.localBsz, app.MinLocalBsz), app.MaxLocalBsz)
	step, sync, err := app.Throughput(s.placement, local)
	if err != nil {
		return false, fmt.Errorf("emulate: no profile for placement %v at local batch %d: %w", s.placement, local, err)
	}
	if s.speed > 0 && s.speed != 1 {
		step = sync + (step-sync)/s.speed // a faster GPU computes faster; the network is the same
	}
	batch := local * k * (s.accumSteps + 1)
	batch = min(max(batch, app.InitBatchSize), app.MaxBatchSize)
	sqr, variance := app.GradStats(float64(batch), min(cp.Epoch, app.MaxEpochs-1))
	scale := float64(batch) / float64(app.InitBatchSize)
	gain := (variance + sqr) / (variance/scale + sqr)
	total := step + (step-sync)*float64(s.accumSteps)
	goodput := gain / total
	cp.SimSeconds += dt
	cp.Progress += goodput * dt
	for cp.Progress >= app.Progress(cp.Epoch+1) {
		cp.Epoch++
		if cp.Epoch > app.CompletionEpoch() {
			return true, nil
		}
	}
	cfg := report.StepConfig{NumNodes: len(s.placement), NumReplicas: k, LocalBsz: local, AccumSteps: s.accumSteps}
	if err := r.Observe(cfg, step-sync, step, sync); err != nil {
		return false, err
	}
	if err := r.ObserveGradients(sqr, variance); err != nil {
		return false, err
	}
	return false, r.Progress(cp.Progress, batch)
}

func readCheckpoint(ctx context.Context, kv *consulapi.KV, key string) (Checkpoint, error) {
	var cp Checkpoint
	pair, _, err := kv.Get(key, (&consulapi.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return cp, fmt.Errorf("emulate: failed to read checkpoint %s: %w", key, err)
	}
	if pair != nil {
		if err := json.Unmarshal(pair.Value, &cp); err != nil {
			return cp, fmt.Errorf("emulate: failed to parse checkpoint %s: %w", key, err)
		}
	}
	return cp, nil
}

func saveCheckpoint(ctx context.Context, kv *consulapi.KV, key string, cp Checkpoint) error {
	raw, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	_, err = kv.Put(&consulapi.KVPair{Key: key, Value: raw}, (&consulapi.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("emulate: failed to write checkpoint %s: %w", key, err)
	}
	return nil
}

// waitDone blocks (Consul blocking queries) until the checkpoint says the
// training is complete.
func waitDone(ctx context.Context, kv *consulapi.KV, key string, log hclog.Logger) error {
	var index uint64
	for {
		q := (&consulapi.QueryOptions{WaitIndex: index, WaitTime: time.Minute}).WithContext(ctx)
		pair, meta, err := kv.Get(key, q)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			log.Warn("failed to watch checkpoint", "error", err)
			time.Sleep(time.Second)
			continue
		}
		if pair != nil {
			var cp Checkpoint
			if json.Unmarshal(pair.Value, &cp) == nil && cp.Done {
				return nil
			}
		}
		if meta.LastIndex < index {
			index = 0
		} else {
			index = meta.LastIndex
		}
	}
}
