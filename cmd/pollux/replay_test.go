package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestSimulateRecordAndReplay records the rounds of a simulated workload
// the project did not write (the Sia artifact's sia-philly-1, on its
// 3-type cluster) and replays them: every round decides the same (exit
// 0); a record whose decision was changed is reported with the job that
// differs (exit 1); a file that is not a record is refused (exit 2).
func TestSimulateRecordAndReplay(t *testing.T) {
	dir := t.TempDir()
	args := []string{"simulate", "-workload", "sia-philly-1", "-cluster", "t4:6x4,rtx2080ti:3x8,a100:2x8", "-rules", "sia", "-policy", "pollux", "-json", "-record-rounds", dir}
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("simulate: %v\n%s", err, stderr.String())
	}
	files, err := filepath.Glob(filepath.Join(dir, "pollux", "round-*.json"))
	if err != nil || len(files) < 10 {
		t.Fatalf("%d records (%v), want one per round", len(files), err)
	}
	stdout.Reset()
	if err := run(context.Background(), []string{"replay", "-q", filepath.Join(dir, "pollux")}, &stdout, &stderr); err != nil {
		t.Fatalf("replay: %v\n%s", err, stdout.String())
	}
	if !strings.Contains(stdout.String(), "every decision the recorded one") {
		t.Errorf("replay printed %q", stdout.String())
	}

	// Change one job's recorded decision in a round that gave jobs GPUs.
	sort.Strings(files)
	var tampered, job string
	for _, f := range files[len(files)/2:] {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		dec, _ := doc["decision"].(map[string]any)
		for id := range dec {
			if job == "" || id < job {
				job = id
			}
		}
		if job == "" {
			continue
		}
		delete(dec, job)
		out, _ := json.Marshal(doc)
		tampered = filepath.Join(t.TempDir(), "round.json")
		if err := os.WriteFile(tampered, out, 0o644); err != nil {
			t.Fatal(err)
		}
		break
	}
	if tampered == "" {
		t.Fatal("no recorded round gave a job GPUs")
	}
	stdout.Reset()
	err = run(context.Background(), []string{"replay", tampered}, &stdout, &stderr)
	if exitCode(err) != 1 || !strings.Contains(stdout.String(), job+": recorded []") {
		t.Errorf("replay of a changed record: exit %d, output %q; want exit 1 naming %s", exitCode(err), stdout.String(), job)
	}
	err = run(context.Background(), []string{"replay", writeFile(t, "x.json", `{"policy": "pollux"}`)}, &stdout, &stderr)
	if exitCode(err) != 2 || !strings.Contains(err.Error(), "record version 0") {
		t.Errorf("replay of a non-record: exit %d, %v; want exit 2 naming the version", exitCode(err), err)
	}
}
