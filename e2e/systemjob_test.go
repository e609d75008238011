package e2e

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/pollux-nomad/pollux/consul"
	"github.com/pollux-nomad/pollux/contract"
)

// The system job, deployed as docs/operators.md documents: deploy/pollux.nomad.hcl
// itself, parsed by Nomad (/v1/jobs/parse) with variables, the binary
// served as a tarball from a local HTTP server. The local cluster's clients
// share 127.0.0.1, so the test asks for a dynamic port (http_port = 0),
// raw_exec (no exec isolation here) and the cluster's server addresses.

// systemJobID is the job's name in deploy/pollux.nomad.hcl.
const systemJobID = "pollux"

// artifactServer serves bin/pollux as pollux.tar.gz and returns its URL.
func artifactServer(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := polluxBinary(t)
	f, err := os.Create(filepath.Join(dir, "pollux.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	raw, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.WriteHeader(&tar.Header{Name: "pollux", Mode: 0o755, Size: int64(len(raw)), ModTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(raw); err != nil {
		t.Fatal(err)
	}
	for _, c := range []io.Closer{tw, zw, f} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(srv.Close)
	return srv.URL + "/pollux.tar.gz"
}

// systemJob parses deploy/pollux.nomad.hcl with Nomad's own parser and the
// given variables (name = HCL value).
func (e *env) systemJob(t *testing.T, vars map[string]string) *nomadapi.Job {
	t.Helper()
	var b strings.Builder
	for k, v := range vars {
		fmt.Fprintf(&b, "%s = %s\n", k, v)
	}
	job, err := e.nomad.Jobs().ParseHCLOpts(&nomadapi.JobsParseRequest{
		JobHCL: readRepoFile(t, "deploy/pollux.nomad.hcl"), Variables: b.String(), Canonicalize: true,
	})
	if err != nil {
		t.Fatalf("nomad could not parse deploy/pollux.nomad.hcl with %s: %v", b.String(), err)
	}
	return job
}

// hclString quotes s as an HCL string (HCL's escapes are Go's, and "${"
// and "%{" start templates).
func hclString(s string) string {
	q := strconv.Quote(s)
	return strings.NewReplacer("${", "$${", "%{", "%%{").Replace(q)
}

// instance is one running allocation of the system job.
type instance struct {
	alloc *nomadapi.Allocation
	addr  string // 127.0.0.1:<dynamic port>
}

func (i instance) get(path string) (int, string) {
	resp, err := http.Get("http://" + i.addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metric reads one unlabelled value from the instance's /metrics, or -1.
func (i instance) metric(name string) float64 {
	code, body := i.get("/metrics")
	if code != http.StatusOK {
		return -1
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == name {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return -1
}

// instances waits until the system job runs n allocations on n distinct
// nodes, none of them in skip, and returns them with their HTTP address.
func (e *env) instances(t *testing.T, n int, timeout time.Duration, skip ...string) []instance {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		stubs, _, err := e.nomad.Jobs().Allocations(systemJobID, false, nil)
		var out []instance
		nodes := map[string]bool{}
	next:
		for _, s := range stubs {
			if err != nil || s.ClientStatus != "running" || s.DesiredStatus != "run" {
				continue
			}
			for _, id := range skip {
				if s.ID == id {
					continue next
				}
			}
			a, _, err := e.nomad.Allocations().Info(s.ID, nil)
			if err != nil || a.AllocatedResources == nil {
				continue
			}
			for _, p := range a.AllocatedResources.Shared.Ports {
				if p.Label == "http" && p.Value > 0 {
					out = append(out, instance{alloc: a, addr: fmt.Sprintf("127.0.0.1:%d", p.Value)})
					nodes[a.NodeID] = true
				}
			}
		}
		if len(out) == n && len(nodes) == n {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("system job: %d running instances on %d nodes after %s, want %d on %d (err %v)", len(out), len(nodes), timeout, n, n, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// leaderOf waits until exactly one instance says it leads (pollux_leader 1,
// with rounds) and the others say they do not, and returns its index.
func leaderOf(t *testing.T, insts []instance, timeout time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		leaders, followers := []int{}, 0
		for i, in := range insts {
			switch in.metric("pollux_leader") {
			case 1:
				if in.metric("pollux_rounds_total") >= 1 {
					leaders = append(leaders, i)
				}
			case 0:
				followers++
			}
		}
		if len(leaders) == 1 && followers == len(insts)-1 {
			return leaders[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("not exactly one leader within %s: leaders %v, followers %d of %d", timeout, leaders, followers, len(insts))
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// allocLog returns an allocation's task log (stderr: hclog writes there)
// from the client's data directory.
func allocLog(t *testing.T, clusterDir, allocID, task string) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(clusterDir, "*", "alloc", allocID, "alloc", "logs", task+".stderr.*"))
	var b strings.Builder
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err == nil {
			b.Write(raw)
		}
	}
	return b.String()
}

// allocLogWith polls a task's log until it holds every one of want or
// within has passed, and returns the last log read: an instance logs a
// moment after the state the test sees (a lock held, a port open).
func allocLogWith(t *testing.T, clusterDir, allocID, task string, within time.Duration, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		log := allocLog(t, clusterDir, allocID, task)
		all := true
		for _, w := range want {
			all = all && strings.Contains(log, w)
		}
		if all || time.Now().After(deadline) {
			return log
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// lockHolder reads the leader lock's key: its value (the holder's
// instance name) and session ("" when free).
func (e *env) lockHolder(t *testing.T) (string, string) {
	t.Helper()
	pair, _, err := e.consul.KV().Get(e.prefix+"leader", nil)
	if err != nil {
		t.Fatalf("read the leader lock: %v", err)
	}
	if pair == nil {
		return "", ""
	}
	return string(pair.Value), pair.Session
}

// TestSystemJob deploys deploy/pollux.nomad.hcl on the local cluster.
func TestSystemJob(t *testing.T) {
	e := newEnv(t)
	dir := os.Getenv("POLLUX_CLUSTER_DIR")
	if dir == "" {
		t.Fatal("POLLUX_CLUSTER_DIR is not set: run through scripts/with-cluster.sh")
	}
	runSystemJob(t, e, dir, nil)
}

// TestSystemJobACL deploys the file on a cluster with ACLs (default deny):
// the agents get their least-privilege tokens (deploy/acl/) from the
// Nomad variable nomad/jobs/pollux through the job's workload identity
// (tokens_from_variable = true).
func TestSystemJobACL(t *testing.T) {
	offset := secureOffset
	if v, err := strconv.Atoi(os.Getenv("POLLUX_PORT_OFFSET")); err == nil {
		offset = v + 500 // beside this developer's own cluster
	}
	c := startClusterAt(t, clusterOptions{Env: []string{"POLLUX_ACL=1"}}, offset)
	e := newEnvOn(t, c) // management tokens, for the test itself
	e.usePrefix(consul.DefaultPrefix)
	nomadRules, consulRules := readRepoFile(t, "deploy/acl/nomad-policy.hcl"), readRepoFile(t, "deploy/acl/consul-policy.hcl")
	if _, err := e.nomad.ACLPolicies().Upsert(&nomadapi.ACLPolicy{Name: "pollux", Rules: nomadRules}, nil); err != nil {
		t.Fatalf("nomad acl policy: %v", err)
	}
	if _, _, err := e.consul.ACL().PolicyCreate(&consulapi.ACLPolicy{Name: "pollux", Rules: consulRules}, nil); err != nil {
		t.Fatalf("consul acl policy: %v", err)
	}
	ntok, _, err := e.nomad.ACLTokens().Create(&nomadapi.ACLToken{Name: "pollux", Type: "client", Policies: []string{"pollux"}}, nil)
	if err != nil {
		t.Fatalf("nomad token: %v", err)
	}
	ctok, _, err := e.consul.ACL().TokenCreate(&consulapi.ACLToken{Description: "pollux", Policies: []*consulapi.ACLTokenPolicyLink{{Name: "pollux"}}}, nil)
	if err != nil {
		t.Fatalf("consul token: %v", err)
	}
	if _, _, err := e.nomad.Variables().Create(&nomadapi.Variable{Path: "nomad/jobs/pollux",
		Items: nomadapi.VariableItems{"nomad_token": ntok.SecretID, "consul_token": ctok.SecretID}}, nil); err != nil {
		t.Fatalf("nomad var put nomad/jobs/pollux: %v", err)
	}
	runSystemJob(t, e, c.dir, []string{ntok.SecretID, ctok.SecretID})
}

// runSystemJob deploys and exercises the system job; with tokens, the
// agents must get exactly those from the Nomad variable.
func runSystemJob(t *testing.T, e *env, clusterDir string, tokens []string) {
	acl := tokens != nil
	config := fmt.Sprintf("interval = \"3s\"\ndevice = %q\nkv_prefix = %q\nga {\n  population = 30\n  generations = 30\n}\n", e.device, e.prefix)
	nomadAddr, consulAddr := e.nomad.Address(), os.Getenv("CONSUL_HTTP_ADDR")
	if e.tc != nil {
		consulAddr = e.tc.env["CONSUL_HTTP_ADDR"]
	}
	vars := map[string]string{
		"artifact":             hclString(artifactServer(t)),
		"driver":               hclString("raw_exec"),
		"http_port":            "0",
		"nomad_addr":           hclString(nomadAddr),
		"consul_addr":          hclString(consulAddr),
		"config":               hclString(config),
		"tokens_from_variable": strconv.FormatBool(acl),
		"check_interval":       hclString("1s"),
	}
	job := e.systemJob(t, vars)
	if *job.ID != systemJobID || *job.Type != "system" {
		t.Fatalf("parsed job %q of type %q, want %q, system", *job.ID, *job.Type, systemJobID)
	}
	task := job.TaskGroups[0].Tasks[0]
	if task.Driver != "raw_exec" || len(job.TaskGroups[0].Networks[0].DynamicPorts) != 1 || len(job.TaskGroups[0].Networks[0].ReservedPorts) != 0 {
		t.Fatalf("variables not applied: driver %q, network %+v", task.Driver, job.TaskGroups[0].Networks[0])
	}
	if hasTokens := len(task.Templates) == 2; hasTokens != acl {
		t.Fatalf("tokens_from_variable=%v but the task has %d templates", acl, len(task.Templates))
	}
	// The defaults are still those of a real cluster.
	def := e.systemJob(t, map[string]string{"artifact": hclString("https://example.internal/pollux.tar.gz")})
	if d := def.TaskGroups[0]; d.Tasks[0].Driver != "exec" || len(d.Networks[0].ReservedPorts) != 1 || d.Networks[0].ReservedPorts[0].Value != 9505 || len(d.Tasks[0].Templates) != 1 {
		t.Fatalf("defaults changed: driver %q, network %+v, %d templates", d.Tasks[0].Driver, d.Networks[0], len(d.Tasks[0].Templates))
	}
	if _, _, err := e.nomad.Jobs().Register(job, nil); err != nil {
		t.Fatalf("register the system job: %v", err)
	}
	e.jobs = append(e.jobs, systemJobID)
	start := time.Now()

	// One instance per client, exactly one leader.
	insts := e.instances(t, 2, 120*time.Second)
	li := leaderOf(t, insts, 60*time.Second)
	leader, follower := insts[li], insts[1-li]
	t.Logf("system job: 2 instances (%s, %s), leader %s after %s", insts[0].addr, insts[1].addr, leader.alloc.ID[:8], time.Since(start).Round(100*time.Millisecond))
	holder, session := e.lockHolder(t)
	if session == "" || !strings.HasSuffix(holder, "/"+leader.alloc.ID) {
		t.Fatalf("lock %sleader held by %q (session %q), want the leader's allocation %s", e.prefix, holder, session, leader.alloc.ID)
	}
	for _, in := range insts {
		if code, body := in.get("/healthz"); code != http.StatusOK {
			t.Errorf("%s /healthz %d %q", in.addr, code, body)
		}
	}
	if log := allocLogWith(t, clusterDir, leader.alloc.ID, "agent", 15*time.Second, "acquired leadership"); !strings.Contains(log, "acquired leadership") {
		t.Errorf("the leader's log has no 'acquired leadership':\n%.2000s", log)
	}
	if log := allocLogWith(t, clusterDir, follower.alloc.ID, "agent", 15*time.Second, "waiting for leadership"); !strings.Contains(log, "waiting for leadership") || strings.Contains(log, "acquired leadership") {
		t.Errorf("the follower's log does not show it waiting:\n%.2000s", log)
	}
	if acl {
		// The tokens came through the template: the agent's environment
		// file holds them, and the agent works under default deny.
		for _, in := range insts {
			files, _ := filepath.Glob(filepath.Join(clusterDir, "*", "alloc", in.alloc.ID, "agent", "secrets", "tokens.env"))
			if len(files) != 1 {
				t.Fatalf("no rendered secrets/tokens.env for %s", in.alloc.ID)
			}
			raw, err := os.ReadFile(files[0])
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(raw), "NOMAD_TOKEN="+tokens[0]) || !strings.Contains(string(raw), "CONSUL_HTTP_TOKEN="+tokens[1]) {
				t.Fatalf("%s: secrets/tokens.env does not hold the variable's tokens", in.alloc.ID)
			}
		}
	}

	// The Consul service check passes on both instances. On the local
	// cluster both Nomad clients share one Consul agent, and a Nomad client
	// removes the services of allocations it does not run at every sync
	// (hashicorp/nomad#9916; on a real cluster each node has its own
	// agent), so each instance's registration comes and goes: the test
	// checks every second and watches for each instance's check to pass
	// with /healthz's answer. The clients started together sync in step,
	// so one client's registrations may be removed within milliseconds,
	// every time: if an instance's check has not passed after 15 s, its
	// Nomad client is restarted (its tasks keep running), which moves its
	// syncs away from the other's.
	passed := map[string]string{}
	checkStart := time.Now()
	deadline := checkStart.Add(90 * time.Second)
	restarted := false
	for len(passed) < len(insts) {
		if !restarted && time.Since(checkStart) > 15*time.Second {
			restarted = true
			for _, in := range insts {
				if _, ok := passed[in.alloc.ID]; !ok {
					node, _, err := e.nomad.Nodes().Info(in.alloc.NodeID, nil)
					if err != nil {
						t.Fatal(err)
					}
					t.Logf("consul check of %s not seen passing in 15s: restarting its Nomad client %s", in.alloc.ID[:8], node.Name)
					e.clusterScript(t, "stop", node.Name)
					e.clusterScript(t, "start", node.Name)
				}
			}
		}
		entries, _, err := e.consul.Health().Service("pollux", "", false, nil)
		for _, en := range entries {
			for _, c := range en.Checks {
				for _, in := range insts {
					if err == nil && c.ServiceID != "" && strings.Contains(c.ServiceID, in.alloc.ID) && c.Status == "passing" && strings.Contains(c.Output, "200 OK") {
						if _, ok := passed[in.alloc.ID]; !ok {
							passed[in.alloc.ID] = c.Output
							t.Logf("consul check of %s passing after %s: %s", in.alloc.ID[:8], time.Since(start).Round(100*time.Millisecond), strings.TrimSpace(c.Output))
						}
					}
				}
			}
		}
		if time.Now().After(deadline) {
			var checks []string
			for _, en := range entries {
				for _, c := range en.Checks {
					checks = append(checks, fmt.Sprintf("%s %s %s: %s", en.Service.ID, c.Name, c.Status, c.Output))
				}
			}
			t.Fatalf("consul service pollux: checks passed for %d of %d instances in 90s (err %v); now: %v", len(passed), len(insts), err, checks)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// A Pollux job is rescaled: it must span both clients.
	id := e.registerJob("sysjob", map[string]string{"pollux_min_gpus": "5"})
	e.putMetrics(id, e.profileDoc("cifar10", []int{1}, []int{2}, []int{4}, []int{4, 4}))
	placed := e.waitPlaced(t, id, 90*time.Second)
	gpus := 0
	for _, p := range placed {
		gpus += p.GPUs
	}
	if gpus < 5 || len(placed) != 2 {
		t.Fatalf("job %s placed on %v, want at least 5 GPUs on both clients", id, placed)
	}
	st, err := e.lastStatus()
	if err != nil || !strings.HasSuffix(st.Instance, "/"+leader.alloc.ID) {
		t.Fatalf("status written by %v (err %v), want the leader's allocation %s", st, err, leader.alloc.ID)
	}
	t.Logf("job %s rescaled by the system job to %s", id, contract.FormatPlacement(placed))

	// Failover: stop the leader's allocation.
	stopped := time.Now()
	if _, err := e.nomad.Allocations().Stop(leader.alloc, nil); err != nil {
		t.Fatalf("nomad alloc stop %s: %v", leader.alloc.ID, err)
	}
	for {
		h, s := e.lockHolder(t)
		if s != "" && strings.HasSuffix(h, "/"+follower.alloc.ID) && follower.metric("pollux_leader") == 1 {
			break
		}
		if time.Since(stopped) > 60*time.Second {
			t.Fatalf("the follower did not take over within 60s of the leader's alloc stop (lock %q, session %q)", h, s)
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("failover after nomad alloc stop of the leader: %s", time.Since(stopped).Round(100*time.Millisecond))
	if log := allocLogWith(t, clusterDir, leader.alloc.ID, "agent", 15*time.Second, `"leadership ended"`, `"reason":"released"`); !strings.Contains(log, `"leadership ended"`) || !strings.Contains(log, `"reason":"released"`) {
		t.Errorf("the stopped leader did not log releasing the lock; its last lines:\n%s", lastLines(log, 5))
	}
	// The new leader goes on with rounds. (Nomad v1.6.1 does not replace
	// a system job's allocation stopped with `nomad alloc stop`: the
	// former follower runs alone until the job is run again.)
	before := follower.metric("pollux_rounds_total")
	time.Sleep(7 * time.Second)
	if after := follower.metric("pollux_rounds_total"); after <= before {
		t.Errorf("the new leader ran no round in 7s (%v -> %v)", before, after)
	}
	if st, err := e.lastStatus(); err != nil || !strings.HasSuffix(st.Instance, "/"+follower.alloc.ID) {
		t.Errorf("status written by %v (err %v), want the new leader %s", st, err, follower.alloc.ID)
	}
	// nomad job stop pollux: every instance ends and the lock is free.
	if _, _, err := e.nomad.Jobs().Deregister(systemJobID, false, nil); err != nil {
		t.Fatalf("nomad job stop pollux: %v", err)
	}
	stopped = time.Now()
	for {
		stubs, _, err := e.nomad.Jobs().Allocations(systemJobID, false, nil)
		_, s := e.lockHolder(t)
		if err == nil && len(runningAllocs(stubs)) == 0 && s == "" {
			break
		}
		if time.Since(stopped) > 60*time.Second {
			t.Fatalf("after nomad job stop: %d allocations running, lock session %q", len(runningAllocs(stubs)), s)
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("nomad job stop pollux: allocations stopped and the lock released in %s", time.Since(stopped).Round(100*time.Millisecond))
}

// clusterScript runs scripts/cluster.sh ACTION AGENT on the test's
// cluster (the dedicated one, or the shared one named by the environment).
func (e *env) clusterScript(t *testing.T, action, agent string) {
	t.Helper()
	if e.tc != nil {
		e.tc.fault(action, agent)
		return
	}
	out, err := exec.Command(filepath.Join(repoRoot(t), "scripts", "cluster.sh"), action, agent).CombinedOutput()
	if err != nil {
		t.Fatalf("cluster.sh %s %s: %v\n%s", action, agent, err, out)
	}
	t.Logf("cluster.sh %s %s: %s", action, agent, strings.TrimSpace(string(out)))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
