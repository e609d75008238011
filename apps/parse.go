package apps

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"strconv"
	"strings"
)

// table is a parsed CSV file: the named columns of every data row, and the
// file line of each row, for error messages.
type table struct {
	name  string
	cols  map[string]int
	rows  [][]string
	lines []int
}

// readTable reads the CSV file at path in fsys, requiring the named columns
// (in any order; other columns are ignored) and at least one data row.
func readTable(fsys fs.FS, path string, required ...string) (*table, error) {
	f, err := fsys.Open(path)
	if err != nil {
		return nil, fmt.Errorf("failed to open %s: %w", path, err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1 // checked below, with a clearer message
	r.ReuseRecord = false
	header, err := r.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: empty file", path)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t := &table{name: path, cols: map[string]int{}}
	for i, h := range header {
		t.cols[strings.TrimSpace(h)] = i
	}
	for _, c := range required {
		if _, ok := t.cols[c]; !ok {
			return nil, fmt.Errorf("%s:1: missing column %q in header %q", path, c, strings.Join(header, ","))
		}
	}
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		line, _ := r.FieldPos(0)
		if len(rec) != len(header) {
			return nil, fmt.Errorf("%s:%d: want %d fields, got %d", path, line, len(header), len(rec))
		}
		t.rows = append(t.rows, rec)
		t.lines = append(t.lines, line)
	}
	if len(t.rows) == 0 {
		return nil, fmt.Errorf("%s: no data rows", path)
	}
	return t, nil
}

// str returns column col of row i.
func (t *table) str(i int, col string) string {
	return strings.TrimSpace(t.rows[i][t.cols[col]])
}

// float parses column col of row i as a finite number.
func (t *table) float(i int, col string) (float64, error) {
	s := t.str(i, col)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%s:%d: %s: not a number %q", t.name, t.lines[i], col, s)
	}
	return v, nil
}

// nonNegative parses column col of row i as a finite number ≥ 0.
func (t *table) nonNegative(i int, col string) (float64, error) {
	v, err := t.float(i, col)
	if err == nil && v < 0 {
		err = fmt.Errorf("%s:%d: %s: negative value %v", t.name, t.lines[i], col, v)
	}
	return v, err
}

// positiveInt parses column col of row i as an integer ≥ 1.
func (t *table) positiveInt(i int, col string) (int, error) {
	s := t.str(i, col)
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%s:%d: %s: not an integer %q", t.name, t.lines[i], col, s)
	}
	if v < 1 {
		return 0, fmt.Errorf("%s:%d: %s: want a positive integer, got %d", t.name, t.lines[i], col, v)
	}
	return v, nil
}

// placementRow is one row of placements.csv.
type placementRow struct {
	placement          string // one digit per node: its GPUs
	localBsz           int
	stepTime, syncTime float64
}

// numReplicas returns the total GPUs of the row's placement.
func (r placementRow) numReplicas() int {
	k := 0
	for _, c := range r.placement {
		k += int(c - '0')
	}
	return k
}

// readPlacements parses placements.csv, in file order.
func readPlacements(fsys fs.FS, path string) ([]placementRow, error) {
	t, err := readTable(fsys, path, "placement", "local_bsz", "step_time", "sync_time")
	if err != nil {
		return nil, err
	}
	out := make([]placementRow, len(t.rows))
	for i := range t.rows {
		r := &out[i]
		r.placement = t.str(i, "placement")
		if r.placement == "" || strings.Trim(r.placement, "123456789") != "" {
			return nil, fmt.Errorf("%s:%d: placement: want digits 1-9 (GPUs per node), got %q", path, t.lines[i], r.placement)
		}
		if r.localBsz, err = t.positiveInt(i, "local_bsz"); err != nil {
			return nil, err
		}
		if r.stepTime, err = t.nonNegative(i, "step_time"); err != nil {
			return nil, err
		}
		if r.syncTime, err = t.nonNegative(i, "sync_time"); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// scalabilityRow is one row of scalability.csv.
type scalabilityRow struct {
	numNodes, numReplicas, localBsz int
	stepTime, syncTime              float64
}

func readScalability(fsys fs.FS, path string) ([]scalabilityRow, error) {
	t, err := readTable(fsys, path, "num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")
	if err != nil {
		return nil, err
	}
	out := make([]scalabilityRow, len(t.rows))
	for i := range t.rows {
		r := &out[i]
		if r.numNodes, err = t.positiveInt(i, "num_nodes"); err != nil {
			return nil, err
		}
		if r.numReplicas, err = t.positiveInt(i, "num_replicas"); err != nil {
			return nil, err
		}
		if r.localBsz, err = t.positiveInt(i, "local_bsz"); err != nil {
			return nil, err
		}
		if r.stepTime, err = t.nonNegative(i, "step_time"); err != nil {
			return nil, err
		}
		if r.syncTime, err = t.nonNegative(i, "sync_time"); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// validationRun is one validation-<M>.csv: per epoch, cumulative progress
// and iterations, the validation metric and the gradient statistics.
type validationRun struct {
	batchSize                   int
	progress, iteration, metric []float64
	gradSqr, gradVar            []float64
}

func readValidation(fsys fs.FS, path string, batchSize int) (*validationRun, error) {
	t, err := readTable(fsys, path, "progress", "iteration", "metric", "grad_sqr", "grad_var")
	if err != nil {
		return nil, err
	}
	v := &validationRun{batchSize: batchSize}
	cols := []struct {
		name string
		dst  *[]float64
	}{
		{"progress", &v.progress}, {"iteration", &v.iteration}, {"metric", &v.metric},
		{"grad_sqr", &v.gradSqr}, {"grad_var", &v.gradVar},
	}
	for i := range t.rows {
		for _, c := range cols {
			x, err := t.float(i, c.name)
			if err != nil {
				return nil, err
			}
			*c.dst = append(*c.dst, x)
		}
	}
	return v, nil
}
