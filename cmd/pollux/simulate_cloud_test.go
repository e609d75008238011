package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSimulateAutoscale(t *testing.T) {
	w := writeFile(t, "small.csv", header+
		"cifar10-0,0,cifar10,2,512\n"+
		"ncf-1,30,ncf,1,2048\n"+
		"bert-2,100,bert,4,48\n")
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := []string{"simulate", "-workload", w, "-policy", "pollux,tiresias", "-autoscale", "0:4", "-node-boot", "2m", "-gpu-price", "2.5", "-json", "-out", out}
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("simulate: %v\n%s", err, stderr.String())
	}
	dec := json.NewDecoder(&stdout)
	n := 0
	for dec.More() {
		var s map[string]any
		if err := dec.Decode(&s); err != nil {
			t.Fatal(err)
		}
		n++
		gh, _ := s["gpu_hours"].(float64)
		cost, _ := s["cost"].(float64)
		if gh <= 0 || s["completed"] != 3.0 {
			t.Errorf("%v: want 3 jobs completed and gpu_hours > 0", s)
		}
		if d := cost - 2.5*gh; d > 1e-9 || d < -1e-9 {
			t.Errorf("cost %v, want 2.5 x gpu_hours %v", cost, gh)
		}
	}
	if n != 2 {
		t.Errorf("%d summaries, want 2", n)
	}
	if _, err := os.Stat(filepath.Join(out, "cluster-size.png")); err != nil {
		t.Errorf("no cluster-size plot: %v", err)
	}
}

func TestSimulateAutoscaleBadFlags(t *testing.T) {
	w := writeFile(t, "small.csv", header+"a,0,bert,1,12\n")
	for args, want := range map[string]string{
		"-autoscale 5:2":                       `-autoscale "5:2": want MIN:MAX`,
		"-autoscale x":                         `-autoscale "x"`,
		"-autoscale 0:4 -autoscale-band .7:.6": `-autoscale-band ".7:.6": want LOW:HIGH with 0 < LOW < HIGH < 1`,
		"-autoscale 0:4 -autoscale-band 0:1":   `-autoscale-band "0:1"`,
		"-gpu-price 3":                         "-gpu-price needs -autoscale",
		"-autoscale 0:4 -gpu-price a100=x":     `-gpu-price part "a100=x"`,
		"-autoscale 0:4 -autoscale-rule mean":  `rule: unknown "mean"`,
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), append([]string{"simulate", "-workload", w}, strings.Fields(args)...), &stdout, &stderr)
		var ee *exitError
		if err == nil || !strings.Contains(err.Error(), want) || !errors.As(err, &ee) || ee.code != 2 {
			t.Errorf("%s: got %v, want exit 2 with %q", args, err, want)
		}
	}
}
