package report_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/consul/api"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/worker/go/report"
)

var update = flag.Bool("update", false, "regenerate worker/testdata/reporter-vectors.json from the Go reporter")

const vectorsFile = "../../testdata/reporter-vectors.json"

// vector is one shared test case: the Go and the Python reporter replay
// the observations against a real Consul, with the fixed timestamp, and
// must store exactly the expected document.
type vector struct {
	Name string `json:"name"`
	// Timestamp is what the reporter's clock returns.
	Timestamp string `json:"timestamp"`
	// InitBatchSize is the reporter's configured initial batch size.
	InitBatchSize int `json:"init_batch_size,omitempty"`
	// GPUType is the reporter's configured GPU type (POLLUX_GPU_TYPE).
	GPUType string `json:"gpu_type,omitempty"`
	// Existing is a document stored before the observations, if any.
	Existing string `json:"existing,omitempty"`
	// Observations are the reporter calls in order; after the last one
	// the reporter flushes.
	Observations []op `json:"observations"`
	// Expected is the stored document after the final flush.
	Expected string `json:"expected"`
}

// op is one reporter call: "observe", "gradients", "progress", "flush" or
// "restarted",
// with the arguments of that call (the others are absent).
type op map[string]any

func observe(nodes, replicas, localBsz, accum int, compute, step, sync float64) op {
	return op{"op": "observe", "num_nodes": nodes, "num_replicas": replicas, "local_bsz": localBsz,
		"accum_steps": accum, "compute_time": compute, "step_time": step, "sync_time": sync}
}

// typed is an observation with its own GPU type.
func typed(o op, gpuType string) op {
	o["gpu_type"] = gpuType
	return o
}

func gradients(sqr, variance float64) op {
	return op{"op": "gradients", "grad_sqr": sqr, "grad_var": variance}
}

func progress(p float64, batchSize int) op {
	return op{"op": "progress", "progress": p, "batch_size": batchSize}
}

func flush() op { return op{"op": "flush"} }

func restarted(restoreTime float64, at string) op {
	return op{"op": "restarted", "restore_time": restoreTime, "at": at}
}

// pointOne and pointTwo are variables, so that their sum is computed in
// float64 (0.30000000000000004) and not as an exact constant (0.3).
var pointOne, pointTwo = 0.1, 0.2

// vectorInputs are the cases; -update stores them with the Go reporter's
// output as expected.
func vectorInputs() []vector {
	many := []op{progress(0, 96)}
	for i := range 60 {
		// Awkward decimals that do not add up exactly in binary.
		many = append(many, observe(1, 3, 32, 0, 0.1*float64(i%7+1), 0.3+0.01*float64(i), 0.001*float64(i%5)))
	}
	many = append(many, gradients(0.52, 2.1))
	return []vector{
		{
			Name:      "single observation",
			Timestamp: "2026-12-02T13:00:00Z",
			Observations: []op{
				observe(1, 1, 32, 0, 0.1, 0.12, 0), progress(0, 128),
			},
		},
		{
			Name:      "running means of 0.1 and 0.2",
			Timestamp: "2026-12-02T13:00:00.25Z",
			Observations: []op{
				observe(1, 2, 128, 0, 0.1, pointOne+pointTwo, 1e-7),
				observe(1, 2, 128, 0, 0.2, pointOne+pointTwo, 0.3),
				observe(1, 2, 128, 0, pointOne+pointTwo, 0.7, 0.1),
				gradients(1e-7, pointOne+pointTwo),
				progress(12345.6, 1024),
			},
		},
		{
			Name:      "tiny and huge numbers",
			Timestamp: "2026-12-02T13:00:00.123456Z",
			Observations: []op{
				observe(2, 8, 1<<20, 3, 1e-7, 1e21, 5e-324),
				observe(2, 8, 1<<20, 3, 1e-6, 1.5e21, 0),
				observe(1, 1, 1, 0, 999999999999999.9, 1e20, 123456789.125),
				observe(1, 2, 1, 0, 1e-300, 1e-6, math.Nextafter(1e-6, 0)),
				observe(1, 3, 1, 0, math.Nextafter(1e21, 0), 1e21, 1e-6),
				gradients(1.5e21, 5e-324),
				progress(1e21, 1<<40),
			},
		},
		{
			Name:      "configurations sorted and negative zero",
			Timestamp: "2026-12-02T13:00:01Z",
			Observations: []op{
				observe(2, 4, 64, 1, 0.25, 0.5, 0.125),
				observe(1, 4, 64, 0, 0.2, 0.4, math.Copysign(0, -1)),
				observe(1, 2, 64, 2, 0.3, 0.6, 0.05),
				observe(1, 2, 32, 0, 0.15, 0.2, 0.01),
				observe(1, 2, 64, 0, 0.18, 0.22, 0.02),
				gradients(math.Copysign(0, -1), 0),
				progress(math.Copysign(0, -1), 256),
			},
		},
		{
			Name:          "init batch size before progress",
			Timestamp:     "2026-12-02T13:00:02Z",
			InitBatchSize: 256,
			Observations: []op{
				observe(1, 1, 256, 0, 0.05, 0.06, 0),
			},
		},
		{
			Name:      "merge with an existing document",
			Timestamp: "2026-12-02T14:00:00Z",
			Existing: `{"version":1,"timestamp":"2026-12-02T13:00:00Z","batch_size":512,"progress":100.5,"grad_sqr":0.5,"grad_var":2,` +
				`"profile":[{"num_nodes":1,"num_replicas":1,"local_bsz":128,"accum_steps":0,"compute_time":0.1,"step_time":0.12,"sync_time":0,"count":9007199254740993},` +
				`{"num_nodes":1,"num_replicas":2,"local_bsz":128,"accum_steps":0,"compute_time":0.1,"step_time":0.13,"sync_time":0.02,"count":40},` +
				`{"num_nodes":4,"num_replicas":16,"local_bsz":8,"accum_steps":1,"compute_time":1e-7,"step_time":3e-7,"sync_time":1e-7,"count":1000000}]}`,
			Observations: []op{
				observe(1, 1, 128, 0, 0.3, 0.33, 0.001),
				observe(1, 2, 128, 0, 0.2, 0.25, 0.04),
				observe(1, 2, 128, 0, 0.2, 0.26, 0.05),
				observe(2, 2, 64, 0, 0.11, 0.2, 0.09),
				progress(200.25, 768),
			},
		},
		{
			Name:      "existing top-level values kept",
			Timestamp: "2026-12-02T15:00:00Z",
			Existing: `{"version":1,"timestamp":"2026-12-02T13:00:00Z","batch_size":1536.5,"progress":1e21,"grad_sqr":1e-7,"grad_var":0.30000000000000004,` +
				`"profile":[{"num_nodes":1,"num_replicas":1,"local_bsz":64,"accum_steps":0,"compute_time":0.1,"step_time":0.2,"sync_time":0,"count":3}]}`,
			InitBatchSize: 64,
			Observations: []op{
				observe(1, 1, 64, 0, 0.4, 0.5, 0),
			},
		},
		{
			Name:      "flushes merge only new samples",
			Timestamp: "2026-12-02T16:00:00Z",
			Observations: []op{
				observe(1, 1, 16, 0, 0.1, 0.2, 0), observe(1, 1, 16, 0, 0.2, 0.3, 0.01), progress(16, 16), flush(),
				observe(1, 1, 16, 0, 0.3, 0.4, 0.02), observe(1, 2, 16, 0, 0.1, 0.15, 0.05), flush(),
				observe(1, 1, 16, 0, 0.7, 0.9, 0.03), gradients(0.1, 0.2), progress(48, 32),
			},
		},
		{
			Name:      "GPU types",
			Timestamp: "2026-12-03T12:00:00Z",
			GPUType:   "NVIDIA A100-SXM4-40GB",
			Existing: `{"version":1,"timestamp":"2026-12-03T11:00:00Z","batch_size":64,"progress":5,"grad_sqr":1,"grad_var":2,` +
				`"profile":[{"num_nodes":1,"num_replicas":1,"local_bsz":32,"accum_steps":0,"compute_time":0.3,"step_time":0.4,"sync_time":0,"count":10,"gpu_type":"t4"},` +
				`{"num_nodes":1,"num_replicas":1,"local_bsz":32,"accum_steps":0,"compute_time":0.35,"step_time":0.45,"sync_time":0,"count":4}]}`,
			Observations: []op{
				observe(1, 1, 32, 0, 0.1, 0.15, 0),
				typed(observe(1, 1, 32, 0, 0.25, 0.3, 0), "t4"),
				typed(observe(1, 2, 32, 0, 0.26, 0.31, 0.01), "t4"),
				observe(1, 1, 32, 0, 0.12, 0.17, 0),
				progress(9, 64),
			},
		},
		{
			Name:      "restart object",
			Timestamp: "2026-12-04T12:00:00Z",
			Existing: `{"version":1,"timestamp":"2026-12-04T11:00:00Z","batch_size":64,"progress":5,"grad_sqr":1,"grad_var":2,` +
				`"profile":[{"num_nodes":1,"num_replicas":1,"local_bsz":32,"accum_steps":0,"compute_time":0.3,"step_time":0.4,"sync_time":0,"count":10}],` +
				`"restart":{"restore_time":3,"at":"2026-12-04T10:00:00Z"}}`,
			Observations: []op{
				observe(1, 2, 32, 0, 0.1, 0.15, 0.02), flush(),
				restarted(12.25, "2026-12-04T11:59:00.5+01:00"),
				progress(9, 64),
			},
		},
		{
			Name:         "sixty observations",
			Timestamp:    "2026-12-02T17:00:00.5Z",
			Observations: many,
		},
	}
}

// opArgs are the arguments of an op.
type opArgs struct {
	Op          string  `json:"op"`
	NumNodes    int     `json:"num_nodes"`
	NumReplicas int     `json:"num_replicas"`
	LocalBsz    int     `json:"local_bsz"`
	AccumSteps  int     `json:"accum_steps"`
	ComputeTime float64 `json:"compute_time"`
	StepTime    float64 `json:"step_time"`
	SyncTime    float64 `json:"sync_time"`
	GradSqr     float64 `json:"grad_sqr"`
	GradVar     float64 `json:"grad_var"`
	Progress    float64 `json:"progress"`
	BatchSize   int     `json:"batch_size"`
	GPUType     string  `json:"gpu_type"`
	RestoreTime float64 `json:"restore_time"`
	At          string  `json:"at"`
}

// replay runs a case's observations through a Go Reporter against Consul
// and returns the stored document.
func replay(t *testing.T, raw *api.Client, v vector) string {
	t.Helper()
	ts, err := time.Parse(time.RFC3339Nano, v.Timestamp)
	if err != nil {
		t.Fatalf("timestamp: %v", err)
	}
	r := newReporter(t, raw, report.Config{
		JobID: "vectors", InitBatchSize: v.InitBatchSize, MinInterval: time.Hour, GPUType: v.GPUType,
		Now: func() time.Time { return ts },
	})
	if v.Existing != "" {
		if _, err := raw.KV().Put(&api.KVPair{Key: r.Key(), Value: []byte(v.Existing)}, nil); err != nil {
			t.Fatalf("failed to store existing document: %v", err)
		}
	}
	for i, o := range v.Observations {
		var args opArgs
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatalf("observation %d: %v", i, err)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&args); err != nil {
			t.Fatalf("observation %d: %v", i, err)
		}
		switch args.Op {
		case "observe":
			err = r.Observe(report.StepConfig{NumNodes: args.NumNodes, NumReplicas: args.NumReplicas, LocalBsz: args.LocalBsz, AccumSteps: args.AccumSteps, GPUType: args.GPUType},
				args.ComputeTime, args.StepTime, args.SyncTime)
		case "gradients":
			err = r.ObserveGradients(args.GradSqr, args.GradVar)
		case "progress":
			err = r.Progress(args.Progress, args.BatchSize)
		case "flush":
			err = r.Flush(t.Context())
		case "restarted":
			var at time.Time
			if at, err = time.Parse(time.RFC3339Nano, args.At); err == nil {
				err = r.Restarted(args.RestoreTime, at)
			}
		default:
			t.Fatalf("observation %d: unknown op %q", i, args.Op)
		}
		if err != nil {
			t.Fatalf("observation %d (%s): %v", i, args.Op, err)
		}
	}
	if err := r.Flush(t.Context()); err != nil {
		t.Fatalf("final flush: %v", err)
	}
	_, got := readDoc(t, raw, r.Key())
	return got
}

// TestVectors replays every shared test vector and requires the exact
// expected bytes; with -update it regenerates the file from the Go
// reporter.
func TestVectors(t *testing.T) {
	raw := rawClient(t)
	inputs := vectorInputs()
	if *update {
		for i := range inputs {
			t.Run(inputs[i].Name, func(t *testing.T) { inputs[i].Expected = replay(t, raw, inputs[i]) })
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(inputs); err != nil {
			t.Fatalf("failed to encode vectors: %v", err)
		}
		if err := os.WriteFile(vectorsFile, buf.Bytes(), 0o644); err != nil {
			t.Fatalf("failed to write %s: %v", vectorsFile, err)
		}
		return
	}
	data, err := os.ReadFile(vectorsFile)
	if err != nil {
		t.Fatalf("failed to read %s (regenerate with go test -run TestVectors -update): %v", vectorsFile, err)
	}
	var stored []vector
	if err := json.Unmarshal(data, &stored); err != nil {
		t.Fatalf("%s: %v", vectorsFile, err)
	}
	// The file's inputs must be this test's (else it is stale).
	want, _ := json.Marshal(inputs)
	var wantInputs []vector
	_ = json.Unmarshal(want, &wantInputs)
	strip := func(vs []vector) []vector {
		out := make([]vector, len(vs))
		for i, v := range vs {
			v.Expected = ""
			out[i] = v
		}
		return out
	}
	if diff := cmp.Diff(strip(wantInputs), strip(stored)); diff != "" {
		t.Errorf("%s is stale, regenerate with -update (-want +got):\n%s", vectorsFile, diff)
	}
	for _, v := range stored {
		t.Run(v.Name, func(t *testing.T) {
			d, err := contract.ParseMetrics([]byte(v.Expected))
			if err != nil {
				t.Fatalf("expected document is invalid: %v", err)
			}
			canonical, err := contract.MarshalMetrics(d)
			if err != nil || string(canonical) != v.Expected {
				t.Fatalf("expected document is not canonical (err %v):\n%s\n%s", err, canonical, v.Expected)
			}
			if diff := cmp.Diff(v.Expected, replay(t, raw, v)); diff != "" {
				t.Errorf("document (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRestartedRejects: a bad restart observation is refused with the
// field named and changes nothing.
func TestRestartedRejects(t *testing.T) {
	raw := rawClient(t)
	r := newReporter(t, raw, report.Config{JobID: "restarted", InitBatchSize: 32, MinInterval: time.Hour})
	for _, tc := range []struct {
		seconds float64
		at      time.Time
		field   string
	}{
		{-1, time.Now(), "restart.restore_time"},
		{math.NaN(), time.Now(), "restart.restore_time"},
		{1e6, time.Now(), "restart.restore_time"},
		{3, time.Time{}, "restart.at"},
	} {
		if err := r.Restarted(tc.seconds, tc.at); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Restarted(%v, %v) = %v, want an error naming %s", tc.seconds, tc.at, err, tc.field)
		}
	}
	if err := r.Observe(report.StepConfig{NumNodes: 1, NumReplicas: 1, LocalBsz: 32}, 0.1, 0.1, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, got := readDoc(t, raw, r.Key()); strings.Contains(got, "restart") {
		t.Fatalf("a refused restart was written: %s", got)
	}
}
