package e2e

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/consul"
	"github.com/pollux-nomad/pollux/contract"
)

// The reliability tests on a production-shaped control plane: three
// Consul servers and three Nomad servers (CLUSTER_SERVERS=3). Everything
// reaches the servers through TCP proxies of the test on loopback that
// connect to the first server that answers (as a load balancer in front of
// the servers would), and the Pollux leader's own proxy to Consul can be
// cut (a network partition of the leader alone).

// tcpProxy forwards each connection to the first of its targets that
// accepts it. Cut closes every connection and refuses new ones until
// Restore.
type tcpProxy struct {
	ln      net.Listener
	targets []string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
}

func startTCPProxy(t *testing.T, targets []string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, targets: targets, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.Cut()
	})
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) serve() {
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
		var out net.Conn
		for _, target := range p.targets {
			if out, err = net.DialTimeout("tcp", target, time.Second); err == nil {
				break
			}
		}
		if out == nil {
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

func (p *tcpProxy) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// Cut closes every connection and refuses new ones.
func (p *tcpProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Restore lets connections through again.
func (p *tcpProxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

// hostPorts turns the cluster's comma-separated server addresses into
// host:port targets.
func hostPorts(list string) []string {
	var out []string
	for _, a := range strings.Split(list, ",") {
		a = strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(a), "http://"), "https://")
		if a != "" {
			out = append(out, a)
		}
	}
	return out
}

// raftLeader returns the cluster.sh agent name of the raft leader of
// Consul ("consul") or Nomad ("nomad"), asked through the proxy at addr.
func raftLeader(t *testing.T, kind, addr string) string {
	t.Helper()
	var doc struct {
		Servers []struct {
			Node   string
			Leader bool
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/v1/operator/raft/configuration")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&doc)
			resp.Body.Close()
		}
		if err == nil {
			for _, s := range doc.Servers {
				if !s.Leader {
					continue
				}
				switch {
				case kind == "consul" && s.Node == "pollux-consul":
					return "consul"
				case kind == "consul":
					return "consul-" + strings.TrimPrefix(s.Node, "pollux-consul-")
				case strings.HasPrefix(s.Node, "server-1."):
					return "nomad-server"
				default:
					return "nomad-server-" + strings.TrimSuffix(strings.TrimPrefix(s.Node, "server-"), ".global")
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s raft leader within 30s (last error %v)", kind, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// checkNoDoubleWrite fails the test if a job has two versions with one
// pollux_write marker (one change of one round applied twice). A round
// may write a job twice by design (a vacate ahead of its placement); the
// marker's digest tells those apart.
func (e *env) checkNoDoubleWrite(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		versions, _, _, err := e.nomad.Jobs().Versions(id, false, nil)
		if err != nil {
			t.Fatalf("versions of %s: %v", id, err)
		}
		seen := map[string]uint64{}
		for _, v := range versions {
			k := v.Meta[contract.MetaWrite]
			if k == "" {
				continue
			}
			if prev, ok := seen[k]; ok {
				t.Errorf("job %s: versions %d and %d are one write applied twice (%s: term/round/digest)", id, prev, deref(v.Version), k)
			}
			seen[k] = deref(v.Version)
		}
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// TestThreeServers kills the Consul leader and then the Nomad leader while
// the Pollux leader applies a round, and then cuts the Pollux leader off
// from Consul (a partition through its proxy) with a second agent
// waiting: nothing is written twice, nothing by the deposed leader after
// the new one's first write, the new leader comes within the bound, and
// every job ends whole.
func TestThreeServers(t *testing.T) {
	c := startCluster(t, clusterOptions{Env: []string{"CLUSTER_SERVERS=3"}})
	consulLB := startTCPProxy(t, hostPorts(c.env["POLLUX_CONSUL_ADDRS"]))
	nomadLB := startTCPProxy(t, hostPorts(c.env["POLLUX_NOMAD_ADDRS"]))
	if len(consulLB.targets) != 3 || len(nomadLB.targets) != 3 {
		t.Fatalf("cluster has servers %v and %v, want three of each", consulLB.targets, nomadLB.targets)
	}
	c.env["CONSUL_HTTP_ADDR"] = consulLB.addr()
	c.env["NOMAD_ADDR"] = "http://" + nomadLB.addr()
	e := newEnvOn(t, c)
	ids := e.registerFour(t)
	e.waitAsSubmitted(t, ids...)
	log := newWireLog()
	// The default session TTL: a Consul leader election must not cost the
	// Pollux leader its lock.
	const ttl = consul.DefaultSessionTTL
	cfg := e.agentConfig(t, "")

	// A: its Consul traffic through a proxy of its own that the test can
	// cut; every write logged; a hook on its registrations.
	var onRegister atomic.Pointer[func()]
	aConsul := startTCPProxy(t, []string{consulLB.addr()})
	aNomadHook := func(c *call, status int, body []byte) {
		if !c.write || status != http.StatusOK {
			return
		}
		if f := onRegister.Swap(nil); f != nil {
			(*f)()
		}
	}
	cp := startWireProxy(t, "a", "consul", aConsul.addr(), log, nil)
	np := startWireProxy(t, "a", "nomad", nomadLB.addr(), log, aNomadHook)
	e.agentEnv = c.environ("CONSUL_HTTP_ADDR="+cp.addr, "NOMAD_ADDR=http://"+np.addr)

	// 1. The Consul leader dies right after Nomad accepted A's first
	//    registration (the hook is armed before A starts: its first
	//    round writes every job within milliseconds of taking the lock).
	var killed atomic.Value
	kill := func(kind string) func() {
		f := func() {
			name := raftLeader(t, kind, map[string]string{"consul": consulLB.addr(), "nomad": nomadLB.addr()}[kind])
			c.fault("kill", name)
			killed.Store(name)
		}
		return f
	}
	killConsul := kill("consul")
	onRegister.Store(&killConsul)
	a := e.startAgent(t, "a", cfg)
	a.waitLogged(t, 60*time.Second, "acquired leadership")
	for _, id := range ids {
		e.waitPlaced(t, id, 120*time.Second)
	}
	e.waitWhole(t, 90*time.Second, ids...)
	name, _ := killed.Load().(string)
	if name == "" {
		t.Fatalf("no registration reached the hook")
	}
	t.Logf("killed the Consul leader %s mid-apply; every job whole", name)
	c.fault("start", name)

	// 2. The Nomad leader dies mid-apply: a new job makes a round write.
	killed.Store("")
	killNomad := kill("nomad")
	onRegister.Store(&killNomad)
	extra := e.registerJob("extra", map[string]string{"pollux_max_gpus": "2"})
	e.putMetrics(extra, e.profileDoc("cifar10", []int{1}, []int{2}))
	all := append(ids, extra)
	e.waitPlaced(t, extra, 120*time.Second)
	e.waitWhole(t, 90*time.Second, all...)
	name, _ = killed.Load().(string)
	if name == "" {
		t.Fatalf("no registration reached the hook after the new job")
	}
	t.Logf("killed the Nomad leader %s mid-apply; every job whole", name)
	c.fault("start", name)
	e.checkNoDoubleWrite(t, all...)

	// 3. A is cut off from Consul; B, waiting, takes over.
	bcp := startWireProxy(t, "b", "consul", consulLB.addr(), log, nil)
	bnp := startWireProxy(t, "b", "nomad", nomadLB.addr(), log, nil)
	e.agentEnv = c.environ("CONSUL_HTTP_ADDR="+bcp.addr, "NOMAD_ADDR=http://"+bnp.addr)
	b := e.startAgent(t, "b", cfg)
	b.waitLogged(t, 60*time.Second, "waiting for leadership")
	before, _ := a.logged("lost leadership")
	cutAt := time.Now()
	aConsul.Cut()
	t.Cleanup(aConsul.Restore)
	for n, _ := a.logged("lost leadership"); n == before; n, _ = a.logged("lost leadership") {
		if time.Since(cutAt) > ttl+3*time.Second {
			t.Fatalf("A did not step down within %v of the partition", ttl+3*time.Second)
		}
		time.Sleep(100 * time.Millisecond)
	}
	lostAt := time.Now()
	select {
	case <-log.bFirst:
	case <-time.After(2*ttl + time.Second + 30*time.Second):
		t.Fatalf("B made no write within %v of the partition", 2*ttl+time.Second+30*time.Second)
	}
	took := time.Since(cutAt)
	t.Logf("partition: A stepped down %v after the cut, B wrote %v after it", lostAt.Sub(cutAt).Round(time.Millisecond), took.Round(time.Millisecond))
	// Consul invalidates A's session 2×TTL after its last renewal; B then
	// waits the lock-delay (1s) and its first round's reads.
	if bound := 2*ttl + time.Second + 10*time.Second; took > bound {
		t.Errorf("B's first write came %v after the partition, want within %v", took, bound)
	}
	// A may still send what it had begun to Nomad; none of it may land
	// after B's first write.
	time.Sleep(5 * time.Second)
	var first *wireWrite
	writes := log.all()
	for i := range writes {
		if w := &writes[i]; w.agent == "b" && w.accepted && (first == nil || w.sent.Before(first.sent)) {
			first = w
		}
	}
	for _, w := range writes {
		if w.agent == "a" && w.accepted && w.done.After(first.sent) {
			t.Errorf("the partitioned leader's write was accepted %v after the new leader's first: %s %s", w.done.Sub(first.sent), w.target, w.what)
		}
	}
	aConsul.Restore()
	e.waitWhole(t, 90*time.Second, all...)
	e.checkNoDoubleWrite(t, all...)
}
