package report_test

import (
	"context"
	"log"

	"github.com/hashicorp/consul/api"

	"github.com/pollux-nomad/pollux/worker/go/report"
)

// A worker's training loop: report every step, adopt the controller's
// decisions between steps. (Not run: it needs Consul and Nomad's
// environment.)
func Example() {
	ctx := context.Background()
	client, err := api.NewClient(api.DefaultConfig()) // CONSUL_HTTP_ADDR
	if err != nil {
		log.Fatal(err)
	}
	r, err := report.New(ctx, report.Config{Consul: client}) // NOMAD_JOB_ID, NOMAD_META_pollux_rank, ...
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close(ctx) // writes what is left

	alloc, err := r.Allocation() // NOMAD_META_pollux_*
	if err != nil {
		log.Fatal(err)
	}
	cfg := report.StepConfig{NumNodes: alloc.NumNodes, NumReplicas: alloc.NumReplicas, LocalBsz: alloc.LocalBsz, AccumSteps: alloc.AccumSteps}
	batchSize, lr := alloc.BatchSize, alloc.LR
	decisions := r.Decisions(ctx)
	progress := 0.0
	for step := 0; step < 1000; step++ {
		select {
		case d := <-decisions:
			if d.NumReplicas == cfg.NumReplicas { // same allocation: adopt without a restart
				cfg.LocalBsz, cfg.AccumSteps, batchSize, lr = d.LocalBsz, d.AccumSteps, d.BatchSize, d.LR
			}
		default:
		}
		// Seconds: mean forward/backward per micro-batch without sync, the
		// synchronising step, and the part of it blocked in all-reduce.
		computeTime, stepTime, syncTime := trainStep(cfg, lr)
		progress += float64(batchSize) // × statistical efficiency, in M0-equivalent examples
		if err := r.Observe(cfg, computeTime, stepTime, syncTime); err != nil {
			log.Print(err)
		}
		if err := r.ObserveGradients(0.52, 2.1); err != nil { // the smoothed estimates
			log.Print(err)
		}
		if err := r.Progress(progress, batchSize); err != nil {
			log.Print(err)
		}
	}
}

// trainStep stands for one optimizer step of a real trainer.
func trainStep(report.StepConfig, float64) (computeTime, stepTime, syncTime float64) {
	return 0.1, 0.12, 0.02
}
