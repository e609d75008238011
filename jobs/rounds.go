package jobs

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pollux-nomad/pollux/policy/record"
)

// maxRecordRounds bounds the record_rounds setting: a record of a
// 4,096-GPU round holds some megabytes (the population the next round
// starts from).
const maxRecordRounds = 1000

// RoundLog keeps the controller's last rounds whole, as pollux replay
// reads them, for the agent's HTTP port. It is safe for concurrent use:
// the round adds while the HTTP handler reads.
type RoundLog struct {
	mu     sync.Mutex
	rounds []loggedRound
}

// loggedRound is one kept round.
type loggedRound struct {
	time time.Time
	rec  *record.Round
}

// NewRoundLog returns an empty log.
func NewRoundLog() *RoundLog { return &RoundLog{} }

// add keeps rec, dropping the oldest rounds beyond keep (0: keep none).
func (l *RoundLog) add(t time.Time, rec *record.Round, keep int) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if keep <= 0 {
		l.rounds = nil
		return
	}
	l.rounds = append(l.rounds, loggedRound{time: t, rec: rec})
	if n := len(l.rounds) - keep; n > 0 {
		l.rounds = append(l.rounds[:0], l.rounds[n:]...)
	}
}

// RoundSummary names a kept round in the /v1/rounds listing.
type RoundSummary struct {
	Round  int64     `json:"round"`
	Time   time.Time `json:"time"`
	Policy string    `json:"policy"`
	Jobs   int       `json:"jobs"`
	Nodes  int       `json:"nodes"`
}

// List returns the kept rounds, oldest first.
func (l *RoundLog) List() []RoundSummary {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]RoundSummary, 0, len(l.rounds))
	for _, r := range l.rounds {
		out = append(out, RoundSummary{Round: r.rec.Input.Round, Time: r.time.UTC(), Policy: r.rec.Policy, Jobs: len(r.rec.Input.Jobs), Nodes: len(r.rec.Input.Nodes)})
	}
	return out
}

// Get returns round n's record, if it is kept.
func (l *RoundLog) Get(n int64) (*record.Round, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.rounds {
		if r.rec.Input.Round == n {
			return r.rec, true
		}
	}
	return nil, false
}

// ServeHTTP serves /v1/rounds (the kept rounds, JSON) and
// /v1/rounds/N (round N's record, the document pollux replay reads; 404
// when it is not kept).
func (l *RoundLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest := strings.Trim(strings.TrimPrefix(r.URL.Path, "/v1/rounds"), "/")
	w.Header().Set("Content-Type", "application/json")
	if rest == "" {
		_ = json.NewEncoder(w).Encode(l.List())
		return
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	if err != nil {
		http.Error(w, `{"error": "want /v1/rounds/N with N a round number"}`, http.StatusBadRequest)
		return
	}
	rec, ok := l.Get(n)
	if !ok {
		http.Error(w, `{"error": "round `+rest+` is not kept (see /v1/rounds)"}`, http.StatusNotFound)
		return
	}
	b, err := json.Marshal(rec)
	if err != nil {
		http.Error(w, `{"error": "failed to encode the round"}`, http.StatusInternalServerError)
		return
	}
	_, _ = w.Write(b)
}
