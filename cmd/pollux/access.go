package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/pollux-nomad/pollux/consul"
	"github.com/pollux-nomad/pollux/internal/access"
	"github.com/pollux-nomad/pollux/jobs"
	"github.com/pollux-nomad/pollux/nomad"
)

// The access check: before the agent competes for leadership, and then
// every accessRecheck, it makes the calls the controller needs, on both
// servers, and records every one that is refused for lack of ACL
// permission or fails in TLS. Until a check passes the agent does nothing
// else (it could only fail, round after round): it stays up, logs each
// problem as an error naming the server, the operation and the missing
// rule or variable, retries with backoff, and /healthz answers 503 with
// the problems. A server that cannot be reached at all is not an access
// problem: the agent's own loops retry that.
const (
	accessRecheck    = time.Minute
	accessMaxBackoff = 30 * time.Second
	accessTimeout    = 30 * time.Second
	// probeJobID is the job the submit-job probe registers. The probe
	// cannot create it: it enforces a job modify index no job has, so a
	// permitted register is refused by that check (made after the ACL
	// check) and nothing is written.
	probeJobID = "pollux-access-probe"
	// maxProbedNamespaces bounds the namespaces one check probes.
	maxProbedNamespaces = 16
)

// accessCheck probes the agent's access and serves the result to /healthz.
type accessCheck struct {
	cluster   *nomad.Client
	nomadAPI  *nomadapi.Client
	kv        *consul.Client
	consulAPI *consulapi.Client
	// submit also probes submit-job (not in dry-run, which never writes a
	// job).
	submit bool
	log    hclog.Logger

	mu       sync.Mutex
	checked  bool
	problems []string
	notes    []string // failures that are not access problems
}

// health returns the HTTP status and body /healthz serves: 200 "ok" once
// a check found no access problem, 503 with the problems otherwise (also
// before the first check ends).
func (a *accessCheck) health() (int, string) {
	if a == nil {
		return http.StatusOK, "ok\n"
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case !a.checked:
		return http.StatusServiceUnavailable, "checking access to nomad and consul\n"
	case len(a.problems) > 0:
		var b strings.Builder
		for _, p := range a.problems {
			fmt.Fprintf(&b, "access: %s\n", p)
		}
		return http.StatusServiceUnavailable, b.String()
	}
	var b strings.Builder
	b.WriteString("ok\n")
	for _, n := range a.notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	return http.StatusOK, b.String()
}

// run checks until ctx ends: with backoff (1 s doubling to 30 s) while
// there are access problems, then every accessRecheck. It closes ready
// after the first check without access problems.
func (a *accessCheck) run(ctx context.Context, ready chan<- struct{}) {
	backoff := time.Second
	ok := false
	for ctx.Err() == nil {
		problems, notes := a.check(ctx)
		if ctx.Err() != nil {
			return
		}
		a.mu.Lock()
		a.checked, a.problems, a.notes = true, problems, notes
		a.mu.Unlock()
		for _, n := range notes {
			a.log.Warn("could not check access: " + n)
		}
		wait := accessRecheck
		if len(problems) > 0 {
			for _, p := range problems {
				a.log.Error(p, "retry_in", backoff)
			}
			wait = backoff
			backoff = min(2*backoff, accessMaxBackoff)
			ok = false
		} else {
			backoff = time.Second
			if !ok {
				a.log.Info("access check passed: nomad and consul allow what the controller needs")
				if ready != nil {
					close(ready)
					ready = nil
				}
			}
			ok = true
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// check makes the probes once and returns the access problems and the
// other failures.
func (a *accessCheck) check(ctx context.Context) (problems, notes []string) {
	ctx, cancel := context.WithTimeout(ctx, accessTimeout)
	defer cancel()
	record := func(err error) {
		if err == nil || errors.Is(err, jobs.ErrNotFound) || errors.Is(err, jobs.ErrConflict) {
			return
		}
		var ae *access.Error
		switch {
		case errors.As(err, &ae):
			msg := ae.Error()
			if ae.Denied && ae.Server == "nomad" && os.Getenv("NOMAD_TOKEN") == "" {
				msg += " [NOMAD_TOKEN is not set: the anonymous policy applies]"
			}
			problems = appendNew(problems, msg)
		default:
			notes = appendNew(notes, err.Error())
		}
	}

	// Nomad: what a round reads (jobs in every namespace, nodes, the
	// allocations of every job), and registering in the namespaces of the
	// tagged jobs.
	refs, _, err := a.cluster.ListJobs(ctx, 0, 0)
	record(err)
	_, err = a.cluster.Nodes(ctx)
	record(err)
	first := map[string]jobs.JobRef{}
	for _, r := range refs {
		if _, ok := first[r.Namespace]; !ok {
			first[r.Namespace] = r
		}
	}
	namespaces := slices.Sorted(func(yield func(string) bool) {
		for ns := range first {
			if !yield(ns) {
				return
			}
		}
	})
	if len(namespaces) > maxProbedNamespaces {
		namespaces = namespaces[:maxProbedNamespaces]
	}
	for _, ns := range namespaces {
		_, err := a.cluster.ReadJob(ctx, first[ns])
		record(err)
		if a.submit {
			record(a.probeSubmit(ctx, ns))
		}
	}

	// Consul: reading and writing under the prefix, and the session the
	// leader lock needs.
	_, _, err = a.kv.Get(ctx, jobs.ConfigKey)
	record(err)
	// A check-and-set at an index no key has: the ACL check comes first,
	// and a permitted write is refused (ErrConflict), writing nothing.
	record(a.kv.CAS(ctx, consul.StatusKey, []byte{}, math.MaxUint64))
	record(a.probeSession(ctx))
	return problems, notes
}

func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// probeSubmit checks submit-job in namespace ns without writing: a
// register that enforces a job modify index no job has.
func (a *accessCheck) probeSubmit(ctx context.Context, ns string) error {
	id := probeJobID
	job := &nomadapi.Job{
		ID: &id, Name: &id, Namespace: &ns,
		Type:        ptrTo(nomadapi.JobTypeBatch),
		Datacenters: []string{"*"},
		TaskGroups: []*nomadapi.TaskGroup{{
			Name:  ptrTo("probe"),
			Count: ptrTo(0),
			Tasks: []*nomadapi.Task{{Name: "probe", Driver: "raw_exec", Config: map[string]any{"command": "/bin/true"}}},
		}},
	}
	opts := &nomadapi.RegisterOptions{EnforceIndex: true, ModifyIndex: math.MaxUint64}
	_, _, err := a.nomadAPI.Jobs().RegisterOpts(job, opts, (&nomadapi.WriteOptions{Namespace: ns}).WithContext(ctx))
	if err == nil {
		// Cannot happen (no job has that index); if it did, take the probe away.
		_, _, _ = a.nomadAPI.Jobs().Deregister(id, true, (&nomadapi.WriteOptions{Namespace: ns}).WithContext(ctx))
		return nil
	}
	if strings.Contains(err.Error(), "Enforcing job modify index") {
		return nil // permitted: refused by the index check, after the ACL check
	}
	return nomad.Classify(err, fmt.Sprintf("registering jobs in namespace %q", ns), nomad.NeedNamespace("submit-job", ns))
}

// probeSession creates and destroys a session, as the leader lock does.
func (a *accessCheck) probeSession(ctx context.Context) error {
	w := (&consulapi.WriteOptions{}).WithContext(ctx)
	id, _, err := a.consulAPI.Session().Create(&consulapi.SessionEntry{
		Name: "pollux access check", TTL: "10s", Behavior: consulapi.SessionBehaviorDelete,
	}, w)
	if err != nil {
		return consul.Classify(err, "creating a session for the lock "+a.kv.Prefix()+consul.DefaultLockKey, consul.NeedSession)
	}
	if _, err := a.consulAPI.Session().Destroy(id, w); err != nil {
		return consul.Classify(err, "destroying a session", consul.NeedSession)
	}
	return nil
}

func ptrTo[T any](v T) *T { return &v }
