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
// leader and reports the write as it happened, without writing it again.
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
			ctx := ctxFor(t, time.Minute)
			read, err := c.ReadJob(ctx, ref(id))
			if err != nil {
				t.Fatal(err)
			}
			idx, err := c.Apply(ctx, jobs.Change{Job: ref(id), JobModifyIndex: read.JobModifyIndex,
				Placement: []jobs.NodeGPUs{{Node: n1, GPUs: 1}}, Meta: map[string]string{contract.MetaRound: "5"}})
			if n := p.written.Load(); n != 1 {
				t.Errorf("the adapter sent %d registrations, want 1 (no second write before the read-back)", n)
			}
			info, _, ierr := raw.Jobs().Info(id, nil)
			if ierr != nil {
				t.Fatal(ierr)
			}
			versions, _, _, verr := raw.Jobs().Versions(id, false, nil)
			if verr != nil {
				t.Fatal(verr)
			}
			if tc.landed {
				if err != nil {
					t.Fatalf("Apply: %v, want the landed write reported as done", err)
				}
				if idx != *info.JobModifyIndex || !strings.HasPrefix(info.Meta[contract.MetaWrite], "3/5/") {
					t.Errorf("Apply gave index %d, job is at %d with marker %q (want term 3, round 5)", idx, *info.JobModifyIndex, info.Meta[contract.MetaWrite])
				}
				if len(versions) != 2 {
					t.Errorf("job has %d versions, want 2 (the author's and one write)", len(versions))
				}
				return
			}
			if err == nil || errors.Is(err, contract.ErrConflict) || !strings.Contains(err.Error(), "not applied") {
				t.Fatalf("Apply: %v, want an error saying the read-back found it not applied", err)
			}
			if *info.JobModifyIndex != read.JobModifyIndex || len(versions) != 1 {
				t.Errorf("job at index %d with %d versions, want untouched at %d", *info.JobModifyIndex, len(versions), read.JobModifyIndex)
			}
		})
	}
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
