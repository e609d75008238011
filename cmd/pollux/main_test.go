package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// exitCode maps run's error to the process exit code main would use.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const header = "name,time,application,num_replicas,batch_size\n"

func TestSimulateBadInput(t *testing.T) {
	tests := map[string]struct {
		args     func(t *testing.T) []string
		wantCode int
		wantMsg  []string
	}{
		"missing workload flag": {
			args: func(*testing.T) []string { return []string{"simulate"} }, wantCode: 2,
			wantMsg: []string{"-workload is required"},
		},
		"missing file": {
			args:     func(*testing.T) []string { return []string{"simulate", "-workload", "/nonexistent/w.csv"} },
			wantCode: 2, wantMsg: []string{"/nonexistent/w.csv"},
		},
		"unknown application": {
			args: func(t *testing.T) []string {
				return []string{"simulate", "-workload", writeFile(t, "w.csv", header+"a,0,bert,1,12\nb,5,gpt,1,8\n")}
			},
			wantCode: 2, wantMsg: []string{"w.csv:3", "application", `"gpt"`},
		},
		"negative time": {
			args: func(t *testing.T) []string {
				return []string{"simulate", "-workload", writeFile(t, "w.csv", header+"a,-5,bert,1,12\n")}
			},
			wantCode: 2, wantMsg: []string{"w.csv:2", "time"},
		},
		"malformed row": {
			args: func(t *testing.T) []string {
				return []string{"simulate", "-workload", writeFile(t, "w.csv", header+"a,0,bert\n")}
			},
			wantCode: 2, wantMsg: []string{"w.csv:2"},
		},
		"bad share-profiles": {
			args: func(*testing.T) []string {
				return []string{"simulate", "-workload", "workload-1", "-share-profiles", "maybe"}
			},
			wantCode: 2, wantMsg: []string{"-share-profiles", `"maybe"`},
		},
		"unknown policy": {
			args:     func(*testing.T) []string { return []string{"simulate", "-workload", "workload-1", "-policy", "fifo"} },
			wantCode: 2, wantMsg: []string{`"fifo"`},
		},
		"bad profiles dir": {
			args: func(t *testing.T) []string {
				return []string{"simulate", "-workload", "workload-1", "-profiles", t.TempDir()}
			},
			wantCode: 2, wantMsg: []string{"profiles"},
		},
		"bad cluster spec": {
			args: func(*testing.T) []string {
				return []string{"simulate", "-workload", "sia-philly-1", "-cluster", "t4:6x4,a100:2by8"}
			},
			wantCode: 2, wantMsg: []string{"-cluster", `part 2 "a100:2by8"`},
		},
		"cluster and nodes": {
			args: func(*testing.T) []string {
				return []string{"simulate", "-workload", "sia-philly-1", "-cluster", "t4:6x4", "-nodes", "3"}
			},
			wantCode: 2, wantMsg: []string{"-cluster replaces -nodes"},
		},
		"unknown rules": {
			args: func(*testing.T) []string {
				return []string{"simulate", "-workload", "sia-philly-1", "-rules", "gavel"}
			},
			wantCode: 2, wantMsg: []string{"-rules", `"gavel"`},
		},
		"unknown command": {
			args: func(*testing.T) []string { return []string{"frobnicate"} }, wantCode: 2,
			wantMsg: []string{"frobnicate"},
		},
		"hcl config with a bad duration": {
			args: func(t *testing.T) []string {
				return []string{"status", "-config", writeFile(t, "pollux.hcl", "device = \"nvidia/gpu\"\ninterval = \"soon\"\n")}
			},
			wantCode: 2, wantMsg: []string{"pollux.hcl:2,12-18: interval: want a duration"},
		},
		"json config with an unknown field": {
			args: func(t *testing.T) []string {
				return []string{"status", "-config", writeFile(t, "pollux.json", `{"intervall":"10s"}`)}
			},
			wantCode: 2, wantMsg: []string{"pollux.json: failed to parse configuration", `unknown field "intervall"`},
		},
		"fit without metrics": {
			args: func(*testing.T) []string { return []string{"fit"} }, wantCode: 2,
			wantMsg: []string{"-metrics"},
		},
		"fit garbage metrics": {
			args: func(t *testing.T) []string {
				return []string{"fit", "-metrics", writeFile(t, "m.json", `{"version": 1, "profile": [{"step_time": -1}]`)}
			},
			wantCode: 2, wantMsg: []string{"m.json"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tc.args(t), &stdout, &stderr)
			if got := exitCode(err); got != tc.wantCode {
				t.Fatalf("exit code %d (error %v), want %d", got, err, tc.wantCode)
			}
			for _, m := range tc.wantMsg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %q", err, m)
				}
			}
		})
	}
}

func TestSimulateJSON(t *testing.T) {
	w := writeFile(t, "small.csv", header+
		"cifar10-0,0,cifar10,2,512\n"+
		"ncf-1,30,ncf,1,2048\n"+
		"bert-2,100,bert,4,48\n")
	var stdout, stderr bytes.Buffer
	args := []string{"simulate", "-workload", w, "-policy", "tiresias,optimus", "-nodes", "2", "-json", "-out", t.TempDir()}
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("simulate: %v\n%s", err, stderr.String())
	}
	dec := json.NewDecoder(&stdout)
	var policies []string
	for dec.More() {
		var s map[string]any
		if err := dec.Decode(&s); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"policy", "workload", "jobs", "completed", "avg_jct_s", "p50_jct_s", "p99_jct_s",
			"makespan_s", "restarts_per_job", "gpu_utilization", "rounds", "optimize_ms_median", "optimize_ms_p95", "wall_s"} {
			if _, ok := s[k]; !ok {
				t.Errorf("summary lacks %q", k)
			}
		}
		if s["workload"] != "small" || s["jobs"] != 3.0 || s["completed"] != 3.0 {
			t.Errorf("summary %v: want workload small with 3 of 3 jobs completed", s)
		}
		policies = append(policies, s["policy"].(string))
	}
	if strings.Join(policies, ",") != "tiresias,optimus" {
		t.Errorf("policies %v, want tiresias then optimus", policies)
	}
}

// TestSimulateTypedCluster: -cluster and -rules sia on an embedded Sia
// workload give per-type utilisation and GPU-hours per job.
func TestSimulateTypedCluster(t *testing.T) {
	var stdout, stderr bytes.Buffer
	args := []string{"simulate", "-workload", "sia-helios-1", "-policy", "tiresias", "-cluster", "t4:6x4,rtx2080ti:3x8,a100:2x8", "-rules", "sia", "-json"}
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("simulate: %v\n%s", err, stderr.String())
	}
	var s struct {
		Workload  string             `json:"workload"`
		Jobs      int                `json:"jobs"`
		Completed int                `json:"completed"`
		ByType    map[string]float64 `json:"gpu_utilization_by_type"`
		GPUHours  float64            `json:"gpu_hours_per_job"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	if s.Workload != "sia-helios-1" || s.Jobs != 160 || s.Completed != 160 || len(s.ByType) != 3 || s.GPUHours <= 0 {
		t.Errorf("summary %+v: want sia-helios-1, 160 of 160 jobs, 3 types, GPU-hours", s)
	}
}

func TestFitPrintsPredictions(t *testing.T) {
	doc := `{"version":1,"timestamp":"2026-12-02T13:00:00Z","batch_size":128,"progress":10,"grad_sqr":0.5,"grad_var":2,
"profile":[{"num_nodes":1,"num_replicas":1,"local_bsz":128,"accum_steps":0,"compute_time":0.05,"step_time":0.06,"sync_time":0.001,"count":10},
{"num_nodes":1,"num_replicas":2,"local_bsz":64,"accum_steps":0,"compute_time":0.03,"step_time":0.045,"sync_time":0.01,"count":10}]}`
	var stdout, stderr bytes.Buffer
	args := []string{"fit", "-metrics", writeFile(t, "m.json", doc), "-max-batch-size", "1024", "-max-gpus", "8"}
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("fit: %v", err)
	}
	var out fitOutput
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Predictions) != 8 || out.Points != 2 {
		t.Fatalf("got %d predictions from %d points, want 8 from 2", len(out.Predictions), out.Points)
	}
	for _, p := range out.Predictions {
		if p.BatchSize != p.LocalBsz*p.GPUs*(p.AccumSteps+1) {
			t.Errorf("%d GPUs: batch %d != %d x %d x (%d+1)", p.GPUs, p.BatchSize, p.LocalBsz, p.GPUs, p.AccumSteps)
		}
		if p.BatchSize < 128 || p.BatchSize > 1024 || p.Goodput <= 0 {
			t.Errorf("%d GPUs: batch %d outside [128, 1024] or goodput %g", p.GPUs, p.BatchSize, p.Goodput)
		}
	}
	if out.Predictions[0].Speedup != 1 {
		t.Errorf("speedup on 1 GPU = %g, want 1", out.Predictions[0].Speedup)
	}
}

// A mistyped -log-level is refused before anything connects, naming the
// value and the levels there are (hclog alone would log at no level).
func TestAgentBadLogLevel(t *testing.T) {
	for _, cmd := range []string{"agent", "status", "plan"} {
		var stderr bytes.Buffer
		err := run(context.Background(), []string{cmd, "-log-level", "inf"}, io.Discard, &stderr)
		if code := exitCode(err); code != 2 {
			t.Errorf("%s -log-level inf: exit %d (%v), want 2", cmd, code, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, `"inf"`) || !strings.Contains(msg, "debug") {
			t.Errorf("%s -log-level inf: error %q names neither the value nor the levels", cmd, msg)
		}
	}
}
