package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/pollux-nomad/pollux/consul"
	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
)

// The access tests: a dedicated cluster with ACLs (default deny) and TLS
// on both servers (cluster.sh POLLUX_ACL=1 POLLUX_TLS=1, port offset
// 9000). The controller runs with exactly the policies of deploy/acl/ and
// rescales a tagged job; without them (no token, a Consul token that may
// only read its keys, a Nomad token without node:read) or with a wrong or
// missing CA it stays up, logs what is missing and /healthz answers 503.

// secureOffset is the port offset reserved for the secure cluster.
const secureOffset = 9000

// usePrefix points the test's KV helpers at prefix: the agents of the
// access tests use the default prefix, which the policies name.
func (e *env) usePrefix(prefix string) {
	e.t.Helper()
	kv, err := consul.New(e.consul, consul.Config{Prefix: prefix, Logger: e.log, SessionTTL: 10 * time.Second})
	if err != nil {
		e.t.Fatal(err)
	}
	e.prefix, e.kv = prefix, kv
}

// healthz returns the agent's /healthz status code and body (0 if it does
// not answer).
func (p *agentProc) healthz() (int, string) {
	resp, err := http.Get("http://" + p.addr + "/healthz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// exited reports whether the agent process has ended.
func (p *agentProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// writeOtherCA writes a CA certificate that signed nothing of the
// cluster's, for the wrong-CA case.
func writeOtherCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "some other CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func readRepoFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// nodeBlock matches the node { ... } rule of the Nomad policy.
var nodeBlock = regexp.MustCompile(`(?s)\nnode \{.*?\n\}\n`)

// TestAccess (ACL + TLS): the least-privilege policies are enough, and
// every missing permission or TLS setting is reported, not crashed on.
func TestAccess(t *testing.T) {
	start := time.Now()
	c := startClusterAt(t, clusterOptions{Env: []string{"POLLUX_ACL=1", "POLLUX_TLS=1"}}, secureOffset)
	t.Logf("secure cluster (ACL + TLS) up in %s", time.Since(start).Round(100*time.Millisecond))
	for _, k := range []string{"NOMAD_TOKEN", "CONSUL_HTTP_TOKEN", "NOMAD_CACERT", "CONSUL_CACERT"} {
		if c.env[k] == "" {
			t.Fatalf("cluster env has no %s: %v", k, c.env)
		}
	}
	if !strings.HasPrefix(c.env["NOMAD_ADDR"], "https://") || c.env["CONSUL_HTTP_SSL"] != "true" {
		t.Fatalf("cluster env is not TLS: %v", c.env)
	}
	e := newEnvOn(t, c) // management tokens
	e.usePrefix(consul.DefaultPrefix)
	ctx := context.Background()

	// The servers enforce what they should: nothing without a token, and
	// plain HTTP is refused.
	checkDenied(t, c)

	// Policies: the files in deploy/acl, and two that lack one rule each.
	nomadRules := readRepoFile(t, "deploy/acl/nomad-policy.hcl")
	noNode := nodeBlock.ReplaceAllString(nomadRules, "\n")
	if noNode == nomadRules || nodeBlock.MatchString(noNode) {
		t.Fatalf("could not remove the node rule from the policy:\n%s", noNode)
	}
	for name, rules := range map[string]string{"pollux": nomadRules, "pollux-no-node": noNode} {
		if _, err := e.nomad.ACLPolicies().Upsert(&nomadapi.ACLPolicy{Name: name, Rules: rules}, nil); err != nil {
			t.Fatalf("nomad acl policy %s: %v", name, err)
		}
	}
	consulRules := readRepoFile(t, "deploy/acl/consul-policy.hcl")
	kvReadOnly := strings.Replace(consulRules, "key_prefix \"pollux/\" {\n  policy = \"write\"", "key_prefix \"pollux/\" {\n  policy = \"read\"", 1)
	if kvReadOnly == consulRules {
		t.Fatal("could not make the read-only consul policy")
	}
	for name, rules := range map[string]string{"pollux": consulRules, "pollux-kv-read": kvReadOnly} {
		if _, _, err := e.consul.ACL().PolicyCreate(&consulapi.ACLPolicy{Name: name, Rules: rules}, nil); err != nil {
			t.Fatalf("consul acl policy %s: %v", name, err)
		}
	}
	nomadToken := func(policy string) *nomadapi.ACLToken {
		tok, _, err := e.nomad.ACLTokens().Create(&nomadapi.ACLToken{Name: "pollux " + policy, Type: "client", Policies: []string{policy}}, nil)
		if err != nil {
			t.Fatalf("nomad token %s: %v", policy, err)
		}
		return tok
	}
	consulToken := func(policy string) string {
		tok, _, err := e.consul.ACL().TokenCreate(&consulapi.ACLToken{Description: "pollux " + policy, Policies: []*consulapi.ACLTokenPolicyLink{{Name: policy}}}, nil)
		if err != nil {
			t.Fatalf("consul token %s: %v", policy, err)
		}
		return tok.SecretID
	}
	nomadFull, nomadNoNode := nomadToken("pollux"), nomadToken("pollux-no-node")
	consulFull, consulKVRead := consulToken("pollux"), consulToken("pollux-kv-read")

	// A tagged job that must span both clients once scheduled.
	id := e.registerJob("secure", map[string]string{"pollux_min_gpus": "5"})
	e.putMetrics(id, e.profileDoc("cifar10", []int{1}, []int{2}, []int{4}, []int{4, 4}))
	var before jobs.Job
	for deadline := time.Now().Add(60 * time.Second); ; {
		j, err := e.cluster.ReadJob(ctx, ref(id))
		if err == nil && len(j.Running) > 0 {
			before = j
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s not running as submitted: %+v %v", id, j, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("job %s before: spec placement %v, running %v, JobModifyIndex %d", id, before.Placement, before.Running, before.JobModifyIndex)

	cfg := e.agentConfig(t, "")
	otherCA := writeOtherCA(t)
	type failing struct {
		name string
		env  []string
		want []string // substrings of the error line
	}
	cases := []failing{
		{"no-token", []string{"NOMAD_TOKEN=", "CONSUL_HTTP_TOKEN="},
			[]string{"nomad: permission denied listing nodes", `the token needs node { policy = "read" }`, "NOMAD_TOKEN is not set"}},
		{"consul-kv-read-only", []string{"NOMAD_TOKEN=" + nomadFull.SecretID, "CONSUL_HTTP_TOKEN=" + consulKVRead},
			[]string{`consul: permission denied writing pollux/status: the token needs key_prefix "pollux/" write; see deploy/acl/consul-policy.hcl`}},
		{"nomad-no-node-read", []string{"NOMAD_TOKEN=" + nomadNoNode.SecretID, "CONSUL_HTTP_TOKEN=" + consulFull},
			[]string{`nomad: permission denied listing nodes: the token needs node { policy = "read" }; see deploy/acl/nomad-policy.hcl`}},
		{"nomad-wrong-ca", []string{"NOMAD_TOKEN=" + nomadFull.SecretID, "CONSUL_HTTP_TOKEN=" + consulFull, "NOMAD_CACERT=" + otherCA},
			[]string{"nomad: TLS problem listing jobs", "not signed by a CA this client trusts", "set NOMAD_CACERT"}},
		{"consul-no-ca", []string{"NOMAD_TOKEN=" + nomadFull.SecretID, "CONSUL_HTTP_TOKEN=" + consulFull, "CONSUL_CACERT="},
			[]string{"consul: TLS problem reading pollux/config", "not signed by a CA this client trusts", "set CONSUL_CACERT"}},
		{"consul-plain-http", []string{"NOMAD_TOKEN=" + nomadFull.SecretID, "CONSUL_HTTP_TOKEN=" + consulFull, "CONSUL_HTTP_SSL="},
			[]string{"consul: TLS problem reading pollux/config", "set CONSUL_HTTP_SSL=true"}},
	}
	// The no-token agent must also name Consul's missing token.
	noTokenConsul := []string{"consul: permission denied", "no token was sent (set CONSUL_HTTP_TOKEN)"}
	agents := map[string]*agentProc{}
	started := time.Now()
	for _, fc := range cases {
		e.agentEnv = c.environ(fc.env...)
		agents[fc.name] = e.startAgent(t, fc.name, cfg)
	}
	for _, fc := range cases {
		p := agents[fc.name]
		line := p.waitLogged(t, 30*time.Second, fc.want...)
		if !strings.Contains(line, "[ERROR]") {
			t.Errorf("%s: not logged as an error: %s", fc.name, line)
		}
		t.Logf("%s: logged after %s: %s", fc.name, time.Since(started).Round(100*time.Millisecond), line)
	}
	agents["no-token"].waitLogged(t, 10*time.Second, noTokenConsul...)

	// Several retries later, with growing backoff: every agent is still up,
	// healthz says 503 with the reason, nobody led or changed the job.
	time.Sleep(9 * time.Second)
	for _, fc := range cases {
		p := agents[fc.name]
		if p.exited() {
			t.Errorf("%s: the agent exited (%v)", fc.name, p.cmd.ProcessState)
			continue
		}
		n, _ := p.logged(fc.want...)
		var backoffs []string
		for _, d := range []string{"retry_in=1s", "retry_in=2s", "retry_in=4s"} {
			if k, _ := p.logged(append([]string{d}, fc.want...)...); k > 0 {
				backoffs = append(backoffs, d)
			}
		}
		if n < 3 || len(backoffs) < 3 {
			t.Errorf("%s: %d attempts logged (backoffs %v), want at least 3 with retry_in 1s, 2s, 4s", fc.name, n, backoffs)
		}
		code, body := p.healthz()
		if code != http.StatusServiceUnavailable || !strings.Contains(body, fc.want[0]) {
			t.Errorf("%s: /healthz %d %q, want 503 naming %q", fc.name, code, body, fc.want[0])
		}
		if l, r := p.metric("pollux_leader"), p.metric("pollux_rounds_total"); l > 0 || r > 0 {
			t.Errorf("%s: leader=%v rounds=%v, want neither", fc.name, l, r)
		}
		t.Logf("%s: up after %s, %d attempts (%s), /healthz %d: %s", fc.name, time.Since(started).Round(100*time.Millisecond), n, strings.Join(backoffs, ", "), code, strings.TrimSpace(firstLine(body)))
	}
	if idx := e.modifyIndex(id); idx != before.JobModifyIndex {
		t.Fatalf("job %s changed (JobModifyIndex %d -> %d) although no agent had access", id, before.JobModifyIndex, idx)
	}

	// Stop the others (a graceful stop while waiting for access: exit 0).
	for _, fc := range cases {
		if fc.name == "nomad-no-node-read" {
			continue
		}
		p := agents[fc.name]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
			if code := p.cmd.ProcessState.ExitCode(); code != 0 {
				t.Errorf("%s: exit code %d after SIGTERM, want 0", fc.name, code)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("%s: did not exit within 15s of SIGTERM", fc.name)
		}
	}

	// Grant the missing rule: the token now has exactly deploy/acl's
	// policy. The waiting agent finds out at its next retry, goes healthy
	// and rescales the job.
	p := agents["nomad-no-node-read"]
	nomadNoNode.Policies = []string{"pollux"}
	if _, _, err := e.nomad.ACLTokens().Update(nomadNoNode, nil); err != nil {
		t.Fatalf("update token: %v", err)
	}
	granted := time.Now()
	for {
		code, body := p.healthz()
		if code == http.StatusOK {
			t.Logf("after the grant: /healthz 200 in %s (%q)", time.Since(granted).Round(100*time.Millisecond), strings.TrimSpace(body))
			break
		}
		if time.Since(granted) > 45*time.Second {
			t.Fatalf("/healthz still %d 45s after the grant: %s", code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	p.waitLogged(t, 5*time.Second, "access check passed")
	deniedAtGrant, _ := p.logged("permission denied")
	placed := e.waitPlaced(t, id, 90*time.Second)
	after, err := e.cluster.ReadJob(ctx, ref(id))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("job %s after: spec placement %v, running %v (%s after the grant)", id, after.Placement, after.Running, time.Since(granted).Round(100*time.Millisecond))
	gpus := 0
	for _, ng := range placed {
		gpus += ng.GPUs
	}
	if len(before.Placement) != 0 || gpus < 5 || len(placed) != 2 || jobs.SamePerNode(before.Running, after.Running) {
		t.Errorf("job not rescaled: spec %v -> %v, running %v -> %v", before.Placement, after.Placement, before.Running, after.Running)
	}
	st := e.waitRound(t, 0, 30*time.Second)
	if !strings.Contains(st.Instance, fmt.Sprintf("pid-%d", p.cmd.Process.Pid)) {
		t.Errorf("status written by %q, want the agent pid %d", st.Instance, p.cmd.Process.Pid)
	}
	if js := jobStatus(t, st, id); js.State != contract.StateScheduled {
		t.Errorf("job status %+v", js)
	}
	if n, line := p.logged("permission denied"); n != deniedAtGrant {
		t.Errorf("%d permission errors after access was granted, the last: %s", n-deniedAtGrant, line)
	}
	if code, _ := p.healthz(); code != http.StatusOK {
		t.Errorf("/healthz %d while the agent works", code)
	}
}

// checkDenied shows the cluster enforces ACLs and TLS: an anonymous
// request is refused by both servers, and plain HTTP by both.
func checkDenied(t *testing.T, c *testCluster) {
	t.Helper()
	nc := nomadapi.DefaultConfig()
	nc.Address = c.env["NOMAD_ADDR"]
	nc.TLSConfig = &nomadapi.TLSConfig{CACert: c.env["NOMAD_CACERT"]}
	nc.SecretID = ""
	n, err := nomadapi.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := n.Nodes().List(nil); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("anonymous nomad node list: %v, want 403", err)
	}
	cc := consulapi.DefaultConfig()
	cc.Address = c.env["CONSUL_HTTP_ADDR"]
	cc.Scheme = "https"
	cc.Token = ""
	cc.TLSConfig = consulapi.TLSConfig{CAFile: c.env["CONSUL_CACERT"]}
	k, err := consulapi.NewClient(cc)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := k.KV().Get("pollux/config", nil); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("anonymous consul kv read: %v, want 403", err)
	}
	for _, u := range []string{strings.Replace(c.env["NOMAD_ADDR"], "https://", "http://", 1) + "/v1/status/leader", "http://" + c.env["CONSUL_HTTP_ADDR"] + "/v1/status/leader"} {
		resp, err := http.Get(u)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Errorf("plain HTTP %s answered 200", u)
			}
		}
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
