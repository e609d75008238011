// Package report is the worker side of Pollux: a small library that a
// training job calls every step to report what the controller needs
// (docs/contracts.md §3), and to learn the allocation and the training
// configuration the controller chose for it (docs/contracts.md §1 and §2).
//
//	r, err := report.New(ctx, report.Config{Consul: client})
//	defer r.Close(context.Background()) // writes what is left
//	alloc, err := r.Allocation()        // from NOMAD_META_pollux_*
//	decisions := r.Decisions(ctx)       // later decisions, from Consul KV
//	for step := 0; ; step++ {
//		... train one optimizer step ...
//		r.Observe(report.StepConfig{...}, computeTime, stepTime, syncTime)
//		r.ObserveGradients(gradSqr, gradVar)
//		r.Progress(progress, batchSize)
//		select {
//		case d := <-decisions: // adopt d.BatchSize, d.LocalBsz, d.AccumSteps, d.LR
//		default:
//		}
//	}
//
// # What it writes
//
// A Reporter keeps, per configuration (num_nodes, num_replicas, local_bsz,
// accum_steps), the running means of the step timings and their count, and
// the latest gradient statistics, progress and batch size. Only the rank-0
// worker writes: the document at <prefix>jobs/<namespace>/<job-id>/metrics,
// in the canonical encoding of package metrics (metrics.Marshal). New
// starts a background writer that writes at most once per
// Config.MinInterval, and only when something new was observed; Flush
// writes at once; Close stops the background writer and writes the rest.
//
// # Check-and-set merging
//
// Every write reads the stored document and its ModifyIndex, merges, and
// writes with Consul's check-and-set, retrying on conflict, so concurrent
// writers (an old and a new incarnation of a worker, or two workers that
// both think they are rank 0) lose nothing:
//
//   - profile entries of configurations this process never observed are
//     kept as they are;
//   - for a configuration that is in both, the samples this process
//     observed since its last successful write are merged into the stored
//     entry by count (count-weighted means), so what it wrote before is
//     never counted twice;
//   - the top-level fields are this process's latest values when it has
//     them (the last writer wins), else the stored ones; batch_size falls
//     back to Config.InitBatchSize when neither has one.
//
// If the stored document no longer holds what this process last wrote
// (the key is gone or was re-created, its index went backwards, an entry
// this process wrote is missing or has a smaller count, or it no longer
// parses), as after a Consul server that lost its data restarts, the
// write merges everything this process ever observed instead, so the next
// successful write contains it all. While Consul cannot be reached,
// observations accumulate in memory and the background writer retries
// with exponential backoff (from min(1s, MinInterval) up to MinInterval).
//
// Means are merged with the count-weighted formula
//
//	mean = (mean_a·count_a + mean_b·count_b) / (count_a + count_b)
//
// evaluated exactly in this order in float64 (the Python reporter,
// worker/python/pollux/report.py, does the same), so that both reporters
// produce the same bytes for the same observations: the shared vectors in
// worker/testdata/reporter-vectors.json check it.
//
// # Limits
//
// Whether an earlier write survived is decided from the key's CreateIndex
// and ModifyIndex and from the entries' counts. If a Consul server that
// lost its data re-creates the key with the same CreateIndex, a higher
// ModifyIndex and counts at least as large as this process wrote (another
// writer must have written first), this process's earlier samples of
// those configurations are lost. If a check-and-set request fails in
// transit, the write counts as applied only if the stored value is
// byte-identical to the attempt; if another writer already wrote over an
// applied attempt, its samples are counted twice.
package report
