package archtest

import (
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/pollux-nomad/pollux"

// layers lists every package of the module, bottom up. A package may
// import packages of lower layers only (and its own sub-packages); a
// package missing from the list fails the test, so that a new package
// must be placed.
var layers = [][]string{
	// The wire contract and the pure leaves.
	{"contract/quote", "contract", "contract/contracttest", "model", "data", "apps/internal/delaunay", "internal/stats"},
	// The types the policies share, then the policies.
	{"policy"},
	{"policy/pollux", "policy/sia", "policy/baseline"},
	// Pure core built on them (the registry of the policies among it).
	{"internal/access", "metrics", "policy/registry", "results", "workload", "apps"},
	// Recording and replaying rounds, through the registry.
	{"policy/record"},
	// Cluster sizing on the policy's types.
	{"policy/autoscale"},
	// Test helpers of the core; the controller, its Consul adapter, the
	// simulator.
	{"policy/policytest", "consul", "jobs", "sim"},
	// The Nomad adapter (it implements the controller's types), the
	// in-memory harness, the agent process around the controller, the
	// status as text, the worker's Go reporter, the status page.
	{"nomad", "nomad/nomadtest", "jobs/jobstest", "jobs/agent", "jobs/statustext", "worker/go/report", "ui"},
	// The emulated trainer, then the closed-loop demo.
	{"emulate"},
	{"demo"},
	// The binary and the end-to-end tests.
	{"cmd/pollux", "e2e", "internal/archtest"},
}

// hashicorpAllowed may import the Nomad or Consul API packages.
var hashicorpAllowed = []string{"consul", "nomad", "nomad/nomadtest", "worker/go/report", "emulate", "demo", "cmd/pollux", "e2e"}

// noServerDeps must not depend, even indirectly, on the Nomad or Consul
// APIs: the pure core, the contract and the controller.
var noServerDeps = []string{"contract", "model", "policy", "policy/registry", "policy/record", "policy/pollux", "policy/sia", "policy/baseline", "policy/autoscale", "sim", "apps", "workload", "metrics", "results", "jobs", "jobs/agent", "jobs/statustext", "internal/access"}

// notDependOn lists, for a package and its sub-packages, the packages it
// must not depend on even indirectly although their layers would allow
// it: the controller (jobs) is no reporting tool, so it takes its order
// statistics from internal/stats, not from results.
var notDependOn = map[string][]string{
	"jobs": {"results"},
}

// workerForbidden are what the worker libraries must not depend on.
var workerForbidden = []string{"jobs", "policy", "sim", "model", "nomad"}

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

func list(t *testing.T) map[string]pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", module+"/...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs[strings.TrimPrefix(p.ImportPath, module+"/")] = p
	}
	return pkgs
}

func rel(path string) (string, bool) {
	if !strings.HasPrefix(path, module+"/") {
		return "", false
	}
	return strings.TrimPrefix(path, module+"/"), true
}

func isServerAPI(path string) bool {
	return strings.HasPrefix(path, "github.com/hashicorp/nomad/") || strings.HasPrefix(path, "github.com/hashicorp/consul/")
}

func TestLayers(t *testing.T) {
	layer := map[string]int{}
	for i, l := range layers {
		for _, p := range l {
			layer[p] = i
		}
	}
	for name, p := range list(t) {
		li, ok := layer[name]
		if !ok {
			t.Errorf("package %s has no layer: add it to layers in internal/archtest and to the README's folder table", name)
			continue
		}
		for _, imp := range p.Imports {
			dep, ok := rel(imp)
			if !ok {
				if isServerAPI(imp) && !slices.Contains(hashicorpAllowed, name) {
					t.Errorf("%s imports %s: only the adapters (and worker-side code) may", name, imp)
				}
				continue
			}
			if strings.HasPrefix(dep, name+"/") {
				continue // its own sub-package
			}
			if lj, ok := layer[dep]; ok && lj >= li {
				t.Errorf("%s (layer %d) imports %s (layer %d): a package imports only lower layers", name, li, dep, lj)
			}
		}
	}
}

func TestNoServerAPIs(t *testing.T) {
	pkgs := list(t)
	for _, name := range noServerDeps {
		for _, d := range pkgs[name].Deps {
			if isServerAPI(d) {
				t.Errorf("%s depends on %s: it must stay free of the Nomad and Consul APIs", name, d)
				break
			}
		}
	}
}

func TestNotDependOn(t *testing.T) {
	for name, p := range list(t) {
		for owner, banned := range notDependOn {
			if name != owner && !strings.HasPrefix(name, owner+"/") {
				continue
			}
			for _, d := range p.Deps {
				if r, ok := rel(d); ok && slices.Contains(banned, r) {
					t.Errorf("%s depends on %s: %s and its sub-packages must not", name, r, owner)
				}
			}
		}
	}
}

func TestWorkersStandAlone(t *testing.T) {
	for name, p := range list(t) {
		if !strings.HasPrefix(name, "worker/") {
			continue
		}
		for _, d := range p.Deps {
			if r, ok := rel(d); ok && slices.Contains(workerForbidden, r) {
				t.Errorf("worker package %s depends on %s: a worker library must not drag in the controller or the policy", name, r)
			}
		}
	}
}

// TestContractIsALeaf: the contract imports nothing of this project but
// its own quote package.
func TestContractIsALeaf(t *testing.T) {
	for _, d := range list(t)["contract"].Deps {
		if r, ok := rel(d); ok && r != "contract/quote" {
			t.Errorf("contract depends on %s", r)
		}
	}
}
