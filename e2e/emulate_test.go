package e2e

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/pollux-nomad/pollux/emulate"
)

// TestEmulatedJobResumes: a `pollux emulate`
// task trains BERT at 200x speed, reporting real metrics; the controller
// then reallocates it, which restarts the task; the new incarnation
// resumes from its checkpoint and the job completes with exit code 0.
func TestEmulatedJobResumes(t *testing.T) {
	e := newEnv(t)
	bin := polluxBinary(t)
	id := e.registerJob("emu", map[string]string{
		"pollux_init_batch_size": "12", "pollux_max_batch_size": "384",
		"pollux_local_bsz_min": "4", "pollux_local_bsz_max": "12",
	})
	// Turn the test job's worker into an emulated trainer.
	job, _, err := e.nomad.Jobs().Info(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	task := job.TaskGroups[0].Tasks[0]
	task.Config = map[string]any{"command": bin, "args": []string{"emulate", "-app", "bert", "-speedup", "200", "-kv-prefix", e.prefix, "-report-interval", "500ms"}}
	task.Env = map[string]string{"CONSUL_HTTP_ADDR": os.Getenv("CONSUL_HTTP_ADDR")}
	if _, _, err := e.nomad.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
	key := e.prefix + "jobs/default/" + id + "/checkpoint"
	checkpoint := func() emulate.Checkpoint {
		var cp emulate.Checkpoint
		pair, _, err := e.consul.KV().Get(key, nil)
		if err == nil && pair != nil {
			_ = json.Unmarshal(pair.Value, &cp)
		}
		return cp
	}
	// Let it train on the GPU Nomad gave it, reporting metrics.
	deadline := time.Now().Add(60 * time.Second)
	for checkpoint().Progress <= 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the emulated job made no progress: checkpoint %+v", checkpoint())
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	if _, _, err := e.kv.Get(context.Background(), "jobs/default/"+id+"/metrics"); err != nil {
		t.Fatalf("the emulated job reported no metrics: %v", err)
	}
	// The controller reallocates it (its first shaping restarts the task).
	c := e.controller("emu", nil)
	st, err := c.Round(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	js := jobStatus(t, st, id)
	if !js.Applied {
		t.Fatalf("the controller did not reallocate the job: %+v", js)
	}
	t.Logf("reallocated to %s (batch %d)", js.Decision.Placement, js.Decision.BatchSize)
	// It completes, having resumed from its checkpoint.
	deadline = time.Now().Add(3 * time.Minute)
	for !checkpoint().Done {
		if time.Now().After(deadline) {
			t.Fatalf("the emulated job did not complete: checkpoint %+v", checkpoint())
		}
		time.Sleep(500 * time.Millisecond)
	}
	cp := checkpoint()
	t.Logf("checkpoint at completion: %+v", cp)
	if cp.Starts < 2 || cp.ResumedFrom <= 0 {
		t.Errorf("checkpoint %+v: want a restart that resumed from earlier progress", cp)
	}
	// Every allocation of the final shape exits successfully.
	for time.Now().Before(deadline) {
		allocs, _, err := e.nomad.Jobs().Allocations(id, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		complete, running := 0, 0
		for _, a := range allocs {
			switch a.ClientStatus {
			case nomadapi.AllocClientStatusComplete:
				complete++
			case nomadapi.AllocClientStatusRunning, nomadapi.AllocClientStatusPending:
				if a.DesiredStatus == "run" {
					running++
				}
			case nomadapi.AllocClientStatusFailed:
				if a.DesiredStatus == "run" {
					t.Fatalf("allocation %s failed", a.ID)
				}
			}
		}
		if running == 0 && complete > 0 {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Errorf("the job's allocations did not all complete")
}
