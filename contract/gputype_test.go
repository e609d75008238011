package contract

import (
	"strings"
	"testing"
	"time"
)

// TestMetricsGPUType: gpu_type is optional, written after count only when
// set, part of the sort key (absent first), and validated.
func TestMetricsGPUType(t *testing.T) {
	e := func(k int, typ string) ProfileEntry {
		return ProfileEntry{NumNodes: 1, NumReplicas: k, LocalBsz: 32, ComputeTime: 0.1, StepTime: 0.2, Count: 3, GPUType: typ}
	}
	d := &Metrics{Version: 1, Timestamp: time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC), BatchSize: 64,
		Profile: []ProfileEntry{e(2, "t4"), e(1, "t4"), e(1, "NVIDIA A100-SXM4-40GB"), e(1, "")}}
	raw, err := MarshalMetrics(d)
	if err != nil {
		t.Fatal(err)
	}
	want := `"profile":[` +
		`{"num_nodes":1,"num_replicas":1,"local_bsz":32,"accum_steps":0,"compute_time":0.1,"step_time":0.2,"sync_time":0,"count":3},` +
		`{"num_nodes":1,"num_replicas":1,"local_bsz":32,"accum_steps":0,"compute_time":0.1,"step_time":0.2,"sync_time":0,"count":3,"gpu_type":"NVIDIA A100-SXM4-40GB"},` +
		`{"num_nodes":1,"num_replicas":1,"local_bsz":32,"accum_steps":0,"compute_time":0.1,"step_time":0.2,"sync_time":0,"count":3,"gpu_type":"t4"},` +
		`{"num_nodes":1,"num_replicas":2,"local_bsz":32,"accum_steps":0,"compute_time":0.1,"step_time":0.2,"sync_time":0,"count":3,"gpu_type":"t4"}]}`
	if !strings.HasSuffix(string(raw), want) {
		t.Fatalf("canonical encoding:\n got %s\nwant suffix %s", raw, want)
	}
	back, err := ParseMetrics(raw)
	if err != nil {
		t.Fatal(err)
	}
	if back.Profile[1].GPUType != "NVIDIA A100-SXM4-40GB" || back.Profile[0].GPUType != "" {
		t.Errorf("parsed types %q, %q", back.Profile[0].GPUType, back.Profile[1].GPUType)
	}
	for _, bad := range []string{`t4"x`, "a<b", strings.Repeat("x", MaxGPUTypeLen+1), "é"} {
		d.Profile[0].GPUType = bad
		if _, err := MarshalMetrics(d); err == nil || !strings.Contains(err.Error(), "profile[0].gpu_type") {
			t.Errorf("gpu_type %q: error %v, want one naming profile[0].gpu_type", bad, err)
		}
	}
	d.Profile[0].GPUType = "t4"
	d.Profile[1].GPUType = "t4"
	d.Profile[1].NumReplicas = 2
	if _, err := MarshalMetrics(d); err == nil || !strings.Contains(err.Error(), "same num_nodes") {
		t.Errorf("duplicate typed entries: error %v", err)
	}
}

// TestDecisionGPUType: the decision's type travels through meta and is
// validated.
func TestDecisionGPUType(t *testing.T) {
	d := Decision{BatchSize: 64, LocalBsz: 32, NumReplicas: 2, NumNodes: 1, LR: 0.1, Placement: "n1:2", GPUType: "a100"}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	m := d.Meta()
	if m[MetaGPUType] != "a100" {
		t.Fatalf("meta %v lacks %s", m, MetaGPUType)
	}
	back, err := DecisionFromMeta(func(k string) (string, bool) { v, ok := m[k]; return v, ok }, func(k string) string { return k })
	if err != nil || back != d {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
	d.GPUType = ""
	if _, ok := d.Meta()[MetaGPUType]; ok {
		t.Errorf("an untyped decision writes %s", MetaGPUType)
	}
	d.GPUType = "bad\"type"
	if err := d.Validate(); err == nil || !strings.Contains(err.Error(), MetaGPUType) {
		t.Errorf("bad type: %v", err)
	}
}

// TestStateTyped: per-type fits are checked like the main one.
func TestStateTyped(t *testing.T) {
	good := `{"version":1,"metrics_index":0,"profile_points":0,"max_profiled":0,"applied_index":0,"applied_at":"0001-01-01T00:00:00Z","restarts":0,"attained_service":0,` +
		`"typed":{"t4":{"perf":{"alpha_c":0.1,"beta_c":0.01,"alpha_n":0,"beta_n":0,"alpha_r":0,"beta_r":0,"gamma":1},"profile_points":2,"max_profiled":2}},"gpu_type":"t4"}`
	s, err := ParseState([]byte(good), nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Typed["t4"].ProfilePoints != 2 || s.GPUType != "t4" {
		t.Errorf("parsed %+v", s)
	}
	bad := strings.Replace(good, `"t4":{`, `"t\"4":{`, 1)
	if _, err := ParseState([]byte(bad), nil); err == nil || !strings.Contains(err.Error(), "typed") {
		t.Errorf("bad type name: %v", err)
	}
	bad = strings.Replace(good, `"max_profiled":2`, `"max_profiled":-2`, 1)
	if _, err := ParseState([]byte(bad), nil); err == nil || !strings.Contains(err.Error(), "typed.t4") {
		t.Errorf("bad count: %v", err)
	}
}
