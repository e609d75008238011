package report_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/consul/api"

	"github.com/pollux-nomad/pollux/worker/go/report"
)

func TestAllocation(t *testing.T) {
	raw, err := api.NewClient(&api.Config{Address: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	full := map[string]string{
		"NOMAD_META_pollux_batch_size": "1024", "NOMAD_META_pollux_local_bsz": "128",
		"NOMAD_META_pollux_accum_steps": "1", "NOMAD_META_pollux_lr": "0.0125",
		"NOMAD_META_pollux_num_replicas": "4", "NOMAD_META_pollux_num_nodes": "2",
		"NOMAD_META_pollux_placement": "node-a:3,node-b:1", "NOMAD_META_pollux_round": "17",
	}
	with := func(changes map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range full {
			out[k] = v
		}
		for k, v := range changes {
			out[k] = v
		}
		return out
	}
	tests := map[string]struct {
		env     map[string]string
		want    report.Allocation
		wantErr []string
	}{
		"all keys": {
			env: full,
			want: report.Allocation{BatchSize: 1024, LocalBsz: 128, AccumSteps: 1, LR: 0.0125,
				NumReplicas: 4, NumNodes: 2, Placement: "node-a:3,node-b:1", Round: 17},
		},
		"no keys": {env: map[string]string{}},
		"some keys with spaces": {
			env:  map[string]string{"NOMAD_META_pollux_batch_size": " 64 ", "NOMAD_META_pollux_lr": "1e-3"},
			want: report.Allocation{BatchSize: 64, LR: 0.001},
		},
		"malformed": {
			env:     with(map[string]string{"NOMAD_META_pollux_batch_size": "lots", "NOMAD_META_pollux_lr": "NaN"}),
			wantErr: []string{"NOMAD_META_pollux_batch_size", `"lots"`, "NOMAD_META_pollux_lr"},
		},
		"negative": {
			env:     map[string]string{"NOMAD_META_pollux_round": "-1", "NOMAD_META_pollux_accum_steps": "-2"},
			wantErr: []string{"NOMAD_META_pollux_round", "NOMAD_META_pollux_accum_steps"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for k := range full {
				t.Setenv(k, "")
				os.Unsetenv(k)
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			r, err := report.New(t.Context(), report.Config{Consul: raw, JobID: "alloc", Rank: 1})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			got, err := r.Allocation()
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("Allocation() = %+v, want an error", got)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not mention %s", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Allocation: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("allocation (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecisions writes decisions to the decision key and expects each new
// one on the channel within a second; repeated and invalid values are not
// delivered.
func TestDecisions(t *testing.T) {
	raw := rawClient(t)
	r := newReporter(t, raw, report.Config{Rank: 1, DecisionWait: 2 * time.Second})
	decisionKey := strings.TrimSuffix(r.Key(), "metrics") + "decision"
	put := func(value []byte) {
		t.Helper()
		if _, err := raw.KV().Put(&api.KVPair{Key: decisionKey, Value: value}, nil); err != nil {
			t.Fatalf("failed to write decision: %v", err)
		}
	}
	putDecision := func(d report.Decision) {
		t.Helper()
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		put(b)
	}
	expect := func(want report.Decision, ch <-chan report.Decision, written time.Time) {
		t.Helper()
		select {
		case got, ok := <-ch:
			if !ok {
				t.Fatalf("channel closed, want %+v", want)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
			if d := time.Since(written); d > time.Second {
				t.Errorf("decision delivered after %v, want within 1s", d)
			}
		case <-time.After(time.Second):
			t.Fatalf("no decision within 1s, want %+v", want)
		}
	}
	d0 := report.Decision{BatchSize: 512, LocalBsz: 128, NumReplicas: 4, NumNodes: 1, LR: 0.04, Placement: "a:4", Round: 3}
	d1 := report.Decision{BatchSize: 1024, LocalBsz: 128, AccumSteps: 1, NumReplicas: 4, NumNodes: 2, LR: 0.05, Placement: "a:2,b:2", Round: 7}
	d2 := report.Decision{BatchSize: 2048, LocalBsz: 256, AccumSteps: 1, NumReplicas: 4, NumNodes: 2, LR: 0.07, Placement: "a:2,b:2", Round: 8}

	putDecision(d0)
	ctx, cancel := context.WithCancel(t.Context())
	ch := r.Decisions(ctx)
	expect(d0, ch, time.Now()) // the current one first

	time.Sleep(100 * time.Millisecond) // the blocking query is waiting
	written := time.Now()
	putDecision(d1)
	expect(d1, ch, written)

	putDecision(d1)          // unchanged: not delivered again
	put([]byte("{not json")) // invalid: skipped
	select {
	case got := <-ch:
		t.Fatalf("delivered %+v for an unchanged or invalid value", got)
	case <-time.After(300 * time.Millisecond):
	}
	written = time.Now()
	putDecision(d2)
	expect(d2, ch, written)

	cancel()
	select {
	case _, ok := <-ch:
		if ok {
			t.Errorf("decision delivered after cancel")
		}
	case <-time.After(5 * time.Second):
		t.Errorf("channel not closed 5s after cancel")
	}
}
