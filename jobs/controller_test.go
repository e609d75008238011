package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
	"github.com/pollux-nomad/pollux/jobs/jobstest"
	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/policy/registry"
)

// fixture is a controller on the in-memory stand-ins, driven by a
// scripted policy.
type fixture struct {
	t       *testing.T
	clock   *jobstest.Clock
	cluster *jobstest.Cluster
	kv      *jobstest.KV
	lock    *jobstest.Lock
	policy  *scripted
	cfg     jobs.Config
	// traits, if set, are the scripted policy's (default: the registry's
	// for the configured name).
	traits *registry.Traits
	// slow hands controllers the cluster without its fast-path readers
	// (jobstest.Cluster.Plain).
	slow bool
}

// scripted is a policy that returns the allocation a test set, and
// remembers what it was asked.
type scripted struct {
	mu   sync.Mutex
	next policy.Allocations
	last policy.Input
}

func (s *scripted) Name() string        { return "pollux" }
func (s *scripted) Carry() policy.Carry { return nil }

func (s *scripted) Optimize(ctx context.Context, in policy.Input) (policy.Allocations, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = in
	out := policy.Allocations{}
	for _, j := range in.Jobs {
		if a := s.next[j.ID]; len(a) > 0 {
			out[j.ID] = a
		}
	}
	return out, nil
}

// lastInput is the input of the last Optimize.
func (s *scripted) lastInput() policy.Input {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// set makes the policy give each job ("default/<id>") the listed nodes.
func (s *scripted) set(alloc map[string][]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next = policy.Allocations{}
	for id, a := range alloc {
		s.next["default/"+id] = a
	}
}

func (s *scripted) input() policy.Input {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// newFixture returns stand-ins with the given nodes (id → GPUs).
func newFixture(t *testing.T, nodes map[string]int) *fixture {
	t.Helper()
	clock := jobstest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	f := &fixture{
		t: t, clock: clock, cluster: jobstest.NewCluster(clock), kv: jobstest.NewKV(clock),
		lock: jobstest.NewLock(), policy: &scripted{}, cfg: jobs.DefaultConfig(),
	}
	if _, err := f.lock.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		if g, ok := nodes[id]; ok {
			f.cluster.AddNode(id, g)
		}
	}
	return f
}

// controller returns a new controller instance over the fixture's
// stand-ins, fenced by its lock.
func (f *fixture) controller(instance string) *jobs.Controller {
	f.t.Helper()
	return f.controllerOfTerm(instance, 0)
}

// controllerOfTerm is controller for a leader of the given term (0: no
// term known).
func (f *fixture) controllerOfTerm(instance string, term uint64) *jobs.Controller {
	f.t.Helper()
	var cluster jobs.Cluster = f.cluster
	if f.slow {
		cluster = f.cluster.Plain()
	}
	c, err := jobs.New(f.cfg, jobs.Options{
		Cluster: cluster, KV: f.kv, Now: f.clock.Now, Instance: instance, Fence: f.lock.Verify, Term: termOf(term),
		NewPolicy: func(string, registry.Settings) (policy.Policy, error) { return f.policy, nil },
		Traits: func(name string) (registry.Traits, error) {
			if f.traits != nil {
				return *f.traits, nil
			}
			return registry.TraitsOf(name)
		},
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// recordWrites makes the stand-in cluster record each write it is asked
// for as "job=placement", in order, and answer it with fail (nil: accept
// all); the returned function gives the writes so far.
func (f *fixture) recordWrites(fail func(jobs.Change) error) func() []string {
	var mu sync.Mutex
	var order []string
	f.cluster.SetHooks(jobstest.Hooks{BeforeApply: func(ch jobs.Change) error {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, ch.Job.ID+"="+contract.FormatPlacement(ch.Placement))
		if fail != nil {
			return fail(ch)
		}
		return nil
	}})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(order)
	}
}

// termOf is Options.Term for a fixed term (nil for 0).
func termOf(term uint64) func() uint64 {
	if term == 0 {
		return nil
	}
	return func() uint64 { return term }
}

// submit registers a valid Pollux job asking for gpus GPUs.
func (f *fixture) submit(id string, gpus int) jobs.JobRef {
	return f.cluster.Submit(id, map[string]string{
		contract.MetaEnabled: "true", contract.MetaInitBatchSize: "128", contract.MetaInitLR: "0.1",
		contract.MetaMaxBatchSize: "4096", contract.MetaLocalBszMin: "32", contract.MetaLocalBszMax: "1024",
	}, gpus)
}

func (f *fixture) round(c *jobs.Controller) *jobs.Status {
	f.t.Helper()
	st, err := c.Round(context.Background(), true)
	if err != nil {
		f.t.Fatalf("round: %v", err)
	}
	return st
}

func (f *fixture) job(ref jobs.JobRef) jobs.Job {
	f.t.Helper()
	j, ok := f.cluster.Job(ref)
	if !ok {
		f.t.Fatalf("no job %s", ref)
	}
	return j
}

// state reads the job's state document from the KV store.
func (f *fixture) state(ref jobs.JobRef) jobs.State {
	f.t.Helper()
	raw, _, err := f.kv.Get(context.Background(), "jobs/"+ref.Namespace+"/"+ref.ID+"/state")
	if err != nil {
		f.t.Fatalf("state of %s: %v", ref, err)
	}
	var s jobs.State
	if err := json.Unmarshal(raw, &s); err != nil {
		f.t.Fatalf("state of %s: %v", ref, err)
	}
	return s
}

func jobLine(t *testing.T, st *jobs.Status, ref jobs.JobRef) jobs.JobStatus {
	t.Helper()
	for _, j := range st.Jobs {
		if j.Job == ref.String() {
			return j
		}
	}
	t.Fatalf("job %s not in the status: %+v", ref, st.Jobs)
	return jobs.JobStatus{}
}

func placement(s string) []jobs.NodeGPUs {
	var out []jobs.NodeGPUs
	for _, part := range strings.Split(s, ",") {
		node, n, _ := strings.Cut(part, ":")
		out = append(out, jobs.NodeGPUs{Node: node, GPUs: int(n[0] - '0')})
	}
	return out
}

// TestReconcileAfterLostAnswer: Nomad applied a write but its answer was
// lost. The pending write stays recorded, and the next leader finds the
// job at the pending placement and completes the bookkeeping instead of
// writing again; a write that did not happen is decided afresh.
func TestReconcileAfterLostAnswer(t *testing.T) {
	f := newFixture(t, map[string]int{"n1": 4})
	a := f.submit("a", 1)
	f.policy.set(map[string][]string{"a": {"n1", "n1"}})
	lost := errors.New("connection reset by peer")
	f.cluster.SetHooks(jobstest.Hooks{AfterApply: func(jobs.Change) error { return lost }})
	st := f.round(f.controller("first"))
	if line := jobLine(t, st, a); line.Applied || !strings.Contains(line.Error, lost.Error()) {
		t.Fatalf("round with a lost answer: %+v", line)
	}
	written := f.job(a)
	s := f.state(a)
	if s.Pending == nil || s.Pending.ReadIndex >= written.JobModifyIndex || !jobs.SamePlacement(written.Placement, placement("n1:2")) {
		t.Fatalf("after the lost answer: pending %+v, job at %d placed %v", s.Pending, written.JobModifyIndex, written.Placement)
	}

	f.cluster.SetHooks(jobstest.Hooks{})
	next := f.controller("second")
	next.TakeOver(context.Background())
	st = f.round(next)
	s = f.state(a)
	if s.Pending != nil || s.AppliedIndex != written.JobModifyIndex || len(s.Allocation) != 2 || s.Restarts != 0 {
		t.Fatalf("reconciled state: %+v, want the write at %d recorded", s, written.JobModifyIndex)
	}
	if got := f.job(a).JobModifyIndex; got != written.JobModifyIndex || jobLine(t, st, a).Changed {
		t.Fatalf("the job was written again: index %d, was %d", got, written.JobModifyIndex)
	}

	// A write that failed before reaching Nomad is dropped and redone.
	f.policy.set(map[string][]string{"a": {"n1", "n1", "n1"}})
	f.cluster.SetHooks(jobstest.Hooks{BeforeApply: func(jobs.Change) error { return lost }})
	f.round(next)
	if s := f.state(a); s.Pending == nil || f.job(a).JobModifyIndex != written.JobModifyIndex {
		t.Fatalf("failed write: pending %+v, job index %d", s.Pending, f.job(a).JobModifyIndex)
	}
	f.cluster.SetHooks(jobstest.Hooks{})
	third := f.controller("third")
	third.TakeOver(context.Background())
	st = f.round(third)
	s = f.state(a)
	if !jobLine(t, st, a).Applied || s.Pending != nil || s.AppliedIndex != f.job(a).JobModifyIndex || len(s.Allocation) != 3 || s.Restarts != 1 {
		t.Fatalf("after a write that did not happen: %+v, state %+v", jobLine(t, st, a), s)
	}
}

// TestSwapVacatesFirst: two full nodes whose jobs trade places deadlock
// on the stand-in cluster when written directly (as on Nomad); the
// controller stops both first and then places them.
func TestSwapVacatesFirst(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, map[string]int{"n1": 2, "n2": 2})
	a, b := f.submit("a", 2), f.submit("b", 2)
	f.policy.set(map[string][]string{"a": {"n1", "n1"}, "b": {"n2", "n2"}})
	c := f.controller("ctl")
	f.round(c)
	if !jobs.SamePerNode(f.job(a).Running, placement("n1:2")) || !jobs.SamePerNode(f.job(b).Running, placement("n2:2")) {
		t.Fatalf("setup: a runs %v, b runs %v", f.job(a).Running, f.job(b).Running)
	}

	// Written one after the other, the swap never completes.
	direct := newFixture(t, map[string]int{"n1": 2, "n2": 2})
	da, db := direct.submit("a", 2), direct.submit("b", 2)
	for _, w := range []struct {
		ref  jobs.JobRef
		want string
	}{{da, "n2:2"}, {db, "n1:2"}} {
		if _, err := direct.cluster.Apply(ctx, jobs.Change{Job: w.ref, JobModifyIndex: direct.job(w.ref).JobModifyIndex, Placement: placement(w.want)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, ref := range []jobs.JobRef{da, db} {
		if ok, _, _ := direct.cluster.Placed(ctx, ref, 0); ok {
			t.Fatalf("the stand-in placed %s through a swap: it does not model the deadlock", ref)
		}
	}

	f.policy.set(map[string][]string{"a": {"n2", "n2"}, "b": {"n1", "n1"}})
	st := f.round(c)
	for ref, want := range map[jobs.JobRef]string{a: "n2:2", b: "n1:2"} {
		j := f.job(ref)
		if !jobLine(t, st, ref).Applied || !jobs.SamePerNode(j.Running, placement(want)) || !jobs.SamePerNode(j.Placement, placement(want)) {
			t.Fatalf("%s after the swap: %+v, runs %v, spec %v; want %s", ref, jobLine(t, st, ref), j.Running, j.Placement, want)
		}
		if s := f.state(ref); s.Restarts != 1 || s.Pending != nil {
			t.Fatalf("%s state: %+v", ref, s)
		}
	}
}

// TestConflictKeepsOperatorEdit: an operator edits the job between the
// controller's read and its write; the check-and-set refuses the write,
// the edit stays, and the next round decides on the edited job.
func TestConflictKeepsOperatorEdit(t *testing.T) {
	f := newFixture(t, map[string]int{"n1": 4})
	a := f.submit("a", 1)
	f.policy.set(map[string][]string{"a": {"n1", "n1"}})
	f.cluster.SetHooks(jobstest.Hooks{BeforeApply: func(ch jobs.Change) error {
		f.cluster.SetHooks(jobstest.Hooks{})
		return f.cluster.Edit(ch.Job, func(j *jobs.Job) { j.Meta["owner"] = "ops" })
	}})
	c := f.controller("ctl")
	st := f.round(c)
	line := jobLine(t, st, a)
	edited := f.job(a)
	if !line.Conflict || line.Applied || st.Conflicts != 1 || edited.Meta["owner"] != "ops" || len(edited.Placement) != 0 || edited.Meta[contract.MetaRound] != "" {
		t.Fatalf("conflicting round: %+v (conflicts %d), job %+v", line, st.Conflicts, edited)
	}
	if s := f.state(a); s.Pending != nil || s.AppliedIndex != 0 {
		t.Fatalf("state after the conflict: %+v", s)
	}
	st = f.round(c)
	j := f.job(a)
	if !jobLine(t, st, a).Applied || j.Meta["owner"] != "ops" || !jobs.SamePlacement(j.Placement, placement("n1:2")) {
		t.Fatalf("next round: %+v, job %+v", jobLine(t, st, a), j)
	}
}

// TestFenceHoldsWithoutLock: a controller that lost the lock before the
// apply changes nothing; one that loses it during the apply (the agent
// cancels the round) finishes the write in progress and leaves the rest.
func TestFenceHoldsWithoutLock(t *testing.T) {
	// Three GPUs: a's write frees none for b, so b's comes after it (two
	// writes whose GPUs are free go out in parallel).
	f := newFixture(t, map[string]int{"n1": 3})
	a, b := f.submit("a", 1), f.submit("b", 1)
	f.policy.set(map[string][]string{"a": {"n1", "n1"}, "b": {"n1", "n1"}})
	c := f.controller("ctl")
	f.lock.Lose()
	before := f.job(a).JobModifyIndex
	st := f.round(c)
	if len(st.Errors) == 0 || !strings.Contains(st.Errors[0], jobstest.ErrLockLost.Error()) || f.job(a).JobModifyIndex != before ||
		!strings.HasPrefix(jobLine(t, st, a).Error, "held: ") {
		t.Fatalf("round without the lock: errors %v, %+v", st.Errors, jobLine(t, st, a))
	}

	if _, err := f.lock.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.cluster.SetHooks(jobstest.Hooks{AfterApply: func(jobs.Change) error {
		f.lock.Lose()
		cancel() // as the agent does when the lock is lost
		return nil
	}})
	bBefore := f.job(b).JobModifyIndex
	st, err := c.Round(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if !jobLine(t, st, a).Applied || jobLine(t, st, b).Decision != nil || f.job(b).JobModifyIndex != bBefore {
		t.Fatalf("interrupted round: a %+v, b %+v (index %d, was %d)", jobLine(t, st, a), jobLine(t, st, b), f.job(b).JobModifyIndex, bBefore)
	}
	if s := f.state(a); s.Pending != nil || s.AppliedIndex != f.job(a).JobModifyIndex {
		t.Fatalf("the write in progress was not recorded: %+v", s)
	}
	raw, _, err := f.kv.Get(context.Background(), "status")
	var saved jobs.Status
	if err != nil || json.Unmarshal(raw, &saved) != nil || saved.Round != st.Round {
		t.Fatalf("status of the interrupted round: %s, %v", raw, err)
	}
}

// TestJobTurningInvalid: a running job whose meta an operator breaks is
// reported invalid, left untouched, and keeps its GPUs out of the
// policy's hands.
func TestJobTurningInvalid(t *testing.T) {
	f := newFixture(t, map[string]int{"n1": 2})
	a, b := f.submit("a", 1), f.submit("b", 1)
	f.policy.set(map[string][]string{"a": {"n1"}, "b": {"n1"}})
	c := f.controller("ctl")
	f.round(c)
	if err := f.cluster.Edit(a, func(j *jobs.Job) { j.Meta[contract.MetaInitBatchSize] = "lots" }); err != nil {
		t.Fatal(err)
	}
	edited := f.job(a)
	f.policy.set(map[string][]string{"a": {"n1"}, "b": {"n1"}})
	st := f.round(c)
	line := jobLine(t, st, a)
	if line.State != jobs.StateInvalid || !strings.Contains(line.Error, contract.MetaInitBatchSize) {
		t.Fatalf("invalid job: %+v", line)
	}
	if j := f.job(a); j.JobModifyIndex != edited.JobModifyIndex || !jobs.SamePerNode(j.Running, placement("n1:1")) {
		t.Fatalf("the invalid job was touched: index %d (was %d), runs %v", j.JobModifyIndex, edited.JobModifyIndex, j.Running)
	}
	in := f.policy.input()
	if len(in.Jobs) != 1 || in.Jobs[0].ID != b.String() || len(in.Nodes) != 1 || in.Nodes[0].GPUs != 1 {
		t.Fatalf("policy input: jobs %+v, nodes %+v; want only b, and one GPU of n1 (a holds the other)", in.Jobs, in.Nodes)
	}
}

// TestAttainedServiceSaved: the GPU-time a job attains is saved every
// round it holds GPUs, so that a new leader (Tiresias orders by it)
// starts from the right value, not from the last refit or write.
func TestAttainedServiceSaved(t *testing.T) {
	f := newFixture(t, map[string]int{"n1": 2})
	a := f.submit("a", 2)
	f.policy.set(map[string][]string{"a": {"n1", "n1"}})
	c := f.controller("first")
	c.TakeOver(context.Background())
	f.round(c)
	f.clock.Advance(time.Minute)
	f.round(c)
	if got := f.state(a).AttainedService; got != 120 {
		t.Fatalf("saved attained service %g GPU-seconds, want 2 GPUs × 60 s = 120", got)
	}
	next := f.controller("second")
	next.TakeOver(context.Background())
	f.round(next)
	if in := f.policy.input(); len(in.Jobs) != 1 || in.Jobs[0].AttainedService != 120 {
		t.Fatalf("the new leader's policy input: %+v, want attained service 120", in.Jobs)
	}
}

// TestPolicyKeptBetweenRounds: the controller creates its policy by name
// and keeps it (the GA's population, Tiresias' queues) while the settings
// it reads stay; changing them, or the policy, makes a new one.
func TestPolicyKeptBetweenRounds(t *testing.T) {
	f := newFixture(t, map[string]int{"n1": 1})
	var made []string
	c, err := jobs.New(f.cfg, jobs.Options{
		Cluster: f.cluster, KV: f.kv, Now: f.clock.Now,
		NewPolicy: func(name string, s registry.Settings) (policy.Policy, error) {
			made = append(made, name)
			return registry.New(name, s)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.submit("a", 1)
	set := func(mutate func(*jobs.Config)) {
		cfg := c.Config()
		mutate(&cfg)
		if err := c.SetConfig(cfg); err != nil {
			t.Fatal(err)
		}
		f.round(c)
	}
	f.round(c)
	f.round(c)
	set(func(cfg *jobs.Config) { cfg.Interval = time.Hour }) // not a policy setting
	set(func(cfg *jobs.Config) { cfg.Policy = "tiresias" })  // another policy
	set(func(cfg *jobs.Config) { cfg.Population = 20 })      // not Tiresias'
	set(func(cfg *jobs.Config) { cfg.Policy = "pollux" })    // population changed meanwhile
	set(func(cfg *jobs.Config) { cfg.DryRun = true })        // not a policy setting
	if want := []string{"pollux", "tiresias", "pollux"}; !slices.Equal(made, want) {
		t.Fatalf("policies made: %v, want %v", made, want)
	}
}

// TestScaleToZeroWriteAhead: the jobs a round scales to zero (most of a
// large first round) are recorded in batches before any of them is
// written: if the intents cannot be saved, no job is written; a write
// whose answer is lost stays pending and the next round completes it;
// the others end with their zero decision recorded and nothing pending.
func TestScaleToZeroWriteAhead(t *testing.T) {
	f := newFixture(t, map[string]int{"n1": 4})
	var refs []jobs.JobRef
	for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
		refs = append(refs, f.submit(id, 1))
	}
	f.policy.set(nil) // nobody gets GPUs: every job is scaled to zero
	var mu sync.Mutex
	written := map[string]bool{}
	f.cluster.SetHooks(jobstest.Hooks{BeforeApply: func(ch jobs.Change) error {
		mu.Lock()
		defer mu.Unlock()
		written[ch.Job.ID] = true
		return nil
	}})
	f.kv.FailWith(func(op, key string) error {
		if op == "put" && strings.HasSuffix(key, "/state") {
			return errors.New("injected: consul refuses the write")
		}
		return nil
	})
	c := f.controller("ctl")
	st := f.round(c)
	if len(written) != 0 {
		t.Fatalf("jobs written although their intents were not recorded: %v", written)
	}
	for _, r := range refs {
		if line := jobLine(t, st, r); line.Applied || !f.job(r).Unshaped {
			t.Fatalf("%s after a round without write-ahead: %+v, job %+v", r, line, f.job(r))
		}
	}

	f.kv.FailWith(nil)
	f.cluster.SetHooks(jobstest.Hooks{AfterApply: func(ch jobs.Change) error {
		if ch.Job.ID == "c" {
			return errors.New("injected: answer lost")
		}
		return nil
	}})
	f.clock.Advance(time.Minute)
	st = f.round(c)
	for _, r := range refs {
		j := f.job(r)
		if j.Unshaped || len(j.Placement) != 0 {
			t.Errorf("%s: %+v, want scaled to zero", r, j)
		}
		s := f.state(r)
		switch {
		case r.ID == "c" && s.Pending == nil:
			t.Errorf("c: the write whose answer was lost is not pending: %+v", s)
		case r.ID != "c" && (s.Pending != nil || s.AppliedIndex != j.JobModifyIndex || s.Decision == nil || s.Decision.NumReplicas != 0):
			t.Errorf("%s: state %+v after its write (job index %d)", r, s, j.JobModifyIndex)
		case r.ID != "c" && !jobLine(t, st, r).Applied:
			t.Errorf("%s: not reported applied", r)
		}
	}
	f.cluster.SetHooks(jobstest.Hooks{})
	f.clock.Advance(time.Minute)
	f.round(c)
	if s := f.state(refs[2]); s.Pending != nil || s.AppliedIndex != f.job(refs[2]).JobModifyIndex {
		t.Errorf("c after the next round: %+v, want the write completed", s)
	}
}

// TestWritesInWaves: a job that grows into GPUs another job's shrink
// frees is written after that shrink (in the next wave), not stopped
// first; each job is written once.
func TestWritesInWaves(t *testing.T) {
	f := newFixture(t, map[string]int{"n1": 4})
	a, b := f.submit("a", 3), f.submit("b", 1)
	f.policy.set(map[string][]string{"a": {"n1"}, "b": {"n1", "n1", "n1"}})
	writes := f.recordWrites(nil)
	st := f.round(f.controller("ctl"))
	if want, order := []string{"a=n1:1", "b=n1:3"}, writes(); !slices.Equal(order, want) {
		t.Fatalf("writes %v, want %v (the shrink, then the grow into its GPUs)", order, want)
	}
	for _, r := range []jobs.JobRef{a, b} {
		if !jobLine(t, st, r).Applied {
			t.Errorf("%s not applied: %+v", r, jobLine(t, st, r))
		}
	}
}

// TestWriteFailureReplans: when the shrink whose GPUs a growing job needs
// fails, apply plans again from what it saw: the growing job's GPUs are
// still held, so it is stopped first and then placed (Nomad places it
// once they free up), instead of being written as the first plan said.
func TestWriteFailureReplans(t *testing.T) {
	f := newFixture(t, map[string]int{"n1": 4})
	a, b := f.submit("a", 3), f.submit("b", 1)
	f.policy.set(map[string][]string{"a": {"n1"}, "b": {"n1", "n1", "n1"}})
	writes := f.recordWrites(func(ch jobs.Change) error {
		if ch.Job.ID == "a" {
			return errors.New("injected: nomad refuses the write")
		}
		return nil
	})
	st := f.round(f.controller("ctl"))
	if want, order := []string{"a=n1:1", "b=", "b=n1:3"}, writes(); !slices.Equal(order, want) {
		t.Fatalf("writes %v, want %v (the failed shrink, then the grow stopped and placed)", order, want)
	}
	if la, lb := jobLine(t, st, a), jobLine(t, st, b); la.Applied || !lb.Applied {
		t.Errorf("a %+v, b %+v: want a not applied and b applied", la, lb)
	}
}

// TestStatusEffectiveSettings: the status names the leader's term, the policy and, for
// Pollux, its effective settings on the round's cluster: values the
// configuration gives are marked set, the others are the policy's
// defaults for the cluster (a 4-GPU one-type cluster here).
func TestStatusEffectiveSettings(t *testing.T) {
	f := newFixture(t, map[string]int{"n1": 4})
	f.cfg.FairnessP = -0.5
	st := f.round(f.controllerOfTerm("c", 12))
	if st.Term != 12 {
		t.Errorf("status term %d, want the leader's 12", st.Term)
	}
	if st.Policy != "pollux" {
		t.Fatalf("status policy %q, want pollux", st.Policy)
	}
	got := map[string]jobs.EffectiveSetting{}
	for _, s := range st.Settings {
		got[s.Key] = s
	}
	if s := got["fairness_p"]; s.Value != "-0.5" || !s.Set {
		t.Errorf("fairness_p %+v, want -0.5, set", s)
	}
	if s, ok := got["pollux.growth_hysteresis"]; !ok || s.Set || s.Value == "" {
		t.Errorf("pollux.growth_hysteresis %+v (listed %v), want the regime's default, not set", s, ok)
	}

	f.cfg.Policy = "tiresias"
	st = f.round(f.controller("c2"))
	if st.Policy != "tiresias" || len(st.Settings) != 0 {
		t.Errorf("tiresias: policy %q, %d settings; want tiresias and none (Pollux's only)", st.Policy, len(st.Settings))
	}
}

// TestReconcileNeverAdoptsAnotherTerm: a write recorded as pending by
// term 5 whose answer was lost; the job's version then carries the term
// that wrote it. A new leader completes the bookkeeping only when that is
// term 5; a version of another term (a deposed leader's late write, say)
// is never adopted as this write: the pending record is dropped and the
// job decided again.
func TestReconcileNeverAdoptsAnotherTerm(t *testing.T) {
	for _, tc := range []struct {
		name, term string
		adopt      bool
	}{{"same term", "5", true}, {"another term", "7", false}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, map[string]int{"n1": 4})
			a := f.submit("a", 1)
			f.policy.set(map[string][]string{"a": {"n1", "n1"}})
			lost := errors.New("connection reset by peer")
			f.cluster.SetHooks(jobstest.Hooks{AfterApply: func(jobs.Change) error { return lost }})
			f.round(f.controllerOfTerm("first", 5))
			f.cluster.SetHooks(jobstest.Hooks{})
			if p := f.state(a).Pending; p == nil || p.Term != 5 {
				t.Fatalf("pending %+v, want a record of term 5", p)
			}
			// The job's version says which term wrote it (the Nomad adapter
			// sets pollux_term with every registration).
			if err := f.cluster.Edit(a, func(j *jobs.Job) { j.Meta[contract.MetaTerm] = tc.term }); err != nil {
				t.Fatal(err)
			}
			version := f.job(a).JobModifyIndex
			next := f.controllerOfTerm("second", 8)
			next.TakeOver(context.Background())
			f.round(next)
			s := f.state(a)
			if s.Pending != nil {
				t.Fatalf("pending %+v after the new leader's round", s.Pending)
			}
			if adopted := s.AppliedIndex == version; adopted != tc.adopt {
				t.Errorf("job version %d of term %s: adopted %v (state applied at %d), want %v", version, tc.term, adopted, s.AppliedIndex, tc.adopt)
			}
		})
	}
}

// TestPolicyGetsEveryKnob: the controller hands the policy the Pollux
// configuration the agent's configuration asks for (Config.PolluxConfig),
// knobs of the pollux block included, and "off" for restart_penalty 0.
func TestPolicyGetsEveryKnob(t *testing.T) {
	f := newFixture(t, map[string]int{"n1": 4})
	f.cfg.Pollux.GrowthHysteresis = 0.2
	f.cfg.Pollux.StallGenerations = 7
	f.cfg.RestartPenalty = 0
	var got registry.Settings
	c, err := jobs.New(f.cfg, jobs.Options{Cluster: f.cluster, KV: f.kv, Now: f.clock.Now, Instance: "c", Fence: f.lock.Verify,
		NewPolicy: func(_ string, s registry.Settings) (policy.Policy, error) { got = s; return f.policy, nil }})
	if err != nil {
		t.Fatal(err)
	}
	f.round(c)
	if p := got.Pollux; p.GrowthHysteresis != 0.2 || p.StallGenerations != 7 || p.RestartPenalty >= 0 {
		t.Errorf("policy settings %+v, want growth hysteresis 0.2, 7 stall generations and the restart penalty off (negative)", p)
	}
}
