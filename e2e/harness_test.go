package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/pollux-nomad/pollux/apps"
	"github.com/pollux-nomad/pollux/consul"
	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/data"
	"github.com/pollux-nomad/pollux/jobs"
	"github.com/pollux-nomad/pollux/nomad"
	"github.com/pollux-nomad/pollux/workload"
)

// env is one test's connection to the real local cluster.
type env struct {
	t       *testing.T
	nomad   *nomadapi.Client
	consul  *consulapi.Client
	device  string
	prefix  string // unique KV prefix of this test
	cluster *nomad.Client
	kv      *consul.Client
	log     hclog.Logger
	jobs    []string
	// agentEnv is the environment of agent processes (nil: this process's).
	agentEnv []string
	// agentDebug starts agents with -enable-debug (the profiler).
	agentDebug bool
	// agentArgs are added to every agent's command line.
	agentArgs []string
	// tc is the dedicated cluster, if the test started one.
	tc *testCluster
}

var (
	clientsOnce  sync.Once
	sharedNomad  *nomadapi.Client
	sharedConsul *consulapi.Client
	clientsErr   error
)

// newEnv connects to the cluster that scripts/with-cluster.sh (make test)
// started. There is no fallback: without a cluster the test fails.
func newEnv(t *testing.T) *env {
	t.Helper()
	for _, v := range []string{"NOMAD_ADDR", "CONSUL_HTTP_ADDR", "POLLUX_DEVICE"} {
		if os.Getenv(v) == "" {
			t.Fatalf("%s is not set: run the end-to-end tests through scripts/with-cluster.sh (make test) so that a real Nomad and Consul cluster is up", v)
		}
	}
	// One pair of API clients per test process, so connections are reused
	// (Nomad refuses a client with more than 100 open connections).
	clientsOnce.Do(func() {
		sharedNomad, clientsErr = nomadapi.NewClient(nomadapi.DefaultConfig())
		if clientsErr == nil {
			sharedConsul, clientsErr = consulapi.NewClient(consulapi.DefaultConfig())
		}
	})
	if clientsErr != nil {
		t.Fatalf("api clients: %v", clientsErr)
	}
	return setupEnv(t, sharedNomad, sharedConsul, os.Getenv("POLLUX_DEVICE"))
}

// newEnvOn connects to a dedicated cluster (startCluster); agents started
// with startAgent get that cluster's addresses.
func newEnvOn(t *testing.T, c *testCluster) *env {
	t.Helper()
	nc, cc := c.apiClients()
	e := setupEnv(t, nc, cc, c.env["POLLUX_DEVICE"])
	e.agentEnv = c.environ()
	e.tc = c
	return e
}

func setupEnv(t *testing.T, nc *nomadapi.Client, cc *consulapi.Client, device string) *env {
	t.Helper()
	var err error
	e := &env{
		t: t, nomad: nc, consul: cc, device: device,
		prefix: fmt.Sprintf("pollux-e2e/%s-%d/", strings.ReplaceAll(t.Name(), "/", "-"), rand.Uint32()),
		log:    hclog.New(&hclog.LoggerOptions{Name: "e2e", Level: hclog.Info, Output: testWriter{t}}),
	}
	e.cluster, err = nomad.New(nc, nomad.Config{Device: e.device, Logger: e.log})
	if err != nil {
		t.Fatalf("nomad adapter: %v", err)
	}
	e.kv, err = consul.New(cc, consul.Config{Prefix: e.prefix, Logger: e.log, SessionTTL: 10 * time.Second})
	if err != nil {
		t.Fatalf("consul adapter: %v", err)
	}
	e.waitNodes()
	t.Cleanup(e.cleanup)
	return e
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// waitNodes waits until the cluster's clients report their GPUs free of
// other tests' jobs.
func (e *env) waitNodes() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		nodes, err := e.cluster.Nodes(ctx)
		if err == nil && len(nodes) >= 2 {
			busy := 0
			for _, n := range nodes {
				busy += n.UsedByOthers
			}
			if busy == 0 {
				return
			}
		}
		if ctx.Err() != nil {
			e.t.Fatalf("cluster not ready: nodes %v, err %v", nodes, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (e *env) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, id := range e.jobs {
		_, _, _ = e.nomad.Jobs().Deregister(id, true, (&nomadapi.WriteOptions{}).WithContext(ctx))
	}
	// Wait for the allocations to stop so the next test sees free GPUs.
	for _, id := range e.jobs {
		for ctx.Err() == nil {
			allocs, _, err := e.nomad.Jobs().Allocations(id, false, (&nomadapi.QueryOptions{}).WithContext(ctx))
			if err != nil || len(runningAllocs(allocs)) == 0 {
				break
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	_, _ = e.consul.KV().DeleteTree(e.prefix, nil)
}

func runningAllocs(allocs []*nomadapi.AllocationListStub) []*nomadapi.AllocationListStub {
	var out []*nomadapi.AllocationListStub
	for _, a := range allocs {
		if a.ClientStatus == "running" || a.ClientStatus == "pending" {
			out = append(out, a)
		}
	}
	return out
}

// registerJob submits a raw_exec batch job with one worker group asking
// for one GPU of the test device; meta is merged over the defaults.
func (e *env) registerJob(name string, meta map[string]string) string {
	e.t.Helper()
	return e.registerJobWith(name, meta, nil)
}

// registerJobWith is registerJob with the task changed by setTask (if not
// nil) before the one registration.
func (e *env) registerJobWith(name string, meta map[string]string, setTask func(*nomadapi.Task)) string {
	e.t.Helper()
	id := fmt.Sprintf("%s-%d", name, rand.Uint32()%100000)
	parts := strings.Split(e.device, "/")
	_ = parts
	m := map[string]string{
		"pollux_enabled": "true", "pollux_init_batch_size": "128", "pollux_init_lr": "0.1",
		"pollux_max_batch_size": "4096", "pollux_local_bsz_min": "32", "pollux_local_bsz_max": "1024",
	}
	for k, v := range meta {
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	job := nomadapi.NewBatchJob(id, id, "global", 50)
	job.Datacenters = []string{"*"}
	job.Meta = m
	task := nomadapi.NewTask("train", "raw_exec").
		SetConfig("command", "/bin/sleep").
		SetConfig("args", []string{"600"})
	task.Resources = &nomadapi.Resources{
		CPU: ptr(20), MemoryMB: ptr(16),
		Devices: []*nomadapi.RequestedDevice{{Name: e.device, Count: ptr(uint64(1))}},
	}
	if setTask != nil {
		setTask(task)
	}
	tg := nomadapi.NewTaskGroup("workers", 1).AddTask(task)
	tg.RestartPolicy = &nomadapi.RestartPolicy{Attempts: ptr(0), Mode: ptr("fail")}
	tg.ReschedulePolicy = &nomadapi.ReschedulePolicy{Attempts: ptr(0), Unlimited: ptr(false)}
	tg.EphemeralDisk = &nomadapi.EphemeralDisk{SizeMB: ptr(150)}
	job.AddTaskGroup(tg)
	if _, _, err := e.nomad.Jobs().Register(job, nil); err != nil {
		e.t.Fatalf("register %s: %v", id, err)
	}
	e.jobs = append(e.jobs, id)
	return id
}

func ptr[T any](v T) *T { return &v }

// ref names a test job in the default namespace.
func ref(id string) jobs.JobRef { return jobs.JobRef{Namespace: "default", ID: id} }

var (
	appsOnce sync.Once
	appsMap  map[string]*apps.Application
)

// profileDoc builds a metrics document for an application from its
// measured profile on the given placements (GPUs per node).
func (e *env) profileDoc(app string, placements ...[]int) []byte {
	e.t.Helper()
	appsOnce.Do(func() {
		var err error
		appsMap, err = apps.LoadAll(data.Traces())
		if err != nil {
			panic(err)
		}
	})
	a := appsMap[app]
	sqr, v := a.GradStats(float64(a.InitBatchSize), 0)
	doc := &contract.Metrics{
		Version: contract.MetricsVersion, Timestamp: time.Now().UTC().Truncate(time.Second), BatchSize: float64(a.InitBatchSize),
		Progress: 100, GradSqr: sqr, GradVar: v,
	}
	for _, p := range placements {
		k := 0
		for _, g := range p {
			k += g
		}
		m := max(a.InitBatchSize/k, a.MinLocalBsz)
		step, sync, err := a.Throughput(p, m)
		if err != nil {
			e.t.Fatalf("profile %s %v: %v", app, p, err)
		}
		doc.Profile = append(doc.Profile, contract.ProfileEntry{
			NumNodes: len(p), NumReplicas: k, LocalBsz: m, ComputeTime: step - sync, StepTime: step, SyncTime: sync, Count: 50,
		})
	}
	sort.Slice(doc.Profile, func(i, j int) bool { return doc.Profile[i].NumReplicas < doc.Profile[j].NumReplicas })
	raw, err := contract.MarshalMetrics(doc)
	if err != nil {
		e.t.Fatalf("marshal metrics: %v", err)
	}
	return raw
}

// putMetrics writes a job's metrics document as its rank-0 worker would.
func (e *env) putMetrics(id string, raw []byte) {
	e.t.Helper()
	if err := e.kv.Put(context.Background(), "jobs/default/"+id+"/metrics", raw); err != nil {
		e.t.Fatalf("put metrics: %v", err)
	}
}

// controller returns a controller on this test's KV prefix.
func (e *env) controller(instance string, mutate func(*jobs.Config)) *jobs.Controller {
	e.t.Helper()
	cfg := jobs.DefaultConfig()
	cfg.Device = e.device
	cfg.KVPrefix = e.prefix
	cfg.Interval = 2 * time.Second
	cfg.Population, cfg.Generations = 50, 50
	if mutate != nil {
		mutate(&cfg)
	}
	c, err := jobs.New(cfg, jobs.Options{Cluster: e.cluster, KV: e.kv, Logger: e.log, Instance: instance})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// waitRunning waits until Nomad runs the job exactly as placed (GPUs per
// node, from the allocations' device IDs) and returns that placement.
func (e *env) waitRunning(id string, want []jobs.NodeGPUs) []jobs.NodeGPUs {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var last []jobs.NodeGPUs
	for {
		got, err := e.devicesPerNode(ctx, id)
		if err == nil && jobs.SamePerNode(got, want) {
			return got
		}
		last = got
		if ctx.Err() != nil {
			e.t.Fatalf("job %s: Nomad runs %v, want %v (err %v)", id, last, want, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// devicesPerNode reads the device IDs that running allocations of the job
// hold, per node, straight from Nomad.
func (e *env) devicesPerNode(ctx context.Context, id string) ([]jobs.NodeGPUs, error) {
	stubs, _, err := e.nomad.Jobs().Allocations(id, false, (&nomadapi.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, err
	}
	per := map[string]int{}
	for _, s := range stubs {
		if s.ClientStatus != "running" || s.DesiredStatus != "run" {
			continue
		}
		a, _, err := e.nomad.Allocations().Info(s.ID, (&nomadapi.QueryOptions{}).WithContext(ctx))
		if err != nil {
			return nil, err
		}
		if a.AllocatedResources == nil {
			continue
		}
		for _, tr := range a.AllocatedResources.Tasks {
			for _, d := range tr.Devices {
				per[a.NodeID] += len(d.DeviceIDs)
			}
		}
	}
	var out []jobs.NodeGPUs
	for n, g := range per {
		out = append(out, jobs.NodeGPUs{Node: n, GPUs: g})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out, nil
}

// jobStatus finds a job's line in a round's status.
func jobStatus(t *testing.T, st *jobs.Status, id string) jobs.JobStatus {
	t.Helper()
	for _, j := range st.Jobs {
		if j.Job == "default/"+id {
			return j
		}
	}
	t.Fatalf("job %s is not in the round's status: %+v", id, st.Jobs)
	return jobs.JobStatus{}
}

// workload1 returns the artifact's workload 1 (and loads the profiles).
func (e *env) workload1(t *testing.T) []workload.Job {
	t.Helper()
	e.profileDoc("ncf", []int{1}) // loads appsMap
	f, err := data.Workloads().Open("workload-1.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	jobs, err := workload.Parse(f, "workload-1.csv", nil)
	if err != nil {
		t.Fatal(err)
	}
	return jobs
}

// waitAsSubmitted waits until Nomad runs each job as registerJob and
// richJob submit it: one allocation with one GPU.
func (e *env) waitAsSubmitted(t *testing.T, ids ...string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for _, id := range ids {
		for {
			got, err := e.devicesPerNode(context.Background(), id)
			if err == nil && len(got) == 1 && got[0].GPUs == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s not running with 1 GPU as submitted: %v %v", id, got, err)
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
}
