package report_test

import (
	"context"
	"errors"
	"io"
	"log"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/consul/api"

	"github.com/pollux-nomad/pollux/worker/go/report"
)

// countsOf returns the counts of a document's entries by configuration.
func countsOf(t *testing.T, raw *api.Client, key string) map[report.StepConfig]int {
	t.Helper()
	d, _ := readDoc(t, raw, key)
	out := map[report.StepConfig]int{}
	for k, e := range entries(d) {
		out[k] = e.Count
	}
	return out
}

func TestNewConfig(t *testing.T) {
	raw, err := api.NewClient(&api.Config{Address: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		env     map[string]string
		cfg     report.Config
		wantKey string
		wantErr []string
	}{
		"defaults from env": {
			env:     map[string]string{"NOMAD_NAMESPACE": "ml", "NOMAD_JOB_ID": "bert", "NOMAD_META_pollux_rank": "1"},
			cfg:     report.Config{Consul: raw},
			wantKey: "pollux/jobs/ml/bert/metrics",
		},
		"explicit": {
			env:     map[string]string{"NOMAD_NAMESPACE": "ml", "NOMAD_JOB_ID": "bert"},
			cfg:     report.Config{Consul: raw, Prefix: "p/", Namespace: "default", JobID: "yolo"},
			wantKey: "p/jobs/default/yolo/metrics",
		},
		"default namespace": {
			cfg:     report.Config{Consul: raw, JobID: "cifar"},
			wantKey: "pollux/jobs/default/cifar/metrics",
		},
		"everything wrong": {
			env:     map[string]string{"NOMAD_META_pollux_rank": "first", "NOMAD_META_pollux_init_batch_size": "-3"},
			cfg:     report.Config{Prefix: "/abs", MinInterval: -time.Second},
			wantErr: []string{"Consul: required", "JobID: required", "NOMAD_META_pollux_rank", "NOMAD_META_pollux_init_batch_size", "MinInterval"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for _, k := range []string{"NOMAD_NAMESPACE", "NOMAD_JOB_ID", "NOMAD_META_pollux_rank", "NOMAD_META_pollux_init_batch_size"} {
				t.Setenv(k, tc.env[k])
				if _, ok := tc.env[k]; !ok {
					os.Unsetenv(k)
				}
			}
			r, err := report.New(t.Context(), tc.cfg)
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("New succeeded, want errors %q", tc.wantErr)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not mention %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if r.Key() != tc.wantKey {
				t.Errorf("Key() = %q, want %q", r.Key(), tc.wantKey)
			}
		})
	}
}

func TestRejectsInvalidValues(t *testing.T) {
	raw := rawClient(t)
	r := newReporter(t, raw, report.Config{InitBatchSize: 32, MinInterval: time.Hour})
	cfg := report.StepConfig{NumNodes: 1, NumReplicas: 1, LocalBsz: 32}
	if err := r.Observe(cfg, 0.5, 0.75, 0.25); err != nil {
		t.Fatalf("Observe: %v", err)
	}
	tests := map[string]struct {
		call func() error
		arg  string
	}{
		"NaN compute time":   {func() error { return r.Observe(cfg, math.NaN(), 1, 0) }, "computeTime"},
		"zero compute time":  {func() error { return r.Observe(cfg, 0, 1, 0) }, "computeTime"},
		"infinite step time": {func() error { return r.Observe(cfg, 0.5, math.Inf(1), 0) }, "stepTime"},
		"negative sync time": {func() error { return r.Observe(cfg, 0.5, 1, -0.01) }, "syncTime"},
		"-Inf sync time":     {func() error { return r.Observe(cfg, 0.5, 1, math.Inf(-1)) }, "syncTime"},
		"no nodes": {func() error {
			return r.Observe(report.StepConfig{NumReplicas: 1, LocalBsz: 1}, 0.5, 1, 0)
		}, "num_nodes"},
		"replicas below nodes": {func() error {
			return r.Observe(report.StepConfig{NumNodes: 2, NumReplicas: 1, LocalBsz: 1}, 0.5, 1, 0)
		}, "num_replicas"},
		"negative accumulation": {func() error {
			return r.Observe(report.StepConfig{NumNodes: 1, NumReplicas: 1, LocalBsz: 1, AccumSteps: -1}, 0.5, 1, 0)
		}, "accum_steps"},
		"NaN grad sqr":        {func() error { return r.ObserveGradients(math.NaN(), 1) }, "gradSqr"},
		"negative grad var":   {func() error { return r.ObserveGradients(1, -1e-9) }, "gradVar"},
		"infinite grad var":   {func() error { return r.ObserveGradients(1, math.Inf(1)) }, "gradVar"},
		"NaN progress":        {func() error { return r.Progress(math.NaN(), 32) }, "progress"},
		"negative progress":   {func() error { return r.Progress(-1, 32) }, "progress"},
		"zero batch size":     {func() error { return r.Progress(1, 0) }, "batchSize"},
		"negative batch size": {func() error { return r.Progress(1, -32) }, "batchSize"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.call()
			if err == nil {
				t.Fatalf("accepted, want an error naming %s", tc.arg)
			}
			if !strings.Contains(err.Error(), tc.arg) {
				t.Errorf("error %q does not name %s", err, tc.arg)
			}
		})
	}
	// Nothing rejected reached the document.
	if err := r.Flush(t.Context()); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	d, _ := readDoc(t, raw, r.Key())
	got := entries(d)[cfg]
	if got.Count != 1 || got.ComputeTime != 0.5 || got.StepTime != 0.75 || got.SyncTime != 0.25 {
		t.Errorf("entry %+v, want the one good observation", got)
	}
	if d.GradSqr != 0 || d.GradVar != 0 || d.Progress != 0 || d.BatchSize != 32 {
		t.Errorf("top-level values %v %v %v %v, want 0 0 0 32", d.GradSqr, d.GradVar, d.Progress, d.BatchSize)
	}
}

func TestRunningMeans(t *testing.T) {
	raw := rawClient(t)
	r := newReporter(t, raw, report.Config{MinInterval: time.Hour})
	type sample struct{ compute, step, sync float64 }
	configs := []report.StepConfig{
		{NumNodes: 1, NumReplicas: 2, LocalBsz: 64, AccumSteps: 1},
		{NumNodes: 2, NumReplicas: 4, LocalBsz: 32},
	}
	observed := map[report.StepConfig][]sample{}
	for i := range 50 {
		c := configs[i%3%2]
		s := sample{0.1 * float64(i%9+1), 0.3 + 0.01*float64(i), 0.001 * float64(i)}
		if err := r.Observe(c, s.compute, s.step, s.sync); err != nil {
			t.Fatalf("Observe: %v", err)
		}
		observed[c] = append(observed[c], s)
		if i%11 == 5 {
			if err := r.Progress(float64(i), 256); err != nil {
				t.Fatalf("Progress: %v", err)
			}
			if err := r.Flush(t.Context()); err != nil {
				t.Fatalf("Flush: %v", err)
			}
		}
	}
	if err := r.Flush(t.Context()); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	d, _ := readDoc(t, raw, r.Key())
	got := entries(d)
	for c, samples := range observed {
		var want sample
		for _, s := range samples {
			want.compute += s.compute / float64(len(samples))
			want.step += s.step / float64(len(samples))
			want.sync += s.sync / float64(len(samples))
		}
		e := got[c]
		if e.Count != len(samples) {
			t.Errorf("%+v: count %d, want %d", c, e.Count, len(samples))
		}
		const tol = 1e-12
		if !near(e.ComputeTime, want.compute, tol) || !near(e.StepTime, want.step, tol) || !near(e.SyncTime, want.sync, tol) {
			t.Errorf("%+v: means %v %v %v, want %v %v %v (±%g)", c, e.ComputeTime, e.StepTime, e.SyncTime, want.compute, want.step, want.sync, tol)
		}
	}
}

func TestNotReady(t *testing.T) {
	raw := rawClient(t)
	r := newReporter(t, raw, report.Config{MinInterval: time.Hour})
	if err := r.Flush(t.Context()); !errors.Is(err, report.ErrNotReady) {
		t.Fatalf("Flush without observations: %v, want ErrNotReady", err)
	}
	cfg := report.StepConfig{NumNodes: 1, NumReplicas: 1, LocalBsz: 8}
	if err := r.Observe(cfg, 0.1, 0.2, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(t.Context()); !errors.Is(err, report.ErrNotReady) {
		t.Fatalf("Flush without batch size: %v, want ErrNotReady", err)
	}
	if err := r.Progress(3, 8); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(t.Context()); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if diff := cmp.Diff(map[report.StepConfig]int{cfg: 1}, countsOf(t, raw, r.Key())); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
}

// TestConcurrentWriters runs two Reporters of the same job, with a
// configuration each and one in common, flushing concurrently: the final
// document must hold every sample exactly once.
func TestConcurrentWriters(t *testing.T) {
	raw := rawClient(t)
	prefix := testPrefix(t, raw)
	a := newReporter(t, raw, report.Config{Prefix: prefix, InitBatchSize: 64, MinInterval: time.Hour})
	b := newReporter(t, raw, report.Config{Prefix: prefix, InitBatchSize: 64, MinInterval: time.Hour})
	onlyA := report.StepConfig{NumNodes: 1, NumReplicas: 1, LocalBsz: 64}
	both := report.StepConfig{NumNodes: 1, NumReplicas: 2, LocalBsz: 64}
	onlyB := report.StepConfig{NumNodes: 2, NumReplicas: 4, LocalBsz: 64, AccumSteps: 1}
	const n = 80
	value := func(base float64, i int) float64 { return base + 0.001*float64(i) }
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	run := func(r *report.Reporter, configs []report.StepConfig, base float64) {
		defer wg.Done()
		for i := range n {
			for _, c := range configs {
				if err := r.Observe(c, value(base, i), 2*value(base, i), value(base, i)/10); err != nil {
					errs <- err
				}
			}
			if i%4 == 3 {
				if err := r.Flush(t.Context()); err != nil {
					errs <- err
				}
			}
		}
		if err := r.Flush(t.Context()); err != nil {
			errs <- err
		}
	}
	wg.Add(2)
	go run(a, []report.StepConfig{onlyA, both}, 0.1)
	go run(b, []report.StepConfig{both, onlyB}, 0.2)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("writer: %v", err)
	}
	d, _ := readDoc(t, raw, a.Key())
	got := entries(d)
	if diff := cmp.Diff(map[report.StepConfig]int{onlyA: n, both: 2 * n, onlyB: n}, countsOf(t, raw, a.Key())); diff != "" {
		t.Fatalf("counts (-want +got):\n%s", diff)
	}
	mean := func(base float64) float64 {
		s := 0.0
		for i := range n {
			s += value(base, i)
		}
		return s / n
	}
	for c, want := range map[report.StepConfig]float64{onlyA: mean(0.1), both: (mean(0.1) + mean(0.2)) / 2, onlyB: mean(0.2)} {
		e := got[c]
		if !near(e.ComputeTime, want, 1e-12) || !near(e.StepTime, 2*want, 1e-12) || !near(e.SyncTime, want/10, 1e-12) {
			t.Errorf("%+v: means %v %v %v, want %v %v %v", c, e.ComputeTime, e.StepTime, e.SyncTime, want, 2*want, want/10)
		}
	}
}

// lossyProxy forwards to Consul and, while drop is set, applies one
// check-and-set and then cuts the connection before the answer, so the
// client cannot know whether it was applied.
type lossyProxy struct {
	proxy *httputil.ReverseProxy
	drop  atomic.Bool
}

func (p *lossyProxy) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method == http.MethodPut && req.URL.Query().Has("cas") && p.drop.CompareAndSwap(true, false) {
		rec := httptest.NewRecorder()
		p.proxy.ServeHTTP(rec, req)
		panic(http.ErrAbortHandler)
	}
	p.proxy.ServeHTTP(w, req)
}

func TestCASLostInTransit(t *testing.T) {
	raw := rawClient(t)
	target, err := url.Parse("http://" + strings.TrimPrefix(os.Getenv("CONSUL_HTTP_ADDR"), "http://"))
	if err != nil {
		t.Fatalf("CONSUL_HTTP_ADDR: %v", err)
	}
	p := &lossyProxy{proxy: httputil.NewSingleHostReverseProxy(target)}
	p.proxy.ErrorLog = log.New(io.Discard, "", 0)
	srv := httptest.NewUnstartedServer(p)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	viaProxy, err := api.NewClient(&api.Config{Address: srv.Listener.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	prefix := testPrefix(t, raw)
	r := newReporter(t, viaProxy, report.Config{Prefix: prefix, InitBatchSize: 16, MinInterval: time.Hour})
	cfg := report.StepConfig{NumNodes: 1, NumReplicas: 1, LocalBsz: 16}
	if err := r.Observe(cfg, 0.1, 0.2, 0); err != nil {
		t.Fatal(err)
	}
	p.drop.Store(true)
	if err := r.Flush(t.Context()); err == nil {
		t.Fatalf("Flush succeeded though its answer was cut")
	}
	if got := countsOf(t, raw, r.Key())[cfg]; got != 1 {
		t.Fatalf("the cut write was not applied (count %d): the test proves nothing", got)
	}
	if err := r.Observe(cfg, 0.3, 0.4, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(t.Context()); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	d, _ := readDoc(t, raw, r.Key())
	if e := entries(d)[cfg]; e.Count != 2 || !near(e.ComputeTime, 0.2, 1e-15) {
		t.Errorf("entry %+v, want count 2 and compute time 0.2", e)
	}
}

func TestStoredDocumentReplacedWhenInvalid(t *testing.T) {
	raw := rawClient(t)
	r := newReporter(t, raw, report.Config{InitBatchSize: 16, MinInterval: time.Hour})
	if _, err := raw.KV().Put(&api.KVPair{Key: r.Key(), Value: []byte(`{"version":1,"profile":[]}`)}, nil); err != nil {
		t.Fatal(err)
	}
	cfg := report.StepConfig{NumNodes: 1, NumReplicas: 1, LocalBsz: 16}
	if err := r.Observe(cfg, 0.1, 0.2, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(t.Context()); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if diff := cmp.Diff(map[report.StepConfig]int{cfg: 1}, countsOf(t, raw, r.Key())); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
}

func TestOtherRanksDoNotWrite(t *testing.T) {
	raw := rawClient(t)
	r := newReporter(t, raw, report.Config{Rank: 1, InitBatchSize: 16, MinInterval: 10 * time.Millisecond})
	if err := r.Observe(report.StepConfig{NumNodes: 1, NumReplicas: 1, LocalBsz: 16}, 0.1, 0.2, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(t.Context()); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if err := r.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	if pair, _, err := raw.KV().Get(r.Key(), nil); err != nil || pair != nil {
		t.Errorf("rank 1 wrote %v (err %v), want no document", pair, err)
	}
}

// TestBackgroundWriterRate observes continuously and counts the writes of
// the background writer: at most one per MinInterval.
func TestBackgroundWriterRate(t *testing.T) {
	raw := rawClient(t)
	const interval = 300 * time.Millisecond
	r := newReporter(t, raw, report.Config{InitBatchSize: 16, MinInterval: interval})
	cfg := report.StepConfig{NumNodes: 1, NumReplicas: 1, LocalBsz: 16}
	indexes := map[uint64]bool{}
	start := time.Now()
	observed := 0
	for time.Since(start) < 5*interval {
		if err := r.Observe(cfg, 0.1, 0.2, 0); err != nil {
			t.Fatal(err)
		}
		observed++
		pair, _, err := raw.KV().Get(r.Key(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if pair != nil {
			indexes[pair.ModifyIndex] = true
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := len(indexes); n < 2 || n > 5 {
		t.Errorf("background writer wrote %d times in %v, want 2 to 5 (at most every %v)", n, 5*interval, interval)
	}
	if err := r.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := countsOf(t, raw, r.Key())[cfg]; got != observed {
		t.Errorf("count %d after Close, want %d", got, observed)
	}
}

func TestCloseWaitsForContext(t *testing.T) {
	raw := rawClient(t)
	r := newReporter(t, raw, report.Config{InitBatchSize: 16, MinInterval: time.Hour})
	if err := r.Observe(report.StepConfig{NumNodes: 1, NumReplicas: 1, LocalBsz: 16}, 0.1, 0.2, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := r.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	readDoc(t, raw, r.Key())
}
