package consul_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/pollux-nomad/pollux/consul"
)

// The test binary doubles as a lock holder that a test runs in a child
// process and kills, to observe a takeover after a real death.
const (
	holderEnv       = "POLLUX_CONSUL_TEST_HOLDER"
	holderPrefixEnv = "POLLUX_CONSUL_TEST_HOLDER_PREFIX"
	holderAcquired  = "acquired"
	// holderLifetime bounds a holder a test forgot to kill.
	holderLifetime = 2 * time.Minute
)

func TestMain(m *testing.M) {
	if os.Getenv(holderEnv) != "" {
		os.Exit(runHolder(os.Getenv(holderEnv), os.Getenv(holderPrefixEnv)))
	}
	os.Exit(m.Run())
}

// runHolder acquires the leader lock under prefix as instance, says so on
// stdout, and then holds it until it is killed (or holderLifetime).
func runHolder(instance, prefix string) int {
	raw, err := api.NewClient(api.DefaultConfig())
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 1
	}
	c, err := consul.New(raw, consul.Config{Prefix: prefix, Instance: instance, Logger: testLogger()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), holderLifetime)
	defer cancel()
	if _, err := c.Leader().Acquire(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 1
	}
	fmt.Println(holderAcquired)
	<-ctx.Done()
	return 0
}

// testLogger logs to stderr, at the level of POLLUX_TEST_LOG (default
// info); go test shows it only for failing packages or with -v.
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
		t.Fatalf("no cluster: run through scripts/with-cluster.sh or make test")
	}
	raw, err := api.NewClient(api.DefaultConfig())
	if err != nil {
		t.Fatalf("failed to create consul api client for CONSUL_HTTP_ADDR=%s: %v", os.Getenv("CONSUL_HTTP_ADDR"), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	leader, err := raw.Status().LeaderWithQueryOptions((&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		t.Fatalf("consul at CONSUL_HTTP_ADDR=%s cannot be reached: %v", os.Getenv("CONSUL_HTTP_ADDR"), err)
	}
	if leader == "" {
		t.Fatalf("consul at CONSUL_HTTP_ADDR=%s has no leader", os.Getenv("CONSUL_HTTP_ADDR"))
	}
	return raw
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// testPrefix returns a prefix of its own for the test,
// "pollux-test/<test name>-<random>/", and deletes everything under it
// when the test ends.
func testPrefix(t *testing.T, raw *api.Client) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("failed to make a random prefix: %v", err)
	}
	prefix := "pollux-test/" + unsafeChars.ReplaceAllString(t.Name(), "_") + "-" + hex.EncodeToString(b) + "/"
	t.Cleanup(func() {
		if _, err := raw.KV().DeleteTree(prefix, nil); err != nil {
			t.Errorf("failed to clean up %s: %v", prefix, err)
		}
	})
	return prefix
}

// newClient returns a consul.Client on raw with cfg, failing the test on
// error. An empty cfg.Prefix gets a fresh test prefix.
func newClient(t *testing.T, raw *api.Client, cfg consul.Config) *consul.Client {
	t.Helper()
	if cfg.Prefix == "" {
		cfg.Prefix = testPrefix(t, raw)
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger().Named(t.Name())
	}
	c, err := consul.New(raw, cfg)
	if err != nil {
		t.Fatalf("failed to create client: %v", err)
	}
	return c
}

// keysUnder lists the keys under prefix, relative to it.
func keysUnder(t *testing.T, raw *api.Client, prefix string) []string {
	t.Helper()
	keys, _, err := raw.KV().Keys(prefix, "", nil)
	if err != nil {
		t.Fatalf("failed to list keys under %s: %v", prefix, err)
	}
	out := []string{}
	for _, k := range keys {
		out = append(out, strings.TrimPrefix(k, prefix))
	}
	return out
}

// proxy is a TCP proxy between a client and Consul that a test can cut
// (every connection closed, new ones refused) and restore, to make Consul
// unreachable for one client while the others still reach it.
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
}

// startProxy listens on 127.0.0.1 and forwards to target (host:port).
func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("failed to listen: %v", err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.Cut()
	})
	return p
}

// Addr is the proxy's address.
func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut := p.cut
		p.mu.Unlock()
		if cut {
			in.Close()
			continue
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

func (p *proxy) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// Cut closes every connection and refuses new ones until Restore.
func (p *proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Restore lets connections through again.
func (p *proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

// consulTarget returns host:port of CONSUL_HTTP_ADDR.
func consulTarget(t *testing.T) string {
	t.Helper()
	addr := os.Getenv("CONSUL_HTTP_ADDR")
	for _, scheme := range []string{"http://", "https://", "unix://"} {
		if strings.HasPrefix(addr, scheme) {
			if scheme != "http://" {
				t.Fatalf("the proxy test needs a plain http CONSUL_HTTP_ADDR, got %s", addr)
			}
			addr = strings.TrimPrefix(addr, scheme)
		}
	}
	return addr
}
