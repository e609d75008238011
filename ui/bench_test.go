package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
	"github.com/pollux-nomad/pollux/model"
)

// loadSnapshot is a snapshot like the load test's (e2e/load_test.go): 200
// jobs on 8 nodes of 4 GPUs, each job with a model and a metrics document,
// 32 of them holding a GPU and the rest waiting, 30 rounds of history.
func loadSnapshot(nJobs, nodes int) *Snapshot {
	perf, grad := testFit()
	bounds := model.Bounds{MaxBatchSize: 4096, MinLocalBsz: 32, MaxLocalBsz: 1024, Accumulation: true}
	base := testSnapshot()
	st := &jobs.Status{Round: 500, Time: t0, Instance: "client-1/alloc", Nodes: nodes, GPUs: 4 * nodes,
		Timings: map[string]float64{"snapshot": 80, "fit": 5, "optimize": 120, "apply": 40, "total": 245}}
	for n := range nodes {
		st.NodeMap = append(st.NodeMap, jobs.NodeStatus{ID: fmt.Sprintf("node-%02d-0123456789abcdef", n), Name: fmt.Sprintf("client-%d", n+1), GPUs: 4})
	}
	s := &Snapshot{Status: st, Reader: "no Consul token", Jobs: map[string]*JobData{}}
	sub := t0.Add(-3 * time.Hour)
	for i := range nJobs {
		id := fmt.Sprintf("default/load-%03d", i)
		js := jobs.JobStatus{Job: id, State: jobs.StateScheduled, Submitted: &sub}
		gpus := 0
		if i < 4*nodes {
			gpus = 1
			node := st.NodeMap[i/4].ID
			js.Running = []jobs.NodeGPUs{{Node: node, GPUs: 1}}
			js.Decision = &jobs.Decision{BatchSize: 256, LocalBsz: 256, NumReplicas: 1, NumNodes: 1, LR: 0.1, Placement: node + ":1"}
		} else {
			js.WaitingSince = &sub
			js.Decision = &jobs.Decision{LR: 0.1}
		}
		js.GPUs = gpus
		x := jobs.Explain(jobs.ExplainInput{State: jobs.StateScheduled, Fit: &model.GoodputFunc{Perf: perf, Grad: grad, InitBatchSize: 128},
			Bounds: bounds, GPUs: gpus, Nodes: gpus, BatchSize: 256, MinGPUs: 1, MaxGPUs: 4, PolicyGPUs: 4 * nodes, PolicyNodes: nodes, PolicyJobs: nJobs})
		js.Explain = &x
		st.Jobs = append(st.Jobs, js)
		s.Jobs[id] = &JobData{State: &jobs.State{Version: 1, Perf: ptr(contract.PerfParams(perf)), Grad: ptr(contract.GradParams(grad))}, Metrics: base.Jobs["default/a"].Metrics}
	}
	var h History
	for r := range 30 {
		c := *st
		c.Round = st.Round - int64(29-r)
		h.Observe(&c)
	}
	h.fill(s)
	return s
}

// BenchmarkPage renders /ui and one job's page with 200 jobs; bytes/page
// is the page weight (the stylesheet, fetched once, is 1.6 kB more).
func BenchmarkPage(b *testing.B) {
	h := Handler(fakeSource{snap: loadSnapshot(200, 8)}, Options{Now: func() time.Time { return t0 }})
	for _, path := range []string{"/ui/", "/ui/job?id=default/load-005"} {
		b.Run(path, func(b *testing.B) {
			var size int
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
				if rec.Code != http.StatusOK {
					b.Fatalf("status %d", rec.Code)
				}
				size = rec.Body.Len()
			}
			b.ReportMetric(float64(size), "bytes/page")
		})
	}
}

// BenchmarkConsulSnapshot reads 200 jobs' state and metrics documents and
// the status from an in-memory KV: the decoding a page view adds on top of
// rendering (the Consul round trips are not included).
func BenchmarkConsulSnapshot(b *testing.B) {
	snap := loadSnapshot(200, 8)
	kv := newMemKV()
	raw, _ := json.Marshal(snap.Status)
	kv.put("status", raw)
	doc, _ := contract.MarshalMetrics(snap.Jobs["default/load-000"].Metrics)
	for id, d := range snap.Jobs {
		st, _ := json.Marshal(d.State)
		kv.put("jobs/"+id+"/state", st)
		kv.put("jobs/"+id+"/metrics", doc)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := NewConsulSource(ctx, kv, "", nil)
	for b.Loop() {
		s, err := src.Snapshot(ctx)
		if err != nil || len(s.Jobs) != 200 {
			b.Fatalf("%d jobs, %v", len(s.Jobs), err)
		}
	}
}
