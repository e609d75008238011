package report

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/pollux-nomad/pollux/consul"
	"github.com/pollux-nomad/pollux/contract"
)

// Defaults of Config.
const (
	// DefaultPrefix is the KV prefix of docs/contracts.md §2.
	DefaultPrefix = contract.DefaultPrefix
	// DefaultNamespace is Nomad's default namespace, used when neither
	// Config.Namespace nor NOMAD_NAMESPACE is set.
	DefaultNamespace = "default"
	// DefaultMinInterval is the smallest time between two background
	// writes.
	DefaultMinInterval = 30 * time.Second
	// DefaultDecisionWait is the longest a Consul blocking query on the
	// decision key waits before it asks again.
	DefaultDecisionWait = time.Minute
)

// Environment variables that Nomad sets for a task and that Config's
// defaults read.
const (
	// EnvNamespace is the job's namespace, the default of
	// Config.Namespace.
	EnvNamespace = "NOMAD_NAMESPACE"
	// EnvJobID is the job's ID, the default of Config.JobID.
	EnvJobID = "NOMAD_JOB_ID"
	// EnvRank is the task group's rank, which the Nomad adapter puts in
	// each group's meta: the default of Config.Rank.
	EnvRank = "NOMAD_META_pollux_rank"
	// EnvInitBatchSize is the job's initial batch size M0, the default of
	// Config.InitBatchSize.
	EnvInitBatchSize = "NOMAD_META_" + contract.MetaInitBatchSize
	// EnvGPUType is the GPU type the job author tells the worker
	// (POLLUX_GPU_TYPE, for example "${meta.gpu_type}" in the task's env
	// block), the first default of Config.GPUType.
	EnvGPUType = contract.EnvGPUType
	// EnvControllerGPUType is the GPU type of the allocation the
	// controller applied (its pollux_gpu_type meta key), the second
	// default of Config.GPUType.
	EnvControllerGPUType = "NOMAD_META_" + contract.MetaGPUType
)

// maxCASAttempts bounds the check-and-set attempts of one write.
const maxCASAttempts = 32

// ErrNotReady reports a write that could not be made yet: there is no
// profile entry (call Observe) or no batch size (call Progress or set
// Config.InitBatchSize). Nothing is lost; the background writer tries
// again after the next observation.
var ErrNotReady = errors.New("nothing to write yet")

// Config configures a Reporter. Only Consul is required; every other field
// has a default.
type Config struct {
	// Consul is the Consul API client (api.NewClient(api.DefaultConfig())
	// honours CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN and the TLS variables).
	Consul *api.Client
	// Prefix is the KV prefix. Default "pollux/".
	Prefix string
	// Namespace is the job's Nomad namespace. Default: NOMAD_NAMESPACE,
	// else "default".
	Namespace string
	// JobID is the job's Nomad ID. Default: NOMAD_JOB_ID; New fails if
	// neither is set.
	JobID string
	// Rank is this worker's rank; only rank 0 writes the metrics document.
	// Default (0): NOMAD_META_pollux_rank if it is set, else 0.
	Rank int
	// InitBatchSize is the batch size reported until the first Progress
	// call, when the stored document has none either. Default:
	// NOMAD_META_pollux_init_batch_size, else none.
	InitBatchSize int
	// MinInterval is the smallest time between two writes of the
	// background writer. Default 30s.
	MinInterval time.Duration
	// DecisionWait is the longest one blocking query of Decisions waits
	// before it asks again. Default 1m.
	DecisionWait time.Duration
	// Logger receives the reporter's logs, under the name "report".
	// Default: no logging.
	Logger hclog.Logger
	// Now returns the time written as the document's timestamp. Default
	// time.Now.
	Now func() time.Time
	// GPUType is the GPU type the worker runs on, written as the gpu_type
	// of the profile entries of steps observed without one
	// (docs/contracts.md §3). Default: POLLUX_GPU_TYPE, else
	// NOMAD_META_pollux_gpu_type, else none (the controller then counts
	// the entries for the type of the nodes the job runs on).
	GPUType string
}

// withDefaults returns c with its defaults filled in from the
// environment, or an error naming every field that is wrong.
func (c Config) withDefaults() (Config, error) {
	var errs []error
	if c.Consul == nil {
		errs = append(errs, errors.New("Consul: required"))
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Namespace == "" {
		c.Namespace = os.Getenv(EnvNamespace)
	}
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if c.JobID == "" {
		c.JobID = os.Getenv(EnvJobID)
	}
	if c.JobID == "" {
		errs = append(errs, fmt.Errorf("JobID: required (set it or %s)", EnvJobID))
	}
	if c.Rank == 0 {
		if raw, ok := os.LookupEnv(EnvRank); ok {
			r, err := strconv.Atoi(strings.TrimSpace(raw))
			if err != nil || r < 0 {
				errs = append(errs, fmt.Errorf("%s: must be a non-negative integer, got %q", EnvRank, raw))
			}
			c.Rank = r
		}
	}
	if c.Rank < 0 {
		errs = append(errs, fmt.Errorf("Rank: must be at least 0, got %d", c.Rank))
	}
	if c.InitBatchSize == 0 {
		if raw, ok := os.LookupEnv(EnvInitBatchSize); ok {
			m, err := strconv.Atoi(strings.TrimSpace(raw))
			if err != nil || m < 1 {
				errs = append(errs, fmt.Errorf("%s: must be a positive integer, got %q", EnvInitBatchSize, raw))
			}
			c.InitBatchSize = m
		}
	}
	if c.InitBatchSize < 0 {
		errs = append(errs, fmt.Errorf("InitBatchSize: must be at least 0, got %d", c.InitBatchSize))
	}
	if c.MinInterval == 0 {
		c.MinInterval = DefaultMinInterval
	}
	if c.MinInterval < 0 {
		errs = append(errs, fmt.Errorf("MinInterval: must be positive, got %v", c.MinInterval))
	}
	if c.DecisionWait == 0 {
		c.DecisionWait = DefaultDecisionWait
	}
	if c.DecisionWait < 0 {
		errs = append(errs, fmt.Errorf("DecisionWait: must be positive, got %v", c.DecisionWait))
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.GPUType == "" {
		c.GPUType = strings.TrimSpace(os.Getenv(EnvGPUType))
		name := EnvGPUType
		if c.GPUType == "" {
			c.GPUType, name = strings.TrimSpace(os.Getenv(EnvControllerGPUType)), EnvControllerGPUType
		}
		if c.GPUType != "" {
			if err := contract.ValidGPUType(c.GPUType); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
	} else if err := contract.ValidGPUType(c.GPUType); err != nil {
		errs = append(errs, fmt.Errorf("GPUType: %w", err))
	}
	return c, errors.Join(errs...)
}

// StepConfig is the configuration a step ran with: the key of a profile
// entry (docs/contracts.md §3).
type StepConfig struct {
	// NumNodes is the number of nodes (at least 1).
	NumNodes int
	// NumReplicas is the number of GPUs (at least NumNodes).
	NumReplicas int
	// LocalBsz is the per-GPU micro-batch (at least 1).
	LocalBsz int
	// AccumSteps is the number of gradient-accumulation steps per
	// optimizer step (at least 0).
	AccumSteps int
	// GPUType is the GPU type the step ran on (optional, see
	// contract.ValidGPUType); Observe fills in Config.GPUType when empty.
	GPUType string
}

func (s StepConfig) validate() error {
	var errs []error
	if s.NumNodes < 1 {
		errs = append(errs, fmt.Errorf("num_nodes: must be at least 1, got %d", s.NumNodes))
	}
	if s.NumReplicas < max(s.NumNodes, 1) {
		errs = append(errs, fmt.Errorf("num_replicas: must be at least num_nodes and 1, got %d", s.NumReplicas))
	}
	if s.LocalBsz < 1 {
		errs = append(errs, fmt.Errorf("local_bsz: must be at least 1, got %d", s.LocalBsz))
	}
	if s.AccumSteps < 0 {
		errs = append(errs, fmt.Errorf("accum_steps: must be at least 0, got %d", s.AccumSteps))
	}
	if s.GPUType != "" {
		if err := contract.ValidGPUType(s.GPUType); err != nil {
			errs = append(errs, fmt.Errorf("gpu_type: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Reporter accumulates one worker's observations and writes the job's
// metrics document. It is safe for concurrent use.
type Reporter struct {
	cfg   Config
	kv    *api.KV
	watch *consul.Client
	key   string // full KV key of the metrics document
	dkey  string // decision key, relative to the prefix
	log   hclog.Logger

	mu      sync.Mutex
	acc     accumulator
	changed chan struct{} // signalled (capacity 1) when something is observed

	writeMu sync.Mutex // serialises writes; guards last and unsure
	last    *lastWrite // what the last successful write stored
	unsure  *attempt   // a check-and-set whose outcome is unknown

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

// New returns a Reporter for the job that cfg names. For rank 0 it starts
// the background writer, which runs until ctx is done or Close is called
// and writes at most once per MinInterval when something new was
// observed. New does not contact Consul.
func New(ctx context.Context, cfg Config) (*Reporter, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("failed to create reporter: %w", err)
	}
	log := cfg.Logger.Named("report").With("namespace", cfg.Namespace, "job_id", cfg.JobID, "rank", cfg.Rank)
	watch, err := consul.New(cfg.Consul, consul.Config{Prefix: cfg.Prefix, Logger: log, Instance: "report"})
	if err != nil {
		return nil, fmt.Errorf("failed to create reporter: %w", err)
	}
	r := &Reporter{
		cfg:     cfg,
		kv:      cfg.Consul.KV(),
		watch:   watch,
		key:     cfg.Prefix + contract.MetricsKey(cfg.Namespace, cfg.JobID),
		dkey:    contract.DecisionKey(cfg.Namespace, cfg.JobID),
		log:     log,
		acc:     newAccumulator(),
		changed: make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	if cfg.Rank == 0 {
		go r.loop(ctx)
	} else {
		close(r.done)
	}
	return r, nil
}

// GPUType returns the GPU type the reporter writes for steps observed
// without one (Config.GPUType, or its default from the environment).
func (r *Reporter) GPUType() string { return r.cfg.GPUType }

// Key returns the Consul key of the job's metrics document.
func (r *Reporter) Key() string { return r.key }

// Observe records one optimizer step run with configuration cfg: the mean
// seconds of a micro-batch forward and backward pass without
// synchronisation (computeTime, positive), the seconds of the whole
// synchronising optimizer step (stepTime, positive) and the seconds
// blocked in all-reduce (syncTime, at least 0). A value that is not
// finite, or out of range, is rejected with an error naming it and
// changes nothing.
func (r *Reporter) Observe(cfg StepConfig, computeTime, stepTime, syncTime float64) error {
	if cfg.GPUType == "" {
		cfg.GPUType = r.cfg.GPUType
	}
	errs := []error{cfg.validate()}
	errs = append(errs, positive("computeTime", computeTime), positive("stepTime", stepTime),
		nonNegative("syncTime", syncTime))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("failed to observe step: %w", err)
	}
	r.mu.Lock()
	r.acc.observe(cfg, stats{count: 1, compute: clean(computeTime), step: clean(stepTime), sync: clean(syncTime)})
	r.mu.Unlock()
	r.signal()
	return nil
}

// ObserveGradients records the latest smoothed gradient statistics
// (docs/contracts.md §3, pollux-reference.md §2): gradSqr estimates |g|² and
// gradVar the variance of a batch gradient at the initial batch size. Both
// must be finite and at least 0; a rejected call changes nothing.
func (r *Reporter) ObserveGradients(gradSqr, gradVar float64) error {
	if err := errors.Join(nonNegative("gradSqr", gradSqr), nonNegative("gradVar", gradVar)); err != nil {
		return fmt.Errorf("failed to observe gradients: %w", err)
	}
	r.mu.Lock()
	r.acc.grad = &[2]float64{clean(gradSqr), clean(gradVar)}
	r.acc.dirty = true
	r.mu.Unlock()
	r.signal()
	return nil
}

// Progress records the statistical progress so far (examples at
// M0-equivalent, finite and at least 0) and the total batch size the job
// now trains with (at least 1). A rejected call changes nothing.
func (r *Reporter) Progress(progress float64, batchSize int) error {
	var errs []error
	errs = append(errs, nonNegative("progress", progress))
	if batchSize < 1 {
		errs = append(errs, fmt.Errorf("batchSize: must be at least 1, got %d", batchSize))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("failed to record progress: %w", err)
	}
	r.mu.Lock()
	p := clean(progress)
	r.acc.progress = &p
	r.acc.batchSize = batchSize
	r.acc.dirty = true
	r.mu.Unlock()
	r.signal()
	return nil
}

// Restarted records how long this worker's start took: restoreTime
// seconds from its process start to its first training step (start-up,
// rendezvous, checkpoint restore; finite, in [0, 86400]), that step
// beginning at at. It becomes the document's restart object
// (docs/contracts.md §3), which the controller uses to measure the job's
// restart time; call it once, when the first step after a restore begins.
// A rejected call changes nothing.
func (r *Reporter) Restarted(restoreTime float64, at time.Time) error {
	rs := &contract.Restart{RestoreTime: clean(restoreTime), At: at.UTC()}
	if err := rs.Validate(); err != nil {
		return fmt.Errorf("failed to record the restart: %w", err)
	}
	r.mu.Lock()
	r.acc.restart = rs
	r.acc.dirty = true
	r.mu.Unlock()
	r.signal()
	return nil
}

func (r *Reporter) signal() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// positive returns an error naming name unless x is finite and positive.
func positive(name string, x float64) error {
	if !(x > 0) || math.IsInf(x, 1) {
		return fmt.Errorf("%s: must be finite and positive, got %v", name, x)
	}
	return nil
}

// nonNegative returns an error naming name unless x is finite and at
// least 0.
func nonNegative(name string, x float64) error {
	if !(x >= 0) || math.IsInf(x, 1) {
		return fmt.Errorf("%s: must be finite and at least 0, got %v", name, x)
	}
	return nil
}

// clean turns a negative zero into zero, which the canonical encoding
// writes as 0.
func clean(x float64) float64 {
	if x == 0 {
		return 0
	}
	return x
}

// Flush writes the metrics document now, merged with the stored one (see
// the package documentation). On rank other than 0 it does nothing. It
// returns an error wrapping ErrNotReady if there is nothing to write yet,
// and an error if Consul cannot be reached or the write keeps conflicting;
// the observations are then kept for the next write.
func (r *Reporter) Flush(ctx context.Context) error {
	if r.cfg.Rank != 0 {
		return nil
	}
	return r.write(ctx)
}

// Close stops the background writer, waits for it, and writes what is
// left with Flush(ctx). Observations made after Close are kept and
// written by later Flush calls.
func (r *Reporter) Close(ctx context.Context) error {
	r.stopOnce.Do(func() { close(r.stop) })
	select {
	case <-r.done:
	case <-ctx.Done():
		return fmt.Errorf("failed to close reporter: %w", ctx.Err())
	}
	if !r.dirty() {
		return nil
	}
	if err := r.Flush(ctx); err != nil && !errors.Is(err, ErrNotReady) {
		return fmt.Errorf("failed to close reporter: %w", err)
	}
	return nil
}

func (r *Reporter) dirty() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.acc.dirty
}

// loop is the background writer: it waits for an observation, writes
// (merged) at most once per MinInterval, and retries failed writes with
// exponential backoff from min(1s, MinInterval) up to MinInterval.
func (r *Reporter) loop(ctx context.Context) {
	defer close(r.done)
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-r.stop:
			return false
		case <-t.C:
			return true
		}
	}
	retry := min(time.Second, r.cfg.MinInterval)
	backoff := retry
	for {
		// Sleep MinInterval since the last write, then until there is
		// something to write.
		if !wait(r.cfg.MinInterval) {
			return
		}
		for !r.dirty() {
			select {
			case <-ctx.Done():
				return
			case <-r.stop:
				return
			case <-r.changed:
			}
		}
		for {
			err := r.write(ctx)
			if err == nil || errors.Is(err, ErrNotReady) {
				if err != nil {
					r.log.Debug("nothing to write yet", "error", err)
				}
				backoff = retry
				break
			}
			if ctx.Err() != nil {
				return
			}
			r.log.Warn("failed to write metrics, will retry", "key", r.key, "retry_in", backoff, "error", err)
			if !wait(backoff) {
				return
			}
			backoff = min(2*backoff, r.cfg.MinInterval)
		}
	}
}
