package contract

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestKeys(t *testing.T) {
	tests := map[string]struct{ got, want string }{
		"metrics":    {MetricsKey("default", "train"), "jobs/default/train/metrics"},
		"decision":   {DecisionKey("team-a", "bert.v2"), "jobs/team-a/bert.v2/decision"},
		"state":      {StateKey("default", "resnet"), "jobs/default/resnet/state"},
		"rendezvous": {RendezvousKey("default", "resnet"), "jobs/default/resnet/rendezvous"},
		"checkpoint": {CheckpointKey("ns", "j"), "jobs/ns/j/checkpoint"},
		"prefix":     {JobPrefix("ns", "j"), "jobs/ns/j/"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("got %q, want %q", tc.got, tc.want)
			}
		})
	}
}

func TestPlacement(t *testing.T) {
	p := []NodeGPUs{{"n1", 4}, {"n2", 2}, {"n3", 1}}
	s := FormatPlacement(p)
	if s != "n1:4,n2:2,n3:1" {
		t.Fatalf("FormatPlacement = %q", s)
	}
	got, err := ParsePlacement(s)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(p, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if TotalGPUs(got) != 7 {
		t.Errorf("TotalGPUs = %d", TotalGPUs(got))
	}
	for name, bad := range map[string]string{
		"no count":   "n1",
		"zero":       "n1:0",
		"negative":   "n1:-1",
		"empty node": ":2",
		"repeated":   "n1:1,n1:2",
		"huge":       "n1:99999999999",
		"trailing":   "n1:1,",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ParsePlacement(bad); err == nil {
				t.Errorf("ParsePlacement(%q) accepted", bad)
			}
		})
	}
}

func TestDecisionValidate(t *testing.T) {
	good := Decision{BatchSize: 768, LocalBsz: 64, AccumSteps: 1, LR: 0.2, NumReplicas: 6, NumNodes: 2, Placement: "a:4,b:2", Round: 3}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid decision refused: %v", err)
	}
	raw, _ := json.Marshal(good)
	if d, err := ParseDecision(raw); err != nil || d != good {
		t.Fatalf("ParseDecision = %+v, %v", d, err)
	}
	if err := (Decision{LR: 0.1}).Validate(); err != nil {
		t.Errorf("zero-GPU decision refused: %v", err)
	}
	tests := map[string]struct {
		mutate func(*Decision)
		want   string
	}{
		"negative batch":       {func(d *Decision) { d.BatchSize = -1 }, MetaBatchSize},
		"absurd local":         {func(d *Decision) { d.LocalBsz = 1 << 30 }, MetaLocalBsz},
		"nan lr":               {func(d *Decision) { d.LR = nan() }, MetaLR},
		"zero lr":              {func(d *Decision) { d.LR = 0 }, MetaLR},
		"batch not a product":  {func(d *Decision) { d.BatchSize = 700 }, "is not"},
		"placement mismatch":   {func(d *Decision) { d.Placement = "a:4" }, MetaPlacement},
		"placement unreadable": {func(d *Decision) { d.Placement = "a" }, MetaPlacement},
		"negative round":       {func(d *Decision) { d.Round = -2 }, MetaRound},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := good
			tc.mutate(&d)
			err := d.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want an error naming %q", err, tc.want)
			}
		})
	}
	if _, err := ParseDecision([]byte(`{"batch_size":"x"}`)); err == nil {
		t.Error("ParseDecision accepted a string batch size")
	}
}

func nan() float64 { var z float64; return z / z }

func TestDecisionFromMeta(t *testing.T) {
	d := Decision{BatchSize: 512, LocalBsz: 128, AccumSteps: 0, LR: 0.4, NumReplicas: 4, NumNodes: 1, Placement: "n1:4", Round: 7, GPUType: "t4"}
	meta := d.Meta()
	for _, k := range OwnedMeta {
		if _, ok := meta[k]; !ok && k != MetaSubmitTime {
			t.Errorf("Meta() lacks owned key %s", k)
		}
	}
	name := func(k string) string { return "NOMAD_META_" + k }
	lookup := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	got, err := DecisionFromMeta(lookup(meta), name)
	if err != nil || got != d {
		t.Fatalf("DecisionFromMeta(Meta()) = %+v, %v; want %+v", got, err, d)
	}
	meta[MetaLocalBsz], meta[MetaLR] = "many", "-1"
	_, err = DecisionFromMeta(lookup(meta), name)
	if err == nil || !strings.Contains(err.Error(), "NOMAD_META_pollux_local_bsz") || !strings.Contains(err.Error(), "NOMAD_META_pollux_lr") {
		t.Errorf("malformed meta: %v, want both keys named", err)
	}
}

func TestParseState(t *testing.T) {
	s := State{Version: StateVersion, Perf: &PerfParams{AlphaC: 0.1, BetaC: 0.01, AlphaN: 0.1, BetaN: 0.01, AlphaR: 0.1, BetaR: 0.01, Gamma: 2}, Restarts: 1}
	raw, _ := json.Marshal(s)
	got, err := ParseState(raw, nil)
	if err != nil || got.Restarts != 1 || *got.Perf != *s.Perf {
		t.Fatalf("ParseState = %+v, %v", got, err)
	}
	extra := errors.New("reader's own check")
	if _, err := ParseState(raw, func(*State) error { return extra }); !errors.Is(err, extra) {
		t.Errorf("check not applied: %v", err)
	}
	for name, doc := range map[string]string{
		"version":    `{"version":2}`,
		"restarts":   `{"version":1,"restarts":-1}`,
		"grad":       `{"version":1,"grad":{"sqr":-1,"var":0}}`,
		"attained":   `{"version":1,"attained_service":1e300}`,
		"not json":   `{"version":`,
		"wrong type": `{"version":"1"}`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseState([]byte(doc), nil); err == nil {
				t.Errorf("accepted %s", doc)
			}
		})
	}
}
