package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/pollux-nomad/pollux/emulate"
	"github.com/pollux-nomad/pollux/sim"
	"github.com/pollux-nomad/pollux/worker/go/report"
)

// runEmulate runs an emulated training job (a Nomad task of a Pollux job).
func runEmulate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("emulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		app      = fs.String("app", "", "application: bert, cifar10, deepspeech2, imagenet, ncf, yolov3")
		speedup  = fs.Float64("speedup", 1, "emulated seconds per real second")
		profiles = fs.String("profiles", "", "application profiles directory (default: embedded)")
		prefix   = fs.String("kv-prefix", "pollux/", "Consul KV prefix")
		interval = fs.Duration("report-interval", 2*time.Second, "least time between two metrics writes")
		gpuSpeed = fs.String("gpu-speed", "", "per-GPU speed of each GPU type relative to the profiles' (T4): TYPE=FACTOR,... "+
			"(the worker's type is POLLUX_GPU_TYPE, else NOMAD_META_pollux_gpu_type; unlisted types: 1)")
	)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	speeds, err := parseGPUSpeeds(*gpuSpeed)
	if err != nil {
		return usageErr("-gpu-speed: %v", err)
	}
	applications, err := sim.LoadApplications(*profiles)
	if err != nil {
		return classify(err)
	}
	a, ok := applications[*app]
	if !ok {
		return usageErr("-app: unknown application %q", *app)
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "pollux", Output: stderr})
	cc, err := consulapi.NewClient(consulapi.DefaultConfig())
	if err != nil {
		return err
	}
	rank, _ := strconv.Atoi(os.Getenv("NOMAD_META_pollux_rank"))
	ns := os.Getenv("NOMAD_NAMESPACE")
	if ns == "" {
		ns = "default"
	}
	cfg := emulate.Config{
		App: a, Speedup: *speedup, Consul: cc, Prefix: *prefix, Namespace: ns,
		ID: os.Getenv("NOMAD_JOB_ID"), Rank: rank, Logger: log,
	}
	if rank == 0 {
		r, err := report.New(ctx, report.Config{Consul: cc, Prefix: *prefix, InitBatchSize: a.InitBatchSize, MinInterval: *interval, Logger: log})
		if err != nil {
			return err
		}
		cfg.Reporter = r
		cfg.GPUType = r.GPUType()
		if v, ok := speeds[cfg.GPUType]; ok {
			cfg.GPUSpeed = v
		}
	}
	return emulate.Run(ctx, cfg)
}

// parseGPUSpeeds reads -gpu-speed: TYPE=FACTOR pairs, comma-separated.
func parseGPUSpeeds(s string) (map[string]float64, error) {
	out := map[string]float64{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		t, f, ok := strings.Cut(strings.TrimSpace(part), "=")
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if !ok || t == "" || err != nil || !(v > 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("want TYPE=FACTOR with a positive factor, got %q", part)
		}
		out[strings.TrimSpace(t)] = v
	}
	return out, nil
}
