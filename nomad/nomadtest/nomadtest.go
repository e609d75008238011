package nomadtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// DefaultDevice is the fake GPU of the local cluster.
const DefaultDevice = "nomad/file/mock"

var (
	sharedOnce sync.Once
	shared     *api.Client
	sharedErr  error
)

// E2EEnv is the variable that asks for the tests that need a real
// cluster; scripts/with-cluster.sh (make test, CI) sets it to 1. Without
// it those tests skip, so that `go test ./...` passes on a clean clone with
// no servers; with it they fail when the cluster is missing.
const E2EEnv = "POLLUX_E2E"

// RequireCluster skips t unless E2EEnv is 1.
func RequireCluster(t testing.TB) {
	t.Helper()
	if os.Getenv(E2EEnv) != "1" {
		t.Skip("needs a local Nomad + Consul cluster: run through scripts/with-cluster.sh or make test (" + E2EEnv + "=1)")
	}
}

// Client returns an API client for the cluster in NOMAD_ADDR. Unless
// E2EEnv is 1 it skips the test; with it, it fails the test when NOMAD_ADDR
// is unset or the server has no leader.
func Client(t testing.TB) *api.Client {
	t.Helper()
	RequireCluster(t)
	if os.Getenv("NOMAD_ADDR") == "" {
		t.Fatalf("no cluster: run the tests through scripts/with-cluster.sh or make test (NOMAD_ADDR is unset)")
	}
	// One client (and so one connection pool) per test process: Nomad
	// answers 429 to a client with more than 100 open connections.
	sharedOnce.Do(func() { shared, sharedErr = api.NewClient(api.DefaultConfig()) })
	if sharedErr != nil {
		t.Fatalf("failed to create nomad client for %s: %v", os.Getenv("NOMAD_ADDR"), sharedErr)
	}
	c := shared
	leader, err := c.Status().Leader()
	if err != nil || leader == "" {
		t.Fatalf("no cluster: nomad at %s does not answer (leader %q, error %v); run through scripts/with-cluster.sh or make test",
			os.Getenv("NOMAD_ADDR"), leader, err)
	}
	return c
}

// Device returns POLLUX_DEVICE, or DefaultDevice when it is unset.
func Device() string {
	if d := os.Getenv("POLLUX_DEVICE"); d != "" {
		return d
	}
	return DefaultDevice
}

// Lock gives the calling test exclusive use of the cluster's GPUs until it
// ends: test binaries of different packages run in parallel against the same
// cluster, and a test that counts free GPUs must not see another's jobs. The
// lock is a file lock keyed by NOMAD_ADDR, so it also serialises tests of
// different packages.
func Lock(t testing.TB) {
	t.Helper()
	key := regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(os.Getenv("NOMAD_ADDR"), "_")
	path := filepath.Join(os.TempDir(), "pollux-nomad-gpus-"+key+".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatalf("failed to open cluster lock %s: %v", path, err)
	}
	start := time.Now()
	if err := flock(f); err != nil {
		f.Close()
		t.Fatalf("failed to lock %s: %v", path, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Logf("waited %v for the cluster's GPUs", d.Round(time.Millisecond))
	}
	t.Cleanup(func() { f.Close() }) // closing releases the lock
}

// ID returns a job ID unique to this run, starting with prefix.
func ID(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// Job returns a batch job with one group "train" of count 1 whose raw_exec
// task "worker" runs /bin/sleep 3600 and requests gpus devices of Device().
// With tagged, its meta has pollux_enabled = "true" and the minimal author
// keys.
func Job(id string, gpus int, tagged bool) *api.Job {
	job := api.NewBatchJob(id, id, "global", 50)
	job.Datacenters = []string{"*"}
	if tagged {
		job.Meta = map[string]string{
			"pollux_enabled":         "true",
			"pollux_init_batch_size": "128",
			"pollux_init_lr":         "0.1",
		}
	}
	n := uint64(gpus)
	task := api.NewTask("worker", "raw_exec").
		SetConfig("command", "/bin/sleep").
		SetConfig("args", []string{"3600"}).
		Require(&api.Resources{
			CPU:      new(20),
			MemoryMB: new(16),
			Devices:  []*api.RequestedDevice{{Name: Device(), Count: &n}},
		})
	task.KillTimeout = new(time.Second)
	g := api.NewTaskGroup("train", 1).AddTask(task)
	g.RestartPolicy = &api.RestartPolicy{Attempts: new(0), Mode: new("fail")}
	g.ReschedulePolicy = &api.ReschedulePolicy{Attempts: new(0), Unlimited: new(false)}
	return job.AddTaskGroup(g)
}

// Register registers job and purges it when the test ends. It returns the
// job's JobModifyIndex.
func Register(t testing.TB, c *api.Client, job *api.Job) uint64 {
	t.Helper()
	ns := "default"
	if job.Namespace != nil && *job.Namespace != "" {
		ns = *job.Namespace
	}
	resp, _, err := c.Jobs().Register(job, &api.WriteOptions{Namespace: ns})
	if err != nil {
		t.Fatalf("failed to register job %s: %v", *job.ID, err)
	}
	t.Cleanup(func() { Purge(t, c, ns, *job.ID) })
	return resp.JobModifyIndex
}

// Purge stops and purges a job and waits (up to 30 s) until none of its
// allocations runs any more, so that the next test finds its GPUs free.
func Purge(t testing.TB, c *api.Client, ns, id string) {
	t.Helper()
	w := &api.WriteOptions{Namespace: ns}
	if _, _, err := c.Jobs().Deregister(id, true, w); err != nil && !strings.Contains(err.Error(), "404") {
		t.Errorf("failed to purge job %s/%s: %v", ns, id, err)
		return
	}
	WaitFor(t, 30*time.Second, "allocations of "+id+" to stop", func() (bool, string, error) {
		allocs, _, err := c.Allocations().List(&api.QueryOptions{Namespace: ns, Filter: fmt.Sprintf("JobID == %q", id)})
		if err != nil {
			return false, "", err
		}
		var live []string
		for _, a := range allocs {
			if a.ClientStatus == api.AllocClientStatusPending || a.ClientStatus == api.AllocClientStatusRunning {
				live = append(live, a.Name+" "+a.ClientStatus)
			}
		}
		return len(live) == 0, strings.Join(live, ", "), nil
	})
}

// NodeIDs returns the IDs of the cluster's ready nodes by name (client-1,
// client-2, ...).
func NodeIDs(t testing.TB, c *api.Client) map[string]string {
	t.Helper()
	nodes, _, err := c.Nodes().List(nil)
	if err != nil {
		t.Fatalf("failed to list nodes: %v", err)
	}
	ids := map[string]string{}
	for _, n := range nodes {
		if n.Status == api.NodeStatusReady {
			ids[n.Name] = n.ID
		}
	}
	for _, want := range []string{"client-1", "client-2"} {
		if ids[want] == "" {
			t.Fatalf("cluster has no ready node %s (nodes: %v); start it with scripts/cluster.sh up", want, ids)
		}
	}
	return ids
}

// Devices returns, per node ID, the sorted device IDs of type dev held by
// the job's running allocations.
func Devices(t testing.TB, c *api.Client, ns, id, dev string) map[string][]string {
	t.Helper()
	allocs, _, err := c.Allocations().List(&api.QueryOptions{
		Namespace: ns,
		Filter:    fmt.Sprintf(`JobID == %q and ClientStatus == "running" and DesiredStatus == "run"`, id),
		Params:    map[string]string{"resources": "true"},
	})
	if err != nil {
		t.Fatalf("failed to list allocations of %s: %v", id, err)
	}
	out := map[string][]string{}
	for _, a := range allocs {
		if a.AllocatedResources == nil {
			t.Fatalf("allocation %s has no allocated resources in the list", a.ID)
		}
		for _, tr := range a.AllocatedResources.Tasks {
			for _, d := range tr.Devices {
				if deviceIs(dev, d.Vendor, d.Type, d.Name) {
					out[a.NodeID] = append(out[a.NodeID], d.DeviceIDs...)
				}
			}
		}
	}
	for _, ids := range out {
		slices.Sort(ids)
	}
	return out
}

// deviceIs reports whether an allocated device is of type dev ("type",
// "vendor/type" or "vendor/type/name").
func deviceIs(dev, vendor, typ, name string) bool {
	p := strings.Split(dev, "/")
	switch len(p) {
	case 1:
		return typ == p[0]
	case 2:
		return vendor == p[0] && typ == p[1]
	case 3:
		return vendor == p[0] && typ == p[1] && name == p[2]
	}
	return false
}

// WaitFor polls cond every 200 ms until it is true, failing the test with
// cond's last detail after timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, detail string, err error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var detail string
	var err error
	for {
		var ok bool
		ok, detail, err = cond()
		if ok && err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out after %v waiting for %s: %s (error: %v)", timeout, what, detail, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
