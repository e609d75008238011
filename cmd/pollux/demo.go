package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/pollux-nomad/pollux/demo"
	"github.com/pollux-nomad/pollux/nomad"
	"github.com/pollux-nomad/pollux/results"
	"github.com/pollux-nomad/pollux/sim"
	"github.com/pollux-nomad/pollux/workload"
)

// runDemo runs the closed loop on the cluster in NOMAD_ADDR and
// CONSUL_HTTP_ADDR, then simulates the same slice for comparison.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		wl      = fs.String("workload", "workload-1", "workload CSV or embedded name")
		n       = fs.Int("jobs", 20, "use the first N jobs")
		speedup = fs.Float64("speedup", 100, "emulated seconds per real second")
		device  = fs.String("device", os.Getenv("POLLUX_DEVICE"), "GPU device type (default $POLLUX_DEVICE)")
		timeout = fs.Duration("timeout", 45*time.Minute, "give up after this much real time")
		outDir  = fs.String("out", "", "write per-job CSV and plots here")
		flat    = fs.Bool("flat-sim", false, "simulate with the flat 30 s restarts and 60 s rounds instead of the restart times and round cadence measured on the cluster")
		polName = fs.String("policy", "pollux", "policy driving the real cluster and the simulation: pollux, tiresias, optimus or sia")
	)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *device == "" {
		*device = "nvidia/gpu"
	}
	applications, err := sim.LoadApplications("")
	if err != nil {
		return err
	}
	all, name, err := sim.LoadWorkload(*wl, applications)
	if err != nil {
		return classify(err)
	}
	jobsSlice := workload.First(all, min(*n, len(all)))
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	nc, err := nomadapi.NewClient(nomadapi.DefaultConfig())
	if err != nil {
		return err
	}
	cc, err := consulapi.NewClient(consulapi.DefaultConfig())
	if err != nil {
		return err
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "pollux", Level: hclog.Info, Output: stderr})
	cluster, err := nomad.New(nc, nomad.Config{Device: *device})
	if err != nil {
		return err
	}
	nodes, err := cluster.Nodes(ctx)
	if err != nil || len(nodes) == 0 {
		return fmt.Errorf("no nodes with %s GPUs (is the cluster up? make cluster-up): %v", *device, err)
	}
	// A job asking for more GPUs than the cluster has would never run
	// under Tiresias: cap the requests at the cluster's size.
	total := 0
	for _, nd := range nodes {
		total += nd.GPUs
	}
	jobsSlice = capReplicas(jobsSlice, total)
	label := fmt.Sprintf("%s[:%d]", name, len(jobsSlice))
	measured := &demo.Measured{}
	real, err := demo.Run(ctx, demo.Config{
		Jobs: jobsSlice, Workload: label, Apps: applications, Speedup: *speedup, Binary: exe,
		Device: *device, Nomad: nc, Consul: cc, Logger: log, Timeout: *timeout, Policy: *polName,
		Measured: measured,
	})
	if err != nil {
		return err
	}
	pol, err := sim.NewPolicy(*polName, 1)
	if err != nil {
		return usageErr("%v", err)
	}
	// The simulator models the cluster as measured: each job's restart
	// time and the controller's round cadence, in emulated seconds.
	names := make([]string, len(jobsSlice))
	for i, j := range jobsSlice {
		names[i] = j.Name
	}
	scfg := sim.Config{Nodes: len(nodes), GPUsPerNode: nodes[0].GPUs, JobRestartDelay: measured.RestartDelays(names)}
	scfg.Interval = time.Minute
	if measured.RoundInterval > 0 && !*flat {
		scfg.Interval = time.Duration(measured.RoundInterval * float64(time.Second))
	}
	if !*flat {
		scfg.JobStartDelay = startDelays(measured.StartLatencies, scfg.JobRestartDelay, scfg.Interval)
		fmt.Fprintf(stdout, "simulator: round interval %.0f s, start latencies (s):", scfg.Interval.Seconds())
		for _, n := range names {
			if v, ok := measured.StartLatencies[n]; ok {
				fmt.Fprintf(stdout, " %s=%.0f", n, v)
			}
		}
		fmt.Fprintf(stdout, "\nrestart times (s):")
		for _, n := range names {
			fmt.Fprintf(stdout, " %s=%.0f", n, scfg.JobRestartDelay[n].Seconds())
		}
		fmt.Fprintln(stdout)
	} else {
		scfg.JobRestartDelay = nil
	}
	s, err := sim.New(scfg, applications, jobsSlice, label+" (simulated)", pol)
	if err != nil {
		return err
	}
	simulated, err := s.Run(ctx, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nper-job JCT (s), real cluster vs simulator:\n")
	for i, j := range real.Jobs {
		fmt.Fprintf(stdout, "  %-16s real %8.0f  sim %8.0f  restarts %d\n", j.Name, j.JCT(), simulated.Jobs[i].JCT(), j.Restarts)
	}
	sums := []results.Summary{results.Summarize(real), results.Summarize(simulated)}
	fmt.Fprintln(stdout)
	if err := results.WriteTable(stdout, sums); err != nil {
		return err
	}
	dev := (sums[0].AvgJCT - sums[1].AvgJCT) / sums[1].AvgJCT
	fmt.Fprintf(stdout, "\naverage JCT: real %.0f s, simulated %.0f s (%+.1f%%)\n", sums[0].AvgJCT, sums[1].AvgJCT, 100*dev)
	if *outDir != "" {
		return writeOutputs(*outDir, []results.Run{real, simulated})
	}
	return nil
}

// capReplicas returns a copy of jobs with num_replicas at most gpus.
func capReplicas(jobs []workload.Job, gpus int) []workload.Job {
	out := make([]workload.Job, len(jobs))
	for i, j := range jobs {
		j.NumReplicas = min(j.NumReplicas, gpus)
		out[i] = j
	}
	return out
}

// startDelays returns the simulator's first-allocation delay of each job
// from its measured start latency (submission to first step): less the
// simulator's mean wait for a round (half an interval), and at most its
// restart time plus one interval, since a longer latency is time queued
// for GPUs, which the simulator models itself.
func startDelays(latencies map[string]float64, restart map[string]time.Duration, interval time.Duration) map[string]time.Duration {
	out := map[string]time.Duration{}
	for n, v := range latencies {
		v = min(v, restart[n].Seconds()+interval.Seconds())
		out[n] = time.Duration(max(v-interval.Seconds()/2, 0) * float64(time.Second))
	}
	return out
}
