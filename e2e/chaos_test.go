package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The paused-leader chaos test: two agents, each talking to Consul and
// Nomad through logging proxies of the test; the leader A is frozen with
// SIGSTOP (a GC pause, a frozen VM) at a chosen point of a round, longer
// than its session's TTL, so that B takes the lock; A is resumed right
// after B's first write, or 2 s later. Whatever A still does, no write of
// its may be accepted by Consul or Nomad after B's first.

// chaosTTL is the agents' session TTL in the chaos test: short, so that a
// takeover takes seconds (the local cluster's Consul allows TTLs from 1s).
const chaosTTL = 2 * time.Second

// pausePoint is where in A's round the proxy freezes A.
type pausePoint string

const (
	// afterFence: A has just verified that it holds the lock (the round's
	// fence, a consistent read of the lock key) and is about to write.
	afterFence pausePoint = "after-fence"
	// afterWriteAhead: Consul has just accepted A's write-ahead record of
	// a job change (a state with a pending write); the registration is
	// next.
	afterWriteAhead pausePoint = "after-write-ahead"
)

// wireWrite is one data write an agent sent through a proxy.
type wireWrite struct {
	agent, target string // "a" or "b"; "consul" or "nomad"
	what          string
	sent, done    time.Time
	status        int
	// accepted: the server applied it; refused: Consul's check-session
	// refused it (the fence).
	accepted, refused bool
}

// wireLog records the data writes of both agents: every KV write and job
// registration, not the leader election's own requests (sessions, lock
// acquire and release) nor the access check's probes.
type wireLog struct {
	mu     sync.Mutex
	writes []wireWrite
	// bFirst is closed when B's first data write is accepted.
	bFirst     chan struct{}
	bFirstOnce sync.Once
}

func newWireLog() *wireLog { return &wireLog{bFirst: make(chan struct{})} }

func (l *wireLog) add(w wireWrite) {
	l.mu.Lock()
	l.writes = append(l.writes, w)
	l.mu.Unlock()
	if w.agent == "b" && w.accepted {
		l.bFirstOnce.Do(func() { close(l.bFirst) })
	}
}

func (l *wireLog) all() []wireWrite {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]wireWrite(nil), l.writes...)
}

// callKey carries a proxied request's record through the reverse proxy.
type callKey struct{}

type call struct {
	write bool
	what  string
	sent  time.Time
	body  []byte
	r     *http.Request
}

// wireProxy is a logging reverse proxy from one agent to one server. hook,
// if set, sees every response before the agent does (the pause points).
type wireProxy struct {
	srv  *http.Server
	addr string
}

func startWireProxy(t *testing.T, agent, target, to string, log *wireLog, hook func(c *call, status int, body []byte)) *wireProxy {
	t.Helper()
	if !strings.Contains(to, "://") {
		to = "http://" + to
	}
	u, err := url.Parse(to)
	if err != nil {
		t.Fatal(err)
	}
	p := &wireProxy{addr: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	rp.ModifyResponse = func(resp *http.Response) error {
		c, _ := resp.Request.Context().Value(callKey{}).(*call)
		if c == nil || (!c.write && hook == nil) {
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if c.write {
			w := wireWrite{agent: agent, target: target, what: c.what, sent: c.sent, done: time.Now(), status: resp.StatusCode}
			switch {
			case target == "consul" && strings.HasPrefix(c.r.URL.Path, "/v1/kv/"):
				w.accepted = resp.StatusCode == http.StatusOK && strings.TrimSpace(string(body)) == "true"
			default:
				w.accepted = resp.StatusCode == http.StatusOK
			}
			w.refused = target == "consul" && resp.StatusCode == http.StatusConflict && bytes.Contains(body, []byte("session"))
			log.add(w)
		}
		if hook != nil {
			hook(c, resp.StatusCode, body)
		}
		return nil
	}
	p.srv = &http.Server{Addr: p.addr, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &call{sent: time.Now(), r: r}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			c.body = body
			c.write, c.what = classifyWrite(target, r, body)
		}
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callKey{}, c)))
	})}
	go func() { _ = p.srv.ListenAndServe() }()
	t.Cleanup(func() { _ = p.srv.Close() })
	return p
}

// classifyWrite tells whether a request is a data write and describes it.
func classifyWrite(target string, r *http.Request, body []byte) (bool, string) {
	path, q := r.URL.Path, r.URL.Query()
	desc := r.Method + " " + path
	if target == "nomad" {
		if strings.HasSuffix(path, "/plan") || bytes.Contains(body, []byte(`"pollux-access-probe"`)) {
			return false, desc
		}
		return true, desc
	}
	switch {
	case strings.HasPrefix(path, "/v1/session/"):
		return false, desc
	case strings.HasPrefix(path, "/v1/kv/"):
		if q.Has("acquire") || q.Has("release") {
			return false, desc
		}
		// The access check's CAS at an index no key has never applies.
		if q.Get("cas") == strconv.FormatUint(^uint64(0), 10) {
			return false, desc
		}
		return true, desc
	case path == "/v1/txn":
		keys, _ := txnKeys(body)
		return true, desc + " " + strings.Join(keys, ",")
	}
	return false, desc
}

// txnOp is one operation of a Consul transaction request.
type txnOp struct {
	KV *struct {
		Verb  string
		Key   string
		Value string // base64
	}
}

// txnKeys lists the keys a transaction sets or deletes.
func txnKeys(body []byte) ([]string, []txnOp) {
	var ops []txnOp
	if json.Unmarshal(body, &ops) != nil {
		return nil, nil
	}
	var keys []string
	for _, op := range ops {
		if op.KV != nil && op.KV.Verb != "check-session" {
			keys = append(keys, op.KV.Verb+":"+op.KV.Key)
		}
	}
	return keys, ops
}

// isWriteAhead tells whether a transaction records a pending job write.
func isWriteAhead(body []byte) bool {
	_, ops := txnKeys(body)
	for _, op := range ops {
		if op.KV == nil || op.KV.Verb != "set" || !strings.HasSuffix(op.KV.Key, "/state") {
			continue
		}
		v, err := base64.StdEncoding.DecodeString(op.KV.Value)
		if err == nil && bytes.Contains(v, []byte(`"pending":{`)) {
			return true
		}
	}
	return false
}

// metricSum adds up every series of a metric on an agent's /metrics.
func metricSum(addr, name string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		sum += v
	}
	return sum
}

// chaosResult is one run's measurements.
type chaosResult struct {
	// takeover is from A's pause to B's first accepted write.
	takeover time.Duration
	// refusedConsul counts A's writes Consul refused (check-session),
	// refusedAgent what A's own fences counted (pollux_fence_refused_total).
	refusedConsul int
	refusedAgent  float64
	// lateAccepted lists A's writes accepted after B's first write.
	lateAccepted []wireWrite
}

// runChaos runs one paused-leader scenario on the shared cluster.
func runChaos(t *testing.T, point pausePoint, resumeAfter time.Duration) chaosResult {
	e := newEnv(t)
	ids := e.registerFour(t)
	e.waitAsSubmitted(t, ids...)
	e.agentArgs = []string{"-session-ttl", chaosTTL.String()}
	cfg := e.agentConfig(t, "")
	log := newWireLog()
	consulAddr, nomadAddr := os.Getenv("CONSUL_HTTP_ADDR"), os.Getenv("NOMAD_ADDR")

	var victim atomic.Pointer[agentProc]
	var armed atomic.Bool
	armed.Store(true)
	// roundBegun: A, leading, has read the nodes (its first round's
	// snapshot).
	var roundBegun atomic.Bool
	paused := make(chan time.Time, 1)
	lockPath := "/v1/kv/" + e.prefix + "leader"
	hook := func(c *call, status int, body []byte) {
		hit := false
		switch point {
		case afterFence:
			// The fence's read: consistent and not blocking, once A's
			// round has begun (it read the nodes): the lock loop's reads
			// while acquiring carry a wait, and the lock monitor's first
			// read comes right at the acquisition.
			q := c.r.URL.Query()
			hit = roundBegun.Load() && c.r.Method == http.MethodGet && c.r.URL.Path == lockPath && q.Has("consistent") && !q.Has("wait")
		case afterWriteAhead:
			plain := strings.HasSuffix(c.r.URL.Path, "/state") && bytes.Contains(c.body, []byte(`"pending":{`))
			hit = c.write && status == http.StatusOK && (plain || c.r.URL.Path == "/v1/txn" && isWriteAhead(c.body))
		}
		if !hit || !armed.CompareAndSwap(true, false) {
			return
		}
		p := victim.Load()
		if p == nil {
			armed.Store(true)
			return
		}
		if n, _ := p.logged("acquired leadership"); n == 0 {
			armed.Store(true)
			return
		}
		_ = p.cmd.Process.Signal(syscall.SIGSTOP)
		paused <- time.Now()
	}
	nomadHook := func(c *call, status int, body []byte) {
		p := victim.Load()
		if p == nil || c.r.Method != http.MethodGet || c.r.URL.Path != "/v1/nodes" {
			return
		}
		if n, _ := p.logged("acquired leadership"); n > 0 {
			roundBegun.Store(true)
		}
	}
	agentEnv := func(name string, h func(*call, int, []byte)) []string {
		cp := startWireProxy(t, name, "consul", consulAddr, log, h)
		var nh func(*call, int, []byte)
		if h != nil {
			nh = nomadHook
		}
		np := startWireProxy(t, name, "nomad", nomadAddr, log, nh)
		return append(os.Environ(), "CONSUL_HTTP_ADDR="+cp.addr, "NOMAD_ADDR=http://"+np.addr)
	}

	e.agentEnv = agentEnv("a", hook)
	a := e.startAgent(t, "a", cfg)
	victim.Store(a)
	t.Cleanup(func() { _ = a.cmd.Process.Signal(syscall.SIGCONT) }) // before startAgent's SIGTERM
	a.waitLogged(t, 60*time.Second, "acquired leadership")
	e.agentEnv = agentEnv("b", nil)
	b := e.startAgent(t, "b", cfg)

	var pausedAt time.Time
	select {
	case pausedAt = <-paused:
	case <-time.After(60 * time.Second):
		t.Fatalf("A never reached the pause point %s", point)
	}
	select {
	case <-log.bFirst:
	case <-time.After(60 * time.Second):
		t.Fatalf("B made no write within 60s of A's pause")
	}
	bFirstAt := time.Now()
	time.Sleep(resumeAfter)
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT A: %v", err)
	}
	resumed := time.Now()
	// A finds out, ends its round and waits for the lock again.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if n, _ := a.logged("waiting for leadership"); n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("A did not go back to waiting for leadership within 60s of its resumption")
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // any straggling write of A's round
	b.waitLogged(t, 10*time.Second, "acquired leadership")

	var first *wireWrite
	writes := log.all()
	for i := range writes {
		if w := &writes[i]; w.agent == "b" && w.accepted && (first == nil || w.sent.Before(first.sent)) {
			first = w
		}
	}
	res := chaosResult{takeover: first.done.Sub(pausedAt), refusedAgent: metricSum(a.addr, "pollux_fence_refused_total")}
	for _, w := range writes {
		if w.agent != "a" {
			continue
		}
		if w.refused {
			res.refusedConsul++
		}
		if w.accepted && w.done.After(first.sent) {
			res.lateAccepted = append(res.lateAccepted, w)
		}
	}
	t.Logf("%s, resumed %v after B's first write (%s): B's first write %v after A's pause; A resumed at +%v; A's writes refused by Consul %d, counted by A's fences %.0f",
		point, resumeAfter, first.what, res.takeover.Round(time.Millisecond), resumed.Sub(bFirstAt).Round(time.Millisecond), res.refusedConsul, res.refusedAgent)
	for _, w := range res.lateAccepted {
		t.Errorf("deposed leader's write accepted %v after the new leader's first: %s %s (status %d)", w.done.Sub(first.sent).Round(time.Microsecond), w.target, w.what, w.status)
	}
	// The new leader leaves every job whole: meta, state and published
	// decision agree, no write pending.
	e.waitWhole(t, 90*time.Second, ids...)
	return res
}

// TestChaosPausedLeader pauses the leader at each of the two points of a
// round, resuming it at once and 2 s after the new leader's first write.
// POLLUX_CHAOS_RUNS repeats the four cases (default once).
func TestChaosPausedLeader(t *testing.T) {
	runs := 1
	if v, err := strconv.Atoi(os.Getenv("POLLUX_CHAOS_RUNS")); err == nil && v > 0 {
		runs = v
	}
	start := time.Now()
	var takeovers []time.Duration
	refused := 0.0
	for run := 1; run <= runs; run++ {
		for _, point := range []pausePoint{afterFence, afterWriteAhead} {
			for _, resume := range []time.Duration{0, 2 * time.Second} {
				name := fmt.Sprintf("run%d/%s/resume-%s", run, point, resume)
				t.Run(name, func(t *testing.T) {
					res := runChaos(t, point, resume)
					takeovers = append(takeovers, res.takeover)
					refused += res.refusedAgent
					if point == afterWriteAhead && res.refusedAgent < 1 {
						t.Errorf("A's fences refused nothing after its resumption: its pending registration was neither refused nor made?")
					}
				})
			}
		}
	}
	t.Logf("%d runs of 4 cases in %v; takeover after the pause %v; writes refused by A's fences %.0f in all", runs, time.Since(start).Round(time.Second), takeovers, refused)
}

// firstAccepted returns agent's first accepted write, or nil.
func (l *wireLog) firstAccepted(agent string, after time.Time) *wireWrite {
	var first *wireWrite
	for _, w := range l.all() {
		if w.agent == agent && w.accepted && w.sent.After(after) && (first == nil || w.sent.Before(first.sent)) {
			w := w
			first = &w
		}
	}
	return first
}

// TestFailover measures how long the agents are without a working leader
// when the leader dies (SIGKILL) with the default session TTL: from the
// kill to the new leader's first accepted write. POLLUX_FAILOVER_RUNS sets
// the number of kills (default 2). Run it on a three-server cluster with
// CLUSTER_SERVERS=3 scripts/with-cluster.sh.
func TestFailover(t *testing.T) {
	runs := 2
	if v, err := strconv.Atoi(os.Getenv("POLLUX_FAILOVER_RUNS")); err == nil && v > 0 {
		runs = v
	}
	e := newEnv(t)
	cfg := e.agentConfig(t, "")
	log := newWireLog()
	consulAddr, nomadAddr := os.Getenv("CONSUL_HTTP_ADDR"), os.Getenv("NOMAD_ADDR")
	start := func(name string) *agentProc {
		cp := startWireProxy(t, name, "consul", consulAddr, log, nil)
		np := startWireProxy(t, name, "nomad", nomadAddr, log, nil)
		e.agentEnv = append(os.Environ(), "CONSUL_HTTP_ADDR="+cp.addr, "NOMAD_ADDR=http://"+np.addr)
		return e.startAgent(t, name, cfg)
	}
	leader := start("agent-0")
	leader.waitLogged(t, 60*time.Second, "acquired leadership")
	var took []time.Duration
	for i := 1; i <= runs; i++ {
		name := fmt.Sprintf("agent-%d", i)
		next := start(name)
		next.waitLogged(t, 60*time.Second, "waiting for leadership")
		time.Sleep(2 * time.Second)
		_ = leader.cmd.Process.Signal(syscall.SIGKILL)
		killed := time.Now()
		<-leader.done
		deadline := killed.Add(3*consulDefaultTTL + 30*time.Second)
		var first *wireWrite
		for first == nil {
			if time.Now().After(deadline) {
				t.Fatalf("run %d: no write of the new leader within %v of the kill", i, time.Until(deadline)+time.Since(killed))
			}
			time.Sleep(50 * time.Millisecond)
			first = log.firstAccepted(name, killed)
		}
		d := first.done.Sub(killed)
		took = append(took, d)
		t.Logf("run %d: new leader's first write %v after the leader's death (%s)", i, d.Round(time.Millisecond), first.what)
		// Consul invalidates the dead leader's session 1.5-2 TTL after
		// its death (renewals every TTL/2, timer 2×TTL), then the
		// lock-delay (1s).
		if bound := 2*consulDefaultTTL + time.Second + 5*time.Second; d > bound {
			t.Errorf("run %d: failover took %v, want within %v", i, d, bound)
		}
		leader = next
	}
	sorted := append([]time.Duration(nil), took...)
	slices.Sort(sorted)
	t.Logf("failover over %d kills: median %v, max %v (all %v)", runs, sorted[len(sorted)/2].Round(time.Millisecond), sorted[len(sorted)-1].Round(time.Millisecond), took)
}

// consulDefaultTTL is the agent's default leader session TTL.
const consulDefaultTTL = 10 * time.Second

// TestLeaderlessAfterConsulOutage: Consul (a persistent server) is down
// for 19 s while two agents run; once it is back, a leader writes again
// within TTL + lock-delay + one retry interval: the old holder's session
// is destroyed as soon as Consul answers instead of living on until
// Consul's own timer (reset to 2×TTL by the restart) expires.
func TestLeaderlessAfterConsulOutage(t *testing.T) {
	c := startCluster(t, clusterOptions{PersistentConsul: true})
	e := newEnvOn(t, c)
	cfg := e.agentConfig(t, "")
	log := newWireLog()
	start := func(name string) *agentProc {
		cp := startWireProxy(t, name, "consul", c.env["CONSUL_HTTP_ADDR"], log, nil)
		np := startWireProxy(t, name, "nomad", c.env["NOMAD_ADDR"], log, nil)
		e.agentEnv = c.environ("CONSUL_HTTP_ADDR="+cp.addr, "NOMAD_ADDR=http://"+np.addr)
		return e.startAgent(t, name, cfg)
	}
	a := start("a")
	a.waitLogged(t, 60*time.Second, "acquired leadership")
	b := start("b")
	b.waitLogged(t, 60*time.Second, "waiting for leadership")
	c.fault("stop", "consul")
	time.Sleep(19 * time.Second)
	c.fault("start", "consul") // returns once Consul has a leader
	healthy := time.Now()
	deadline := healthy.Add(60 * time.Second)
	var first *wireWrite
	for first == nil {
		if time.Now().After(deadline) {
			t.Fatalf("no leader wrote within 60s of Consul's return")
		}
		time.Sleep(50 * time.Millisecond)
		if f := log.firstAccepted("a", healthy); f != nil {
			first = f
		}
		if f := log.firstAccepted("b", healthy); f != nil && (first == nil || f.sent.Before(first.sent)) {
			first = f
		}
	}
	d := first.done.Sub(healthy)
	t.Logf("leaderless for %v after Consul was healthy again (first write by %s: %s)", d.Round(time.Millisecond), first.agent, first.what)
	if bound := consulDefaultTTL + time.Second + 3*time.Second; d > bound {
		t.Errorf("no leader for %v after Consul's return, want within TTL + lock-delay + one interval (%v)", d, bound)
	}
}
