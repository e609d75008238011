package sim_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/record"
	"github.com/pollux-nomad/pollux/policy/registry"
	"github.com/pollux-nomad/pollux/sim"
)

// TestRecordedRoundsReplay records every round of simulated workloads
// (the small untyped one under every policy, the first 12 jobs of the
// Sia artifact's sia-philly-1 on its 3-type cluster under pollux and sia)
// through JSON, and decides each again with a policy made afresh from the
// record alone: every decision is the recorded one. A policy that kept
// state of its own between rounds, or drew from a source the input does
// not name, fails here from its second round on.
func TestRecordedRoundsReplay(t *testing.T) {
	type run struct {
		name   string
		policy string
		cfg    sim.Config
		rules  sim.Rules
		hetero bool
	}
	var runs []run
	for _, p := range sim.PolicyNames {
		runs = append(runs, run{name: "small/" + p, policy: p, cfg: sim.Config{Nodes: 2, GPUsPerNode: 4}, rules: sim.RulesPollux})
	}
	groups, err := sim.ParseCluster(sim.DefaultHeteroCluster)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"pollux", "sia"} {
		runs = append(runs, run{name: "sia-philly-1/" + p, policy: p, cfg: sim.Config{Cluster: groups, Rules: sim.RulesSia}, rules: sim.RulesSia, hetero: true})
	}
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			settings := sim.SettingsFor(registry.PolluxConfig{Seed: 3}, r.rules)
			pol, err := registry.New(r.policy, settings)
			if err != nil {
				t.Fatal(err)
			}
			var docs [][]byte
			r.cfg.RecordRound = func(in policy.Input, out policy.Allocations) error {
				rec, err := record.New(r.policy, settings, in, out)
				if err != nil {
					return err
				}
				b, err := json.Marshal(rec)
				docs = append(docs, b)
				return err
			}
			a := applications(t)
			jobs := smallWorkload()
			if r.hetero {
				a = typedApps(t, r.rules)
				jobs, _, err = sim.LoadWorkload("sia-philly-1", a)
				if err != nil {
					t.Fatal(err)
				}
				jobs = jobs[:12]
			}
			runSim(t, r.cfg, a, jobs, pol)
			if len(docs) < 3 {
				t.Fatalf("%d rounds recorded, want several", len(docs))
			}
			carried := 0
			for i, b := range docs {
				var rec record.Round
				if err := json.Unmarshal(b, &rec); err != nil {
					t.Fatal(err)
				}
				if rec.Input.Round != int64(i+1) {
					t.Fatalf("record %d has round %d", i, rec.Input.Round)
				}
				if len(rec.Input.Carry) > 0 {
					carried++
				}
				_, diff, err := rec.Replay(context.Background())
				if err != nil {
					t.Fatalf("round %d: %v", rec.Input.Round, err)
				}
				if len(diff) > 0 {
					t.Fatalf("round %d decided differently on replay:\n%v", rec.Input.Round, diff)
				}
			}
			if (r.policy == "pollux" || r.policy == "tiresias") && carried == 0 {
				t.Errorf("no round of %s handed anything on", r.policy)
			}
			t.Logf("%d rounds replayed, %d with a carry", len(docs), carried)
		})
	}
}
