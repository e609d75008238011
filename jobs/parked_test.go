package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
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

// parkedCluster is the in-memory cluster with ReadParked: it records the
// index each job was asked about and reads the job as ReadJob does.
type parkedCluster struct {
	*jobstest.Cluster
	mu    sync.Mutex
	asked map[jobs.JobRef]uint64
}

func (p *parkedCluster) ReadParked(ctx context.Context, ref jobs.JobRef, at uint64) (jobs.Job, error) {
	p.mu.Lock()
	p.asked[ref] = at
	p.mu.Unlock()
	return p.ReadJob(ctx, ref)
}

func (p *parkedCluster) reset() map[jobs.JobRef]uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.asked
	p.asked = map[jobs.JobRef]uint64{}
	return a
}

// TestReadParked: a round asks the cluster to describe from its list the
// jobs the controller's last write scaled to zero, at that write's index,
// from the state in memory and, for a new leader, from the state in
// Consul; not the jobs that hold GPUs, that were never written, or whose
// last write is still pending.
func TestReadParked(t *testing.T) {
	f := newFixture(t, map[string]int{"n1": 2})
	pc := &parkedCluster{Cluster: f.cluster, asked: map[jobs.JobRef]uint64{}}
	newController := func(instance string) *jobs.Controller {
		c, err := jobs.New(f.cfg, jobs.Options{
			Cluster: pc, KV: f.kv, Now: f.clock.Now, Instance: instance, Fence: f.lock.Verify,
			NewPolicy: func(string, registry.Settings) (policy.Policy, error) { return f.policy, nil },
			Traits:    registry.TraitsOf,
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	refs := make([]jobs.JobRef, 6)
	for i := range refs {
		refs[i] = f.submit(fmt.Sprintf("p%d", i), 1)
	}
	f.policy.set(map[string][]string{"p0": {"n1"}, "p1": {"n1"}})
	one := newController("one")
	one.TakeOver(context.Background())
	f.round(one)
	if a := pc.reset(); len(a) != 0 {
		t.Fatalf("first round asked about %v; no job was written before it", a)
	}
	for _, ref := range refs[2:] {
		if j := f.job(ref); len(j.Placement) != 0 || j.Unshaped {
			t.Fatalf("%s after the first round: %+v, want scaled to zero", ref, j)
		}
	}

	check := func(name string, c *jobs.Controller, skip map[jobs.JobRef]bool) {
		t.Helper()
		f.round(c)
		asked := pc.reset()
		for _, ref := range refs {
			at, ok := asked[ref]
			switch {
			case ref == refs[0] || ref == refs[1] || skip[ref]:
				if ok {
					t.Errorf("%s: asked to describe %s (at %d) from the list", name, ref, at)
				}
			case !ok:
				t.Errorf("%s: %s not described from the list", name, ref)
			case at != f.state(ref).AppliedIndex || at == 0:
				t.Errorf("%s: %s asked at index %d, its state says %d", name, ref, at, f.state(ref).AppliedIndex)
			}
		}
	}
	check("steady round", one, nil)

	// A new leader knows only what Consul holds.
	two := newController("two")
	two.TakeOver(context.Background())
	check("new leader's first round", two, nil)

	// A write recorded but not confirmed: the job is read in full.
	raw, _, err := f.kv.Get(context.Background(), "jobs/default/p5/state")
	if err != nil {
		t.Fatal(err)
	}
	var st jobs.State
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	st.Pending = &jobs.PendingApply{Round: 99, ReadIndex: st.AppliedIndex}
	pending, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.kv.Put(context.Background(), "jobs/default/p5/state", pending); err != nil {
		t.Fatal(err)
	}
	three := newController("three")
	three.TakeOver(context.Background())
	check("pending write", three, map[jobs.JobRef]bool{refs[5]: true})
}

// TestParkBudget: a round that must scale more queued jobs to zero than
// its budget allows writes them a chunk at a time, the jobs that hold no
// GPUs first, and defers every other change (a job that runs would free
// GPUs Nomad could give a queued job) until none is left; the rounds
// after it finish the work, and then the deferred changes are written.
func TestParkBudget(t *testing.T) {
	f := newFixture(t, map[string]int{"n1": 2})
	c, err := jobs.New(f.cfg, jobs.Options{
		Cluster: f.cluster, KV: f.kv, Now: f.clock.Now, Instance: "one", Fence: f.lock.Verify,
		NewPolicy:  func(string, registry.Settings) (policy.Policy, error) { return f.policy, nil },
		Traits:     registry.TraitsOf,
		ParkBudget: time.Nanosecond, // one chunk a round
	})
	if err != nil {
		t.Fatal(err)
	}
	c.TakeOver(context.Background())
	const n = 300
	refs := make([]jobs.JobRef, n)
	for i := range refs {
		refs[i] = f.submit(fmt.Sprintf("p%03d", i), 1)
	}
	// Nomad ran the first two; the policy keeps p000, stops p001 and
	// gives its GPU to p002, which Nomad queued.
	f.policy.set(map[string][]string{"p000": {"n1"}, "p002": {"n1"}})
	parked := func() (queued, zero int) {
		for _, ref := range refs[3:] {
			if j := f.job(ref); j.Unshaped {
				queued++
			} else if len(j.Placement) == 0 {
				zero++
			}
		}
		return queued, zero
	}
	deferred := func(st *jobs.Status, id string) bool {
		for _, j := range st.Jobs {
			if j.Job == "default/"+id {
				return strings.HasPrefix(j.Error, "deferred: ") && !j.Applied && j.Explain != nil && j.Explain.Reason == contract.ReasonHeld
			}
		}
		t.Fatalf("no status line for %s", id)
		return false
	}
	want := n - 3
	for round := 1; ; round++ {
		st := f.round(c)
		queued, zero := parked()
		if queued+zero != want {
			t.Fatalf("round %d: %d queued + %d at zero, want %d jobs", round, queued, zero, want)
		}
		if queued > 0 {
			if zero != round*128 {
				t.Errorf("round %d: %d jobs at zero, want %d (one chunk a round)", round, zero, round*128)
			}
			if len(f.job(refs[1]).Running) != 1 || len(f.job(refs[2]).Running) != 0 {
				t.Fatalf("round %d: p001 runs %v, p002 runs %v while jobs are still queued; want them unchanged", round, f.job(refs[1]).Running, f.job(refs[2]).Running)
			}
			if !deferred(st, "p001") || !deferred(st, "p002") {
				t.Errorf("round %d: the changes of p001 and p002 are not reported deferred", round)
			}
			continue
		}
		if deferred(st, "p001") || deferred(st, "p002") {
			t.Errorf("round %d: changes still deferred with no job queued", round)
		}
		if len(f.job(refs[1]).Running) != 0 || len(f.job(refs[2]).Running) != 1 || len(f.job(refs[0]).Running) != 1 {
			t.Errorf("round %d: p000 %v, p001 %v, p002 %v; want p000 and p002 on n1, p001 stopped", round, f.job(refs[0]).Running, f.job(refs[1]).Running, f.job(refs[2]).Running)
		}
		if round != 3 {
			t.Errorf("the queued jobs were scaled to zero in %d rounds, want 3 (297 in chunks of 128)", round)
		}
		break
	}
}

// TestFastAndSlowPaths: the same rounds over the stand-in cluster with
// its fast-path readers (jobs Nomad queued and jobs the controller
// parked described from the job list) and without them (every job read)
// end with the same jobs and the same status lines; the fast path is
// taken for the queued jobs of the first round, the parked ones of the
// next, and a new leader invalidates what the cluster cached.
func TestFastAndSlowPaths(t *testing.T) {
	type outcome struct {
		jobs  []string
		lines []string
		fast  jobstest.FastReads
	}
	run := func(slow bool) outcome {
		f := newFixture(t, map[string]int{"n1": 2})
		f.slow = slow
		refs := make([]jobs.JobRef, 6)
		for i := range refs {
			refs[i] = f.submit(fmt.Sprintf("p%d", i), 1)
		}
		// Nomad runs p0 and p1; the policy keeps p0, stops p1 and gives
		// its GPU to p2, which Nomad queued.
		f.policy.set(map[string][]string{"p0": {"n1"}, "p2": {"n1"}})
		var out outcome
		c := f.controller("one")
		c.TakeOver(context.Background())
		for round := range 3 {
			if round == 2 {
				c = f.controller("two")
				c.TakeOver(context.Background())
			}
			st := f.round(c)
			for _, l := range st.Jobs {
				out.lines = append(out.lines, fmt.Sprintf("%d %s %s gpus=%d applied=%v changed=%v error=%q", round, l.Job, l.State, l.GPUs, l.Applied, l.Changed, l.Error))
			}
			f.clock.Advance(time.Minute)
		}
		for _, ref := range refs {
			j := f.job(ref)
			// Not the index: parallel writes land in any order.
			out.jobs = append(out.jobs, fmt.Sprintf("%s placement=%s running=%s unshaped=%v", ref.ID,
				contract.FormatPlacement(j.Placement), contract.FormatPlacement(j.Running), j.Unshaped))
		}
		out.fast = f.cluster.FastReads()
		return out
	}
	fast, slow := run(false), run(true)
	if strings.Join(fast.jobs, "\n") != strings.Join(slow.jobs, "\n") {
		t.Errorf("jobs differ:\nfast path:\n%s\nslow path:\n%s", strings.Join(fast.jobs, "\n"), strings.Join(slow.jobs, "\n"))
	}
	if strings.Join(fast.lines, "\n") != strings.Join(slow.lines, "\n") {
		t.Errorf("status lines differ:\nfast path:\n%s\nslow path:\n%s", strings.Join(fast.lines, "\n"), strings.Join(slow.lines, "\n"))
	}
	// Round 0: p2..p5 queued (Nomad had no GPU for them). Rounds 1 and
	// 2: p1, p3..p5 parked, each round. Each leader's TakeOver found
	// another's term (or none): two invalidations.
	if want := (jobstest.FastReads{Queued: 4, Parked: 8, Invalidated: 2}); fast.fast != want {
		t.Errorf("fast path: %+v, want %+v", fast.fast, want)
	}
	if slow.fast != (jobstest.FastReads{}) {
		t.Errorf("slow path used the fast readers: %+v", slow.fast)
	}
}
