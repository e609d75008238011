package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"
)

// clusterOptions describe a dedicated local cluster that one test starts
// for itself (scripts/cluster.sh up with its own directory and ports), for
// tests that break servers or need servers configured differently from the
// shared cluster of make test.
type clusterOptions struct {
	// Clients is the number of Nomad clients (default 2), each with 4 fake
	// GPUs.
	Clients int
	// PersistentConsul runs Consul as a one-node server with a data dir, so
	// its KV store survives a restart (POLLUX_CONSUL_DEV=0).
	PersistentConsul bool
	// Env holds further variables for cluster.sh (for example POLLUX_ACL=1).
	Env []string
}

// testCluster is a running dedicated cluster.
type testCluster struct {
	t   *testing.T
	dir string
	// env is what cluster.sh wrote to <dir>/env: NOMAD_ADDR,
	// CONSUL_HTTP_ADDR, POLLUX_DEVICE, ... for clients of this cluster.
	env  map[string]string
	base []string // cluster.sh's environment
}

var (
	offsetMu   sync.Mutex
	offsetNext int
)

// clusterOffsets are the POLLUX_PORT_OFFSETs dedicated clusters rotate
// through, so that a cluster started right after another does not wait for
// ports its predecessor's killed agents still hold. They clash neither with
// each other nor with the shared cluster (offset 11000); 9000 is left to
// the secure (ACL/TLS) cluster.
var clusterOffsets = []int{7000, 8000, 10000}

// POLLUX_E2E_CLUSTER_OFFSETS (comma-separated) replaces clusterOffsets, so
// that developers sharing one machine give their dedicated clusters ports
// of their own.
func nextOffset() int {
	offsetMu.Lock()
	defer offsetMu.Unlock()
	offsets := clusterOffsets
	if v := os.Getenv("POLLUX_E2E_CLUSTER_OFFSETS"); v != "" {
		offsets = nil
		for _, f := range strings.Split(v, ",") {
			if o, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && o > 0 {
				offsets = append(offsets, o)
			}
		}
		if len(offsets) == 0 {
			offsets = clusterOffsets
		}
	}
	o := offsets[offsetNext%len(offsets)]
	offsetNext++
	return o
}

// repoRoot is the repository's top directory (tests run in e2e/).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// startCluster brings up a dedicated cluster and stops it (every agent,
// job and task) when the test ends. A cluster that cannot start fails the
// test with cluster.sh's output.
func startCluster(t *testing.T, o clusterOptions) *testCluster {
	t.Helper()
	return startClusterAt(t, o, nextOffset())
}

// startClusterAt is startCluster on a given port offset.
func startClusterAt(t *testing.T, o clusterOptions, offset int) *testCluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "pollux-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	// cluster.sh creates the directory itself and refuses stale state.
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if o.Clients == 0 {
		o.Clients = 2
	}
	c := &testCluster{t: t, dir: dir}
	c.base = append(os.Environ(),
		"POLLUX_CLUSTER_DIR="+dir,
		fmt.Sprintf("POLLUX_PORT_OFFSET=%d", offset),
		fmt.Sprintf("NOMAD_CLIENTS=%d", o.Clients),
	)
	if o.PersistentConsul {
		c.base = append(c.base, "POLLUX_CONSUL_DEV=0")
	}
	c.base = append(c.base, o.Env...)
	t.Cleanup(func() {
		if out, err := c.script("down"); err != nil {
			t.Errorf("cluster.sh down: %v\n%s", err, out)
		}
	})
	start := time.Now()
	if out, err := c.script("up"); err != nil {
		t.Fatalf("dedicated cluster did not start (offset %d): %v\n%s", offset, err, out)
	}
	c.env = readEnvFile(t, filepath.Join(dir, "env"))
	t.Logf("dedicated cluster up in %s: %s, %s", time.Since(start).Round(100*time.Millisecond), c.env["NOMAD_ADDR"], c.env["CONSUL_HTTP_ADDR"])
	return c
}

// script runs scripts/cluster.sh with args for this cluster.
func (c *testCluster) script(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(repoRoot(c.t), "scripts", "cluster.sh"), args...)
	cmd.Env = c.base
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// fault runs one fault action (stop, kill, start, pause, resume) on one
// agent (consul, nomad-server, client-<i>) and fails the test if it fails.
func (c *testCluster) fault(action, agent string) {
	c.t.Helper()
	start := time.Now()
	out, err := c.script(action, agent)
	if err != nil {
		c.t.Fatalf("cluster.sh %s %s: %v\n%s", action, agent, err, out)
	}
	c.t.Logf("cluster.sh %s %s (%s): %s", action, agent, time.Since(start).Round(10*time.Millisecond), strings.TrimSpace(out))
}

// readEnvFile parses the export lines cluster.sh writes.
func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("cluster env: %v", err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimPrefix(strings.TrimSpace(sc.Text()), "export ")
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = strings.Trim(v, `"'`)
		}
	}
	return env
}

// environ is os.Environ() with this cluster's variables (and extra
// KEY=VALUE pairs) in place of the shared cluster's, for agent processes.
func (c *testCluster) environ(extra ...string) []string {
	over := map[string]string{}
	for k, v := range c.env {
		over[k] = v
	}
	for _, kv := range extra {
		if k, v, ok := strings.Cut(kv, "="); ok {
			over[k] = v
		}
	}
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := over[k]; !ok {
			out = append(out, kv)
		}
	}
	for k, v := range over {
		out = append(out, k+"="+v)
	}
	return out
}

// apiClients returns Nomad and Consul API clients for this cluster.
func (c *testCluster) apiClients() (*nomadapi.Client, *consulapi.Client) {
	c.t.Helper()
	nc := nomadapi.DefaultConfig()
	nc.Address = c.env["NOMAD_ADDR"]
	if tok := c.env["NOMAD_TOKEN"]; tok != "" {
		nc.SecretID = tok
	}
	if ca := c.env["NOMAD_CACERT"]; ca != "" {
		nc.TLSConfig = &nomadapi.TLSConfig{CACert: ca, ClientCert: c.env["NOMAD_CLIENT_CERT"], ClientKey: c.env["NOMAD_CLIENT_KEY"]}
	}
	n, err := nomadapi.NewClient(nc)
	if err != nil {
		c.t.Fatalf("nomad api client: %v", err)
	}
	cc := consulapi.DefaultConfig()
	cc.Address = c.env["CONSUL_HTTP_ADDR"]
	if tok := c.env["CONSUL_HTTP_TOKEN"]; tok != "" {
		cc.Token = tok
	}
	if c.env["CONSUL_HTTP_SSL"] == "true" {
		cc.Scheme = "https"
		cc.TLSConfig = consulapi.TLSConfig{CAFile: c.env["CONSUL_CACERT"], CertFile: c.env["CONSUL_CLIENT_CERT"], KeyFile: c.env["CONSUL_CLIENT_KEY"]}
	}
	k, err := consulapi.NewClient(cc)
	if err != nil {
		c.t.Fatalf("consul api client: %v", err)
	}
	return n, k
}
