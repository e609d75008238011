//go:build load

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
)

// The load test (make load; build tag "load", so make test does not run
// it): LOAD_JOBS tagged jobs (default 200) on a dedicated cluster of
// LOAD_CLIENTS clients x 4 fake GPUs (default 8), one `pollux agent` at
// LOAD_INTERVAL (default 10s) for LOAD_DURATION (default 10m, counted from
// its first published round) while a load
// generator rewrites every job's metrics about every 30 s and an operator
// edits a random job about every 20 s. It reports round latency, apply
// conflicts and the agent's memory, and checks that at the end every job
// in Nomad is exactly what the last decision says. The report goes to the
// test log and to out/load-<time>.json.

// loadParams are the knobs of the load test.
type loadParams struct {
	Jobs     int           `json:"jobs"`
	Clients  int           `json:"clients"`
	Interval time.Duration `json:"interval_ns"`
	Duration time.Duration `json:"duration_ns"`
	// MetricsEvery and EditEvery are the mean periods of one job's metrics
	// update and of an operator edit.
	MetricsEvery time.Duration `json:"metrics_every_ns"`
	EditEvery    time.Duration `json:"edit_every_ns"`
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration such as 10m", name, v)
	}
	return d
}

// loadRound is what the test saw of one round in the status key.
type loadRound struct {
	Round     int64              `json:"round"`
	At        time.Time          `json:"at"`
	Timings   map[string]float64 `json:"timings_ms"`
	Conflicts int                `json:"conflicts"`
	Errors    int                `json:"errors"`
	Scheduled int                `json:"scheduled"`
	Applied   int                `json:"applied"`
	GPUs      int                `json:"gpus_allocated"`
	// Deferred counts the job lines whose change waits for a later round
	// (a round's budget for scaling jobs to zero spent).
	Deferred int `json:"deferred"`
}

// quantiles of xs (sorted copy): median, p90, p99, max.
func quantiles(xs []float64) map[string]float64 {
	if len(xs) == 0 {
		return nil
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	q := func(p float64) float64 {
		i := int(p*float64(len(s)-1) + 0.5)
		return s[i]
	}
	return map[string]float64{"median": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": s[len(s)-1], "n": float64(len(s))}
}

// rssKB reads VmRSS and VmHWM (peak) of a process, in kB.
func rssKB(pid int) (rss, peak int) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1, -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.Atoi(f[1])
		switch f[0] {
		case "VmRSS:":
			rss = n
		case "VmHWM:":
			peak = n
		}
	}
	return rss, peak
}

// loadJob registers one long-running tagged job asking for one GPU.
func (e *env) loadJob(ctx context.Context, i int) (string, error) {
	id := fmt.Sprintf("load-%03d-%d", i, rand.Uint32()%10000)
	job := nomadapi.NewBatchJob(id, id, "global", 50)
	job.Datacenters = []string{"*"}
	job.Meta = authorMeta(map[string]string{"team": fmt.Sprintf("team-%d", i%7)})
	task := nomadapi.NewTask("train", "raw_exec").
		SetConfig("command", "/bin/sleep").
		SetConfig("args", []string{"86400"})
	task.Resources = &nomadapi.Resources{
		CPU: ptr(20), MemoryMB: ptr(16),
		Devices: []*nomadapi.RequestedDevice{{Name: e.device, Count: ptr(uint64(1))}},
	}
	task.LogConfig = &nomadapi.LogConfig{MaxFiles: ptr(1), MaxFileSizeMB: ptr(1)}
	tg := nomadapi.NewTaskGroup("workers", 1).AddTask(task)
	tg.RestartPolicy = &nomadapi.RestartPolicy{Attempts: ptr(0), Mode: ptr("fail")}
	tg.ReschedulePolicy = &nomadapi.ReschedulePolicy{Attempts: ptr(0), Unlimited: ptr(false)}
	tg.EphemeralDisk = &nomadapi.EphemeralDisk{SizeMB: ptr(10)}
	job.AddTaskGroup(tg)
	if _, _, err := e.nomad.Jobs().Register(job, (&nomadapi.WriteOptions{}).WithContext(ctx)); err != nil {
		return "", fmt.Errorf("register %s: %w", id, err)
	}
	return id, nil
}

// loadMetrics is a job's next metrics document: the application's
// measured profile on a random subset of placements, with progress grown.
func (e *env) loadMetrics(app string, progress float64) ([]byte, error) {
	all := [][]int{{1}, {2}, {4}, {2, 2}, {4, 4}, {4, 4, 4, 4}}
	var pick [][]int
	for _, p := range all {
		if len(pick) == 0 || rand.IntN(3) > 0 {
			pick = append(pick, p)
		}
	}
	var doc contract.Metrics
	if err := json.Unmarshal(e.profileDoc(app, pick...), &doc); err != nil {
		return nil, err
	}
	doc.Progress = progress
	doc.Timestamp = time.Now().UTC().Truncate(time.Second)
	return contract.MarshalMetrics(&doc)
}

// TestLoad runs the load test; see the top of this file.
func TestLoad(t *testing.T) {
	p := loadParams{
		Jobs:         envInt(t, "LOAD_JOBS", 200),
		Clients:      envInt(t, "LOAD_CLIENTS", 8),
		Interval:     envDuration(t, "LOAD_INTERVAL", 10*time.Second),
		Duration:     envDuration(t, "LOAD_DURATION", 10*time.Minute),
		MetricsEvery: 30 * time.Second,
		EditEvery:    20 * time.Second,
	}
	t.Logf("load test: %d jobs, %d clients x 4 GPUs, interval %s, for %s", p.Jobs, p.Clients, p.Interval, p.Duration)
	c := startCluster(t, clusterOptions{Clients: p.Clients})
	e := newEnvOn(t, c)
	ctx := context.Background()

	// The jobs, registered 8 at a time, each with a first metrics document.
	appNames := []string{"cifar10", "imagenet", "bert", "deepspeech2", "ncf", "yolov3"}
	ids := make([]string, p.Jobs)
	app := map[string]string{}
	var progress sync.Map // id -> float64
	regStart := time.Now()
	{
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		sem := make(chan struct{}, 8)
		for i := range p.Jobs {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				id, err := e.loadJob(ctx, i)
				var raw []byte
				if err == nil {
					raw, err = e.loadMetrics(appNames[i%len(appNames)], 0)
				}
				if err == nil {
					err = e.kv.Put(ctx, "jobs/default/"+id+"/metrics", raw)
				}
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					firstErr = cmpErr(firstErr, err)
					return
				}
				ids[i] = id
				app[id] = appNames[i%len(appNames)]
				e.jobs = append(e.jobs, id)
			}()
		}
		wg.Wait()
		if firstErr != nil {
			t.Fatalf("registering the jobs: %v", firstErr)
		}
	}
	for _, id := range ids {
		progress.Store(id, 0.0)
	}
	t.Logf("registered %d jobs with metrics in %s", len(ids), time.Since(regStart).Round(100*time.Millisecond))
	// The agent meets a cluster at rest with its jobs pending, as after a
	// leader change, not Nomad still busy scheduling the registrations.
	settleStart := time.Now()
	if err := e.nomadIdle(ctx, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("nomad scheduled the registrations in %s more", time.Since(settleStart).Round(100*time.Millisecond))

	cfgPath := filepath.Join(t.TempDir(), "pollux.json")
	doc := fmt.Sprintf(`{"interval":%q,"device":%q,"kv_prefix":%q}`, p.Interval.String(), e.device, e.prefix)
	if err := os.WriteFile(cfgPath, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	profile := os.Getenv("LOAD_PROFILE") != ""
	e.agentDebug = profile
	agent := e.startAgent(t, "load", cfgPath)
	pid := agent.cmd.Process.Pid

	run, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup

	// The load generator: every job's metrics about every MetricsEvery.
	var metricWrites, metricErrors atomic.Int64
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := time.Duration(rand.Int64N(int64(p.MetricsEvery)))
			for wait := first; ; wait = time.Duration(float64(p.MetricsEvery) * (0.7 + 0.6*rand.Float64())) {
				select {
				case <-run.Done():
					return
				case <-time.After(wait):
				}
				v, _ := progress.Load(id)
				prog := v.(float64) + 5 + 10*rand.Float64()
				progress.Store(id, prog)
				raw, err := e.loadMetrics(app[id], prog)
				if err == nil {
					err = e.kv.Put(run, "jobs/default/"+id+"/metrics", raw)
				}
				if err != nil && run.Err() == nil {
					metricErrors.Add(1)
					t.Logf("metrics of %s: %v", id, err)
					continue
				}
				metricWrites.Add(1)
			}
		}()
	}

	// The operator: a check-and-set edit of one of the job's own meta keys
	// on the job as it is (the controller's shape kept) about every
	// EditEvery.
	var edits, editConflicts, editErrors atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 1; ; n++ {
			select {
			case <-run.Done():
				return
			case <-time.After(time.Duration(float64(p.EditEvery) * (0.5 + rand.Float64()))):
			}
			id := ids[rand.IntN(len(ids))]
			job, _, err := e.nomad.Jobs().Info(id, (&nomadapi.QueryOptions{}).WithContext(run))
			if err == nil {
				job.Meta["operator_note"] = fmt.Sprintf("edit %d at %s", n, time.Now().Format(time.TimeOnly))
				_, _, err = e.nomad.Jobs().RegisterOpts(job, &nomadapi.RegisterOptions{EnforceIndex: true, ModifyIndex: *job.JobModifyIndex}, (&nomadapi.WriteOptions{}).WithContext(run))
			}
			switch {
			case err == nil:
				edits.Add(1)
			case strings.Contains(err.Error(), "Enforcing job modify index"):
				editConflicts.Add(1)
			case run.Err() == nil:
				editErrors.Add(1)
				t.Logf("operator edit of %s: %v", id, err)
			}
		}
	}()

	// The observer: every round the agent records, and its memory.
	var mu sync.Mutex
	var rounds []loadRound
	var rssSamples []float64
	peakKB := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		var index uint64
		for run.Err() == nil {
			raw, idx, err := e.kv.Watch(run, "status", index, 5*time.Second)
			if rss, peak := rssKB(pid); rss > 0 {
				mu.Lock()
				rssSamples = append(rssSamples, float64(rss)/1024)
				peakKB = max(peakKB, peak)
				mu.Unlock()
			}
			if err != nil {
				if run.Err() == nil && !errors.Is(err, contract.ErrNotFound) {
					t.Logf("watch status: %v", err)
					time.Sleep(time.Second)
				}
				index = idx
				continue
			}
			if idx == index || len(raw) == 0 {
				continue
			}
			index = idx
			st, err := jobs.ParseStatus(run, e.kv, raw)
			if err != nil {
				if run.Err() == nil {
					t.Logf("status: %v", err) // shards of the next round being written
				}
				continue
			}
			r := loadRound{Round: st.Round, At: st.Time, Timings: st.Timings, Conflicts: st.Conflicts, Errors: len(st.Errors)}
			for _, js := range st.Jobs {
				if js.State == contract.StateScheduled {
					r.Scheduled++
				}
				if js.Applied {
					r.Applied++
				}
				if strings.HasPrefix(js.Error, "deferred: ") {
					r.Deferred++
				}
				r.GPUs += js.GPUs
			}
			mu.Lock()
			if n := len(rounds); n == 0 || rounds[n-1].Round != r.Round {
				rounds = append(rounds, r)
			}
			mu.Unlock()
		}
	}()

	// LOAD_DURATION counts from the first published round, so that a long
	// first round (about 140 s at 2,000 jobs on the development machine)
	// does not eat the steady-state window the test measures.
	waitFirst := time.Now()
	for deadline := waitFirst.Add(p.Duration + 15*time.Minute); ; time.Sleep(time.Second) {
		mu.Lock()
		n := len(rounds)
		mu.Unlock()
		if n > 0 {
			t.Logf("first round published after %s; measuring for %s", time.Since(waitFirst).Round(time.Second), p.Duration)
			break
		}
		if time.Now().After(deadline) || agent.exited() {
			stop()
			wg.Wait()
			t.Fatalf("no round published within %s of the agent's start (agent exited: %v)", time.Since(waitFirst).Round(time.Second), agent.exited())
		}
	}
	if profile {
		// A CPU profile of 60 s of steady state, from a minute in.
		go e.saveProfile(t, agent.addr, time.Minute, 60*time.Second)
	}
	time.Sleep(p.Duration)
	stop()
	wg.Wait()
	if agent.exited() {
		t.Fatalf("the agent exited during the load test: %v", agent.cmd.ProcessState)
	}

	// Quiet: no more metrics or edits. Two more rounds settle what the
	// last edits refused; then the agent stops (SIGTERM) and every job in
	// Nomad must be what the last decision says.
	mu.Lock()
	last := int64(0)
	if len(rounds) > 0 {
		last = rounds[len(rounds)-1].Round
	}
	mu.Unlock()
	e.waitRound(t, last+1, 4*p.Interval+2*time.Minute)
	e.waitRound(t, last+2, 4*p.Interval+2*time.Minute)
	rss, peak := rssKB(pid)
	conflictsTotal := agent.metric("pollux_apply_conflicts_total")
	_ = agent.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-agent.done:
	case <-time.After(60 * time.Second):
		t.Fatal("agent did not stop within 60s")
	}
	final, err := e.lastStatus()
	if err != nil {
		t.Fatal(err)
	}
	decided := map[string]jobs.JobStatus{}
	for _, js := range final.Jobs {
		decided[js.Job] = js
	}
	var mismatches []string
	placedJobs, zeroJobs, gpus := 0, 0, 0
	settle := time.Now().Add(2 * time.Minute)
	for _, id := range ids {
		for {
			problem := e.matchesDecision(id, decided["default/"+id])
			if problem == "" {
				break
			}
			if time.Now().After(settle) {
				mismatches = append(mismatches, problem)
				break
			}
			time.Sleep(time.Second) // Nomad may still be moving allocations
		}
		if d := decided["default/"+id].Decision; d != nil && d.NumReplicas > 0 {
			placedJobs++
			gpus += d.NumReplicas
		} else {
			zeroJobs++
		}
	}

	// Failover: a second agent (a new leadership term: nothing cached,
	// every job listed and read again) meets the cluster the first left,
	// the waiting jobs at zero. Its first round is what a new leader costs
	// in steady operation; the first agent's first round above also had
	// to scale the jobs Nomad queued to zero.
	foStart := time.Now()
	fo := e.startAgent(t, "load-failover", cfgPath)
	foRound := e.waitRound(t, final.Round, 5*time.Minute)
	foWait := time.Since(foStart)
	foApplied := 0
	for _, js := range foRound.Jobs {
		if js.Applied {
			foApplied++
		}
	}
	_ = fo.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-fo.done:
	case <-time.After(60 * time.Second):
		t.Fatal("failover agent did not stop within 60s")
	}
	t.Logf("failover: first round %v ms after %s from the agent's start", foRound.Timings, foWait.Round(100*time.Millisecond))

	mu.Lock()
	defer mu.Unlock()
	phase := func(name string) []float64 {
		var xs []float64
		for _, r := range rounds {
			if v, ok := r.Timings[name]; ok {
				xs = append(xs, v)
			}
		}
		return xs
	}
	var periods []float64
	controllerConflicts, roundErrors := 0, 0
	for i, r := range rounds {
		controllerConflicts += r.Conflicts
		roundErrors += r.Errors
		if i > 0 {
			periods = append(periods, r.At.Sub(rounds[i-1].At).Seconds())
		}
	}
	report := map[string]any{
		"params":                p,
		"date":                  time.Now().UTC().Format(time.RFC3339),
		"rounds":                len(rounds),
		"round_total_ms":        quantiles(phase("total")),
		"round_snapshot_ms":     quantiles(phase("snapshot")),
		"round_fit_ms":          quantiles(phase("fit")),
		"round_optimize_ms":     quantiles(phase("optimize")),
		"round_apply_ms":        quantiles(phase("apply")),
		"round_period_s":        quantiles(periods),
		"apply_conflicts":       controllerConflicts,
		"apply_conflicts_agent": conflictsTotal,
		"round_errors":          roundErrors,
		"jobs_applied":          sumApplied(rounds),
		"metrics_writes":        metricWrites.Load(),
		"metrics_errors":        metricErrors.Load(),
		"operator_edits":        edits.Load(),
		"operator_conflicts":    editConflicts.Load(),
		"operator_errors":       editErrors.Load(),
		"agent_rss_mb":          quantiles(rssSamples),
		"agent_rss_final_mb":    float64(rss) / 1024,
		"agent_rss_peak_mb":     float64(max(peak, peakKB)) / 1024,
		"final_round":           final.Round,
		"final_jobs_with_gpus":  placedJobs,
		"final_jobs_zero":       zeroJobs,
		"final_gpus":            gpus,
		"final_mismatches":      mismatches,
		"first_round_ms":        firstTimings(rounds),
		"failover_round_ms":     foRound.Timings,
		"failover_wait_s":       foWait.Seconds(),
		"failover_applied":      foApplied,
		"adoption":              adoption(rounds),
	}
	out, _ := json.MarshalIndent(report, "", "  ")
	t.Logf("load report:\n%s", out)
	dir := filepath.Join(repoRoot(t), "out")
	if err := os.MkdirAll(dir, 0o755); err == nil {
		path := filepath.Join(dir, "load-"+time.Now().UTC().Format("20060102-150405")+".json")
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Errorf("write report: %v", err)
		} else {
			t.Logf("report written to %s", path)
		}
	}

	if len(rounds) < int(p.Duration/p.Interval)/2 {
		t.Errorf("%d rounds in %s at interval %s: the controller fell far behind", len(rounds), p.Duration, p.Interval)
	}
	if gpus > 4*p.Clients {
		t.Errorf("last decision allocates %d GPUs, the cluster has %d", gpus, 4*p.Clients)
	}
	if placedJobs == 0 {
		t.Error("the last decision gives no job a GPU")
	}
	for _, m := range mismatches {
		t.Errorf("final state differs from the last decision: %s", m)
	}
}

// firstTimings are the phase timings of the first round seen.
func firstTimings(rounds []loadRound) map[string]float64 {
	if len(rounds) == 0 {
		return nil
	}
	return rounds[0].Timings
}

// adoption says how the first agent's rounds took over the jobs Nomad
// queued: per round until none is deferred, the round's total time, its
// writes and its deferred changes, and the time from the first round's
// publication to the end of the first round that deferred nothing.
func adoption(rounds []loadRound) map[string]any {
	var per []map[string]any
	for i, r := range rounds {
		per = append(per, map[string]any{"round": r.Round, "total_ms": r.Timings["total"], "applied": r.Applied, "deferred": r.Deferred})
		if r.Deferred == 0 {
			return map[string]any{"rounds": per, "done_in_rounds": i + 1, "done_after_first_s": r.At.Sub(rounds[0].At).Seconds()}
		}
	}
	return map[string]any{"rounds": per, "done_in_rounds": 0}
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

func sumApplied(rounds []loadRound) int {
	n := 0
	for _, r := range rounds {
		n += r.Applied
	}
	return n
}

// matchesDecision checks one job against the last round's status for it:
// the spec asks for the decided placement (count 0 for none), Nomad runs
// exactly that, the meta says it, and the controller's state agrees with
// no write pending. It returns the problem, or "".
func (e *env) matchesDecision(id string, js jobs.JobStatus) string {
	ctx := context.Background()
	if js.Decision == nil {
		return fmt.Sprintf("%s: no decision in the last round (%s %s)", id, js.State, js.Error)
	}
	job, err := e.cluster.ReadJob(ctx, ref(id))
	if err != nil {
		return fmt.Sprintf("%s: %v", id, err)
	}
	d := js.Decision
	if got := contract.FormatPlacement(job.Placement); got != d.Placement {
		return fmt.Sprintf("%s: spec asks for %q, the last decision is %q", id, got, d.Placement)
	}
	if d.NumReplicas == 0 && job.Unshaped {
		return fmt.Sprintf("%s: decided 0 GPUs but the spec still asks for GPUs as submitted", id)
	}
	if !jobs.SamePerNode(job.Running, job.Placement) {
		return fmt.Sprintf("%s: Nomad runs %q, the spec asks for %q", id, contract.FormatPlacement(job.Running), d.Placement)
	}
	if d.NumReplicas > 0 && job.Meta[contract.MetaPlacement] != d.Placement {
		return fmt.Sprintf("%s: meta %s = %q, the last decision %q", id, contract.MetaPlacement, job.Meta[contract.MetaPlacement], d.Placement)
	}
	raw, _, err := e.kv.Get(ctx, "jobs/default/"+id+"/state")
	if err != nil {
		return fmt.Sprintf("%s: state: %v", id, err)
	}
	var s jobs.State
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Sprintf("%s: state: %v", id, err)
	}
	if s.Pending != nil {
		return fmt.Sprintf("%s: a write from round %d still pending", id, s.Pending.Round)
	}
	if got := contract.FormatPlacement(jobs.PlacementOf(s.Allocation)); got != d.Placement {
		return fmt.Sprintf("%s: state records %q, the last decision %q", id, got, d.Placement)
	}
	return ""
}

// nomadIdle waits until Nomad has no evaluation pending (blocked ones
// wait for capacity and stay).
func (e *env) nomadIdle(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		q := (&nomadapi.QueryOptions{Filter: `Status == "pending"`, PerPage: 1, Namespace: "*"}).WithContext(ctx)
		evals, _, err := e.nomad.Evaluations().List(q)
		if err == nil && len(evals) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nomad still has pending evaluations after %s (last error %v)", timeout, err)
		}
		time.Sleep(time.Second)
	}
}

// saveProfile saves a CPU profile of the agent (started with
// -enable-debug) taken for d after waiting wait, to out/load-cpu-<time>.pprof
// (go tool pprof bin/pollux out/load-cpu-*.pprof).
func (e *env) saveProfile(t *testing.T, addr string, wait, d time.Duration) {
	time.Sleep(wait)
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(d.Seconds())))
	if err != nil {
		t.Logf("profile: %v", err)
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Logf("profile: status %d, %v", resp.StatusCode, err)
		return
	}
	dir := filepath.Join(repoRoot(t), "out")
	_ = os.MkdirAll(dir, 0o755)
	path := filepath.Join(dir, "load-cpu-"+time.Now().UTC().Format("20060102-150405")+".pprof")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Logf("profile: %v", err)
		return
	}
	t.Logf("agent CPU profile written to %s", path)
}
