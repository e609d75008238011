package jobs

import (
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata golden files")

// goldenMetrics lists every metric family the controller exports, one per
// line: name, type, label names (comma-separated, - for none) and help.
// It was written from the hand-written exposition before the move to
// client_golang; the names, types, labels and help are part of what
// operators' dashboards and alerts rely on. (Beside the test rather than
// in testdata/: main moved jobs/testdata to worker/testdata.)
const goldenMetrics = "metrics.golden"

// exercise touches every metric so that each family has a sample.
func exercise(tm *Telemetry) {
	tm.SetLeader(true)
	tm.incConflict()
	tm.incError("apply")
	tm.incError("fence")
	tm.observePhase("total", 0.25)
	tm.observePhase("optimize", 0.125)
	tm.setJobGPUs("default/train", 6)
	tm.observeRound(&Status{Jobs: []JobStatus{{Job: "default/train", State: StateScheduled}}})
}

// scrape GETs tm's HTTP handler and returns the metric families, parsed
// as Prometheus does.
func scrape(t *testing.T, tm *Telemetry) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	tm.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q, want the text format 0.0.4", ct)
	}
	body := rec.Body.String()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("exposition does not parse: %v\n%s", err, body)
	}
	return fams
}

// describe renders the families named pollux_* as golden lines.
func describe(fams map[string]*dto.MetricFamily) []string {
	var lines []string
	for name, f := range fams {
		if !strings.HasPrefix(name, "pollux_") {
			continue
		}
		labels := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		names := make([]string, 0, len(labels))
		for l := range labels {
			names = append(names, l)
		}
		sort.Strings(names)
		ls := strings.Join(names, ",")
		if ls == "" {
			ls = "-"
		}
		lines = append(lines, fmt.Sprintf("%s %s %s %s", name, strings.ToLower(f.GetType().String()), ls, f.GetHelp()))
	}
	sort.Strings(lines)
	return lines
}

func TestTelemetryFamiliesMatchGolden(t *testing.T) {
	tm := NewTelemetry()
	exercise(tm)
	got := describe(scrape(t, tm))
	path := filepath.FromSlash(goldenMetrics)
	if *updateGolden {
		if err := os.WriteFile(path, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSpace(string(raw)), "\n")
	gotSet := map[string]bool{}
	for _, l := range got {
		gotSet[l] = true
	}
	for _, w := range want {
		if !gotSet[w] {
			t.Errorf("family missing or changed: want %q", w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d pollux_ families, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
}

// samples returns the values of family name by the value of label.
func samples(fams map[string]*dto.MetricFamily, name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range fams[name].GetMetric() {
		key := ""
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				key = l.GetValue()
			}
		}
		switch {
		case m.GetGauge() != nil:
			out[key] = m.GetGauge().GetValue()
		case m.GetCounter() != nil:
			out[key] = m.GetCounter().GetValue()
		}
	}
	return out
}

// A job that gets no decision in a round (it turned invalid, stopped,
// could not be read, or was purged) disappears from pollux_job_gpus; a
// job decided at 0 GPUs stays, at 0.
func TestJobGPUsOnlyForJobsDecidedThisRound(t *testing.T) {
	tm := NewTelemetry()
	for _, j := range []string{"d/invalid", "d/stopped", "d/error", "d/purged", "d/zero", "d/kept"} {
		tm.setJobGPUs(j, 4)
	}
	tm.observeRound(&Status{Jobs: []JobStatus{
		{Job: "d/invalid", State: StateScheduled}, {Job: "d/stopped", State: StateScheduled},
		{Job: "d/error", State: StateScheduled}, {Job: "d/purged", State: StateScheduled},
		{Job: "d/zero", State: StateScheduled}, {Job: "d/kept", State: StateScheduled},
	}})
	if got := samples(scrape(t, tm), "pollux_job_gpus", "job"); len(got) != 6 {
		t.Fatalf("after round 1: %v, want 6 jobs", got)
	}
	tm.setJobGPUs("d/zero", 0)
	tm.setJobGPUs("d/kept", 2)
	tm.setJobGPUs("d/new", 1)
	tm.observeRound(&Status{Jobs: []JobStatus{
		{Job: "d/invalid", State: StateInvalid}, {Job: "d/stopped", State: StateStopped},
		{Job: "d/error", State: StateError},
		{Job: "d/zero", State: StateScheduled}, {Job: "d/kept", State: StateScheduled}, {Job: "d/new", State: StateScheduled},
	}})
	got := samples(scrape(t, tm), "pollux_job_gpus", "job")
	want := map[string]float64{"d/zero": 0, "d/kept": 2, "d/new": 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after round 2: pollux_job_gpus %v, want %v", got, want)
	}
	// A round that decides nothing (every job stopped) empties it.
	tm.observeRound(&Status{Jobs: []JobStatus{{Job: "d/kept", State: StateStopped}}})
	if got := samples(scrape(t, tm), "pollux_job_gpus", "job"); len(got) != 0 {
		t.Errorf("after round 3: pollux_job_gpus %v, want none", got)
	}
}

// BenchmarkScrape measures one GET /metrics with 100 jobs, the Go runtime
// and process collectors included.
func BenchmarkScrape(b *testing.B) {
	tm := NewTelemetry()
	exercise(tm)
	for i := range 100 {
		tm.setJobGPUs(fmt.Sprintf("default/job-%d", i), i%8)
	}
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	h := tm.Handler()
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Code)
		}
	}
}
