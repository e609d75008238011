package workload

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/pollux-nomad/pollux/contract/quote"
)

// workloadColumns returns the header row of a workload CSV file, as written
// by the artifact's simulator/workload.py (docs/contracts.md §6).
func workloadColumns() []string {
	return []string{"name", "time", "application", "num_replicas", "batch_size"}
}

// Job is one row of a workload CSV: name,time,application,num_replicas,batch_size.
type Job struct {
	// Name identifies the job, "<application>-<index>" in the artifact's
	// workloads; unique within a workload.
	Name string
	// Time is the submission time in seconds from the start of the
	// workload (non-negative).
	Time float64
	// Application names the application profile (bert, cifar10, ...).
	Application string
	// NumReplicas is the GPU count the job asks for. Pollux ignores it;
	// Tiresias uses it as the job's fixed GPU count (pollux-reference.md §4).
	NumReplicas int
	// BatchSize is the tuned total batch size. Pollux ignores it; the
	// baselines train at this fixed batch size.
	BatchSize int
}

// ErrEmpty reports an input without data rows: an empty file, or a header
// and nothing else. Parse and ParsePhilly wrap it in a *ParseError; test
// for it with errors.Is.
var ErrEmpty = errors.New("no data rows")

// ParseError is a problem with one input file, located as precisely as
// possible. Its message reads "source:line: field: reason".
type ParseError struct {
	// Source names the input, as passed to Parse (usually the file path).
	Source string
	// Line is the 1-based line of the offending row; 0 when the problem
	// concerns the input as a whole (for instance an empty workload).
	Line int
	// Field names the offending column; empty when the problem concerns a
	// whole row (wrong number of fields, malformed CSV quoting).
	Field string
	// Err is the reason.
	Err error
}

// Error formats the error as "source:line: field: reason", leaving out the
// line and field when they are unknown.
func (e *ParseError) Error() string {
	var b strings.Builder
	b.WriteString(e.Source)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns the reason, so that errors.Is(err, ErrEmpty) works.
func (e *ParseError) Unwrap() error { return e.Err }

// Parse reads a workload CSV in the artifact's format: a header
// "name,time,application,num_replicas,batch_size" followed by one job per
// row. source names the input in error messages. known reports whether an
// application name is valid; nil accepts any non-empty name.
//
// It rejects, with a *ParseError naming source, line and column: a missing
// or different header; rows without exactly five fields; an empty or
// duplicate name; a time that is not a finite number ≥ 0; an application
// that is empty or unknown; num_replicas or batch_size that are not
// integers ≥ 1 (or overflow an int); names and applications with control
// characters or invalid UTF-8; malformed CSV quoting; and a workload
// without jobs (ErrEmpty). Messages quote at most 40 bytes of a field (200
// of a header).
// Blank lines are skipped. The jobs are returned in file order, which the
// simulator uses to break ties between equal submission times.
func Parse(r io.Reader, source string, known func(string) bool) ([]Job, error) {
	header := workloadColumns()
	cr := newReader(r)
	if err := readHeader(cr, source, header); err != nil {
		return nil, err
	}
	var jobs []Job
	firstLine := make(map[string]int)
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, csvError(source, err)
		}
		line, _ := cr.FieldPos(0)
		if len(rec) != len(header) {
			return nil, &ParseError{Source: source, Line: line,
				Err: fmt.Errorf("expected %d fields, got %d", len(header), len(rec))}
		}
		job, field, err := parseJob(rec, known)
		if err != nil {
			fl, _ := cr.FieldPos(field)
			return nil, &ParseError{Source: source, Line: fl, Field: header[field], Err: err}
		}
		if prev, ok := firstLine[job.Name]; ok {
			return nil, &ParseError{Source: source, Line: line, Field: "name",
				Err: fmt.Errorf("duplicate job %q (first on line %d)", truncate(job.Name), prev)}
		}
		firstLine[job.Name] = line
		jobs = append(jobs, job)
	}
	if len(jobs) == 0 {
		return nil, &ParseError{Source: source, Err: fmt.Errorf("empty workload: %w", ErrEmpty)}
	}
	return jobs, nil
}

// ParseFile opens the workload CSV at path and parses it with Parse; the
// path names the file in error messages.
func ParseFile(path string, known func(string) bool) ([]Job, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("failed to open workload: %w", err)
	}
	defer f.Close()
	return Parse(f, path, known)
}

// Write writes jobs as a workload CSV in the format Parse reads, header
// first, in the given order; Parse(Write(jobs)) returns jobs unchanged for
// any non-empty valid slice. Times are written in the shortest decimal form
// that reads back to the same float64 (so "53", not "53.0").
//
// A job that Parse would reject (empty or duplicate name, negative or
// non-finite time, empty application, num_replicas or batch_size < 1,
// control characters in a name) makes Write fail before writing anything.
// An empty slice writes only the header, which Parse rejects as empty.
func Write(w io.Writer, jobs []Job) error {
	seen := make(map[string]int, len(jobs))
	for i, j := range jobs {
		if field, err := validateJob(j); err != nil {
			return fmt.Errorf("failed to write workload: job %d (%q): %s: %w", i, j.Name, field, err)
		}
		if prev, ok := seen[j.Name]; ok {
			return fmt.Errorf("failed to write workload: job %d: name: duplicate job %q (also job %d)", i, j.Name, prev)
		}
		seen[j.Name] = i
	}
	cw := csv.NewWriter(w)
	if err := cw.Write(workloadColumns()); err != nil {
		return fmt.Errorf("failed to write workload header: %w", err)
	}
	for _, j := range jobs {
		rec := []string{
			j.Name,
			strconv.FormatFloat(j.Time, 'f', -1, 64),
			j.Application,
			strconv.Itoa(j.NumReplicas),
			strconv.Itoa(j.BatchSize),
		}
		if err := cw.Write(rec); err != nil {
			return fmt.Errorf("failed to write workload job %q: %w", j.Name, err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("failed to write workload: %w", err)
	}
	return nil
}

// First returns a copy of the first n jobs (all of them if n ≥ len(jobs)),
// for short demonstrations. It panics if n is negative.
func First(jobs []Job, n int) []Job {
	if n < 0 {
		panic(fmt.Sprintf("workload: First called with negative n %d", n))
	}
	n = min(n, len(jobs))
	out := make([]Job, n)
	copy(out, jobs[:n])
	return out
}

// Compress returns a copy of jobs with every submission time divided by
// factor, keeping the order, so that a workload's arrivals fit a shorter
// demonstration (factor 2 submits everything twice as fast). It panics if
// factor is not a finite number > 0.
func Compress(jobs []Job, factor float64) []Job {
	if !(factor > 0) || math.IsInf(factor, 0) {
		panic(fmt.Sprintf("workload: Compress called with invalid factor %v", factor))
	}
	out := make([]Job, len(jobs))
	for i, j := range jobs {
		j.Time /= factor
		out[i] = j
	}
	return out
}

// parseJob converts one five-field row. On error it returns the index of
// the offending field.
func parseJob(rec []string, known func(string) bool) (Job, int, error) {
	var j Job
	j.Name = rec[0]
	if err := checkText(j.Name); err != nil {
		return Job{}, 0, err
	}
	t, err := parseNonNegative(rec[1])
	if err != nil {
		return Job{}, 1, err
	}
	j.Time = t
	j.Application = rec[2]
	if err := checkText(j.Application); err != nil {
		return Job{}, 2, err
	}
	if known != nil && !known(j.Application) {
		return Job{}, 2, fmt.Errorf("unknown %q", truncate(j.Application))
	}
	if j.NumReplicas, err = parsePositiveInt(rec[3]); err != nil {
		return Job{}, 3, err
	}
	if j.BatchSize, err = parsePositiveInt(rec[4]); err != nil {
		return Job{}, 4, err
	}
	return j, 0, nil
}

// validateJob applies Parse's checks (except the known-application check)
// to an in-memory job and returns the offending column's name.
func validateJob(j Job) (string, error) {
	if err := checkText(j.Name); err != nil {
		return "name", err
	}
	if math.IsNaN(j.Time) || math.IsInf(j.Time, 0) {
		return "time", fmt.Errorf("not a finite number: %v", j.Time)
	}
	if j.Time < 0 {
		return "time", fmt.Errorf("negative value %v", j.Time)
	}
	if err := checkText(j.Application); err != nil {
		return "application", err
	}
	if j.NumReplicas < 1 {
		return "num_replicas", fmt.Errorf("must be at least 1, got %d", j.NumReplicas)
	}
	if j.BatchSize < 1 {
		return "batch_size", fmt.Errorf("must be at least 1, got %d", j.BatchSize)
	}
	return "", nil
}

// checkText accepts a non-empty, valid UTF-8 string without control
// characters (names end up in logs, job IDs and plot labels).
func checkText(s string) error {
	if s == "" {
		return errors.New("empty value")
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("invalid UTF-8 in %q", truncate(s))
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("control character %U in %q", r, truncate(s))
		}
	}
	return nil
}

// parseNonNegative parses a finite float64 ≥ 0.
func parseNonNegative(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("not a finite number: %q", truncate(s))
	}
	if err != nil {
		return 0, fmt.Errorf("not a number: %q", truncate(s))
	}
	if v < 0 {
		return 0, fmt.Errorf("negative value %s", truncate(s))
	}
	return v, nil
}

// parsePositiveInt parses a decimal integer ≥ 1.
func parsePositiveInt(s string) (int, error) {
	v, err := strconv.Atoi(s)
	if errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("integer out of range: %q", truncate(s))
	}
	if err != nil {
		return 0, fmt.Errorf("not an integer: %q", truncate(s))
	}
	if v < 1 {
		return 0, fmt.Errorf("must be at least 1, got %d", v)
	}
	return v, nil
}

// newReader returns a CSV reader that leaves the field count to the caller,
// so that a short row gets a message naming the counts.
func newReader(r io.Reader) *csv.Reader {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	return cr
}

// readHeader reads the first row and checks it equals want (a UTF-8 byte
// order mark before it is ignored).
func readHeader(cr *csv.Reader, source string, want []string) error {
	rec, err := cr.Read()
	if err == io.EOF {
		return &ParseError{Source: source, Line: 0, Field: "header",
			Err: fmt.Errorf("missing in empty input: %w", ErrEmpty)}
	}
	if err != nil {
		return csvError(source, err)
	}
	line, _ := cr.FieldPos(0)
	got := make([]string, len(rec))
	copy(got, rec)
	if len(got) > 0 {
		got[0] = strings.TrimPrefix(got[0], "\ufeff")
	}
	if !slices.Equal(got, want) {
		return &ParseError{Source: source, Line: line, Field: "header",
			Err: fmt.Errorf("want %q, got %q", strings.Join(want, ","), quote.Cut(strings.Join(got, ","), maxQuotedHeader))}
	}
	return nil
}

// Bounds of the quoted input in error messages, so that a hostile file
// (a megabyte-long field) gives a short message.
const (
	maxQuoted       = 40
	maxQuotedHeader = 200
)

// truncate shortens a quoted field to maxQuoted bytes (see shorten).
func truncate(s string) string { return quote.Cut(s, maxQuoted) }

// csvError converts an encoding/csv error into a *ParseError with its line.
func csvError(source string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &ParseError{Source: source, Line: pe.Line, Err: pe.Err}
	}
	return &ParseError{Source: source, Err: fmt.Errorf("failed to read CSV: %w", err)}
}
