package jobs

import (
	"flag"
	"fmt"
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
// operators' dashboards and alerts rely on.
const goldenMetrics = "testdata/metrics.golden"

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

// scrape returns the metric families tm exposes, parsed as Prometheus does.
func scrape(t *testing.T, tm *Telemetry) map[string]*dto.MetricFamily {
	t.Helper()
	var b strings.Builder
	if err := tm.WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(b.String()))
	if err != nil {
		t.Fatalf("exposition does not parse: %v\n%s", err, b.String())
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
