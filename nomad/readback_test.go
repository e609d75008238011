package nomad_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
	"github.com/pollux-nomad/pollux/nomad"
	"github.com/pollux-nomad/pollux/nomad/nomadtest"
)

// faultProxy stands between the adapter and the real Nomad server and
// breaks the answer of a job registration as fault says; every other
// request passes through. It counts the registrations it saw.
type faultProxy struct {
	target  *url.URL
	fault   func(w http.ResponseWriter, forward func() (int, []byte))
	written atomic.Int32
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	forward := func() (int, []byte) {
		req, _ := http.NewRequest(r.Method, p.target.String()+r.URL.RequestURI(), bytes.NewReader(body))
		req.Header = r.Header.Clone()
		req.Header.Del("Accept-Encoding") // plain bodies, passed on as they are
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return http.StatusBadGateway, []byte(err.Error())
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			if k != "Content-Length" {
				w.Header()[k] = v
			}
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	// api.Jobs.RegisterOpts: PUT /v1/jobs.
	register := (r.Method == http.MethodPut || r.Method == http.MethodPost) && r.URL.Path == "/v1/jobs"
	if register {
		p.written.Add(1)
		p.fault(w, forward)
		return
	}
	code, b := forward()
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// dropReply hangs up without an answer (the connection lost after the
// server committed the write).
func dropReply(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// TestApplyUnknownOutcome injects, at the wire between the adapter and a
// real Nomad, the faults after which a registration's outcome is unknown:
// the write reaches Nomad and its answer is dropped; it reaches Nomad and
// the answer comes after the client's deadline; Nomad answers 500 having
// written nothing (as for "leadership lost while committing log" of an
// entry that is never committed). The adapter reads the job back from the
// leader and reports the write as it happened, without writing it again:
// 17 writes through each fault, 51 in all, each checked against the job's
// version history (no double write, no false conflict).
func TestApplyUnknownOutcome(t *testing.T) {
	raw := nomadtest.Client(t)
	nomadtest.Lock(t)
	n1 := nomadtest.NodeIDs(t, raw)["client-1"]
	target, err := url.Parse(os.Getenv("NOMAD_ADDR"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		fault  func(w http.ResponseWriter, forward func() (int, []byte))
		landed bool
	}{
		{"answer dropped", func(w http.ResponseWriter, forward func() (int, []byte)) {
			forward()
			dropReply(w)
		}, true},
		{"answer after the deadline", func(w http.ResponseWriter, forward func() (int, []byte)) {
			code, b := forward()
			time.Sleep(2 * time.Second)
			w.WriteHeader(code)
			_, _ = w.Write(b)
		}, true},
		{"server error, nothing written", func(w http.ResponseWriter, _ func() (int, []byte)) {
			http.Error(w, "leadership lost while committing log", http.StatusInternalServerError)
		}, false},
	}
	// faultsPerKind writes of one job through each fault, the placement
	// alternating between one GPU and none; after each the job's version
	// history must show exactly the writes that landed, once each.
	const faultsPerKind = 17
	var faults, doubles, falseConflicts int
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &faultProxy{target: target, fault: tc.fault}
			srv := httptest.NewServer(p)
			t.Cleanup(srv.Close)
			cfg := api.DefaultConfig()
			cfg.Address = srv.URL
			via, err := api.NewClient(cfg)
			if err != nil {
				t.Fatal(err)
			}
			c, err := nomad.New(via, nomad.Config{Device: nomadtest.Device(), RequestTimeout: time.Second,
				Lease: func() (string, time.Time, error) { return "3", time.Now().Add(time.Minute), nil }})
			if err != nil {
				t.Fatal(err)
			}
			id := nomadtest.ID("unknown")
			j := nomadtest.Job(id, 1, true)
			*j.TaskGroups[0].Count = 0
			nomadtest.Register(t, raw, j)
			ctx := ctxFor(t, 3*time.Minute)
			for i := range faultsPerKind {
				read, err := c.ReadJob(ctx, ref(id))
				if err != nil {
					t.Fatal(err)
				}
				before, _, err := raw.Jobs().Info(id, nil)
				if err != nil {
					t.Fatal(err)
				}
				var place []jobs.NodeGPUs
				if i%2 == 0 {
					place = []jobs.NodeGPUs{{Node: n1, GPUs: 1}}
				}
				round := fmt.Sprint(i + 1)
				sent := p.written.Load()
				idx, err := c.Apply(ctx, jobs.Change{Job: ref(id), JobModifyIndex: read.JobModifyIndex,
					Placement: place, Meta: map[string]string{contract.MetaRound: round}})
				faults++
				if n := p.written.Load() - sent; n != 1 {
					t.Errorf("write %d: the adapter sent %d registrations, want 1 (no second write before the read-back)", i, n)
				}
				after, _, ierr := raw.Jobs().Info(id, nil)
				if ierr != nil {
					t.Fatal(ierr)
				}
				grew := int(deref(after.Version)) - int(deref(before.Version))
				if grew > 1 {
					doubles++
					t.Errorf("write %d: the job's version moved from %d to %d", i, deref(before.Version), deref(after.Version))
				}
				if errors.Is(err, contract.ErrConflict) {
					falseConflicts++
					t.Errorf("write %d: Apply reported a conflict with nobody else writing: %v", i, err)
				}
				if tc.landed {
					if err != nil {
						t.Fatalf("write %d: Apply: %v, want the landed write reported as done", i, err)
					}
					if grew != 1 || idx != *after.JobModifyIndex || !strings.HasPrefix(after.Meta[contract.MetaWrite], "3/"+round+"/") {
						t.Errorf("write %d: Apply gave index %d; the job moved %d versions to index %d with marker %q (want term 3, round %s)",
							i, idx, grew, *after.JobModifyIndex, after.Meta[contract.MetaWrite], round)
					}
					continue
				}
				if err == nil || !strings.Contains(err.Error(), "not applied") {
					t.Fatalf("write %d: Apply: %v, want an error saying the read-back found it not applied", i, err)
				}
				if grew != 0 || *after.JobModifyIndex != read.JobModifyIndex {
					t.Errorf("write %d: job moved %d versions to index %d, want untouched at %d", i, grew, *after.JobModifyIndex, read.JobModifyIndex)
				}
			}
		})
	}
	t.Logf("%d injected unknown-outcome faults: %d double writes, %d false conflicts", faults, doubles, falseConflicts)
}

// TestSubmitTimeSurvivesUpdates: an operator re-registers a managed job
// from its author's file (no pollux_submit_time) more times than Nomad
// keeps versions; the job's first submission time is still the one the
// controller recorded with its first write.
func TestSubmitTimeSurvivesUpdates(t *testing.T) {
	c, raw := setup(t, nomad.Config{})
	ctx := ctxFor(t, 2*time.Minute)
	n1 := nomadtest.NodeIDs(t, raw)["client-1"]
	id := nomadtest.ID("resubmit")
	author := func(release string) *api.Job {
		j := nomadtest.Job(id, 1, true)
		*j.TaskGroups[0].Count = 0
		j.TaskGroups[0].Tasks[0].Env = map[string]string{"RELEASE": release}
		return j
	}
	nomadtest.Register(t, raw, author("r0"))
	first, err := c.ReadJob(ctx, ref(id))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Apply(ctx, jobs.Change{Job: ref(id), JobModifyIndex: first.JobModifyIndex,
		Placement: []jobs.NodeGPUs{{Node: n1, GPUs: 1}}, Meta: map[string]string{contract.MetaRound: "1"}}); err != nil {
		t.Fatal(err)
	}
	// Nomad keeps six versions (JobTrackedVersions): eight updates prune
	// every version the controller wrote but the newest it rewrites.
	for i := 1; i <= 8; i++ {
		time.Sleep(20 * time.Millisecond)
		if _, _, err := raw.Jobs().Register(author(fmt.Sprintf("r%d", i)), nil); err != nil {
			t.Fatal(err)
		}
		j, err := c.ReadJob(ctx, ref(id))
		if err != nil {
			t.Fatal(err)
		}
		if !j.SubmitTime.Equal(first.SubmitTime) {
			t.Fatalf("after update %d the job's submission time is %v, want the first %v", i, j.SubmitTime, first.SubmitTime)
		}
		if i%2 == 0 {
			// Every other update the controller reshapes the job again.
			if _, err := c.Apply(ctx, jobs.Change{Job: ref(id), JobModifyIndex: j.JobModifyIndex,
				Placement: []jobs.NodeGPUs{{Node: n1, GPUs: 1}}, Meta: map[string]string{contract.MetaRound: fmt.Sprint(i + 1)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
