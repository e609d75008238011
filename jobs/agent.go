package jobs

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sync/errgroup"
)

// ConfigKey is the KV key (under the prefix) of the operator's
// configuration.
const ConfigKey = "config"

// AgentOptions wire the long-running agent.
type AgentOptions struct {
	Controller *Controller
	Leadership Leadership
	KV         KV
	Logger     hclog.Logger
	// Base is the configuration from defaults and the -config file; the
	// KV document is merged over it.
	Base Config
	// Telemetry records leadership (may be nil).
	Telemetry *Telemetry
	// OnRound is called after each round (may be nil), for tests.
	OnRound func(*Status)
}

// RunAgent runs until ctx ends: it watches the configuration in Consul,
// competes for leadership, and while it leads runs a round every
// interval. Rounds stop the moment leadership is lost: the round's context
// is cancelled, so no write of a former leader overlaps the new leader's.
func RunAgent(ctx context.Context, o AgentOptions) error {
	log := o.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	log = log.Named("agent")
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { watchConfig(ctx, o, log); return nil })
	g.Go(func() error { return lead(ctx, o, log) })
	err := g.Wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// watchConfig follows <prefix>config with blocking queries; an invalid
// document keeps the last good configuration.
func watchConfig(ctx context.Context, o AgentOptions, log hclog.Logger) {
	var index uint64
	var last string
	backoff := time.Second
	for ctx.Err() == nil {
		raw, idx, err := o.KV.Watch(ctx, ConfigKey, index, 5*time.Minute)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Warn("failed to watch configuration; retrying", "error", err, "backoff", backoff)
			sleep(ctx, backoff)
			backoff = min(2*backoff, time.Minute)
			continue
		}
		backoff = time.Second
		if idx < index {
			idx = 0 // the index went backwards (Consul restored): start over
		}
		index = idx
		if string(raw) == last {
			continue
		}
		last = string(raw)
		cfg := o.Base
		if raw != nil {
			merged, err := o.Base.MergeJSON(raw)
			if err != nil {
				log.Error("invalid configuration in consul; keeping the last good one", "error", err)
				continue
			}
			cfg = merged
		}
		if err := o.Controller.SetConfig(cfg); err != nil {
			log.Error("invalid configuration; keeping the last good one", "error", err)
			continue
		}
		log.Info("configuration loaded", "interval", cfg.Interval, "fairness_p", cfg.FairnessP, "device", cfg.Device, "dry_run", cfg.DryRun)
	}
}

// lead acquires leadership and runs rounds while holding it.
func lead(ctx context.Context, o AgentOptions, log hclog.Logger) error {
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
			sleep(ctx, 2*time.Second)
			continue
		}
		log.Info("acquired leadership")
		if o.Telemetry != nil {
			o.Telemetry.SetLeader(true)
		}
		o.Controller.Forget()
		leadCtx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-lost:
				cancel()
			case <-leadCtx.Done():
			}
		}()
		runRounds(leadCtx, o, log)
		cancel()
		if o.Telemetry != nil {
			o.Telemetry.SetLeader(false)
		}
		if ctx.Err() == nil {
			log.Warn("lost leadership")
		}
	}
	return nil
}

// runRounds runs a round now and then every interval until ctx ends.
func runRounds(ctx context.Context, o AgentOptions, log hclog.Logger) {
	for ctx.Err() == nil {
		st, err := o.Controller.Round(ctx, true)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Error("round failed", "error", err)
		} else {
			log.Info("round done", "round", st.Round, "jobs", len(st.Jobs), "conflicts", st.Conflicts, "total_ms", st.Timings["total"])
			if o.OnRound != nil {
				o.OnRound(st)
			}
		}
		sleep(ctx, o.Controller.Config().Interval)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
