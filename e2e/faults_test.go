package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
)

// The reliability tests: each breaks a real server (or the
// controller) while jobs run, and checks that nothing is lost and no job
// is left half-changed. Each starts a dedicated cluster (cluster_test.go),
// so the shared one of the other tests is never disturbed.

// agentConfig writes an agent configuration for this test's prefix.
func (e *env) agentConfig(t *testing.T, extra string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pollux.json")
	doc := fmt.Sprintf(`{"interval":"3s","device":%q,"kv_prefix":%q,"ga":{"population":30,"generations":30}%s}`, e.device, e.prefix, extra)
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// state reads a job's persisted controller state.
func (e *env) state(id string) (*jobs.State, uint64) {
	e.t.Helper()
	raw, idx, err := e.kv.Get(context.Background(), "jobs/default/"+id+"/state")
	if err != nil {
		e.t.Fatalf("state of %s: %v", id, err)
	}
	var s jobs.State
	if err := json.Unmarshal(raw, &s); err != nil {
		e.t.Fatalf("state of %s: %v", id, err)
	}
	return &s, idx
}

// lastStatus reads the controller's last round from Consul.
func (e *env) lastStatus() (*jobs.Status, error) {
	st, _, err := jobs.ReadStatus(context.Background(), e.kv)
	return st, err
}

// waitRound waits until the controller recorded a round after `after`
// and returns it.
func (e *env) waitRound(t *testing.T, after int64, timeout time.Duration) *jobs.Status {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st, err := e.lastStatus()
		if err == nil && st.Round > after {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("no round after %d within %s (last: %+v, err %v)", after, timeout, st, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// modifyIndex returns a job's JobModifyIndex.
func (e *env) modifyIndex(id string) uint64 {
	e.t.Helper()
	job, _, err := e.nomad.Jobs().Info(id, nil)
	if err != nil {
		e.t.Fatalf("job %s: %v", id, err)
	}
	return *job.JobModifyIndex
}

// waitPlaced waits until the job's spec has a placement (the controller
// applied one) and Nomad runs it; it returns the placement.
func (e *env) waitPlaced(t *testing.T, id string, timeout time.Duration) []jobs.NodeGPUs {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		job, err := e.cluster.ReadJob(context.Background(), ref(id))
		if err == nil && len(job.Placement) > 0 && jobs.SamePerNode(job.Placement, job.Running) {
			return job.Placement
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s not placed and running within %s: %+v (err %v)", id, timeout, job, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// checkWhole checks that a job is not half-changed: its meta describes
// exactly the placement its groups ask for, the controller's state records
// that placement with no write pending, and the published decision agrees
// with the meta. It returns the problem, or "".
func (e *env) checkWhole(id string) string {
	ctx := context.Background()
	job, err := e.cluster.ReadJob(ctx, ref(id))
	if err != nil {
		return fmt.Sprintf("read %s: %v", id, err)
	}
	if len(job.Placement) == 0 {
		return fmt.Sprintf("%s: has no placement", id)
	}
	if got, want := job.Meta[contract.MetaPlacement], contract.FormatPlacement(job.Placement); got != want {
		return fmt.Sprintf("%s: meta %s = %q but its groups ask for %q", id, contract.MetaPlacement, got, want)
	}
	sum := 0
	for _, p := range job.Placement {
		sum += p.GPUs
	}
	if got := job.Meta[contract.MetaNumReplicas]; got != strconv.Itoa(sum) {
		return fmt.Sprintf("%s: meta %s = %q but its groups hold %d GPUs", id, contract.MetaNumReplicas, got, sum)
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
		return fmt.Sprintf("%s: state still has a pending write from round %d", id, s.Pending.Round)
	}
	if !jobs.SamePlacement(jobs.PlacementOf(s.Allocation), job.Placement) {
		return fmt.Sprintf("%s: state records %s, the job asks for %s", id, contract.FormatPlacement(jobs.PlacementOf(s.Allocation)), contract.FormatPlacement(job.Placement))
	}
	if s.Decision == nil || s.Decision.Placement != job.Meta[contract.MetaPlacement] || strconv.Itoa(s.Decision.BatchSize) != job.Meta[contract.MetaBatchSize] {
		return fmt.Sprintf("%s: state's decision %+v disagrees with the meta %v", id, s.Decision, job.Meta)
	}
	raw, _, err = e.kv.Get(ctx, "jobs/default/"+id+"/decision")
	if err != nil {
		return fmt.Sprintf("%s: decision: %v", id, err)
	}
	var d contract.Decision
	if err := json.Unmarshal(raw, &d); err != nil {
		return fmt.Sprintf("%s: decision: %v", id, err)
	}
	if d.Placement != job.Meta[contract.MetaPlacement] {
		return fmt.Sprintf("%s: published decision is for %q, the meta for %q", id, d.Placement, job.Meta[contract.MetaPlacement])
	}
	return ""
}

// waitWhole waits until every job passes checkWhole.
func (e *env) waitWhole(t *testing.T, timeout time.Duration, ids ...string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		problem := ""
		for _, id := range ids {
			if problem = e.checkWhole(id); problem != "" {
				break
			}
		}
		if problem == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not consistent within %s: %s", timeout, problem)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestFaultConsulOutage: Consul stops answering for a minute (SIGSTOP:
// connections hang, the worst case) while the controller runs, then is
// restarted outright. The controller changes nothing it cannot verify
// during the outage, keeps retrying with backoff, and afterwards resumes
// with the fitted models and metrics it had.
func TestFaultConsulOutage(t *testing.T) {
	c := startCluster(t, clusterOptions{PersistentConsul: true})
	e := newEnvOn(t, c)
	first := e.registerJob("steady", map[string]string{"pollux_max_gpus": "4"})
	e.putMetrics(first, e.profileDoc("cifar10", []int{1}, []int{2}))
	a := e.startAgent(t, "agent", e.agentConfig(t, ""))
	e.waitPlaced(t, first, 60*time.Second)
	e.waitWhole(t, 30*time.Second, first)
	before, _ := e.state(first)
	_, metricsIdx, err := e.kv.Get(context.Background(), "jobs/default/"+first+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if before.Perf == nil {
		t.Fatalf("no fitted model before the outage: %+v", before)
	}

	// Consul hangs for a minute. A job submitted meanwhile must not be
	// placed: its state cannot be recorded and the lock cannot be checked.
	idxBefore := e.modifyIndex(first)
	c.fault("pause", "consul")
	paused := time.Now()
	late := e.registerJob("late", nil)
	lateIdx := e.modifyIndex(late)
	for time.Since(paused) < 60*time.Second {
		if got := e.modifyIndex(first); got != idxBefore {
			c.fault("resume", "consul")
			t.Fatalf("job %s changed during the Consul outage (index %d -> %d)", first, idxBefore, got)
		}
		if got := e.modifyIndex(late); got != lateIdx {
			c.fault("resume", "consul")
			t.Fatalf("job %s was changed during the Consul outage (index %d -> %d)", late, lateIdx, got)
		}
		select {
		case <-a.done:
			t.Fatalf("the agent exited during the Consul outage")
		case <-time.After(2 * time.Second):
		}
	}
	c.fault("resume", "consul")
	resumed := time.Now()
	// It noticed and backed off rather than spinning.
	if n, line := a.logged("backoff"); n == 0 {
		t.Errorf("the agent logged no retry with backoff during the outage")
	} else {
		t.Logf("during the outage the agent logged %d retries with backoff, e.g. %s", n, line)
	}
	if n, _ := a.logged("lost leadership"); n == 0 {
		t.Errorf("the agent did not step down while Consul was unreachable")
	}
	e.waitPlaced(t, late, 90*time.Second)
	t.Logf("after Consul came back, the job submitted during the outage was placed in %s", time.Since(resumed).Round(100*time.Millisecond))
	e.waitWhole(t, 30*time.Second, first, late)
	after, _ := e.state(first)
	if after.Perf == nil || *after.Perf != *before.Perf || after.MetricsIndex != before.MetricsIndex {
		t.Errorf("the fitted model changed across the outage: before %+v (metrics index %d), after %+v (%d)", before.Perf, before.MetricsIndex, after.Perf, after.MetricsIndex)
	}
	if n, _ := a.logged("resuming as leader with the state in memory"); n == 0 {
		t.Errorf("the agent did not resume with its state in memory after regaining the lock")
	}

	// Restart Consul (a persistent server): stop, wait, start.
	st, err := e.lastStatus()
	if err != nil {
		t.Fatal(err)
	}
	c.fault("stop", "consul")
	time.Sleep(5 * time.Second)
	c.fault("start", "consul")
	restarted := time.Now()
	next := e.waitRound(t, st.Round, 90*time.Second)
	t.Logf("after the Consul restart the controller ran round %d in %s", next.Round, time.Since(restarted).Round(100*time.Millisecond))
	_, idx, err := e.kv.Get(context.Background(), "jobs/default/"+first+"/metrics")
	if err != nil || idx != metricsIdx {
		t.Errorf("metrics of %s after the restart: index %d (was %d), err %v", first, idx, metricsIdx, err)
	}
	final, _ := e.state(first)
	if final.Perf == nil || *final.Perf != *before.Perf {
		t.Errorf("fitted model lost across the Consul restart: %+v", final)
	}
	e.waitWhole(t, 30*time.Second, first, late)
	if final.Restarts > after.Restarts+1 {
		t.Errorf("job %s restarted %d times across the Consul restart", first, final.Restarts-after.Restarts)
	}
}

// TestFaultNomadRestartAndNodeLoss: the Nomad server restarts while the
// controller runs, then a client dies with SIGKILL while a job spans it.
// The controller rides out the restart without changing anything, plans
// without the dead node's GPUs, and the job is placed again on the live
// node.
func TestFaultNomadRestartAndNodeLoss(t *testing.T) {
	c := startCluster(t, clusterOptions{})
	e := newEnvOn(t, c)
	// Five GPUs: with 4 per client it has to span both.
	wide := e.registerJob("wide", map[string]string{"pollux_min_gpus": "5", "pollux_max_gpus": "5"})
	e.putMetrics(wide, e.profileDoc("cifar10", []int{1}, []int{2}, []int{4}))
	a := e.startAgent(t, "agent", e.agentConfig(t, ""))
	placed := e.waitPlaced(t, wide, 60*time.Second)
	if len(placed) != 2 {
		t.Fatalf("job %s placed on %v, want both clients", wide, placed)
	}
	e.waitWhole(t, 30*time.Second, wide)
	idx := e.modifyIndex(wide)

	// Nomad server restart.
	st, err := e.lastStatus()
	if err != nil {
		t.Fatal(err)
	}
	c.fault("stop", "nomad-server")
	time.Sleep(6 * time.Second) // two round intervals without Nomad
	c.fault("start", "nomad-server")
	next := e.waitRound(t, st.Round+1, 90*time.Second)
	t.Logf("round %d ran after the Nomad server restart", next.Round)
	if n, line := a.logged("round failed"); n == 0 {
		t.Errorf("no round failed while Nomad was down (the controller did not notice?)")
	} else {
		t.Logf("while Nomad was down: %d failed rounds, e.g. %s", n, line)
	}
	if got := e.modifyIndex(wide); got != idx {
		t.Errorf("job %s changed across the Nomad restart (index %d -> %d)", wide, idx, got)
	}
	e.waitPlaced(t, wide, 60*time.Second)

	// Kill the client that holds the job's second rank.
	nodes, _, err := e.nomad.Nodes().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	var victim, victimID string
	for _, n := range nodes {
		if n.ID == placed[1].Node {
			victim, victimID = n.Name, n.ID
		}
	}
	if victim == "" {
		t.Fatalf("node %s of the placement is not in the node list", placed[1].Node)
	}
	c.fault("kill", victim)
	killed := time.Now()
	for {
		n, _, err := e.nomad.Nodes().Info(victimID, nil)
		if err == nil && n.Status == "down" {
			break
		}
		if time.Since(killed) > 90*time.Second {
			t.Fatalf("Nomad did not mark %s down within 90s", victim)
		}
		time.Sleep(time.Second)
	}
	t.Logf("Nomad marked %s down %s after SIGKILL", victim, time.Since(killed).Round(time.Second))
	// The job is re-placed on the live node only, and Nomad runs it.
	deadline := time.Now().Add(90 * time.Second)
	for {
		job, err := e.cluster.ReadJob(context.Background(), ref(wide))
		if err == nil && len(job.Placement) > 0 && jobs.SamePerNode(job.Placement, job.Running) {
			onDead := false
			for _, p := range job.Placement {
				onDead = onDead || p.Node == victimID
			}
			if !onDead {
				t.Logf("re-placed %s after the node loss: %s, %s after the kill", wide, contract.FormatPlacement(job.Placement), time.Since(killed).Round(time.Second))
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s not re-placed off the dead node: %+v (err %v)", wide, job, err)
		}
		time.Sleep(time.Second)
	}
	last := e.waitRound(t, 0, 10*time.Second)
	if last.GPUs != 4 {
		t.Errorf("the controller plans with %d GPUs after losing a 4-GPU node of 8, want 4", last.GPUs)
	}
	e.waitWhole(t, 30*time.Second, wide)
}

// slowNomad is a reverse proxy to Nomad for an agent under test: it lets
// reads through and holds each job registration for delay, calling
// onRegister before (forwarded false) and after (true) forwarding it.
type slowNomad struct {
	srv        *http.Server
	addr       string
	registered atomic.Int32
}

func startSlowNomad(t *testing.T, target string, delay time.Duration, onRegister func(n int, forwarded bool)) *slowNomad {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	s := &slowNomad{addr: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	var mu sync.Mutex
	s.srv = &http.Server{Addr: s.addr, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.URL.Path != "/v1/jobs" {
			rp.ServeHTTP(w, r)
			return
		}
		// The agent's access check registers a probe job that cannot be
		// written (cmd/pollux/access.go): not a job write, let it through.
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(`"pollux-access-probe"`)) {
			rp.ServeHTTP(w, r)
			return
		}
		mu.Lock() // one registration at a time, in order
		defer mu.Unlock()
		n := int(s.registered.Add(1))
		onRegister(n, false)
		time.Sleep(delay)
		rec := &recorder{header: http.Header{}}
		rp.ServeHTTP(rec, r)
		onRegister(n, true)
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.code)
		_, _ = w.Write(rec.body)
	})}
	go func() { _ = s.srv.ListenAndServe() }()
	t.Cleanup(func() { _ = s.srv.Close() })
	return s
}

// recorder buffers a proxied response so the proxy can act between
// Nomad's answer and the agent's receiving it.
type recorder struct {
	header http.Header
	code   int
	body   []byte
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}
func (r *recorder) Write(p []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	r.body = append(r.body, p...)
	return len(p), nil
}

// runThrough runs an agent whose Nomad traffic goes through proxy, stores
// it in victim for the proxy's hook to signal, waits until it exits, and
// returns it with the jobs among ids whose spec changed meanwhile. Agents
// started afterwards talk to Nomad directly again.
func (e *env) runThrough(t *testing.T, c *testCluster, proxy *slowNomad, victim *atomic.Pointer[agentProc], name, cfg string, ids []string) (*agentProc, []string) {
	t.Helper()
	before := map[string]uint64{}
	for _, id := range ids {
		before[id] = e.modifyIndex(id)
	}
	e.agentEnv = c.environ("NOMAD_ADDR=http://" + proxy.addr)
	p := e.startAgent(t, name, cfg)
	e.agentEnv = c.environ()
	victim.Store(p)
	select {
	case <-p.done:
	case <-time.After(90 * time.Second):
		t.Fatalf("agent %s did not exit within 90s (no registration reached the proxy?)", name)
	}
	var changed []string
	for _, id := range ids {
		if e.modifyIndex(id) != before[id] {
			changed = append(changed, id)
		}
	}
	return p, changed
}

// registerFour submits four one-GPU jobs with metrics.
func (e *env) registerFour(t *testing.T) []string {
	t.Helper()
	var ids []string
	for i := 0; i < 4; i++ {
		id := e.registerJob(fmt.Sprintf("job%d", i), map[string]string{"pollux_max_gpus": "2"})
		e.putMetrics(id, e.profileDoc("cifar10", []int{1}, []int{2}))
		ids = append(ids, id)
	}
	return ids
}

// TestFaultLeaderKilledMidApply: the leader is killed with SIGKILL in the
// middle of applying a round, at the worst moment: Nomad has accepted its
// first job rewrite but the leader never hears the answer. The new leader
// completes that job's bookkeeping, redoes the rest of the round, and no
// job is left half-changed.
func TestFaultLeaderKilledMidApply(t *testing.T) {
	c := startCluster(t, clusterOptions{})
	e := newEnvOn(t, c)
	ids := e.registerFour(t)
	var victim atomic.Pointer[agentProc]
	proxy := startSlowNomad(t, c.env["NOMAD_ADDR"], 500*time.Millisecond, func(n int, forwarded bool) {
		if n == 1 && forwarded {
			if p := victim.Load(); p != nil {
				_ = p.cmd.Process.Signal(syscall.SIGKILL)
				<-p.done
			}
		}
	})
	cfg := e.agentConfig(t, "")
	_, changed := e.runThrough(t, c, proxy, &victim, "old-leader", cfg, ids)
	killed := time.Now()
	// The controller writes jobs whose GPUs are free in parallel, so the
	// proxy may have had more than one write queued when the leader died;
	// it forwarded the first for sure.
	if len(changed) == 0 || len(changed) == len(ids) {
		t.Fatalf("jobs changed when the leader died: %v, want the first (and at most those queued behind it)", changed)
	}
	// Their writes happened but are recorded only as pending.
	for _, id := range changed {
		if s, _ := e.state(id); s.Pending == nil {
			t.Fatalf("%s: no pending write recorded before the apply: %+v", id, s)
		}
	}
	nu := e.startAgent(t, "new-leader", cfg)
	for _, id := range changed {
		line := nu.waitLogged(t, 90*time.Second, "completed the bookkeeping of an interrupted write", id)
		t.Logf("new leader, %s after the kill: %s", time.Since(killed).Round(100*time.Millisecond), line)
	}
	for _, id := range ids {
		e.waitPlaced(t, id, 90*time.Second)
	}
	e.waitWhole(t, 30*time.Second, ids...)
}

// TestFaultGracefulShutdown: SIGTERM arrives while the leader applies a
// round. It finishes the writes in flight and records them, begins no
// other, releases the lock and exits 0; a second agent takes over at
// once (no session TTL to wait out) and finishes the work.
func TestFaultGracefulShutdown(t *testing.T) {
	c := startCluster(t, clusterOptions{})
	e := newEnvOn(t, c)
	ids := e.registerFour(t)
	var victim atomic.Pointer[agentProc]
	proxy := startSlowNomad(t, c.env["NOMAD_ADDR"], time.Second, func(n int, forwarded bool) {
		if n == 1 && !forwarded {
			if p := victim.Load(); p != nil {
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
			}
		}
	})
	cfg := e.agentConfig(t, "")
	old, changed := e.runThrough(t, c, proxy, &victim, "stopping", cfg, ids)
	stopped := time.Now()
	exit := old.cmd.ProcessState
	if exit == nil || !exit.Success() {
		t.Errorf("agent exit after SIGTERM: %v, want 0", exit)
	}
	old.waitLogged(t, time.Second, "round interrupted")
	// Writes to jobs whose GPUs are free go out in parallel: those already
	// sent when SIGTERM came are finished and recorded, no new one begins.
	if len(changed) == 0 || len(changed) == len(ids) {
		t.Fatalf("jobs changed by the stopping agent: %v, want the writes in flight only", changed)
	}
	for _, id := range changed {
		if p := e.checkWhole(id); p != "" {
			t.Errorf("a write in flight was not recorded: %s", p)
		}
	}
	holder, err := e.kv.Leader().Holder(context.Background())
	if err != nil || holder != "" {
		t.Errorf("lock after a graceful stop: holder %q, err %v; want released", holder, err)
	}
	nu := e.startAgent(t, "successor", cfg)
	nu.waitLogged(t, 30*time.Second, "acquired leadership")
	t.Logf("successor took the lock %s after the old agent exited", time.Since(stopped).Round(10*time.Millisecond))
	if took := time.Since(stopped); took > 10*time.Second {
		t.Errorf("takeover after a graceful stop took %s; the lock was not released", took)
	}
	for _, id := range ids {
		e.waitPlaced(t, id, 90*time.Second)
	}
	e.waitWhole(t, 30*time.Second, ids...)
}

// TestOperatorActions: an operator stops, deletes and re-submits jobs the
// controller manages. A stopped job is left alone and its GPUs go to the
// others, a deleted one drops out without errors, and a plain re-submit
// (which resets the shape) is re-applied next round, keeping the
// operator's new settings.
func TestOperatorActions(t *testing.T) {
	e := newEnv(t)
	a := e.registerJob("keep", nil)
	b := e.registerJob("stop", nil)
	d := e.registerJob("delete", nil)
	for _, id := range []string{a, b, d} {
		e.putMetrics(id, e.profileDoc("cifar10", []int{1}, []int{2}))
	}
	ctrl := e.controller("e2e", nil)
	ctx := context.Background()
	round := func() *jobs.Status {
		t.Helper()
		st, err := ctrl.Round(ctx, true)
		if err != nil {
			t.Fatalf("round: %v", err)
		}
		return st
	}
	round()
	for _, id := range []string{a, b, d} {
		e.waitPlaced(t, id, 60*time.Second)
	}

	// Stop b, purge d.
	if _, _, err := e.nomad.Jobs().Deregister(b, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.nomad.Jobs().Deregister(d, true, nil); err != nil {
		t.Fatal(err)
	}
	stoppedIdx := e.modifyIndex(b)
	st := round()
	if js := jobStatus(t, st, b); js.State != contract.StateStopped || js.Applied {
		t.Errorf("stopped job: %+v, want state stopped and untouched", js)
	}
	for _, j := range st.Jobs {
		if j.Job == "default/"+d {
			t.Errorf("deleted job still in the round: %+v", j)
		}
	}
	if len(st.Errors) > 0 {
		t.Errorf("round errors after a stop and a delete: %v", st.Errors)
	}
	if got := e.modifyIndex(b); got != stoppedIdx {
		t.Errorf("the controller changed the stopped job (index %d -> %d)", stoppedIdx, got)
	}

	// Re-submit a with a plain register: the shape is reset to one group
	// and the operator caps it at one GPU and adds a key of its own.
	job, _, err := e.nomad.Jobs().Info(a, nil)
	if err != nil {
		t.Fatal(err)
	}
	job.Meta["pollux_max_gpus"] = "1"
	job.Meta["team"] = "vision"
	var base *nomadapi.TaskGroup
	for _, g := range job.TaskGroups {
		if *g.Name == "workers" {
			base = g
		}
	}
	base.Constraints = nil
	job.TaskGroups = []*nomadapi.TaskGroup{base}
	if _, _, err := e.nomad.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
	e.waitPlaced(t, a, 60*time.Second)
	for i := 0; i < 3; i++ {
		round()
		time.Sleep(time.Second)
	}
	got, err := e.cluster.ReadJob(ctx, ref(a))
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, p := range got.Placement {
		total += p.GPUs
	}
	if total != 1 || got.Meta["team"] != "vision" || got.Meta["pollux_max_gpus"] != "1" {
		t.Errorf("after the operator's re-submit: placement %v, meta %v; want 1 GPU and the operator's keys kept", got.Placement, got.Meta)
	}
	if p := e.checkWhole(a); p != "" {
		t.Error(p)
	}
}
