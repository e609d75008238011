package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pollux-nomad/pollux/apps"
	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/record"
	"github.com/pollux-nomad/pollux/policy/registry"
	"github.com/pollux-nomad/pollux/results"
	"github.com/pollux-nomad/pollux/sim"
)

func runSimulate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		workloadPath = fs.String("workload", "", "workload CSV (name,time,application,num_replicas,batch_size), or the name of an embedded one: workload-1..8, sia-philly-1..8, sia-helios-1..10, sia-newtrace-1..10, sia-scale-{2,4,8,16,32}x")
		policies     = fs.String("policy", "pollux", "policy: "+strings.Join(sim.PolicyNames, ", ")+", or a comma-separated list, or all")
		profiles     = fs.String("profiles", "", "directory of application profiles (default: the copy embedded in the binary)")
		nodes        = fs.Int("nodes", 16, "number of nodes")
		gpus         = fs.Int("gpus-per-node", 4, "GPUs per node")
		clusterSpec  = fs.String("cluster", "", "typed cluster TYPE:NODESxGPUS[,...], e.g. "+sim.DefaultHeteroCluster+" (types t4, v100, a100, rtx6000, rtx2080ti); replaces -nodes and -gpus-per-node")
		rulesName    = fs.String("rules", "pollux", "simulator semantics: pollux (the Pollux artifact's) or sia (the Sia artifact's)")
		interval     = fs.Duration("interval", 60*time.Second, "scheduling interval")
		restartDelay = fs.Duration("restart-delay", 0, "restart (checkpoint-restore) delay of every job (default: the rules' own: 30 s, or Sia's per-application delays)")
		exploreStart = fs.Int("explore-start", 0, "most GPUs of a job's first allocation, before it has a profile (0: 4; under -rules sia the policy's own: 4 for pollux, 16 on a cluster of several GPU types, 1 for sia and the others, as the Sia and Pollux artifacts start every job on one GPU)")
		seed         = fs.Int64("seed", 1, "random seed of the Pollux genetic algorithm")
		stall        = fs.Int("ga-stall", 0, "end a Pollux round's search once the first front has not changed for this many generations (0: the size-aware default, 20 on one GPU type with at most 64 GPUs; -1: all generations)")
		asJSON       = fs.Bool("json", false, "print the summary as JSON on stdout (one object per policy)")
		outDir       = fs.String("out", "", "write per-job CSV and PNG plots into this directory")
		share        = fs.String("share-profiles", "auto", "fit a job's throughput models on the profiles of every job of its application: auto (pollux on a cluster of several GPU types), on, off")
		recordDir    = fs.String("record-rounds", "", "write every round's whole input and decision into DIR/POLICY/round-NNNNNNNN.json, for pollux replay")
		cloudFlags   = addCloudFlags(fs)
	)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: pollux simulate -workload FILE [flags]")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if *workloadPath == "" {
		fs.Usage()
		return usageErr("-workload is required")
	}
	if *nodes < 1 || *gpus < 1 || *interval <= 0 {
		return usageErr("-nodes, -gpus-per-node and -interval must be positive")
	}
	if *restartDelay < 0 {
		return usageErr("-restart-delay must not be negative")
	}
	names, err := parsePolicies(*policies)
	if err != nil {
		return err
	}
	rules, err := sim.ParseRules(*rulesName)
	if err != nil {
		return usageErr("-rules: %v", err)
	}
	var groups []sim.NodeGroup
	if *clusterSpec != "" {
		set := false
		fs.Visit(func(f *flag.Flag) { set = set || f.Name == "nodes" || f.Name == "gpus-per-node" })
		if set {
			return usageErr("-cluster replaces -nodes and -gpus-per-node: give one or the other")
		}
		if groups, err = sim.ParseCluster(*clusterSpec); err != nil {
			return usageErr("-cluster: %v", err)
		}
	} else if rules == sim.RulesSia {
		// Sia's homogeneous cluster is of T4s.
		groups = []sim.NodeGroup{{Type: "t4", Nodes: *nodes, GPUsPerNode: *gpus}}
	}
	var applications map[string]*apps.Application
	switch {
	case groups != nil && *profiles != "":
		applications, err = sim.LoadTypedApplicationsFrom(*profiles, rules)
	case groups != nil:
		applications, err = sim.LoadTypedApplications(rules)
	default:
		applications, err = sim.LoadApplications(*profiles)
	}
	if err != nil {
		return classify(err)
	}
	jobs, wlName, err := sim.LoadWorkload(*workloadPath, applications)
	if err != nil {
		return classify(err)
	}
	cfg := sim.Config{Nodes: *nodes, GPUsPerNode: *gpus, Cluster: groups, Rules: rules, Interval: *interval, ExploreStart: *exploreStart}
	if cfg.ShareProfiles, err = sim.ParseShare(*share); err != nil {
		return usageErr("-share-profiles: %v", err)
	}
	if cfg.Cloud, err = cloudFlags.config(); err != nil {
		return usageErr("%v", err)
	}
	if *restartDelay > 0 {
		// One delay for every job, whatever the rules' per-application table.
		cfg.RestartDelay = *restartDelay
		cfg.AppRestartDelay = map[string]time.Duration{}
	}

	var runs []results.Run
	for _, name := range names {
		settings := sim.SettingsFor(registry.PolluxConfig{Seed: *seed, StallGenerations: *stall}, rules)
		pol, err := registry.New(name, settings)
		if err != nil {
			return usageErr("%v", err)
		}
		cfg := cfg
		if *recordDir != "" {
			dir := filepath.Join(*recordDir, name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("-record-rounds: %w", err)
			}
			cfg.RecordRound = func(in policy.Input, out policy.Allocations) error {
				rec, err := record.New(name, settings, in, out)
				if err != nil {
					return err
				}
				return rec.WriteFile(filepath.Join(dir, record.FileName(in.Round)))
			}
		}
		s, err := sim.New(cfg, applications, jobs, wlName, pol)
		if err != nil {
			return usageErr("%v", err)
		}
		bar := newProgressBar(stderr, name, *asJSON)
		r, err := s.Run(ctx, bar.update)
		bar.finish()
		if err != nil {
			return fmt.Errorf("simulation of %s under %s failed: %w", wlName, name, err)
		}
		runs = append(runs, r)
	}

	sums := make([]results.Summary, len(runs))
	for i, r := range runs {
		sums[i] = results.Summarize(r)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		for _, s := range sums {
			if err := enc.Encode(s); err != nil {
				return err
			}
		}
	} else if err := results.WriteTable(stdout, sums); err != nil {
		return err
	}
	if *outDir != "" {
		if err := writeOutputs(*outDir, runs); err != nil {
			return err
		}
		if !*asJSON {
			fmt.Fprintf(stdout, "\nwrote per-job CSV and plots to %s\n", *outDir)
		}
	}
	return nil
}

func parsePolicies(s string) ([]string, error) {
	if s == "all" {
		return slices.Clone(sim.PolicyNames), nil
	}
	var out []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(sim.PolicyNames, p) {
			return nil, usageErr("-policy: unknown policy %q (want %s or all)", p, strings.Join(sim.PolicyNames, ", "))
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// classify maps input errors to exit code 2.
func classify(err error) error {
	if errors.Is(err, sim.ErrBadInput) {
		return &exitError{code: 2, err: err}
	}
	return err
}

func writeOutputs(dir string, runs []results.Run) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("failed to create output directory: %w", err)
	}
	for _, r := range runs {
		path := filepath.Join(dir, r.Workload+"-"+r.Policy+"-jobs.csv")
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("failed to write %s: %w", path, err)
		}
		werr := results.WriteJobsCSV(f, r)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return fmt.Errorf("failed to write %s: %w", path, werr)
		}
	}
	if err := results.WritePlots(dir, runs); err != nil {
		return fmt.Errorf("failed to write plots: %w", err)
	}
	return nil
}

// progressBar draws simulated time and jobs done on stderr: redrawn in
// place on a terminal, a line per 10% of jobs otherwise.
type progressBar struct {
	w       io.Writer
	name    string
	off     bool
	tty     bool
	last    time.Time
	lastTen int
	drawn   bool
}

func newProgressBar(w io.Writer, name string, quiet bool) *progressBar {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &progressBar{w: w, name: name, off: quiet, tty: tty}
}

func (b *progressBar) update(p sim.Progress) {
	if b.off || p.Total == 0 {
		return
	}
	if b.tty {
		if time.Since(b.last) < 100*time.Millisecond && p.Done < p.Total {
			return
		}
		b.last = time.Now()
		const width = 30
		fill := p.Done * width / p.Total
		fmt.Fprintf(b.w, "\r%-8s [%s%s] %3d/%d jobs done  t=%6.1fh  active %3d  GPUs busy %3d ",
			b.name, strings.Repeat("#", fill), strings.Repeat(".", width-fill), p.Done, p.Total, p.Time/3600, p.Active, p.GPUsInUse)
		b.drawn = true
		return
	}
	if ten := p.Done * 10 / p.Total; ten > b.lastTen {
		b.lastTen = ten
		fmt.Fprintf(b.w, "%s: %d/%d jobs done at t=%.1fh\n", b.name, p.Done, p.Total, p.Time/3600)
	}
}

func (b *progressBar) finish() {
	if b.drawn {
		fmt.Fprintln(b.w)
	}
}
