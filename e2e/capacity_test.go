package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/pollux-nomad/pollux/contract"
)

// TestMoreJobsThanGPUs: three tagged jobs that each need at least 4 GPUs
// on 8 GPUs. Each runs as submitted (1 GPU); the policy can give only two
// of them 4 GPUs, so the third gets none and must be scaled to zero: as
// submitted it would keep a GPU the policy gave to another job, whose
// allocation would then never be placed. (Found by the load test: jobs
// left unshaped kept their GPUs.)
func TestMoreJobsThanGPUs(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	var ids []string
	for range 3 {
		id := e.registerJob("big", map[string]string{"pollux_min_gpus": "4"})
		e.putMetrics(id, e.profileDoc("cifar10", []int{1}, []int{2}, []int{4}))
		ids = append(ids, id)
	}
	e.waitAsSubmitted(t, ids...)
	c := e.controller("capacity", nil)
	st, err := c.Round(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	placed, zero := 0, ""
	for _, id := range ids {
		js := jobStatus(t, st, id)
		if js.Decision == nil {
			t.Fatalf("%s: no decision: %+v", id, js)
		}
		switch js.GPUs {
		case 0:
			zero = id
			if !js.Applied {
				t.Errorf("%s: given 0 GPUs but not rewritten (it still asks for 1 GPU): %+v", id, js)
			}
		default:
			placed++
			if js.GPUs < 4 {
				t.Errorf("%s: %d GPUs, below its minimum 4", id, js.GPUs)
			}
		}
	}
	if placed != 2 || zero == "" {
		t.Fatalf("round gave %d jobs GPUs and none to %q; want 2 placed and one at zero: %+v", placed, zero, st.Jobs)
	}
	// Nomad runs the two placed jobs as decided and nothing of the third.
	for _, id := range ids {
		if id == zero {
			continue
		}
		got := e.waitPlaced(t, id, 90*time.Second)
		t.Logf("%s placed on %s", id, contract.FormatPlacement(got))
	}
	for deadline := time.Now().Add(60 * time.Second); ; {
		j, err := e.cluster.ReadJob(ctx, ref(zero))
		if err == nil && len(j.Running) == 0 && !j.Unshaped && len(j.Placement) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still running %v (unshaped %v, err %v), want scaled to zero", zero, j.Running, j.Unshaped, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// The next round leaves the zero-GPU job alone (nothing more to write).
	st, err = c.Round(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if js := jobStatus(t, st, zero); js.Changed || js.Applied || js.State != contract.StateScheduled {
		t.Errorf("round 2: the zero-GPU job %+v, want scheduled and left alone", js)
	}
	// Nomad calls a batch job with no allocations dead; the controller
	// must still schedule it: when another job ends, it gets the GPUs.
	var gone string
	for _, id := range ids {
		if id != zero {
			gone = id
			break
		}
	}
	if _, _, err := e.nomad.Jobs().Deregister(gone, true, nil); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; {
		if got, _ := e.devicesPerNode(ctx, gone); len(got) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still runs after its purge", gone)
		}
		time.Sleep(300 * time.Millisecond)
	}
	// A purged job's allocations keep DesiredStatus "run" until Nomad has
	// processed the purge, while its own allocation list is already gone:
	// for a moment its GPUs still count as held by a job outside Pollux.
	// The controller places the waiting job in the first round that sees
	// them free.
	var js contract.JobStatus
	for round := 1; ; round++ {
		st, err = c.Round(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		js = jobStatus(t, st, zero)
		if js.Applied || round == 5 {
			break
		}
		time.Sleep(time.Second)
	}
	if js.State != contract.StateScheduled || !js.Applied || js.GPUs < 4 {
		t.Fatalf("after %s ended, the zero-GPU job: %+v, want scheduled and placed on at least 4 GPUs within 5 rounds", gone, js)
	}
	got := e.waitPlaced(t, zero, 90*time.Second)
	t.Logf("%s placed on %s once %s ended", zero, contract.FormatPlacement(got), gone)
}
