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

	"github.com/pollux-nomad/pollux/contract/quote"
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
// (in any order, each once; other columns are ignored; a UTF-8 byte order
// mark is skipped) and at least one data row. Errors read "path:line:
// reason" and quote at most 40 bytes of a field (200 of a header).
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
		return nil, csvError(path, err)
	}
	hline, _ := r.FieldPos(0)
	if len(header) > 0 {
		header[0] = strings.TrimPrefix(header[0], "\ufeff") // a UTF-8 byte order mark
	}
	t := &table{name: path, cols: map[string]int{}}
	for i, h := range header {
		h = strings.TrimSpace(h)
		if j, dup := t.cols[h]; dup && h != "" {
			return nil, fmt.Errorf("%s:%d: column %q twice in the header (columns %d and %d)", path, hline, truncate(h), j+1, i+1)
		}
		t.cols[h] = i
	}
	for _, c := range required {
		if _, ok := t.cols[c]; !ok {
			return nil, fmt.Errorf("%s:%d: missing column %q in header %q", path, hline, c, quote.Cut(strings.Join(header, ","), maxQuotedHeader))
		}
	}
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, csvError(path, err)
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

// csvError formats an encoding/csv error as "path:line: reason".
func csvError(path string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s:%d: %w", path, pe.Line, pe.Err)
	}
	return fmt.Errorf("failed to read %s: %w", path, err)
}

// Bounds of the quoted input in error messages, so that a hostile file
// (a megabyte-long field) gives a short message.
const (
	maxQuoted       = 40
	maxQuotedHeader = 200
)

// truncate shortens a quoted field to maxQuoted bytes (see shorten).
func truncate(s string) string { return quote.Cut(s, maxQuoted) }

// str returns column col of row i.
func (t *table) str(i int, col string) string {
	return strings.TrimSpace(t.rows[i][t.cols[col]])
}

// float parses column col of row i as a finite number.
func (t *table) float(i int, col string) (float64, error) {
	s := t.str(i, col)
	v, err := strconv.ParseFloat(s, 64)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%s:%d: %s: not a finite number %q", t.name, t.lines[i], col, truncate(s))
	}
	if err != nil {
		return 0, fmt.Errorf("%s:%d: %s: not a number %q", t.name, t.lines[i], col, truncate(s))
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
	if errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("%s:%d: %s: integer out of range %q", t.name, t.lines[i], col, truncate(s))
	}
	if err != nil {
		return 0, fmt.Errorf("%s:%d: %s: not an integer %q", t.name, t.lines[i], col, truncate(s))
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
			return nil, fmt.Errorf("%s:%d: placement: want digits 1-9 (GPUs per node), got %q", path, t.lines[i], truncate(r.placement))
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
		if r.numReplicas < r.numNodes {
			return nil, fmt.Errorf("%s:%d: num_replicas: %d is below num_nodes %d", path, t.lines[i], r.numReplicas, r.numNodes)
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
	// The metric may be anything; the other columns are non-negative, and
	// progress and iteration are cumulative.
	cols := []struct {
		name       string
		dst        *[]float64
		nonNeg     bool
		cumulative bool
	}{
		{"progress", &v.progress, true, true}, {"iteration", &v.iteration, true, true}, {"metric", &v.metric, false, false},
		{"grad_sqr", &v.gradSqr, true, false}, {"grad_var", &v.gradVar, true, false},
	}
	for i := range t.rows {
		for _, c := range cols {
			parse := t.float
			if c.nonNeg {
				parse = t.nonNegative
			}
			x, err := parse(i, c.name)
			if err != nil {
				return nil, err
			}
			if n := len(*c.dst); c.cumulative && n > 0 && x < (*c.dst)[n-1] {
				return nil, fmt.Errorf("%s:%d: %s: %v is below the previous row's %v (the column is cumulative)", path, t.lines[i], c.name, x, (*c.dst)[n-1])
			}
			*c.dst = append(*c.dst, x)
		}
	}
	return v, nil
}
