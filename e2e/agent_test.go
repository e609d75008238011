package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// polluxBinary builds cmd/pollux once per test run.
func polluxBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pollux-e2e-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "pollux")
		out, err := exec.Command("go", "build", "-o", binPath, "../cmd/pollux").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// agentProc is one `pollux agent` process.
type agentProc struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}

	mu  sync.Mutex
	out []string // every line the agent logged
}

// logged returns how many of the agent's log lines so far contain all of
// the given substrings, and the last such line.
func (p *agentProc) logged(subs ...string) (int, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, last := 0, ""
next:
	for _, l := range p.out {
		for _, s := range subs {
			if !strings.Contains(l, s) {
				continue next
			}
		}
		n++
		last = l
	}
	return n, last
}

// waitLogged waits until the agent logged a line containing all subs and
// returns it; it fails the test after timeout.
func (p *agentProc) waitLogged(t *testing.T, timeout time.Duration, subs ...string) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if n, line := p.logged(subs...); n > 0 {
			return line
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent did not log a line with %q within %s", subs, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (e *env) startAgent(t *testing.T, name, configPath string) *agentProc {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	args := []string{"agent", "-config", configPath, "-http-addr", addr, "-log-level", "info"}
	if e.agentDebug {
		args = append(args, "-enable-debug")
	}
	args = append(args, e.agentArgs...)
	cmd := exec.Command(polluxBinary(t), args...)
	cmd.Env = os.Environ()
	if e.agentEnv != nil {
		cmd.Env = e.agentEnv
	}
	p := startLogged(t, "agent "+name, name, cmd)
	p.addr = addr
	return p
}

// startLogged starts cmd in a process group of its own, keeps every line
// it writes (logged to the test under tag) and stops the group when the
// test ends: SIGTERM, then SIGKILL after 10 s.
func startLogged(t *testing.T, what, tag string, cmd *exec.Cmd) *agentProc {
	t.Helper()
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", what, err)
	}
	p := &agentProc{cmd: cmd, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.out = append(p.out, sc.Text())
			p.mu.Unlock()
			t.Logf("[%s] %s", tag, sc.Text())
		}
	}()
	go func() { _ = cmd.Wait(); pw.Close(); close(p.done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	})
	return p
}

// metric reads one unlabelled value from the agent's /metrics, or -1.
func (p *agentProc) metric(name string) float64 {
	return p.metricWhere(func(series string) bool { return series == name })
}

// metricWhere reads the value of the first series of the agent's /metrics
// (name and labels, as exposed) for which match is true, or -1.
func (p *agentProc) metricWhere(match func(series string) bool) float64 {
	resp, err := http.Get("http://" + p.addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && match(f[0]) {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return -1
}

// TestTwoAgentsOneLeader: two agents run; only the
// leader runs rounds; SIGKILL the leader, the other takes over within
// about twice the session TTL and goes on.
func TestTwoAgentsOneLeader(t *testing.T) {
	e := newEnv(t)
	id := e.registerJob("leader", nil)
	e.putMetrics(id, e.profileDoc("cifar10", []int{1}, []int{2}))
	cfg := filepath.Join(t.TempDir(), "pollux.json")
	doc := fmt.Sprintf(`{"interval":"2s","device":%q,"kv_prefix":%q,"ga":{"population":30,"generations":30}}`, e.device, e.prefix)
	if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	a := e.startAgent(t, "a", cfg)
	b := e.startAgent(t, "b", cfg)

	// Wait for one leader with rounds.
	var leader, follower *agentProc
	deadline := time.Now().Add(60 * time.Second)
	for leader == nil {
		if time.Now().After(deadline) {
			t.Fatalf("no leader: a leader=%v rounds=%v, b leader=%v rounds=%v", a.metric("pollux_leader"), a.metric("pollux_rounds_total"), b.metric("pollux_leader"), b.metric("pollux_rounds_total"))
		}
		switch {
		case a.metric("pollux_leader") == 1 && a.metric("pollux_rounds_total") >= 2:
			leader, follower = a, b
		case b.metric("pollux_leader") == 1 && b.metric("pollux_rounds_total") >= 2:
			leader, follower = b, a
		}
		time.Sleep(300 * time.Millisecond)
	}
	// For a while, only the leader runs rounds.
	time.Sleep(5 * time.Second)
	if follower.metric("pollux_leader") != 0 || follower.metric("pollux_rounds_total") != 0 {
		t.Fatalf("the follower leads or ran rounds: leader=%v rounds=%v", follower.metric("pollux_leader"), follower.metric("pollux_rounds_total"))
	}
	// The job got its allocation from the leader.
	ctx := context.Background()
	job, err := e.cluster.ReadJob(ctx, ref(id))
	if err != nil || len(job.Placement) == 0 {
		t.Fatalf("job not placed by the leader: %+v %v", job, err)
	}

	// Kill the leader without any chance to release the lock.
	killed := time.Now()
	if err := leader.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-leader.done
	for follower.metric("pollux_leader") != 1 || follower.metric("pollux_rounds_total") < 2 {
		if time.Since(killed) > 60*time.Second {
			t.Fatalf("the follower did not take over within 60s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("takeover after SIGKILL of the leader: %s (session TTL 10s)", time.Since(killed).Round(100*time.Millisecond))
	if took := time.Since(killed); took > 30*time.Second {
		t.Errorf("takeover took %s, want about twice the 10s session TTL", took)
	}
	// The new leader goes on: the status in Consul is written by it.
	time.Sleep(3 * time.Second)
	raw, _, err := e.kv.Get(ctx, "status")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), fmt.Sprintf("pid-%d", follower.cmd.Process.Pid)) {
		t.Errorf("status not written by the new leader (pid %d): %.200s", follower.cmd.Process.Pid, raw)
	}
}
