package sim

import (
	"context"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/workload"
)

// watched wraps a policy and checks each round's nodes against the cloud:
// none is booting, none was marked draining after the previous round.
type watched struct {
	policy.Policy
	t        *testing.T
	s        *Simulator
	draining map[string]bool
	rounds   int
	sizes    map[int]bool
}

func (w *watched) Optimize(ctx context.Context, in policy.Input) (policy.Allocations, error) {
	w.rounds++
	w.sizes[len(in.Nodes)] = true
	for _, n := range in.Nodes {
		if w.draining[n.ID] {
			w.t.Errorf("t=%.0f: the policy got node %s, draining since the last round", in.Now, n.ID)
		}
		for _, c := range w.s.cloud.nodes {
			if c.id == n.ID && c.ready > in.Now {
				w.t.Errorf("t=%.0f: the policy got node %s, ready only at %.0f", in.Now, n.ID, c.ready)
			}
		}
	}
	return w.Policy.Optimize(ctx, in)
}

func TestCloudNeverOffersDrainingOrBootingNodes(t *testing.T) {
	applications, err := LoadApplications("")
	if err != nil {
		t.Fatal(err)
	}
	jobs := []workload.Job{
		{Name: "cifar10-0", Time: 0, Application: "cifar10", NumReplicas: 4, BatchSize: 512},
		{Name: "cifar10-1", Time: 0, Application: "cifar10", NumReplicas: 4, BatchSize: 512},
		{Name: "bert-2", Time: 60, Application: "bert", NumReplicas: 4, BatchSize: 48},
		{Name: "ncf-3", Time: 5400, Application: "ncf", NumReplicas: 1, BatchSize: 2048},
	}
	pol, err := NewPolicy("pollux", 3)
	if err != nil {
		t.Fatal(err)
	}
	w := &watched{Policy: pol, t: t, draining: map[string]bool{}, sizes: map[int]bool{}}
	cfg := Config{GPUsPerNode: 4, Cloud: &Cloud{MaxNodes: 6, Boot: 5 * time.Minute}}
	cfg.Cloud.Scaler.ScaleDownDelay = 120
	s, err := New(cfg, applications, jobs, "burst", w)
	if err != nil {
		t.Fatal(err)
	}
	w.s = s
	drained := 0
	if _, err := s.Run(context.Background(), func(Progress) {
		w.draining = map[string]bool{}
		for _, n := range s.cloud.nodes {
			if n.draining {
				w.draining[n.id] = true
				drained++
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if drained == 0 || len(w.sizes) < 2 {
		t.Errorf("%d drains, node counts seen %v: want the cluster to grow and shrink", drained, w.sizes)
	}
}
