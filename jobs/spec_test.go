package jobs

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/model"
)

func TestParseSpec(t *testing.T) {
	base := func(kv ...string) map[string]string {
		m := map[string]string{contract.MetaEnabled: "true", contract.MetaInitBatchSize: "128", contract.MetaInitLR: "0.1"}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == "<delete>" {
				delete(m, kv[i])
				continue
			}
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tests := map[string]struct {
		meta    map[string]string
		want    Spec
		wantErr []string
	}{
		"defaults": {
			meta: base(),
			want: Spec{InitBatchSize: 128, InitLR: 0.1, MaxBatchSize: 128, LocalBszMin: 1, LocalBszMax: 128, Accumulation: true, LRScaling: model.AdaScale, MinGPUs: 1},
		},
		"all keys": {
			meta: base(contract.MetaMaxBatchSize, "4096", contract.MetaLocalBszMin, "32", contract.MetaLocalBszMax, "512", contract.MetaAccumulation, "false",
				contract.MetaLRScaling, "sqrt", contract.MetaMinGPUs, "2", contract.MetaMaxGPUs, "16", contract.MetaModel, " resnet50-imagenet/fp16:v2 "),
			want: Spec{InitBatchSize: 128, InitLR: 0.1, MaxBatchSize: 4096, LocalBszMin: 32, LocalBszMax: 512, Accumulation: false, LRScaling: model.Sqrt, MinGPUs: 2, MaxGPUs: 16, Model: "resnet50-imagenet/fp16:v2"},
		},
		"model with a space":   {meta: base(contract.MetaModel, "resnet 50"), wantErr: []string{contract.MetaModel + `: want 1 to 128 letters, digits or . _ - : /, got "resnet 50"`}},
		"empty model":          {meta: base(contract.MetaModel, "  "), wantErr: []string{contract.MetaModel + ": want"}},
		"model too long":       {meta: base(contract.MetaModel, strings.Repeat("m", 129)), wantErr: []string{contract.MetaModel + ": want"}},
		"missing required":     {meta: base(contract.MetaInitBatchSize, "<delete>", contract.MetaInitLR, "<delete>"), wantErr: []string{contract.MetaInitBatchSize + ": required", contract.MetaInitLR + ": required"}},
		"not a number":         {meta: base(contract.MetaInitBatchSize, "lots"), wantErr: []string{contract.MetaInitBatchSize + `: not an integer: "lots"`}},
		"negative":             {meta: base(contract.MetaMaxGPUs, "-4"), wantErr: []string{contract.MetaMaxGPUs + ": must be in"}},
		"huge":                 {meta: base(contract.MetaMaxBatchSize, "99999999999"), wantErr: []string{contract.MetaMaxBatchSize}},
		"nan lr":               {meta: base(contract.MetaInitLR, "NaN"), wantErr: []string{contract.MetaInitLR + ": must be a positive finite number"}},
		"min above max":        {meta: base(contract.MetaMinGPUs, "8", contract.MetaMaxGPUs, "4"), wantErr: []string{contract.MetaMaxGPUs + ": 4 is below " + contract.MetaMinGPUs}},
		"max batch below m0":   {meta: base(contract.MetaMaxBatchSize, "64"), wantErr: []string{contract.MetaMaxBatchSize + ": 64 is below"}},
		"unknown scaling":      {meta: base(contract.MetaLRScaling, "cosine"), wantErr: []string{contract.MetaLRScaling}},
		"bad bool":             {meta: base(contract.MetaAccumulation, "maybe"), wantErr: []string{contract.MetaAccumulation + `: want true or false, got "maybe"`}},
		"local bounds flipped": {meta: base(contract.MetaLocalBszMin, "64", contract.MetaLocalBszMax, "32"), wantErr: []string{contract.MetaLocalBszMax + ": 32 is below"}},
		"very long value":      {meta: base(contract.MetaInitBatchSize, strings.Repeat("9x", 5000)), wantErr: []string{"..."}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseSpec(tc.meta)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("spec (-want +got):\n%s", diff)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if len(err.Error()) > 2000 {
				t.Errorf("error message is %d bytes long", len(err.Error()))
			}
		})
	}
}

func TestDecideConsistency(t *testing.T) {
	spec := Spec{InitBatchSize: 128, InitLR: 0.1, MaxBatchSize: 4096, LocalBszMin: 32, LocalBszMax: 256, Accumulation: true, LRScaling: model.AdaScale, MinGPUs: 1}
	fit := &model.GoodputFunc{
		Perf:          model.PerfParams{AlphaC: 0.02, BetaC: 0.0007, AlphaN: 0.12, BetaN: 0.002, AlphaR: 0.03, BetaR: 0.001, Gamma: 2},
		Grad:          model.GradParams{Sqr: 0.5, Var: 5},
		InitBatchSize: 128,
	}
	for name, p := range map[string][]NodeGPUs{
		"one gpu":       {{Node: "a", GPUs: 1}},
		"one node":      {{Node: "a", GPUs: 4}},
		"spread":        {{Node: "a", GPUs: 4}, {Node: "b", GPUs: 2}},
		"three singles": {{Node: "a", GPUs: 1}, {Node: "b", GPUs: 1}, {Node: "c", GPUs: 1}},
	} {
		for _, f := range []*model.GoodputFunc{nil, fit} {
			t.Run(name, func(t *testing.T) {
				d := Decide(spec, f, p, 7)
				if d.BatchSize != d.LocalBsz*d.NumReplicas*(d.AccumSteps+1) {
					t.Errorf("batch %d != local %d x replicas %d x (accum %d + 1)", d.BatchSize, d.LocalBsz, d.NumReplicas, d.AccumSteps)
				}
				if d.BatchSize > spec.MaxBatchSize || d.LocalBsz < 1 || d.AccumSteps < 0 {
					t.Errorf("decision %+v outside bounds", d)
				}
				if f == nil && d.LocalBsz > spec.LocalBszMax {
					t.Errorf("micro-batch %d above %d", d.LocalBsz, spec.LocalBszMax)
				}
				if d.NumNodes != len(p) || d.Round != 7 || d.Placement != contract.FormatPlacement(p) {
					t.Errorf("decision %+v does not describe placement %v", d, p)
				}
				if d.LR <= 0 {
					t.Errorf("lr %g", d.LR)
				}
			})
		}
	}
}

func TestConfigMergeJSON(t *testing.T) {
	tests := map[string]struct {
		doc     string
		check   func(t *testing.T, c Config)
		wantErr string
	}{
		"empty object keeps defaults": {doc: `{}`, check: func(t *testing.T, c Config) {
			if diff := cmp.Diff(DefaultConfig(), c); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		}},
		"fields": {doc: `{"interval":"10s","fairness_p":1,"device":"nomad/file/mock","dry_run":true,"ga":{"population":50,"seed":9}}`,
			check: func(t *testing.T, c Config) {
				if c.Interval != 10*time.Second || c.FairnessP != 1 || c.Device != "nomad/file/mock" || !c.DryRun || c.Population != 50 || c.Seed != 9 || c.Generations != 100 {
					t.Errorf("got %+v", c)
				}
			}},
		"unknown field":    {doc: `{"intervall":"10s"}`, wantErr: `unknown field "intervall"`},
		"bad duration":     {doc: `{"interval":"soon"}`, wantErr: "interval:"},
		"p zero":           {doc: `{"fairness_p":0}`, wantErr: "fairness_p: 0 is not allowed"},
		"bad device":       {doc: `{"device":"gpu"}`, wantErr: "device:"},
		"negative penalty": {doc: `{"restart_penalty":"-1s"}`, wantErr: "restart_penalty"},
		"not json":         {doc: `interval = "10s"`, wantErr: "failed to parse configuration"},
		"two errors":       {doc: `{"interval":"0s","ga":{"population":1}}`, wantErr: "ga.population"},
		"unknown policy":   {doc: `{"policy":"fifo"}`, wantErr: `policy: want pollux, tiresias, optimus or sia, got "fifo"`},
		"baseline policy": {doc: `{"policy":"tiresias"}`, check: func(t *testing.T, c Config) {
			if c.Policy != "tiresias" {
				t.Errorf("policy %q", c.Policy)
			}
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := DefaultConfig().MergeJSON([]byte(tc.doc))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, got)
		})
	}
}

func TestTelemetryExposition(t *testing.T) {
	tm := NewTelemetry()
	tm.incConflict()
	tm.incError("apply")
	tm.observePhase("total", 0.25)
	tm.setJobGPUs("default/train", 6)
	tm.observeRound(&Status{Jobs: []JobStatus{{Job: "default/train", State: StateScheduled}}})
	var b strings.Builder
	if err := tm.WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"pollux_rounds_total 1", "pollux_apply_conflicts_total 1", `pollux_errors_total{kind="apply"} 1`,
		`pollux_round_phase_seconds_sum{phase="total"} 0.25`, `pollux_jobs{state="scheduled"} 1`, `pollux_job_gpus{job="default/train"} 6`,
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("exposition lacks %q:\n%s", want, b.String())
		}
	}
}
