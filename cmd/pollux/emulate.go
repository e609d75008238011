package main

import (
	"context"
	"flag"
	"io"
	"os"
	"strconv"
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
	)
	if err := parseFlags(fs, args); err != nil {
		return err
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
	}
	return emulate.Run(ctx, cfg)
}
