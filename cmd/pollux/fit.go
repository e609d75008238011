package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/metrics"
	"github.com/pollux-nomad/pollux/model"
)

// fitOutput is what `pollux fit` prints.
type fitOutput struct {
	Metrics     string           `json:"metrics"`
	Points      int              `json:"profile_points"`
	Perf        model.PerfParams `json:"perf_params"`
	GradSqr     float64          `json:"grad_sqr"`
	GradVar     float64          `json:"grad_var"`
	NoiseScale  float64          `json:"noise_scale"`
	InitBatch   int              `json:"init_batch_size"`
	MaxBatch    int              `json:"max_batch_size"`
	Predictions []fitPrediction  `json:"predictions"`
}

type fitPrediction struct {
	GPUs       int     `json:"gpus"`
	Nodes      int     `json:"nodes"`
	Goodput    float64 `json:"goodput"`
	Speedup    float64 `json:"speedup"`
	Throughput float64 `json:"throughput"`
	Efficiency float64 `json:"efficiency"`
	BatchSize  int     `json:"batch_size"`
	LocalBsz   int     `json:"local_bsz"`
	AccumSteps int     `json:"accum_steps"`
}

func runFit(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		path     = fs.String("metrics", "", "metrics document (JSON, contract section 3)")
		m0       = fs.Int("init-batch-size", 0, "job's initial batch size M0 (default: the document's batch_size)")
		maxBatch = fs.Int("max-batch-size", 0, "largest total batch size (default: M0, as the pollux_max_batch_size meta key)")
		minLocal = fs.Int("local-bsz-min", 1, "smallest per-GPU micro-batch")
		maxLocal = fs.Int("local-bsz-max", 0, "largest per-GPU micro-batch (default: M0)")
		noAccum  = fs.Bool("no-accumulation", false, "disallow gradient accumulation")
		maxGPUs  = fs.Int("max-gpus", 16, "predict for 1 ... max-gpus GPUs")
		perNode  = fs.Int("gpus-per-node", 4, "GPUs per node when packing predictions onto nodes")
	)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *path == "" {
		return usageErr("-metrics is required")
	}
	raw, err := os.ReadFile(*path)
	if err != nil {
		return usageErr("metrics: %v", err)
	}
	doc, err := contract.ParseMetrics(raw)
	if err != nil {
		return usageErr("%s: %v", *path, err)
	}
	if *m0 == 0 {
		*m0 = int(doc.BatchSize)
	}
	if *maxBatch == 0 {
		*maxBatch = *m0
	}
	if *maxLocal == 0 {
		*maxLocal = *m0
	}
	if *m0 < 1 || *maxBatch < *m0 || *minLocal < 1 || *maxLocal < *minLocal || *maxGPUs < 1 || *perNode < 1 {
		return usageErr("need 1 ≤ init-batch-size ≤ max-batch-size, 1 ≤ local-bsz-min ≤ local-bsz-max, max-gpus ≥ 1, gpus-per-node ≥ 1")
	}
	points := metrics.ProfilePoints(doc)
	perf, err := model.FitPerfParams(points)
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("%s: %w", *path, err)}
	}
	grad := metrics.GradParams(doc)
	f := model.GoodputFunc{Perf: perf, Grad: grad, InitBatchSize: float64(*m0)}
	b := model.Bounds{MaxBatchSize: *maxBatch, MinLocalBsz: *minLocal, MaxLocalBsz: *maxLocal, Accumulation: !*noAccum}
	out := fitOutput{
		Metrics: *path, Points: len(points), Perf: perf,
		GradSqr: grad.Sqr, GradVar: grad.Var,
		InitBatch: *m0, MaxBatch: *maxBatch,
	}
	if grad.Sqr > 0 {
		out.NoiseScale = float64(*m0) * grad.Var / grad.Sqr
	}
	base := f.Optimize(1, 1, b).Goodput
	for k := 1; k <= *maxGPUs; k++ {
		n := (k + *perNode - 1) / *perNode
		c := f.Optimize(n, k, b)
		p := fitPrediction{GPUs: k, Nodes: n, Goodput: c.Goodput, BatchSize: c.BatchSize, LocalBsz: c.LocalBsz, AccumSteps: c.AccumSteps}
		if c.LocalBsz > 0 {
			p.Throughput = f.Throughput(n, k, float64(c.LocalBsz), c.AccumSteps)
			p.Efficiency = f.Efficiency(float64(c.BatchSize))
		}
		if base > 0 {
			p.Speedup = c.Goodput / base
		}
		out.Predictions = append(out.Predictions, p)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
