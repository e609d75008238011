package report_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/worker/go/report"
)

// testLogger logs to stderr at the level of POLLUX_TEST_LOG (default
// info); go test shows it only for failing tests or with -v.
func testLogger() hclog.Logger {
	level := hclog.LevelFromString(os.Getenv("POLLUX_TEST_LOG"))
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	return hclog.New(&hclog.LoggerOptions{Name: "test", Output: os.Stderr, Level: level})
}

// rawClient returns an API client for the cluster named by
// CONSUL_HTTP_ADDR, after checking that Consul answers and has a leader.
func rawClient(t *testing.T) *api.Client {
	t.Helper()
	// POLLUX_E2E=1 (scripts/with-cluster.sh, make test) asks for the
	// tests that need a real cluster; without it they skip.
	if os.Getenv("POLLUX_E2E") != "1" {
		t.Skip("needs a local Consul: run through scripts/with-cluster.sh or make test (POLLUX_E2E=1)")
	}
	if os.Getenv("CONSUL_HTTP_ADDR") == "" {
		t.Fatalf("no cluster: run through scripts/with-cluster.sh or make test (CONSUL_HTTP_ADDR is not set)")
	}
	raw, err := api.NewClient(api.DefaultConfig())
	if err != nil {
		t.Fatalf("failed to create consul api client for CONSUL_HTTP_ADDR=%s: %v", os.Getenv("CONSUL_HTTP_ADDR"), err)
	}
	waitLeader(t, raw, 10*time.Second)
	return raw
}

// waitLeader waits until Consul answers KV reads (it has a leader).
func waitLeader(t *testing.T, raw *api.Client, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, _, err := raw.KV().Get("pollux-test/ready", (&api.QueryOptions{}).WithContext(ctx))
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("consul at %s is not ready after %v: %v", raw.Headers().Get("Host"), timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// testPrefix returns a prefix of the test's own,
// "pollux-test/<test name>-<random>/", and deletes everything under it when
// the test ends.
func testPrefix(t *testing.T, raw *api.Client) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("failed to make a random prefix: %v", err)
	}
	prefix := "pollux-test/" + unsafeChars.ReplaceAllString(t.Name(), "_") + "-" + hex.EncodeToString(b) + "/"
	t.Cleanup(func() {
		if _, err := raw.KV().DeleteTree(prefix, nil); err != nil {
			t.Logf("failed to clean up %s: %v", prefix, err)
		}
	})
	return prefix
}

// newReporter returns a Reporter for job "train" in namespace "default"
// under cfg.Prefix (a fresh test prefix if empty), with a test logger and a
// background writer that stops when the test ends.
func newReporter(t *testing.T, raw *api.Client, cfg report.Config) *report.Reporter {
	t.Helper()
	cfg.Consul = raw
	if cfg.Prefix == "" {
		cfg.Prefix = testPrefix(t, raw)
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	if cfg.JobID == "" {
		cfg.JobID = "train"
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger().Named(t.Name())
	}
	r, err := report.New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("failed to create reporter: %v", err)
	}
	return r
}

// readDoc returns the stored document at key, parsed, and its bytes; it
// fails the test if it is absent or invalid.
func readDoc(t *testing.T, raw *api.Client, key string) (*contract.Metrics, string) {
	t.Helper()
	pair, _, err := raw.KV().Get(key, nil)
	if err != nil {
		t.Fatalf("failed to read %s: %v", key, err)
	}
	if pair == nil {
		t.Fatalf("%s: no document", key)
	}
	d, err := contract.ParseMetrics(pair.Value)
	if err != nil {
		t.Fatalf("%s: %v\n%s", key, err, pair.Value)
	}
	return d, string(pair.Value)
}

// entries returns a document's profile by configuration.
func entries(d *contract.Metrics) map[report.StepConfig]contract.ProfileEntry {
	out := map[report.StepConfig]contract.ProfileEntry{}
	for _, e := range d.Profile {
		out[report.StepConfig{NumNodes: e.NumNodes, NumReplicas: e.NumReplicas, LocalBsz: e.LocalBsz, AccumSteps: e.AccumSteps}] = e
	}
	return out
}

// agent is a Consul agent of the test's own, on free local ports, that the
// test stops and starts again on the same ports. It never touches the
// shared cluster.
type agent struct {
	t          *testing.T
	bin        string
	args       []string
	dir        string
	addr       string
	persistent bool
	cmd        *exec.Cmd
	exited     chan struct{}
}

// consulBinary returns the Consul binary that scripts/install-servers.sh
// installs, or the one on PATH.
func consulBinary(t *testing.T) string {
	t.Helper()
	cache := os.Getenv("POLLUX_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "pollux")
	}
	if bin := filepath.Join(cache, "bin", "consul"); fileExists(bin) {
		return bin
	}
	bin, err := exec.LookPath("consul")
	if err != nil {
		t.Fatalf("no consul binary in %s/bin or on PATH: run make servers", cache)
	}
	return bin
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("failed to find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startAgent starts a Consul agent: with persistent, a single server that
// keeps its data in a data dir across restarts; else a -dev agent, whose
// store is in memory and lost with every restart.
func startAgent(t *testing.T, persistent bool) *agent {
	t.Helper()
	http, lan, wan, server := freePort(t), freePort(t), freePort(t), freePort(t)
	a := &agent{t: t, bin: consulBinary(t), dir: t.TempDir(), persistent: persistent,
		addr: "127.0.0.1:" + strconv.Itoa(http)}
	a.args = []string{"agent", "-bind", "127.0.0.1", "-client", "127.0.0.1",
		"-hcl", "disable_update_check = true", "-log-level", "warn",
		"-http-port", strconv.Itoa(http), "-dns-port", "-1", "-grpc-port", "-1", "-grpc-tls-port", "-1",
		"-serf-lan-port", strconv.Itoa(lan), "-serf-wan-port", strconv.Itoa(wan),
		"-server-port", strconv.Itoa(server), "-data-dir", filepath.Join(a.dir, "data")}
	if persistent {
		a.args = append(a.args, "-server", "-bootstrap-expect", "1", "-node", "pollux-report-test",
			"-hcl", "performance { raft_multiplier = 1 }")
	} else {
		a.args = append(a.args, "-dev")
	}
	t.Cleanup(a.stop)
	a.start()
	return a
}

// client returns an API client for the agent.
func (a *agent) client() *api.Client {
	a.t.Helper()
	c, err := api.NewClient(&api.Config{Address: a.addr})
	if err != nil {
		a.t.Fatalf("failed to create consul api client for %s: %v", a.addr, err)
	}
	return c
}

// start starts the agent and waits until it serves KV reads.
func (a *agent) start() {
	a.t.Helper()
	log, err := os.OpenFile(filepath.Join(a.dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		a.t.Fatalf("failed to open agent log: %v", err)
	}
	defer log.Close()
	a.cmd = exec.Command(a.bin, a.args...)
	a.cmd.Stdout, a.cmd.Stderr = log, log
	if err := a.cmd.Start(); err != nil {
		a.t.Fatalf("failed to start consul agent: %v", err)
	}
	a.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) {
		_ = cmd.Wait()
		close(exited)
	}(a.cmd, a.exited)
	deadline := time.Now().Add(30 * time.Second)
	c := a.client()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, _, err := c.KV().Get("ready", (&api.QueryOptions{}).WithContext(ctx))
		cancel()
		if err == nil {
			return
		}
		select {
		case <-a.exited:
			out, _ := os.ReadFile(filepath.Join(a.dir, "agent.log"))
			a.t.Fatalf("consul agent exited at start-up:\n%s", out)
		default:
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("consul agent at %s not ready after 30s: %v", a.addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop kills the agent (by its PID) and waits for it to exit.
func (a *agent) stop() {
	if a.cmd == nil {
		return
	}
	if err := syscall.Kill(a.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		a.t.Errorf("failed to kill consul agent %d: %v", a.cmd.Process.Pid, err)
	}
	select {
	case <-a.exited:
	case <-time.After(10 * time.Second):
		a.t.Errorf("consul agent %d did not exit", a.cmd.Process.Pid)
	}
	a.cmd = nil
}

// eventually calls f every 20ms until it returns nil or timeout passes,
// and fails the test with f's last error.
func eventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// near reports whether got is within a relative tolerance tol of want.
func near(got, want, tol float64) bool {
	d := got - want
	if d < 0 {
		d = -d
	}
	return d <= tol*max(1, want, -want)
}
