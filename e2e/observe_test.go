package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The operator's observability files: deploy/grafana/pollux.json and
// deploy/prometheus.example.yml, checked with Debian's promtool, and the
// agent's /metrics checked by promtool (in TestStatusPage, which runs an
// agent).

const promtoolPath = "/usr/bin/promtool"

func promtool(t *testing.T, stdin []byte, args ...string) (string, error) {
	t.Helper()
	if _, err := os.Stat(promtoolPath); err != nil {
		t.Fatalf("%s is missing (Debian package prometheus): %v", promtoolPath, err)
	}
	cmd := exec.Command(promtoolPath, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// dashboardExprs returns every PromQL expression of the dashboard.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(readRepoFile(t, "deploy/grafana/pollux.json")), &dash); err != nil {
		t.Fatalf("deploy/grafana/pollux.json: %v", err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	if len(exprs) < 10 {
		t.Fatalf("dashboard %q has %d queries", dash.Title, len(exprs))
	}
	return exprs
}

// TestGrafanaDashboard: every query of the dashboard is valid PromQL
// (promtool checks it as a recording rule).
func TestGrafanaDashboard(t *testing.T) {
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, e := range dashboardExprs(t) {
		q, _ := json.Marshal(e) // a JSON string is a valid YAML string
		fmt.Fprintf(&b, "      - record: pollux:dashboard_query_%d\n        expr: %s\n", i, q)
	}
	path := filepath.Join(t.TempDir(), "rules.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := promtool(t, nil, "check", "rules", path); err != nil {
		t.Fatalf("promtool check rules on the dashboard's queries: %v\n%s\n%s", err, out, b.String())
	}
}

// TestPrometheusExample: the scrape example is a valid configuration.
func TestPrometheusExample(t *testing.T) {
	if out, err := promtool(t, nil, "check", "config", filepath.Join(repoRoot(t), "deploy/prometheus.example.yml")); err != nil {
		t.Fatalf("promtool check config deploy/prometheus.example.yml: %v\n%s", err, out)
	}
}

var metricName = regexp.MustCompile(`\bpollux_[a-z_]+\b`)

// checkAgentMetrics runs promtool check metrics on an agent's /metrics and
// checks that every series the dashboard queries is exported.
func checkAgentMetrics(t *testing.T, addr string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if out, err := promtool(t, body, "check", "metrics"); err != nil {
		t.Errorf("promtool check metrics on the agent's /metrics: %v\n%s", err, out)
	}
	exported := map[string]bool{}
	for _, l := range strings.Split(string(body), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && !strings.HasPrefix(l, "#") {
			name, _, _ := strings.Cut(f[0], "{")
			exported[name] = true
		}
	}
	var missing []string
	for _, e := range dashboardExprs(t) {
		for _, name := range metricName.FindAllString(e, -1) {
			// Counters by kind have no series before the first error.
			if !exported[name] && name != "pollux_errors_total" {
				missing = append(missing, name)
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("the dashboard queries series the agent does not export: %v", missing)
	}
}
