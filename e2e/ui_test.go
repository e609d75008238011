package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// mapCells is what the cluster map shows: per node ID, each GPU as
// "kind:job" (job empty for free and non-Pollux GPUs), sorted.
type mapCells map[string][]string

// readMap reads the cluster map of the page open in the browser.
func readMap(b *browser) mapCells {
	var rows []struct {
		Node  string   `json:"node"`
		Cells []string `json:"cells"`
	}
	b.eval(`return Array.from(document.querySelectorAll('#cluster-map g.node')).map(g => ({
		node: g.getAttribute('data-node'),
		cells: Array.from(g.querySelectorAll('rect.gpu')).map(r => r.getAttribute('data-kind') + ':' + r.getAttribute('data-job'))}))`, &rows)
	out := mapCells{}
	for _, r := range rows {
		sort.Strings(r.Cells)
		out[r.Node] = r.Cells
	}
	return out
}

// reasons reads the jobs table: job -> reason cell text.
func reasons(b *browser) map[string]string {
	var rows [][2]string
	b.eval(`return Array.from(document.querySelectorAll('#jobs tr[data-job]')).map(r => [r.getAttribute('data-job'), r.querySelector('td.reason').textContent])`, &rows)
	out := map[string]string{}
	for _, r := range rows {
		out[r[0]] = r[1]
	}
	return out
}

// TestStatusPage loads /ui of agents on the local cluster in headless
// Chromium: two Pollux jobs, a job outside Pollux, an invalid job and a
// job whose ID and meta carry markup. It checks the GPUs of each node show
// the jobs Nomad runs there, the invalid job's reason, a job's detail with
// its speedup curve, that nothing a job supplied runs, and that a follower
// serves the same page; it writes screenshots to out/.
func TestStatusPage(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := e.registerJob("train-a", map[string]string{"pollux_max_gpus": "3"})
	bjob := e.registerJob("train-b", nil)
	e.putMetrics(a, e.profileDoc("cifar10", []int{1}, []int{2}, []int{4}))
	e.putMetrics(bjob, e.profileDoc("imagenet", []int{1}, []int{2}))
	plain := e.registerJob("plain", map[string]string{"pollux_enabled": ""})
	invalid := e.registerJob("invalid", map[string]string{"pollux_init_lr": "fast"})
	hostile := e.registerJob(`x<script>document.title='pwned'</script>`, map[string]string{"pollux_init_batch_size": "<svg/onload=document.title=1>"})
	e.waitAsSubmitted(t, plain, invalid, hostile)

	cfg := e.agentConfig(t, "")
	p1 := e.startAgent(t, "ui-1", cfg)
	p2 := e.startAgent(t, "ui-2", cfg)
	var leader, follower *agentProc
	deadline := time.Now().Add(60 * time.Second)
	for leader == nil {
		switch {
		case p1.metric("pollux_leader") == 1:
			leader, follower = p1, p2
		case p2.metric("pollux_leader") == 1:
			leader, follower = p2, p1
		case time.Now().After(deadline):
			t.Fatal("no leader within 60s")
		}
		time.Sleep(300 * time.Millisecond)
	}
	e.waitPlaced(t, a, 90*time.Second)
	e.waitPlaced(t, bjob, 90*time.Second)
	// Wait for a round that saw both jobs running as placed.
	st := e.waitRound(t, 0, 30*time.Second)
	st = e.waitRound(t, st.Round+1, 30*time.Second)

	// What Nomad runs, per node: the page must show exactly this.
	want := mapCells{}
	for _, n := range st.NodeMap {
		want[n.ID] = nil
	}
	total := map[string]int{}
	for _, j := range []struct{ id, kind string }{{a, "pollux"}, {bjob, "pollux"}, {invalid, "held"}, {hostile, "held"}, {plain, "other"}} {
		per, err := e.devicesPerNode(ctx, j.id)
		if err != nil {
			t.Fatal(err)
		}
		for _, ng := range per {
			for range ng.GPUs {
				job := "default/" + j.id
				if j.kind == "other" {
					job = j.id // named on the map, without the default namespace
				}
				want[ng.Node] = append(want[ng.Node], j.kind+":"+job)
				total[ng.Node]++
			}
		}
	}
	for _, n := range st.NodeMap {
		for range n.GPUs - total[n.ID] {
			want[n.ID] = append(want[n.ID], "free:")
		}
		sort.Strings(want[n.ID])
	}

	br := startBrowser(t)
	outDir := filepath.Join(repoRoot(t), "out")
	br.open("http://" + leader.addr + "/ui/")
	got := readMap(br)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("cluster map\n got %v\nwant %v (from Nomad's allocations)", got, want)
	}
	rs := reasons(br)
	if r := rs["default/"+invalid]; !strings.Contains(r, "invalid_meta") || !strings.Contains(r, "pollux_init_lr") {
		t.Errorf("invalid job's reason %q, want invalid_meta naming pollux_init_lr", r)
	}
	for _, j := range []string{a, bjob} {
		if r := rs["default/"+j]; r == "" || strings.HasPrefix(r, "invalid") {
			t.Errorf("job %s reason %q", j, r)
		}
	}
	// Nothing a job supplied ran: the title is the page's own, and the
	// markup is shown as text.
	var probe struct {
		Title   string `json:"title"`
		Scripts int    `json:"scripts"`
		Text    bool   `json:"text"`
		Meta    bool   `json:"meta"`
	}
	br.eval(`return {title: document.title, scripts: document.scripts.length,
		text: document.body.textContent.includes("x<script>document.title='pwned'</script>"),
		meta: document.body.textContent.includes("<svg/onload=document.title=1>")}`, &probe)
	if probe.Title != "Pollux" || probe.Scripts != 0 || !probe.Text || !probe.Meta {
		t.Errorf("hostile job: title %q (want Pollux), %d script elements (want 0), ID shown as text %v, meta shown as text %v", probe.Title, probe.Scripts, probe.Text, probe.Meta)
	}
	br.screenshot(filepath.Join(outDir, "ui-cluster-map.png"))

	// The hostile job's own page.
	br.open("http://" + leader.addr + "/ui/job?id=" + urlQueryEscape("default/"+hostile))
	br.eval(`return {title: document.title, scripts: document.scripts.length,
		text: document.body.textContent.includes("x<script>document.title='pwned'</script>"), meta: true}`, &probe)
	if probe.Title != "default/"+hostile+" · Pollux" || probe.Scripts != 0 || !probe.Text {
		t.Errorf("hostile job's page: title %q, %d scripts, ID as text %v", probe.Title, probe.Scripts, probe.Text)
	}

	// A job's detail: its speedup curve with the chosen point.
	br.open("http://" + leader.addr + "/ui/job?id=default/" + a)
	var detail struct {
		Reason  string `json:"reason"`
		Path    string `json:"path"`
		Points  int    `json:"points"`
		Chosen  string `json:"chosen"`
		Eff     bool   `json:"eff"`
		FitText string `json:"fit"`
	}
	br.eval(`const s = document.querySelector('svg[data-chart="speedup"]');
		return {reason: document.querySelector('#reason').textContent,
			path: s ? s.querySelector('path.curve').getAttribute('d') : '',
			points: s ? s.querySelectorAll('circle.dot').length : 0,
			chosen: s && s.querySelector('circle[data-chosen]') ? s.querySelector('circle[data-chosen] title').textContent : '',
			eff: !!document.querySelector('svg[data-chart="efficiency"] circle[data-chosen]'),
			fit: (document.querySelector('#fit-error') || {textContent: ''}).textContent}`, &detail)
	ja := jobStatus(t, st, a)
	if detail.Points < 2 || !strings.HasPrefix(detail.Path, "M") || !strings.HasPrefix(detail.Chosen, fmt.Sprintf("chosen: %d GPUs", ja.GPUs)) || !detail.Eff {
		t.Errorf("job %s detail: %d curve points, path %.40q, chosen %q (want %d GPUs), efficiency mark %v", a, detail.Points, detail.Path, detail.Chosen, ja.GPUs, detail.Eff)
	}
	if !strings.Contains(detail.FitText, "RMS relative error") || detail.Reason == "" {
		t.Errorf("job %s detail: reason %q, fit %q", a, detail.Reason, detail.FitText)
	}
	t.Logf("job %s: %s; %s", a, detail.Reason, detail.FitText)
	br.screenshot(filepath.Join(outDir, "ui-job-detail.png"))

	// A follower serves the same page (it reads the leader's status).
	br.open("http://" + follower.addr + "/ui/")
	if fg := readMap(br); fmt.Sprint(fg) != fmt.Sprint(got) {
		t.Errorf("the follower's map differs:\n follower %v\n leader   %v", fg, got)
	}
	if fr := reasons(br); fmt.Sprint(fr) != fmt.Sprint(rs) {
		t.Errorf("the follower's reasons differ:\n follower %v\n leader   %v", fr, rs)
	}
	var leaderName string
	br.eval(`return document.querySelector('#leader').textContent`, &leaderName)
	if !strings.Contains(leaderName, fmt.Sprintf("pid-%d", leader.cmd.Process.Pid)) {
		t.Errorf("the follower's page names %q as leader, want pid %d", leaderName, leader.cmd.Process.Pid)
	}

	// pollux status says the same: a table, one job's detail, the JSON.
	status := func(args ...string) string {
		cmd := exec.Command(polluxBinary(t), append([]string{"status", "-kv-prefix", e.prefix}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("pollux status %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	table := status()
	for _, s := range []string{"REASON", "invalid_meta: invalid meta pollux_init_lr", "default/" + a} {
		if !strings.Contains(table, s) {
			t.Errorf("pollux status lacks %q:\n%s", s, table)
		}
	}
	if one := status(a); !strings.Contains(one, "fair-share base") || !strings.Contains(one, "reason") {
		t.Errorf("pollux status %s:\n%s", a, one)
	}
	if js := status("-json", invalid); !strings.Contains(js, `"reason": "invalid_meta"`) || !strings.Contains(js, `"key": "pollux_init_lr"`) {
		t.Errorf("pollux status -json %s:\n%s", invalid, js)
	}

	// The agent's /metrics passes promtool, and the dashboard's series
	// exist in it.
	checkAgentMetrics(t, leader.addr)

	// Serving the page does not slow the round: round times with a reader
	// fetching /ui in a loop against without.
	measureRoundsUnderUI(t, e, leader.addr)
}

func urlQueryEscape(s string) string {
	r := strings.NewReplacer("%", "%25", "<", "%3C", ">", "%3E", "'", "%27", "\"", "%22", "/", "%2F", "&", "%26", "#", "%23", "=", "%3D", "+", "%2B", " ", "%20")
	return r.Replace(s)
}

// measureRoundsUnderUI logs the median round time without and with a
// client fetching /ui 20 times a second (200 open pages refreshing every
// 10 s), in alternating windows of 5 rounds (4 of each), so that the load
// of others on the machine falls on both alike.
func measureRoundsUnderUI(t *testing.T, e *env, addr string) {
	t.Helper()
	st := e.waitRound(t, 0, 30*time.Second)
	collect := func(n int) []float64 {
		var out []float64
		for len(out) < n {
			st = e.waitRound(t, st.Round, 30*time.Second)
			out = append(out, st.Timings["total"])
		}
		return out
	}
	var idle, busy []float64
	pages, busyTime := 0, time.Duration(0)
	for range 4 {
		idle = append(idle, collect(5)...)
		stop, done := make(chan struct{}), make(chan int)
		go func() {
			n := 0
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					done <- n
					return
				case <-tick.C:
				}
				resp, err := http.Get("http://" + addr + "/ui/")
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					n++
				}
			}
		}()
		start := time.Now()
		busy = append(busy, collect(5)...)
		close(stop)
		pages += <-done
		busyTime += time.Since(start)
	}
	sort.Float64s(idle)
	sort.Float64s(busy)
	rate := float64(pages) / busyTime.Seconds()
	t.Logf("round total ms, median of 20: %.1f without page views, %.1f while serving /ui (%.1f pages/s); quartiles %.0f-%.0f vs %.0f-%.0f",
		idle[10], busy[10], rate, idle[5], idle[15], busy[5], busy[15])
	if f := os.Getenv("POLLUX_UI_REPORT"); f != "" {
		_ = os.WriteFile(f, fmt.Appendf(nil, "idle_ms=%.1f busy_ms=%.1f pages_per_s=%.1f\n", idle[10], busy[10], rate), 0o644)
	}
}
