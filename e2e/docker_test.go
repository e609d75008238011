package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"
)

// trainImage is the example job's image, built locally by
// scripts/build-train-image.sh (make test and CI build it).
func trainImage() string {
	if v := os.Getenv("POLLUX_TRAIN_IMAGE"); v != "" {
		return v
	}
	return "pollux-train:local"
}

func requireDockerImage(t *testing.T) {
	t.Helper()
	if out, err := exec.Command("docker", "image", "inspect", "-f", "{{.Id}}", trainImage()).CombinedOutput(); err != nil {
		t.Fatalf("no image %s (scripts/install-docker.sh, then scripts/build-train-image.sh): %v\n%s", trainImage(), err, out)
	}
}

// hclVars renders variables as the content of a variables file.
func hclVars(vars map[string]any) string {
	var b strings.Builder
	for k, v := range vars {
		raw, _ := json.Marshal(v) // strings, numbers and lists of strings: JSON is valid HCL for them
		fmt.Fprintf(&b, "%s = %s\n", k, raw)
	}
	return b.String()
}

// TestExampleJobInDocker runs deploy/examples/train.nomad.hcl as it is,
// with the docker driver on a dedicated two-client cluster: only its
// variables are set (the local image, the fake GPU device, the cluster's
// Consul address, CPU-sized resources, a training log). The rendezvous
// goes through the mapped "pollux" port, the checkpoint lives on the
// "pollux-checkpoints" host volume, and the controller rescales the job
// from 1 GPU to 5 on both nodes and back to at most 2, as in
// TestTorchTraining, with the same checks: one process group of the
// decided size per allocation, no lost or repeated step or epoch, the
// controller's batch size and learning rate, and accuracy >= 0.9.
func TestExampleJobInDocker(t *testing.T) {
	requireDockerImage(t)
	c := startCluster(t, clusterOptions{Clients: 2, Env: []string{"POLLUX_DOCKER=1"}})
	e := newEnvOn(t, c)

	spec, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "examples", "train.nomad.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	// More epochs than TestTorchTraining: a container's restart takes
	// longer (measured here: up to two minutes on a loaded machine), and at
	// 5 replicas the job must not finish before the shrink is applied.
	const epochs = 60
	job, err := e.nomad.Jobs().ParseHCLOpts(&nomadapi.JobsParseRequest{
		JobHCL: string(spec),
		Variables: hclVars(map[string]any{
			"image":       trainImage(),
			"gpu_device":  e.device,
			"consul_addr": c.env["CONSUL_HTTP_ADDR"],
			"kv_prefix":   e.prefix,
			"epochs":      epochs,
			"train_args":  []string{"--step-delay", "0.1"},
			"cpu":         200,
			"memory":      2048,
			"train_log":   "/checkpoints/train.jsonl",
		}),
		Canonicalize: true,
	})
	if err != nil {
		t.Fatalf("parsing deploy/examples/train.nomad.hcl: %v", err)
	}
	id := *job.ID
	// The controller steers the sizes through the author's bounds, as in
	// TestTorchTraining; everything else is the file's.
	job.Meta["pollux_min_gpus"], job.Meta["pollux_max_gpus"] = "1", "1"
	if _, _, err := e.nomad.Jobs().Register(job, nil); err != nil {
		t.Fatalf("registering the example job: %v", err)
	}
	e.jobs = append(e.jobs, id)
	t.Cleanup(func() {
		if t.Failed() {
			e.dumpTaskLogs(id)
		}
	})
	// The host volume is <cluster dir>/checkpoints on every client.
	e.rescaleDigits(id, filepath.Join(c.dir, "checkpoints", "train.jsonl"), epochs)
}
