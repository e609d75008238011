package ui

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
	"github.com/pollux-nomad/pollux/model"
)

// fakeSource serves a fixed snapshot.
type fakeSource struct {
	snap *Snapshot
	err  error
}

func (f fakeSource) Snapshot(context.Context) (*Snapshot, error) { return f.snap, f.err }

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

const hostile = `evil<script>document.title="pwned"</script>`

func testFit() (model.PerfParams, model.GradParams) {
	return model.PerfParams{AlphaC: 0.02, BetaC: 0.0008, AlphaN: 0.05, BetaN: 0.01, AlphaR: 0.01, BetaR: 0.002, Gamma: 1.2},
		model.GradParams{Sqr: 0.5, Var: 5}
}

// testSnapshot: two nodes of 4 GPUs; job a holds 2 GPUs of n1, job b one of
// n2, an invalid job one of n2, another (non-Pollux) job one of n2, and a
// hostile job waits.
func testSnapshot() *Snapshot {
	perf, grad := testFit()
	bounds := model.Bounds{MaxBatchSize: 4096, MinLocalBsz: 32, MaxLocalBsz: 1024, Accumulation: true}
	sub := t0.Add(-time.Hour)
	explainA := jobs.Explain(jobs.ExplainInput{State: jobs.StateScheduled, Fit: &model.GoodputFunc{Perf: perf, Grad: grad, InitBatchSize: 128},
		Bounds: bounds, GPUs: 2, Nodes: 1, BatchSize: 512, MinGPUs: 1, MaxGPUs: 8, FreeGPUs: 2, PolicyGPUs: 6, PolicyNodes: 2, PolicyJobs: 3})
	explainBad := jobs.Explain(jobs.ExplainInput{State: jobs.StateInvalid, Error: "pollux_init_lr: required"})
	explainHostile := jobs.Explain(jobs.ExplainInput{State: jobs.StateInvalid, Error: "pollux_init_batch_size: not an integer: \"<script>alert(1)</script>\""})
	st := &jobs.Status{Round: 42, Time: t0, Instance: "host-a/alloc-1", Term: 7, Nodes: 2, GPUs: 6,
		Policy: "pollux", Settings: []jobs.EffectiveSetting{{Key: "fairness_p", Value: "-1", Set: true}, {Key: "pollux.growth_hysteresis", Value: "0.3"}},
		Autoscaling: []contract.AutoscalePool{{NodePool: "gpu", Nodes: 2, Desired: 3, UtilityNow: 0.91, UtilityDesired: 0.84, Reason: "node 3 adds 0.75 speedup per GPU (target 0.65)"}},
		Timings:     map[string]float64{"snapshot": 3, "fit": 1, "optimize": 20, "apply": 5, "total": 29},
		NodeMap: []jobs.NodeStatus{
			{ID: "n1", Name: "client-1", GPUs: 4, Other: 1, OtherJobs: []contract.OtherJob{{Job: "analytics/notebook", GPUs: 1}}},
			// Two GPUs held by others, one of them by a job the status names.
			{ID: "n2", Name: "client-2", GPUs: 4, Other: 2, OtherJobs: []contract.OtherJob{{Job: "etl-nightly", GPUs: 1}}, GPUType: "a100"},
		},
		Jobs: []jobs.JobStatus{
			{Job: "default/a", State: jobs.StateScheduled, GPUs: 2, Submitted: &sub, Restarts: 1,
				Decision: &jobs.Decision{BatchSize: 512, LocalBsz: 256, NumReplicas: 2, NumNodes: 1, LR: 0.2, Placement: "n1:2"},
				Running:  []jobs.NodeGPUs{{Node: "n1", GPUs: 2}}, Explain: &explainA},
			{Job: "default/b", State: jobs.StateScheduled, GPUs: 1, Submitted: &sub,
				Decision: &jobs.Decision{BatchSize: 128, LocalBsz: 128, NumReplicas: 1, NumNodes: 1, LR: 0.1, Placement: "n2:1"},
				Running:  []jobs.NodeGPUs{{Node: "n2", GPUs: 1}}, Explain: &jobs.Explanation{Reason: contract.ReasonNoMetrics, Message: "no model yet"}},
			{Job: "default/bad", State: jobs.StateInvalid, Error: "pollux_init_lr: required", Running: []jobs.NodeGPUs{{Node: "n2", GPUs: 1}}, Explain: &explainBad},
			{Job: "default/" + hostile, State: jobs.StateInvalid, Error: "x", Explain: &explainHostile},
		}}
	doc := &contract.Metrics{Version: 1, Timestamp: t0, BatchSize: 512, Progress: 12345, GradSqr: 0.5, GradVar: 5,
		Profile: []contract.ProfileEntry{{NumNodes: 1, NumReplicas: 1, LocalBsz: 128, ComputeTime: 0.12, StepTime: 0.14, SyncTime: 0.01, Count: 10},
			{NumNodes: 1, NumReplicas: 2, LocalBsz: 128, ComputeTime: 0.12, StepTime: 0.16, SyncTime: 0.03, Count: 10}}}
	s := &Snapshot{Status: st, Reader: "no Consul token", Jobs: map[string]*JobData{
		"default/a": {State: &jobs.State{Version: 1, Perf: ptr(contract.PerfParams(perf)), Grad: ptr(contract.GradParams(grad)), Restarts: 1, AppliedAt: t0.Add(-10 * time.Minute)}, Metrics: doc},
	}}
	var h History
	h.Observe(st)
	h.fill(s)
	return s
}

func get(t *testing.T, h http.Handler, path string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	res := rec.Result()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func newTestHandler(s Source) http.Handler {
	return Handler(s, Options{Now: func() time.Time { return t0.Add(5 * time.Second) }})
}

var cellRE = regexp.MustCompile(`<rect class="gpu (\w+)" data-kind="\w+" data-job="([^"]*)"`)

func TestOverview(t *testing.T) {
	res, body := get(t, newTestHandler(fakeSource{snap: testSnapshot()}), "/ui/")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", res.StatusCode, body)
	}
	if got := res.Header.Get("Content-Security-Policy"); !strings.Contains(got, "default-src 'none'") || strings.Contains(got, "script-src") {
		t.Errorf("CSP %q, want default-src 'none' and no script source", got)
	}
	// The cluster map: per node, the GPUs in order with their holders.
	var cells []string
	for _, m := range cellRE.FindAllStringSubmatch(body, -1) {
		cells = append(cells, m[1]+":"+m[2])
	}
	want := "pollux:default/a pollux:default/a other:analytics/notebook free: pollux:default/b held:default/bad other:etl-nightly other:"
	if got := strings.Join(cells, " "); got != want {
		t.Errorf("map cells\n got %s\nwant %s", got, want)
	}
	for _, s := range []string{`id="round">42<`, "host-a/alloc-1", `term <b id="term">7</b>`, `data-reason="invalid_meta"`, "invalid meta pollux_init_lr", "29.0", "no_metrics", "1.0h", `data-node="n2" data-node-name="client-2" data-gpu-type="a100"`, "client-2 (4 a100)",
		// Jobs Pollux does not manage are named in the legend and in their GPUs' titles.
		"etl-nightly (1, not a Pollux job)",
		// The policy's effective settings, and where each comes from.
		// The desired cluster size and why.
		`<tr data-pool="gpu"><td>gpu</td><td></td><td class="num">2</td><td class="num">3</td><td class="num">0.91</td><td class="num">0.84</td><td class="reason">node 3 adds 0.75 speedup per GPU (target 0.65)</td>`,
		"Policy: pollux", `<tr data-setting="fairness_p"><td>fairness_p</td><td class="num">-1</td><td>configuration</td>`,
		`<tr data-setting="pollux.growth_hysteresis"><td>pollux.growth_hysteresis</td><td class="num">0.3</td><td>default for this cluster</td>`, "notebook (1, not a Pollux job)", "<title>GPU 2: etl-nightly (not a Pollux job)</title>", "<title>GPU 3: a job Pollux does not manage</title>"} {
		if !strings.Contains(body, s) {
			t.Errorf("page lacks %q", s)
		}
	}
}

// Every job-supplied string is escaped: a job whose ID and meta error
// carry a script tag shows it as text.
func TestEscaping(t *testing.T) {
	for _, path := range []string{"/ui/", "/ui/job?id=default/" + strings.NewReplacer("<", "%3C", ">", "%3E", `"`, "%22", " ", "%20", "=", "%3D").Replace(hostile)} {
		res, body := get(t, newTestHandler(fakeSource{snap: testSnapshot()}), path)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d", path, res.StatusCode)
		}
		if strings.Contains(strings.ToLower(body), "<script") {
			t.Errorf("%s: a script tag reached the page:\n%s", path, body)
		}
		if !strings.Contains(body, "&lt;script&gt;") {
			t.Errorf("%s: the hostile ID is not shown escaped", path)
		}
	}
}

func TestJobDetail(t *testing.T) {
	h := newTestHandler(fakeSource{snap: testSnapshot()})
	res, body := get(t, h, "/ui/job?id=default/a")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d", res.StatusCode)
	}
	for _, s := range []string{`data-chart="speedup"`, `data-chart="efficiency"`, `data-chosen="true"`, "fair-share base", "alpha_c", "RMS relative error", "over 2 configurations", "n1:2", "12k"} {
		if !strings.Contains(body, s) {
			t.Errorf("detail lacks %q", s)
		}
	}
	// The chosen point of the speedup curve is the job's 2 GPUs.
	if !regexp.MustCompile(`data-chosen="true"[^>]*><title>chosen: 2 GPUs on 1 nodes`).MatchString(body) {
		t.Errorf("the chosen point is not the job's 2 GPUs")
	}
	res, body = get(t, h, "/ui/job?id=default/b")
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `id="no-model"`) || strings.Contains(body, "data-chart") {
		t.Errorf("a job without a model: status %d, want the no-model note and no chart", res.StatusCode)
	}
	if res, _ := get(t, h, "/ui/job?id=default/nope"); res.StatusCode != http.StatusNotFound {
		t.Errorf("unknown job: status %d, want 404", res.StatusCode)
	}
}

func TestSourceErrorAndEmpty(t *testing.T) {
	res, body := get(t, newTestHandler(fakeSource{err: errors.New("consul: permission denied reading pollux/status")}), "/ui/")
	if res.StatusCode != http.StatusOK || !strings.Contains(body, "permission denied reading pollux/status") {
		t.Errorf("status %d; the page must show the source's error: %s", res.StatusCode, body)
	}
	res, body = get(t, newTestHandler(fakeSource{snap: &Snapshot{}}), "/ui/")
	if res.StatusCode != http.StatusOK || !strings.Contains(body, "no round published yet") {
		t.Errorf("status %d; an empty cluster: %s", res.StatusCode, body)
	}
	if res, _ := get(t, newTestHandler(fakeSource{snap: &Snapshot{}}), "/ui/static/style.css"); res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/css") {
		t.Errorf("stylesheet: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	rec := httptest.NewRecorder()
	newTestHandler(fakeSource{snap: &Snapshot{}}).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/ui/", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405 (read-only)", rec.Code)
	}
}

func TestHistory(t *testing.T) {
	h := History{Rounds: 3, PerJob: 2}
	for r := int64(1); r <= 5; r++ {
		gpus := int(r+1) / 2 // 1 1 2 2 3: a change every other round
		h.Observe(&jobs.Status{Round: r, Time: t0.Add(time.Duration(r) * time.Minute), Instance: "i",
			Jobs: []jobs.JobStatus{{Job: "default/a", Decision: &jobs.Decision{NumReplicas: gpus, Placement: fmt.Sprintf("n1:%d", gpus)}}}})
		h.Observe(&jobs.Status{Round: r, Time: t0.Add(time.Duration(r) * time.Minute), Instance: "i"}) // the same round again: ignored
	}
	var s Snapshot
	h.fill(&s)
	var rounds []int64
	for _, r := range s.Rounds {
		rounds = append(rounds, r.Round)
	}
	if fmt.Sprint(rounds) != "[5 4 3]" {
		t.Errorf("rounds %v, want [5 4 3]", rounds)
	}
	var changes []string
	for _, c := range s.Allocations["default/a"] {
		changes = append(changes, fmt.Sprintf("%d:%s", c.Round, c.Placement))
	}
	if fmt.Sprint(changes) != "[5:n1:3 3:n1:2]" {
		t.Errorf("changes %v, want [5:n1:3 3:n1:2]", changes)
	}
}

// ptr returns a pointer to a copy of v.
func ptr[T any](v T) *T { return &v }
