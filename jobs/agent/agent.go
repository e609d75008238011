// Package agent is the long-running pollux agent around the controller
// (package jobs): it follows the configuration in Consul, watches Nomad
// for new Pollux jobs, competes for leadership and, while it leads, runs
// the controller's rounds every interval, stopping them the moment the
// term or its lease ends.
package agent

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sync/errgroup"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
)

// Options wire the long-running agent.
type Options struct {
	Controller *jobs.Controller
	Leadership jobs.Leadership
	KV         jobs.KV
	Logger     hclog.Logger
	// Base is the configuration from defaults and the -config file; the
	// KV document is merged over it.
	Base jobs.Config
	// Telemetry records leadership (may be nil).
	Telemetry *jobs.Telemetry
	// OnRound is called after each round (may be nil), for tests.
	OnRound func(*jobs.Status)
	// OnConfig is called after each configuration document from Consul
	// is handled (may be nil), for tests: with the configuration it
	// loaded, or the error that made it keep the last good one.
	OnConfig func(jobs.Config, error)
	// Clock times the rounds and the retries (default the wall clock).
	Clock Clock
}

// Clock is the agent's time source.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives the time once d has passed.
	After(d time.Duration) <-chan time.Time
}

// wallClock is the real clock.
type wallClock struct{}

func (wallClock) Now() time.Time                         { return time.Now() }
func (wallClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Run runs until ctx ends: it watches the configuration in Consul,
// competes for leadership, and while it leads runs a round every
// interval. Rounds stop the moment leadership is lost: the round's context
// is cancelled, so no write of a former leader overlaps the new leader's.
func Run(ctx context.Context, o Options) error {
	log := o.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	log = log.Named("agent")
	if o.Clock == nil {
		o.Clock = wallClock{}
	}
	g, ctx := errgroup.WithContext(ctx)
	wake := make(chan struct{}, 1)
	g.Go(func() error { watchConfig(ctx, o, log); return nil })
	g.Go(func() error { watchJobs(ctx, o.Controller.Cluster(), o.Clock, log, wake); return nil })
	g.Go(func() error { return lead(ctx, o, log, wake) })
	err := g.Wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// watchConfig follows <prefix>config with blocking queries; an invalid
// document keeps the last good configuration.
func watchConfig(ctx context.Context, o Options, log hclog.Logger) {
	var index uint64
	var last string
	retry := backoff{clock: o.Clock}
	for ctx.Err() == nil {
		raw, idx, err := o.KV.Watch(ctx, contract.ConfigKey, index, 5*time.Minute)
		if err != nil {
			retry.wait(ctx, log, "failed to watch configuration; retrying", err)
			continue
		}
		retry.reset()
		index = nextIndex(index, idx)
		if string(raw) == last {
			continue
		}
		last = string(raw)
		cfg := o.Base
		if raw != nil {
			merged, err := o.Base.MergeJSON(raw)
			if err != nil {
				log.Error("invalid configuration in consul; keeping the last good one", "error", err)
				o.configured(jobs.Config{}, err)
				continue
			}
			cfg = merged
		}
		if err := o.Controller.CheckConfig(ctx, cfg); err != nil {
			log.Error("invalid configuration; keeping the last good one", "error", err)
			o.configured(jobs.Config{}, err)
			continue
		}
		if err := o.Controller.SetConfig(cfg); err != nil {
			log.Error("invalid configuration; keeping the last good one", "error", err)
			o.configured(jobs.Config{}, err)
			continue
		}
		o.configured(cfg, nil)
		log.Info("configuration loaded", "interval", cfg.Interval, "fairness_p", fairnessLabel(cfg.FairnessP), "device", cfg.Device, "dry_run", cfg.DryRun)
	}
}

// watchJobs follows the Pollux-tagged jobs with Nomad blocking queries.
// A blocking list wakes on any job's change, so it diffs the set and
// signals wake when a job appears, to schedule it without waiting a whole
// interval.
func watchJobs(ctx context.Context, cluster jobs.Cluster, clock Clock, log hclog.Logger, wake chan<- struct{}) {
	var index uint64
	known := map[jobs.JobRef]bool{}
	retry := backoff{clock: clock}
	for ctx.Err() == nil {
		refs, idx, err := cluster.ListJobs(ctx, index, 5*time.Minute)
		if err != nil {
			retry.wait(ctx, log, "failed to watch jobs; retrying", err)
			continue
		}
		retry.reset()
		index = nextIndex(index, idx)
		now := map[jobs.JobRef]bool{}
		var added, gone []jobs.JobRef
		for _, r := range refs {
			now[r] = true
			if !known[r] {
				added = append(added, r)
			}
		}
		for r := range known {
			if !now[r] {
				gone = append(gone, r)
			}
		}
		logJobSet(log, "discovered pollux job", added)
		logJobSet(log, "pollux job gone", gone)
		known = now
		if len(added) > 0 {
			select {
			case wake <- struct{}{}:
			default:
			}
		}
		// Any job's change wakes the blocking list, and each answer lists
		// every job: at thousands of jobs, wait a little between lists.
		sleep(ctx, clock, watchGap)
	}
}

// watchGap is the least time between two lists of the job watcher.
const watchGap = 2 * time.Second

// logJobSet logs each job of refs, or past logJobsMax of them one line
// with the count and the first few (each job at debug level).
func logJobSet(log hclog.Logger, msg string, refs []jobs.JobRef) {
	if len(refs) <= logJobsMax {
		for _, r := range refs {
			log.Info(msg, "job_id", r.String())
		}
		return
	}
	first := make([]string, logJobsMax)
	for i := range first {
		first[i] = refs[i].String()
	}
	log.Info(msg+"s", "count", len(refs), "first", strings.Join(first, ","))
	for _, r := range refs {
		log.Debug(msg, "job_id", r.String())
	}
}

// logJobsMax is how many jobs of one kind a log line names one by one.
const logJobsMax = 10

// lead acquires leadership and runs rounds while holding it.
func lead(ctx context.Context, o Options, log hclog.Logger, wake <-chan struct{}) error {
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := o.Leadership.Release(rctx); err != nil {
			log.Warn("failed to release leadership", "error", err)
		}
	}()
	for ctx.Err() == nil {
		log.Info("waiting for leadership")
		lost, err := o.Leadership.Acquire(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			log.Warn("failed to acquire leadership; retrying", "error", err)
			sleep(ctx, o.Clock, 2*time.Second)
			continue
		}
		log.Info("acquired leadership")
		if o.Telemetry != nil {
			o.Telemetry.SetLeader(true)
		}
		o.Controller.TakeOver(ctx)
		leadTerm(ctx, o, log, wake, lost)
		if o.Telemetry != nil {
			o.Telemetry.SetLeader(false)
		}
		if ctx.Err() == nil {
			log.Warn("lost leadership")
		}
	}
	return nil
}

// leadTerm runs rounds until the term ends (lost is closed) or ctx ends.
// With a Leased leadership, rounds stop when the lease ends unrenewed; if
// a renewal then succeeds before the term ends (a slow answer of Consul),
// they resume in the same term.
func leadTerm(ctx context.Context, o Options, log hclog.Logger, wake <-chan struct{}, lost <-chan struct{}) {
	leased, hasLease := o.Leadership.(Leased)
	for ctx.Err() == nil {
		leadCtx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-lost:
				cancel()
			case <-leadCtx.Done():
			}
		}()
		if hasLease {
			go watchLease(leadCtx, leased, cancel, log)
		}
		runRounds(leadCtx, o, log, wake)
		cancel()
		if !hasLease || !awaitLease(ctx, o.Clock, leased, lost) {
			return
		}
		log.Info("leader lease renewed; resuming rounds")
	}
}

// awaitLease waits, after the lease ended, until it holds again (true) or
// the term or ctx ends (false).
func awaitLease(ctx context.Context, clock Clock, l Leased, lost <-chan struct{}) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-lost:
			return false
		default:
		}
		if end, ok := l.LeaseEnd(); !ok {
			return false
		} else if time.Now().Before(end) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-lost:
			return false
		case <-clock.After(100 * time.Millisecond):
		}
	}
}

// Leased is implemented by a jobs.Leadership whose terms hold a lease
// (consul.Leader): LeaseEnd returns when the current term's lease ends, or
// false when no term is held. The agent stops the term's rounds the moment
// the lease ends without having been renewed, before the term itself is
// found over.
type Leased interface {
	LeaseEnd() (time.Time, bool)
}

// watchLease cancels the term's rounds (stop) once its lease has ended.
func watchLease(ctx context.Context, l Leased, stop context.CancelFunc, log hclog.Logger) {
	for {
		end, ok := l.LeaseEnd()
		if !ok || !time.Now().Before(end) {
			log.Warn("leader lease ended; stopping the round")
			stop()
			return
		}
		t := time.NewTimer(time.Until(end))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// runRounds runs a round now and then every interval (or when a new job
// appears, but at most every few seconds) until ctx ends.
func runRounds(ctx context.Context, o Options, log hclog.Logger, wake <-chan struct{}) {
	for ctx.Err() == nil {
		st, err := o.Controller.Round(ctx, true)
		switch {
		case ctx.Err() != nil:
			// The term ended (or the agent stops) during the round: what
			// it did not write is left to the next leader.
			if st != nil {
				log.Warn("round interrupted: leadership ended", "round", st.Round)
			}
			return
		case err != nil:
			log.Error("round failed", "error", err)
		default:
			log.Info("round done", "round", st.Round, "jobs", len(st.Jobs), "conflicts", st.Conflicts, "total_ms", st.Timings["total"],
				"snapshot_ms", st.Timings["snapshot"], "fit_ms", st.Timings["fit"], "optimize_ms", st.Timings["optimize"], "apply_ms", st.Timings["apply"])
			if o.OnRound != nil {
				o.OnRound(st)
			}
		}
		select {
		case <-ctx.Done():
		case <-o.Clock.After(o.Controller.Config().Interval):
		case <-wake:
			sleep(ctx, o.Clock, 2*time.Second) // let a burst of submissions settle
		}
	}
}

func sleep(ctx context.Context, clock Clock, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-clock.After(d):
	}
}

// backoff is the exponential wait (1 s doubling to 1 min) between retries
// of a failed blocking query; its clock must be set.
type backoff struct {
	clock Clock
	d     time.Duration
}

// wait logs err and sleeps the current backoff (returning early when ctx
// ends), then doubles it.
func (b *backoff) wait(ctx context.Context, log hclog.Logger, msg string, err error) {
	if ctx.Err() != nil {
		return
	}
	if b.d == 0 {
		b.d = time.Second
	}
	log.Warn(msg, "error", err, "backoff", b.d)
	sleep(ctx, b.clock, b.d)
	b.d = min(2*b.d, time.Minute)
}

// reset starts the next failure's backoff at 1 s again.
func (b *backoff) reset() { b.d = 0 }

// configured reports a handled configuration document to OnConfig.
func (o Options) configured(cfg jobs.Config, err error) {
	if o.OnConfig != nil {
		o.OnConfig(cfg, err)
	}
}

// nextIndex is the wait index for the next blocking query: the returned
// index, or 0 when it went backwards (a restored server), to start over.
func nextIndex(prev, got uint64) uint64 {
	if got < prev {
		return 0
	}
	return got
}

// fairnessLabel is fairness_p for the log: a number, or what unset means.
func fairnessLabel(p float64) string {
	if p == 0 {
		return "policy default (-1 on one GPU type, 0.5 on several)"
	}
	return strconv.FormatFloat(p, 'g', -1, 64)
}
