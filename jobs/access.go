package jobs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/internal/access"
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
	// maxProbedNamespaces bounds the namespaces one check probes.
	maxProbedNamespaces = 16
)

// SubmitProber is the part of the cluster the access check needs beyond
// Cluster: whether the token may register jobs in a namespace, checked
// without writing. nomad.Client implements it.
type SubmitProber interface {
	ProbeSubmit(ctx context.Context, namespace string) error
}

// SessionProber is the part of the KV store the access check needs beyond
// KV: whether the token may create the leader lock's session. consul.Client
// implements it.
type SessionProber interface {
	ProbeSession(ctx context.Context) error
}

// AccessOptions configure an AccessCheck.
type AccessOptions struct {
	Cluster Cluster
	KV      KV
	// Submit, if set, also probes registering jobs in the namespaces of
	// the tagged jobs (not in dry-run, which never writes a job).
	Submit SubmitProber
	// Session, if set, probes the leader lock's session.
	Session SessionProber
	// NomadTokenSet tells whether NOMAD_TOKEN is set, so that a refusal
	// can say that the anonymous policy applied.
	NomadTokenSet bool
	Logger        hclog.Logger
}

// AccessCheck probes the agent's access to Nomad and Consul and serves
// the result to /healthz. Its zero value is not usable; a nil
// *AccessCheck reports healthy.
type AccessCheck struct {
	o   AccessOptions
	log hclog.Logger

	mu       sync.Mutex
	checked  bool
	problems []string
	notes    []string // failures that are not access problems
}

// NewAccessCheck returns an access check that has not run yet.
func NewAccessCheck(o AccessOptions) *AccessCheck {
	log := o.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &AccessCheck{o: o, log: log.Named("access")}
}

// Health returns the HTTP status and body /healthz serves: 200 "ok" once
// a check found no access problem, 503 with the problems otherwise (also
// before the first check ends).
func (a *AccessCheck) Health() (int, string) {
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

// Run checks until ctx ends: with backoff (1 s doubling to 30 s) while
// there are access problems, then every accessRecheck. It closes ready
// after the first check without access problems.
func (a *AccessCheck) Run(ctx context.Context, ready chan<- struct{}) {
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
func (a *AccessCheck) check(ctx context.Context) (problems, notes []string) {
	ctx, cancel := context.WithTimeout(ctx, accessTimeout)
	defer cancel()
	record := func(err error) {
		if err == nil || errors.Is(err, contract.ErrNotFound) || errors.Is(err, contract.ErrConflict) {
			return
		}
		var ae *access.Error
		switch {
		case errors.As(err, &ae):
			msg := ae.Error()
			if ae.Denied && ae.Server == "nomad" && !a.o.NomadTokenSet {
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
	refs, _, err := a.o.Cluster.ListJobs(ctx, 0, 0)
	record(err)
	_, err = a.o.Cluster.Nodes(ctx)
	record(err)
	first := map[string]JobRef{}
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
		_, err := a.o.Cluster.ReadJob(ctx, first[ns])
		record(err)
		if a.o.Submit != nil {
			record(a.o.Submit.ProbeSubmit(ctx, ns))
		}
	}

	// Consul: reading and writing under the prefix, and the session the
	// leader lock needs.
	_, _, err = a.o.KV.Get(ctx, contract.ConfigKey)
	record(err)
	// A check-and-set at an index no key has: the ACL check comes first,
	// and a permitted write is refused (ErrConflict), writing nothing.
	record(a.o.KV.CAS(ctx, contract.StatusKey, []byte{}, math.MaxUint64))
	if a.o.Session != nil {
		record(a.o.Session.ProbeSession(ctx))
	}
	return problems, notes
}

func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}
