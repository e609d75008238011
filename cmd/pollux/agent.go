package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http/pprof"
	"os"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/pollux-nomad/pollux/consul"
	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
	"github.com/pollux-nomad/pollux/jobs/agent"
	"github.com/pollux-nomad/pollux/jobs/statustext"
	"github.com/pollux-nomad/pollux/nomad"
	"github.com/pollux-nomad/pollux/ui"
)

// agentFlags are shared by agent, plan and status.
type agentFlags struct {
	config   string
	dryRun   bool
	prefix   string
	httpAddr string
	logJSON  bool
	logLevel string
	debug    bool
	// sessionTTL and lockDelay are the leader session's (0: consul's
	// defaults).
	sessionTTL time.Duration
	lockDelay  time.Duration
}

func (f *agentFlags) register(fs *flag.FlagSet, withAgent bool) {
	fs.StringVar(&f.config, "config", "", "configuration file, HCL (.hcl) or JSON (pollux/config in Consul KV wins field by field)")
	fs.StringVar(&f.prefix, "kv-prefix", "", "Consul KV prefix (default from the configuration: pollux/)")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: trace, debug, info, warn, error")
	fs.BoolVar(&f.logJSON, "log-json", false, "log in JSON")
	if withAgent {
		fs.BoolVar(&f.dryRun, "dry-run", false, "decide and publish decisions, but never change a job")
		fs.StringVar(&f.httpAddr, "http-addr", "127.0.0.1:9505", "listen address for /healthz and /metrics (empty: off)")
		fs.BoolVar(&f.debug, "enable-debug", false, "also serve Go's profiler at /debug/pprof/ on -http-addr (for profiling the agent)")
		fs.DurationVar(&f.sessionTTL, "session-ttl", consul.DefaultSessionTTL, "TTL of the leader's Consul session: a dead leader is replaced 2-3x this after it stops (Consul's session_ttl_min must allow it)")
		fs.DurationVar(&f.lockDelay, "lock-delay", consul.DefaultLockDelay, "lock-delay of the leader's Consul session (every instance should use the same)")
	}
}

// setup builds the logger, the configuration and the two adapters.
type setup struct {
	log     hclog.Logger
	cfg     jobs.Config
	cluster *nomad.Client
	kv      *consul.Client
	consul  *consulapi.Client
	nomad   *nomadapi.Client
	// leader is the agent's candidacy (nil for plan and status): every
	// registration of cluster asks its lease first.
	leader *consul.Leader
	// refused counts the writes the fences refused (nil: not counted).
	refused func(target, reason string)
}

// newSetup builds the adapters; with lead, also the leader candidacy, and
// the Nomad adapter registers jobs only under its lease.
func newSetup(ctx context.Context, f *agentFlags, stderr io.Writer, lead bool) (*setup, error) {
	level := hclog.LevelFromString(f.logLevel)
	if level == hclog.NoLevel {
		return nil, usageErr("-log-level %q: want trace, debug, info, warn or error", f.logLevel)
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "pollux", Level: level, JSONFormat: f.logJSON, Output: stderr})
	cfg := jobs.DefaultConfig()
	if f.config != "" {
		loaded, err := jobs.LoadConfigFile(f.config)
		if err != nil {
			return nil, usageErr("config: %v", err)
		}
		cfg = loaded
	}
	if f.prefix != "" {
		cfg.KVPrefix = f.prefix
	}
	if f.dryRun {
		cfg.DryRun = true
	}
	if err := cfg.Validate(); err != nil {
		return nil, usageErr("invalid configuration: %v", err)
	}
	nc, err := nomadapi.NewClient(nomadapi.DefaultConfig())
	if err != nil {
		return nil, fmt.Errorf("failed to create nomad client (check NOMAD_ADDR and the NOMAD_* TLS variables): %w", err)
	}
	cc, err := consulapi.NewClient(consulapi.DefaultConfig())
	if err != nil {
		return nil, fmt.Errorf("failed to create consul client (check CONSUL_HTTP_ADDR and the CONSUL_* TLS variables): %w", err)
	}
	instance := instanceName()
	kv, err := consul.New(cc, consul.Config{Prefix: cfg.KVPrefix, Logger: log, Instance: instance, SessionTTL: f.sessionTTL, LockDelay: f.lockDelay})
	if err != nil {
		return nil, err
	}
	s := &setup{log: log, cfg: cfg, kv: kv, consul: cc, nomad: nc}
	ncfg := nomad.Config{Device: cfg.Device, NodePool: cfg.NodePool, Logger: log}
	if lead {
		s.leader = kv.Leader()
		ncfg.Lease = s.lease
	}
	if s.cluster, err = nomad.New(nc, ncfg); err != nil {
		return nil, err
	}
	return s, nil
}

// lease is the Nomad adapter's check before each registration: the
// leader's lease, its term number for the job's pollux_term.
func (s *setup) lease() (string, time.Time, error) {
	term, end, err := s.leader.Lease()
	if err != nil {
		if s.refused != nil {
			reason := "no_term"
			if errors.Is(err, consul.ErrLeaseExpired) {
				reason = "lease_expired"
			}
			s.refused("nomad", reason)
		}
		return "", time.Time{}, err
	}
	return term.String(), end, nil
}

func runAgent(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f agentFlags
	f.register(fs, true)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	s, err := newSetup(ctx, &f, stderr, true)
	if err != nil {
		return err
	}
	tel := jobs.NewTelemetry()
	s.refused = tel.FenceRefused
	leader := s.leader
	// Every KV write of the controller is fenced by Consul on the leader
	// lock, every job registration by the leader's lease.
	fenced := leader.KV()
	fenced.OnRefused = func(_, reason string) { tel.FenceRefused("consul", reason) }
	rounds := jobs.NewRoundLog()
	ctrl, err := jobs.New(s.cfg, jobs.Options{Cluster: s.cluster, KV: fenced, Logger: s.log, Instance: instanceName(), Telemetry: tel, Fence: leader.Verify, Rounds: rounds,
		Term: func() uint64 {
			t, _ := leader.Term()
			return t.Number
		}})
	if err != nil {
		return err
	}
	if err := ctrl.CheckConfig(ctx, s.cfg); err != nil {
		if f.config != "" {
			return usageErr("config %s: invalid configuration: %v", f.config, err)
		}
		return usageErr("invalid configuration: %v", err)
	}
	// The access check gates the agent and feeds /healthz.
	ao := jobs.AccessOptions{Cluster: s.cluster, KV: s.kv, Session: s.kv, NomadTokenSet: os.Getenv("NOMAD_TOKEN") != "", Logger: s.log}
	if !s.cfg.DryRun {
		ao.Submit = s.cluster // dry-run never writes a job
	}
	acc := jobs.NewAccessCheck(ao)
	if f.httpAddr != "" {
		mux := jobs.Handler(tel, acc, rounds)
		page := ui.Handler(ui.NewConsulSource(ctx, s.kv, ui.ReaderOf(os.Getenv("CONSUL_HTTP_TOKEN")), s.log), ui.Options{Logger: s.log})
		mux.Handle("/ui", page)
		mux.Handle("/ui/", page)
		if f.debug {
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		}
		addr, err := jobs.Serve(ctx, f.httpAddr, mux, s.log)
		if err != nil {
			return err
		}
		s.log.Info("serving health, metrics, the last rounds (/v1/rounds) and the status page /ui", "addr", addr.String())
	}
	s.log.Info("starting agent", "kv_prefix", s.cfg.KVPrefix, "device", s.cfg.Device, "dry_run", s.cfg.DryRun)
	ready := make(chan struct{})
	go acc.Run(ctx, ready)
	select {
	case <-ready:
	case <-ctx.Done():
		return nil
	}
	return agent.Run(ctx, agent.Options{
		Controller: ctrl, Leadership: leader, KV: fenced, Logger: s.log, Base: s.cfg, Telemetry: tel,
	})
}

// runPlan runs one round without writing anything and prints it.
func runPlan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f agentFlags
	f.register(fs, false)
	asJSON := fs.Bool("json", false, "print the round as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	s, err := newSetup(ctx, &f, stderr, false)
	if err != nil {
		return err
	}
	// Read the operator's configuration from Consul too.
	if raw, _, err := s.kv.Get(ctx, contract.ConfigKey); err == nil {
		if merged, merr := s.cfg.MergeJSON(raw); merr == nil {
			s.cfg = merged
		} else {
			s.log.Warn("ignoring invalid configuration in consul", "error", merr)
		}
	}
	s.cfg.DryRun = true
	ctrl, err := jobs.New(s.cfg, jobs.Options{Cluster: s.cluster, KV: readOnlyKV{s.kv}, Logger: s.log, Instance: "plan"})
	if err != nil {
		return err
	}
	st, err := ctrl.Round(ctx, false)
	if err != nil {
		return err
	}
	return printStatus(stdout, st, *asJSON, "")
}

// runStatus prints the last round from <prefix>status.
func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f agentFlags
	f.register(fs, false)
	asJSON := fs.Bool("json", false, "print the raw status JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return usageErr("usage: pollux status [flags] [JOB]")
	}
	s, err := newSetup(ctx, &f, stderr, false)
	if err != nil {
		return err
	}
	st, _, err := jobs.ReadStatus(ctx, s.kv)
	if errors.Is(err, contract.ErrNotFound) {
		return fmt.Errorf("no status under %sstatus: has an agent run a round yet?", s.cfg.KVPrefix)
	}
	if err != nil {
		return fmt.Errorf("failed to read status: %w", err)
	}
	return printStatus(stdout, st, *asJSON, fs.Arg(0))
}

// readOnlyKV drops writes, so `pollux plan` changes nothing.
type readOnlyKV struct{ jobs.KV }

func (readOnlyKV) Put(context.Context, string, []byte) error         { return nil }
func (readOnlyKV) CAS(context.Context, string, []byte, uint64) error { return nil }
func (readOnlyKV) Delete(context.Context, string, bool) error        { return nil }

// printStatus prints a round as a table, or one job's detail (job not
// empty), or either as JSON.
func printStatus(w io.Writer, st *jobs.Status, asJSON bool, job string) error {
	var doc any = st
	if job != "" {
		j, err := statustext.FindJobStatus(st, job)
		if err != nil {
			return usageErr("%v", err)
		}
		doc = j
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(doc)
	}
	if job != "" {
		return statustext.WriteJobStatus(w, st, job, time.Now())
	}
	return statustext.WriteStatusTable(w, st, time.Now())
}

// instanceName identifies this agent: host and Nomad allocation, or host
// and process ID outside Nomad.
func instanceName() string {
	host, _ := os.Hostname()
	if id := os.Getenv("NOMAD_ALLOC_ID"); id != "" {
		return host + "/" + id
	}
	return fmt.Sprintf("%s/pid-%d", host, os.Getpid())
}
