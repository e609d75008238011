package model

import (
	"encoding/csv"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// apps are the six applications of the Pollux artifact's traces.
var apps = []string{"bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"}

// traceRow is one row of an artifact placements.csv.
type traceRow struct {
	placement          string
	nodes, replicas    int
	localBsz           float64
	stepTime, syncTime float64
}

// point is the row as the artifact simulator profiles it (Job.update_params):
// accumulation-step time = step_time − sync_time, optim-step time =
// step_time.
func (r traceRow) point() ProfilePoint {
	return ProfilePoint{
		Nodes: r.nodes, Replicas: r.replicas, LocalBsz: r.localBsz,
		AccumStepTime: r.stepTime - r.syncTime, OptimStepTime: r.stepTime,
	}
}

// readPlacements reads data/traces/<app>/placements.csv
// (placement,local_bsz,step_time,sync_time; a placement is one digit per
// node, the GPUs used there).
func readPlacements(tb testing.TB, app string) []traceRow {
	tb.Helper()
	path := filepath.Join("..", "data", "traces", app, "placements.csv")
	f, err := os.Open(path)
	if err != nil {
		tb.Fatalf("failed to open %s: %v", path, err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		tb.Fatalf("failed to read %s: %v", path, err)
	}
	var rows []traceRow
	for i, rec := range recs[1:] {
		r := traceRow{placement: rec[0]}
		for _, c := range rec[0] {
			if c != '0' {
				r.nodes++
				r.replicas += int(c - '0')
			}
		}
		vals := make([]float64, 3)
		for j := range vals {
			if vals[j], err = strconv.ParseFloat(rec[j+1], 64); err != nil {
				tb.Fatalf("%s line %d: %v", path, i+2, err)
			}
		}
		r.localBsz, r.stepTime, r.syncTime = vals[0], vals[1], vals[2]
		rows = append(rows, r)
	}
	return rows
}

// firstPoints returns one point per distinct (N, K, m), the first row in
// file order, as the artifact simulator keeps the first observation.
func firstPoints(rows []traceRow) []ProfilePoint {
	type key struct {
		n, k int
		m    float64
	}
	seen := map[key]bool{}
	var pts []ProfilePoint
	for _, r := range rows {
		k := key{r.nodes, r.replicas, r.localBsz}
		if seen[k] {
			continue
		}
		seen[k] = true
		pts = append(pts, r.point())
	}
	return pts
}

func allPoints(rows []traceRow) []ProfilePoint {
	pts := make([]ProfilePoint, len(rows))
	for i, r := range rows {
		pts[i] = r.point()
	}
	return pts
}
