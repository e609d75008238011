package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/jobs"
	"github.com/pollux-nomad/pollux/policy/record"
)

// TestRoundsRecordedAndReplayed runs a controller with the real policies
// over the in-memory cluster for several rounds and reads its last rounds
// through the HTTP handler, as an operator would fetch them from the
// agent: record_rounds bounds how many are kept, every kept round decides
// the same again from its document alone (the population Pollux hands
// on, Tiresias' queues included), and a round not kept is a 404.
func TestRoundsRecordedAndReplayed(t *testing.T) {
	for _, name := range []string{"pollux", "tiresias"} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, map[string]int{"n1": 4, "n2": 4, "n3": 4})
			f.cfg.Policy = name
			f.cfg.RecordRounds = 3
			log := jobs.NewRoundLog()
			c, err := jobs.New(f.cfg, jobs.Options{Cluster: f.cluster, KV: f.kv, Now: f.clock.Now, Rounds: log})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 7 {
				f.submit(fmt.Sprintf("j%d", i), 1+i%3)
			}
			for range 5 {
				f.round(c)
				f.clock.Advance(time.Minute)
			}
			srv := httptest.NewServer(jobs.Handler(jobs.NewTelemetry(), nil, log))
			defer srv.Close()
			var list []jobs.RoundSummary
			getJSON(t, srv.URL+"/v1/rounds", &list)
			if len(list) != 3 || list[0].Round != 3 || list[2].Round != 5 {
				t.Fatalf("kept rounds %+v, want rounds 3..5", list)
			}
			for _, s := range list {
				if s.Policy != name || s.Jobs != 7 || s.Nodes != 3 {
					t.Errorf("round %d: %+v, want %s with 7 jobs on 3 nodes", s.Round, s, name)
				}
				var rec record.Round
				getJSON(t, fmt.Sprintf("%s/v1/rounds/%d", srv.URL, s.Round), &rec)
				if len(rec.Input.Carry) == 0 {
					t.Errorf("round %d: no carry recorded", s.Round)
				}
				_, diff, err := rec.Replay(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if len(diff) > 0 {
					t.Errorf("round %d decided differently on replay: %v", s.Round, diff)
				}
			}
			resp, err := http.Get(srv.URL + "/v1/rounds/1")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("round 1 (dropped): HTTP %d, want 404", resp.StatusCode)
			}
		})
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
