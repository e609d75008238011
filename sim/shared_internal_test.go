package sim

import (
	"strings"
	"testing"

	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/registry"
	"github.com/pollux-nomad/pollux/workload"
)

// observeTrue has job j measure its application's true step time on
// gpuType at the given placement and micro-batch.
func observeTrue(t *testing.T, j *job, gpuType string, placement []int, m int) {
	t.Helper()
	step, sync, err := j.app.ThroughputOn(gpuType, placement, m)
	if err != nil {
		t.Fatalf("profile %s %v m=%d: %v", gpuType, placement, m, err)
	}
	k := 0
	for _, g := range placement {
		k += g
	}
	j.gpuType, j.placement = gpuType, placement
	if err := j.observe(len(placement), k, m, step, sync, 1, 10); err != nil {
		t.Fatal(err)
	}
}

// TestSharedProfiles: with ShareProfiles a job's models on a type it has
// not run on are fitted on what the other jobs of its application
// measured there (not bootstrapped), for the policy and for its own batch
// size, while its exploration bound stays its own; without, it sees only
// its own fits and the bootstrap. The default shares for pollux on several
// GPU types only.
func TestSharedProfiles(t *testing.T) {
	applications, err := LoadTypedApplications(RulesSia)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := ParseCluster("t4:1x4,a100:1x8")
	if err != nil {
		t.Fatal(err)
	}
	jobs := []workload.Job{
		{Name: "cifar10-0", Application: "cifar10", NumReplicas: 1, BatchSize: 128},
		{Name: "cifar10-1", Time: 10, Application: "cifar10", NumReplicas: 1, BatchSize: 128},
		{Name: "yolov3-0", Time: 20, Application: "yolov3", NumReplicas: 1, BatchSize: 8},
	}
	setup := func(cfg Config, name string) *Simulator {
		t.Helper()
		pol, err := newTestPolicy(name)
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(cfg, applications, jobs, "shared", pol)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, share := range []Share{ShareOn, ShareOff} {
		s := setup(Config{Cluster: groups, Rules: RulesSia, ShareProfiles: share}, "pollux")
		a, b, y := s.jobs[0], s.jobs[1], s.jobs[2]
		lo, _, err := a.app.LocalBszBounds("a100")
		if err != nil {
			t.Fatal(err)
		}
		observeTrue(t, a, "a100", []int{1}, lo)
		observeTrue(t, a, "a100", []int{4}, lo)
		observeTrue(t, a, "a100", []int{8}, 2*lo)
		lo4, _, _ := b.app.LocalBszBounds("t4")
		observeTrue(t, b, "t4", []int{1}, lo4)
		ylo, _, _ := y.app.LocalBszBounds("a100")
		observeTrue(t, y, "a100", []int{2}, ylo)

		var projected []string
		proj := func(j *job, target string, fitted map[string]policy.GoodputModel) policy.GoodputModel {
			projected = append(projected, j.name+"@"+target)
			return s.bootstrap(j, target, fitted)
		}
		info := b.info(s.traits, 100, 64, registry.JobLimits{Explore: 2, Start: 16}, s.types, proj)
		if info.TypedGoodput["a100"] == nil || info.TypedGoodput["t4"] == nil {
			t.Fatalf("share %d: job b has models on %v, want t4 and a100", share, info.TypedGoodput)
		}
		if b.maxProfile["a100"] != 0 {
			t.Errorf("share %d: job b's a100 profile bound is %d; what others measured must not count", share, b.maxProfile["a100"])
		}
		switch share {
		case ShareOn:
			if len(projected) != 0 {
				t.Errorf("shared: bootstrapped %v, want a100 fitted on cifar10-0's points", projected)
			}
			pa, pb := a.perfOn("a100"), b.perfOn("a100")
			if pa == nil || pb == nil || *pa != *pb {
				t.Errorf("shared: a100 models of a and b differ: %v %v", pa, pb)
			}
			if p := a.perfOn("t4"); p == nil || *p != *b.perfOn("t4") {
				t.Errorf("shared: cifar10-0 has no t4 model from cifar10-1's point: %v", p)
			}
			// Another application's points stay its own.
			if p := y.perfOn("a100"); p == nil || *p == *pa {
				t.Errorf("shared: yolov3's a100 model is %v, the pool mixed applications", p)
			}
			// The batch size b picks on a100 comes from the shared model:
			// the same as a's at the same placement.
			a.reallocate("a100", []int{4}, 0)
			b.haveGrad = true
			b.reallocate("a100", []int{4}, 0)
			if a.atomicBsz != b.atomicBsz || a.accumSteps != b.accumSteps {
				t.Errorf("shared: b's micro-batch %d x %d differs from a's %d x %d on the same model", b.atomicBsz, b.accumSteps, a.atomicBsz, a.accumSteps)
			}
		case ShareOff:
			if len(projected) != 1 || projected[0] != "cifar10-1@a100" {
				t.Errorf("not shared: bootstrapped %v, want [cifar10-1@a100]", projected)
			}
			if b.perfOn("a100") != nil || a.perfOn("t4") != nil {
				t.Error("not shared: a job has a model of a type only the other ran on")
			}
		}
	}

	pol, err := newTestPolicy("pollux")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Cluster: groups, Rules: RulesSia, ShareProfiles: Share(7)}, applications, jobs, "shared", pol); err == nil || !strings.Contains(err.Error(), "ShareProfiles") {
		t.Errorf("ShareProfiles 7: error %v, want one naming ShareProfiles", err)
	}

	// Defaults: pollux shares on several types, not on one; sia never.
	for _, tc := range []struct {
		cluster, policy string
		want            bool
	}{
		{"t4:1x4,a100:1x8", "pollux", true},
		{"t4:2x4", "pollux", false},
		{"t4:1x4,a100:1x8", "sia", false},
	} {
		g, err := ParseCluster(tc.cluster)
		if err != nil {
			t.Fatal(err)
		}
		s := setup(Config{Cluster: g, Rules: RulesSia}, tc.policy)
		if got := s.jobs[0].pool != nil; got != tc.want {
			t.Errorf("%s on %s: shares profiles %v, want %v", tc.policy, tc.cluster, got, tc.want)
		}
	}
}

func newTestPolicy(name string) (policy.Policy, error) { return NewPolicyFor(name, 1, RulesSia) }
