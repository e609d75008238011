package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/pollux-nomad/pollux/apps"
	"github.com/pollux-nomad/pollux/data"
	"github.com/pollux-nomad/pollux/emulate"
)

// startProc starts a background process of a test (Prometheus, the Nomad
// Autoscaler) with env: its output kept and logged, its process group
// (the autoscaler's plugins are its children) stopped when the test ends.
func startProc(t *testing.T, name string, env []string, bin string, args ...string) *agentProc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	return startLogged(t, name, name, cmd)
}

// metricLabelled reads the value of the first series of name whose labels
// contain labels from the agent's /metrics, or -1.
func (p *agentProc) metricLabelled(name, labels string) float64 {
	return p.metricWhere(func(series string) bool {
		return strings.HasPrefix(series, name+"{") && strings.Contains(series, labels)
	})
}

// autoscalerBin is the Nomad Autoscaler scripts/install-autoscaler.sh
// builds, and the directory of its external plugins.
func autoscalerBin(t *testing.T) (bin, plugins string) {
	t.Helper()
	cache := os.Getenv("POLLUX_CACHE")
	if cache == "" {
		cache = filepath.Join(os.Getenv("HOME"), ".cache", "pollux")
	}
	bin = filepath.Join(cache, "bin", "nomad-autoscaler")
	plugins = filepath.Join(cache, "bin", "autoscaler-plugins")
	for _, f := range []string{bin, filepath.Join(plugins, "pollux-local-clients")} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%s is missing: run scripts/install-autoscaler.sh (make servers): %v", f, err)
		}
	}
	return bin, plugins
}

// shippedQuery is the check query of deploy/autoscaler/policies/gpu.hcl,
// for the node pool pool instead of "gpu".
func shippedQuery(t *testing.T, pool string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy/autoscaler/policies/gpu.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*query\s*=\s*"((?:[^"\\]|\\.)*)"`).FindSubmatch(src)
	if m == nil {
		t.Fatal("deploy/autoscaler/policies/gpu.hcl has no check query")
	}
	q, err := strconv.Unquote(`"` + string(m[1]) + `"`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(q, `node_pool="gpu"`) {
		t.Fatalf("the shipped query %q does not select node_pool=\"gpu\"", q)
	}
	return strings.ReplaceAll(q, `node_pool="gpu"`, fmt.Sprintf("node_pool=%q", pool))
}

// promQuery runs an instant query on Prometheus and returns its one value
// (-1 if there is none).
func promQuery(addr, q string) (float64, error) {
	resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return -1, err
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Result []struct {
				Value []any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return -1, err
	}
	if len(r.Data.Result) == 0 || len(r.Data.Result[0].Value) < 2 {
		return -1, nil
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	return strconv.ParseFloat(s, 64)
}

// TestCloudAutoscalingChain runs the whole chain of cloud autoscaling on
// the local cluster: the Pollux agent publishes the desired node count,
// a real Prometheus (Debian's) scrapes it, the real Nomad Autoscaler
// reads it with the pass-through strategy of the shipped policy, and its
// target, the pollux-local-clients plugin (written with the autoscaler's
// SDK: its node selection and drain run), starts and stops local Nomad
// clients with fake GPUs, the stand-in for a cloud's instance group.
//
// Scenario: one running client (4 GPUs) and two stopped ones; seven
// emulated training jobs, more work than GPUs. The desired count grows,
// the autoscaler starts the stopped clients, Pollux places jobs on them.
// As the jobs finish the count falls while one long job still trains,
// Pollux empties the surplus nodes, and the autoscaler ("empty" node
// selection) drains and removes them. Checked: the pool grew to 3 nodes
// and went back to 1, shrinking while a job trained; jobs ran on the new
// nodes; every job completed, each restart resumed from its checkpoint;
// no allocation of a job was on a node while it was drained and none was
// migrated by a drain.
func TestCloudAutoscalingChain(t *testing.T) {
	bin, pluginDir := autoscalerBin(t)
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus is missing (Debian package prometheus, scripts/install-deps.sh): %v", err)
	}
	c := startCluster(t, clusterOptions{Clients: 3})
	e := newEnvOn(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	// The instance group starts at one instance: client-2 and client-3
	// are stopped and their nodes purged, as instances that were never
	// launched.
	nodeID := map[string]string{}
	nodes, _, err := e.nomad.Nodes().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		nodeID[n.Name] = n.ID
	}
	for _, name := range []string{"client-2", "client-3"} {
		c.fault("stop", name)
		if _, _, err := e.nomad.Nodes().Purge(nodeID[name], nil); err != nil {
			t.Fatalf("purge %s: %v", name, err)
		}
	}

	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}

	// The Pollux agent, with the autoscaling section for the pool.
	agentCfg := write("pollux.hcl", fmt.Sprintf(`
interval        = "3s"
restart_penalty = "1s"
device          = %q
kv_prefix       = %q
ga {
  population  = 30
  generations = 30
}
autoscaling {
  scale_down_delay = "10s"
  pool "default" {
    gpus_per_node = 4
    min_nodes     = 1
    max_nodes     = 3
  }
}
`, e.device, e.prefix))
	agent := e.startAgent(t, "pollux", agentCfg)

	// Prometheus scraping the agent every second.
	promAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	promCfg := write("prometheus.yml", fmt.Sprintf(`
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: pollux
    static_configs:
      - targets: [%q]
`, agent.addr))
	startProc(t, "prometheus", os.Environ(), prom, "--config.file="+promCfg, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+promAddr, "--log.level=warn")

	// The Nomad Autoscaler: the shipped policy's check, the local
	// instance group as its target.
	query := shippedQuery(t, "default")
	asCfg := write("autoscaler/agent.hcl", fmt.Sprintf(`
log_level  = "DEBUG"
plugin_dir = %q
nomad {
  address = %q
}
http {
  bind_address = "127.0.0.1"
  bind_port    = %d
}
apm "prometheus" {
  driver = "prometheus"
  config = {
    address = "http://%s"
  }
}
strategy "pass-through" {
  driver = "pass-through"
}
target "pollux-local-clients" {
  driver = "pollux-local-clients"
  config = {
    cluster_script = %q
    cluster_dir    = %q
  }
}
`, pluginDir, c.env["NOMAD_ADDR"], freePort(t), promAddr, filepath.Join(repoRoot(t), "scripts", "cluster.sh"), c.dir))
	write("autoscaler/policies/default.hcl", fmt.Sprintf(`
scaling "pollux-default" {
  enabled = true
  type    = "cluster"
  min     = 1
  max     = 3
  policy {
    cooldown            = "5s"
    evaluation_interval = "2s"
    check "pollux_desired_nodes" {
      source       = "prometheus"
      query        = %q
      query_window = "5s"
      strategy "pass-through" {}
    }
    target "pollux-local-clients" {
      instances              = "client-1,client-2,client-3"
      node_pool              = "default"
      node_drain_deadline    = "2m"
      node_selector_strategy = "empty"
      node_purge             = "true"
    }
  }
}
`, query))
	autoscaler := startProc(t, "autoscaler", c.base, bin, "agent", "-config", asCfg, "-policy-dir", filepath.Join(dir, "autoscaler", "policies"))

	// Six emulated training jobs on one 4-GPU node.
	all, err := apps.LoadAll(data.Traces())
	if err != nil {
		t.Fatal(err)
	}
	// Six jobs emulated at 40x and one on at most one GPU at 15x, which
	// still trains when the others are done: the pool shrinks under it.
	var ids []string
	for i, name := range []string{"cifar10", "cifar10", "bert", "cifar10", "bert", "cifar10", "cifar10"} {
		app := all[name]
		speedup, maxGPUs := 40, ""
		if i == 6 {
			speedup, maxGPUs = 15, "1"
		}
		id := e.registerJobWith(fmt.Sprintf("as-%s-%d", name, i), map[string]string{
			"pollux_init_batch_size": fmt.Sprint(app.InitBatchSize), "pollux_max_batch_size": fmt.Sprint(app.MaxBatchSize),
			"pollux_local_bsz_min": fmt.Sprint(app.MinLocalBsz), "pollux_local_bsz_max": fmt.Sprint(app.MaxLocalBsz),
			"pollux_app": name, "pollux_max_gpus": maxGPUs,
		}, func(task *nomadapi.Task) {
			task.Config = map[string]any{"command": polluxBinary(t), "args": []string{"emulate", "-app", name, "-speedup", fmt.Sprint(speedup), "-kv-prefix", e.prefix, "-report-interval", "1s"}}
			task.Env = map[string]string{"CONSUL_HTTP_ADDR": c.env["CONSUL_HTTP_ADDR"]}
		})
		ids = append(ids, id)
	}
	checkpoint := func(id string) emulate.Checkpoint {
		var cp emulate.Checkpoint
		if pair, _, err := e.consul.KV().Get(e.prefix+"jobs/default/"+id+"/checkpoint", nil); err == nil && pair != nil {
			_ = json.Unmarshal(pair.Value, &cp)
		}
		return cp
	}

	// Watch until every job is done and the pool is back at one node.
	var (
		maxNodes, maxDesired  int
		onNew                 = map[string]bool{} // jobs that ran on client-2 or client-3
		violations            []string
		shrunkWhileRunning    bool
		desiredLog            []string
		lastDesired, lastSeen = -1, -1
	)
	ours := map[string]bool{}
	for _, id := range ids {
		ours[id] = true
	}
	done := func() int {
		n := 0
		for _, id := range ids {
			if checkpoint(id).Done {
				n++
			}
		}
		return n
	}
	start := time.Now()
	for {
		if ctx.Err() != nil {
			t.Fatalf("timed out: %d of %d jobs done, nodes seen at most %d, desired at most %d; desired over time %v", done(), len(ids), maxNodes, maxDesired, desiredLog)
		}
		nodes, _, err := e.nomad.Nodes().List(nil)
		if err != nil {
			t.Fatal(err)
		}
		ready := 0
		for _, n := range nodes {
			if n.Status == nomadapi.NodeStatusReady && !n.Drain && n.SchedulingEligibility == nomadapi.NodeSchedulingEligible {
				ready++
			}
			if !n.Drain && n.SchedulingEligibility == nomadapi.NodeSchedulingEligible {
				continue
			}
			// A draining or ineligible node: none of the jobs may be on it.
			allocs, _, err := e.nomad.Nodes().Allocations(n.ID, nil)
			if err != nil {
				continue
			}
			for _, a := range allocs {
				if ours[a.JobID] && !a.ClientTerminalStatus() && !a.ServerTerminalStatus() {
					violations = append(violations, fmt.Sprintf("%s: job %s's allocation %s on node %s while it was drained (drain %v, eligibility %s)",
						time.Since(start).Round(time.Second), a.JobID, a.ID[:8], n.Name, n.Drain, n.SchedulingEligibility))
				}
			}
		}
		maxNodes = max(maxNodes, ready)
		d := int(agent.metricLabelled("pollux_cluster_desired_nodes", `node_pool="default"`))
		maxDesired = max(maxDesired, d)
		if d != lastDesired || ready != lastSeen {
			desiredLog = append(desiredLog, fmt.Sprintf("%s: desired %d, ready %d", time.Since(start).Round(time.Second), d, ready))
			lastDesired, lastSeen = d, ready
		}
		running := 0
		for _, id := range ids {
			allocs, _, err := e.nomad.Jobs().Allocations(id, false, nil)
			if err != nil {
				continue
			}
			for _, a := range runningAllocs(allocs) {
				running++
				if a.NodeName == "client-2" || a.NodeName == "client-3" {
					onNew[id] = true
				}
			}
		}
		if maxNodes == 3 && ready < 3 && running > 0 {
			shrunkWhileRunning = true
		}
		if done() == len(ids) && maxNodes == 3 && ready == 1 && len(nodes) == 1 {
			break
		}
		time.Sleep(time.Second)
	}
	t.Logf("desired and ready nodes over time: %v", desiredLog)
	t.Logf("jobs that ran on the new nodes: %d of %d; the pool shrank while jobs still ran: %v", len(onNew), len(ids), shrunkWhileRunning)

	if maxDesired < 2 {
		t.Errorf("the desired count grew at most to %d, want at least 2 (six jobs on 4 GPUs)", maxDesired)
	}
	if len(onNew) == 0 {
		t.Error("no job ran on a node the autoscaler added")
	}
	if !shrunkWhileRunning {
		t.Error("the pool did not shrink while the long job still trained")
	}
	for _, v := range violations {
		t.Error(v)
	}
	if n, _ := autoscaler.logged("starting instance"); n < 2 {
		t.Errorf("the autoscaler's target started %d instances, want 2", n)
	}
	if n, _ := autoscaler.logged("stopping drained instance"); n < 2 {
		t.Errorf("the autoscaler's target removed %d instances, want 2", n)
	}
	for _, id := range ids {
		cp := checkpoint(id)
		if !cp.Done {
			t.Errorf("%s did not complete: %+v", id, cp)
		}
		if cp.Starts > 1 && cp.ResumedFrom <= 0 {
			t.Errorf("%s restarted without resuming from its checkpoint: %+v", id, cp)
		}
		allocs, _, err := e.nomad.Jobs().Allocations(id, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range allocs {
			full, _, err := e.nomad.Allocations().Info(a.ID, nil)
			if err != nil {
				t.Fatal(err)
			}
			if full.DesiredTransition.ShouldMigrate() {
				t.Errorf("%s: allocation %s on %s was migrated by a drain", id, a.ID[:8], a.NodeName)
			}
		}
		t.Logf("%s: %d starts, resumed from %.0f, %.0f emulated s", id, cp.Starts, cp.ResumedFrom, cp.SimSeconds)
	}
	// The pool is back at its minimum: only one of the group runs.
	out, _ := c.script("status")
	if n := strings.Count(out, ": running"); n != 3 {
		// consul, nomad-server and one client.
		t.Errorf("cluster.sh status after the shrink:\n%s", out)
	}
}

// TestAgentRefusesUnknownAutoscalingPool: an agent whose configuration
// file sizes a node pool the real Nomad does not have refuses to start,
// naming the pool and the pools Nomad has.
func TestAgentRefusesUnknownAutoscalingPool(t *testing.T) {
	e := newEnv(t)
	cfg := filepath.Join(t.TempDir(), "agent.hcl")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
device    = %q
kv_prefix = %q
autoscaling {
  pool "no-such-pool" {
    gpus_per_node = 4
    max_nodes     = 2
  }
}
`, e.device, e.prefix)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, polluxBinary(t), "agent", "-config", cfg, "-http-addr", "")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("agent: %v, want exit status 2\n%s", err, out)
	}
	for _, want := range []string{`autoscaling.pool "no-such-pool": unknown node pool`, "default"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
