package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAgentRoundsReplayOffline: a running agent on the local cluster
// keeps its last rounds (record_rounds); the test fetches them from its
// HTTP port as an operator would (curl /v1/rounds/N > file) and decides
// each again offline with `pollux replay`, which exits 0 only when every
// round gives the decision the agent made. The jobs carry fitted models
// (profiles in their metrics documents), so the records hold them.
func TestAgentRoundsReplayOffline(t *testing.T) {
	e := newEnv(t)
	for i, app := range []string{"cifar10", "imagenet", "bert"} {
		id := e.registerJob(fmt.Sprintf("replay-%d", i), nil)
		e.putMetrics(id, e.profileDoc(app, []int{1}, []int{2}))
	}
	cfg := filepath.Join(t.TempDir(), "pollux.json")
	doc := fmt.Sprintf(`{"interval":"2s","device":%q,"kv_prefix":%q,"record_rounds":4,"ga":{"population":30,"generations":30}}`, e.device, e.prefix)
	if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	a := e.startAgent(t, "a", cfg)

	type summary struct {
		Round int64 `json:"round"`
		Jobs  int   `json:"jobs"`
	}
	var kept []summary
	deadline := time.Now().Add(90 * time.Second)
	for {
		kept = kept[:0]
		if resp, err := http.Get("http://" + a.addr + "/v1/rounds"); err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&kept)
			resp.Body.Close()
		}
		if len(kept) == 4 && kept[0].Jobs == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent keeps rounds %+v, want 4 rounds of the 3 jobs", kept)
		}
		time.Sleep(time.Second)
	}
	dir := t.TempDir()
	for _, s := range kept {
		resp, err := http.Get(fmt.Sprintf("http://%s/v1/rounds/%d", a.addr, s.Round))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("round %d: HTTP %d, %v", s.Round, resp.StatusCode, err)
		}
		if !strings.Contains(string(b), `"func"`) {
			t.Errorf("round %d's record has no fitted model: %.300s", s.Round, b)
		}
		// The first round of a term starts from no carry; every later
		// round is handed the search's population by the one before.
		if s.Round > 1 && !strings.Contains(string(b), `"carry"`) {
			t.Errorf("round %d's record has no carry: %.300s", s.Round, b)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("round-%08d.json", s.Round)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(polluxBinary(t), "replay", dir).CombinedOutput()
	t.Logf("pollux replay:\n%s", out)
	if err != nil {
		t.Fatalf("pollux replay: %v", err)
	}
	if !strings.Contains(string(out), "4 rounds: every decision the recorded one") {
		t.Errorf("replay output lacks the summary line")
	}
}
