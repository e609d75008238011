package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
)

// Source gives the pages their data.
type Source interface {
	// Snapshot returns the current state; an error is shown on the page.
	Snapshot(ctx context.Context) (*Snapshot, error)
}

// Snapshot is everything the pages show.
type Snapshot struct {
	// Status is the leader's last round (nil before the first), with the
	// node map and each job's explanation.
	Status *jobs.Status
	// Jobs holds each job's persisted state and metrics, by
	// "namespace/id".
	Jobs map[string]*JobData
	// Rounds are the last rounds seen, newest first.
	Rounds []RoundSummary
	// Allocations are each job's allocation changes seen, newest first.
	Allocations map[string][]AllocChange
	// Reader says which credentials the page reads Consul with.
	Reader string
}

// JobData is what Consul holds about one job beside the status.
type JobData struct {
	// State is the controller's state key (nil: none or unreadable).
	State *jobs.State
	// Metrics is the job's metrics document (nil: none or invalid, then
	// MetricsError says why).
	Metrics      *contract.Metrics
	MetricsError string
}

// RoundSummary is one round in the history.
type RoundSummary struct {
	Round     int64
	Time      time.Time
	Instance  string
	DryRun    bool
	Timings   map[string]float64
	Conflicts int
	Errors    []string
	Jobs      int
	Changed   int
}

// AllocChange is a job's new allocation in some round.
type AllocChange struct {
	Round     int64
	Time      time.Time
	GPUs      int
	Placement string
	BatchSize int
}

// History keeps the last rounds and allocation changes it was shown. It is
// safe for concurrent use.
type History struct {
	// Rounds and PerJob bound what is kept (defaults 30 and 20).
	Rounds, PerJob int

	mu     sync.Mutex
	rounds []RoundSummary
	allocs map[string][]AllocChange
}

// Observe records a round once (by its number and instance).
func (h *History) Observe(st *jobs.Status) {
	if st == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.rounds) > 0 && h.rounds[0].Round == st.Round && h.rounds[0].Instance == st.Instance && h.rounds[0].Time.Equal(st.Time) {
		return
	}
	if h.allocs == nil {
		h.allocs = map[string][]AllocChange{}
	}
	rs := RoundSummary{Round: st.Round, Time: st.Time, Instance: st.Instance, DryRun: st.DryRun, Timings: st.Timings,
		Conflicts: st.Conflicts, Errors: st.Errors, Jobs: len(st.Jobs)}
	present := map[string]bool{}
	perJob := cmpDefault(h.PerJob, 20)
	for _, j := range st.Jobs {
		present[j.Job] = true
		if j.Changed {
			rs.Changed++
		}
		if j.Decision == nil {
			continue
		}
		prev := h.allocs[j.Job]
		if len(prev) > 0 && prev[0].Placement == j.Decision.Placement {
			continue
		}
		c := AllocChange{Round: st.Round, Time: st.Time, GPUs: j.Decision.NumReplicas, Placement: j.Decision.Placement, BatchSize: j.Decision.BatchSize}
		h.allocs[j.Job] = append([]AllocChange{c}, prev[:min(len(prev), perJob-1)]...)
	}
	for job := range h.allocs {
		if !present[job] {
			delete(h.allocs, job)
		}
	}
	h.rounds = append([]RoundSummary{rs}, h.rounds[:min(len(h.rounds), cmpDefault(h.Rounds, 30)-1)]...)
}

// fill copies the history into a snapshot.
func (h *History) fill(s *Snapshot) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s.Rounds = append([]RoundSummary(nil), h.rounds...)
	s.Allocations = make(map[string][]AllocChange, len(h.allocs))
	for k, v := range h.allocs {
		s.Allocations[k] = append([]AllocChange(nil), v...)
	}
}

func cmpDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// KV is what ConsulSource needs of Consul's KV store, under the
// controller's prefix. consul.Client implements it.
type KV interface {
	Get(ctx context.Context, key string) ([]byte, uint64, error)
	Watch(ctx context.Context, key string, index uint64, wait time.Duration) ([]byte, uint64, error)
	List(ctx context.Context, dir string) (map[string][]byte, error)
}

// ConsulSource reads the leader's published status and the jobs' keys
// from Consul, and keeps the history of the rounds it saw: it watches the
// status key from its creation (a blocking query), so every instance
// records every round whether or not anyone looks at the page.
type ConsulSource struct {
	kv     KV
	reader string
	log    hclog.Logger
	hist   History
}

// NewConsulSource returns a source reading kv and starts watching the
// status key until ctx ends. reader says which token it reads with, for
// the page (never the secret itself).
func NewConsulSource(ctx context.Context, kv KV, reader string, log hclog.Logger) *ConsulSource {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	s := &ConsulSource{kv: kv, reader: reader, log: log.Named("ui")}
	go s.watch(ctx)
	return s
}

// ReaderOf describes a Consul token for the page without revealing it.
func ReaderOf(token string) string {
	if token == "" {
		return "no Consul token (anonymous; CONSUL_HTTP_TOKEN is not set)"
	}
	return "the agent's Consul token (CONSUL_HTTP_TOKEN)"
}

func (s *ConsulSource) watch(ctx context.Context) {
	var index uint64
	backoff := time.Second
	for ctx.Err() == nil {
		raw, idx, err := s.kv.Watch(ctx, "status", index, 5*time.Minute)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Debug("failed to watch the status; retrying", "error", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
		if idx < index {
			idx = 0 // the index went back (Consul restarted): start over
		}
		index = idx
		if st, err := parseStatus(ctx, s.kv, raw); err == nil && st != nil {
			s.hist.Observe(st)
		}
	}
}

// parseStatus decodes the status document and reads its shards, if it
// has them (a round of more than contract.StatusInlineJobs jobs).
func parseStatus(ctx context.Context, kv jobs.StatusReader, raw []byte) (*jobs.Status, error) {
	if raw == nil {
		return nil, nil
	}
	st, err := jobs.ParseStatus(ctx, kv, raw)
	if err != nil {
		return nil, fmt.Errorf("failed to parse the status: %w", err)
	}
	return st, nil
}

// Snapshot reads the status and every job's keys (one request each).
func (s *ConsulSource) Snapshot(ctx context.Context) (*Snapshot, error) {
	snap := &Snapshot{Reader: s.reader, Jobs: map[string]*JobData{}}
	raw, _, err := s.kv.Get(ctx, "status")
	switch {
	case errors.Is(err, jobs.ErrNotFound):
	case err != nil:
		return nil, fmt.Errorf("failed to read the status: %w", err)
	default:
		st, err := parseStatus(ctx, s.kv, raw)
		if err != nil {
			return nil, err
		}
		snap.Status = st
		s.hist.Observe(st)
	}
	keys, err := s.kv.List(ctx, "jobs/")
	if err != nil {
		return nil, fmt.Errorf("failed to read the jobs' keys: %w", err)
	}
	for key, value := range keys {
		// jobs/<namespace>/<id>/<leaf>
		rest := strings.TrimPrefix(key, "jobs/")
		i := strings.LastIndexByte(rest, '/')
		if i < 0 {
			continue
		}
		job, leaf := rest[:i], rest[i+1:]
		d := snap.Jobs[job]
		if d == nil {
			d = &JobData{}
		}
		switch leaf {
		case "state":
			var st jobs.State
			if json.Unmarshal(value, &st) == nil {
				d.State = &st
			}
		case "metrics":
			if doc, err := contract.ParseMetrics(value); err == nil {
				d.Metrics = doc
			} else {
				d.MetricsError = err.Error()
			}
		default:
			continue
		}
		snap.Jobs[job] = d
	}
	s.hist.fill(snap)
	return snap, nil
}
