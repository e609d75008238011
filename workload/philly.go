package workload

import (
	"fmt"
	"io"
	"strconv"
	"time"
)

// phillyColumns returns the header row of traces/philly.csv.
func phillyColumns() []string {
	return []string{"timestamp", "duration", "num_gpus", "gpu_time", "cluster"}
}

// PhillyTimeLayout is the layout of the timestamp column of
// traces/philly.csv ("2017-10-09 07:01:55"); it carries no zone and is
// read as UTC.
const PhillyTimeLayout = "2006-01-02 15:04:05"

// PhillyJob is one row of the summarised Microsoft Philly trace
// (traces/philly.csv: timestamp,duration,num_gpus,gpu_time,cluster).
type PhillyJob struct {
	// Timestamp is the job's submission time, zone-less in the file and
	// read as UTC.
	Timestamp time.Time
	// Duration is the job's run time in seconds.
	Duration float64
	// NumGPUs is the job's GPU count.
	NumGPUs int
	// GPUTime is Duration × NumGPUs, in GPU·seconds.
	GPUTime float64
	// Cluster is the (anonymised) virtual cluster the job ran in.
	Cluster string
}

// ParsePhilly reads a Philly trace summary in the artifact's format
// (traces/philly.csv: a header and 82,247 jobs). source names the input in error
// messages. Every row must have five fields: a timestamp in
// PhillyTimeLayout, finite non-negative duration and gpu_time, and a
// non-negative integer num_gpus; the cluster may be any string. Errors are
// *ParseError values naming source, line and column. Blank lines (the
// artifact's file ends with one) are skipped; rows keep their file order.
func ParsePhilly(r io.Reader, source string) ([]PhillyJob, error) {
	header := phillyColumns()
	cr := newReader(r)
	if err := readHeader(cr, source, header); err != nil {
		return nil, err
	}
	var jobs []PhillyJob
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, csvError(source, err)
		}
		if len(rec) != len(header) {
			line, _ := cr.FieldPos(0)
			return nil, &ParseError{Source: source, Line: line,
				Err: fmt.Errorf("expected %d fields, got %d", len(header), len(rec))}
		}
		job, field, err := parsePhillyRow(rec)
		if err != nil {
			line, _ := cr.FieldPos(field)
			return nil, &ParseError{Source: source, Line: line, Field: header[field], Err: err}
		}
		jobs = append(jobs, job)
	}
	if len(jobs) == 0 {
		return nil, &ParseError{Source: source, Err: fmt.Errorf("empty trace: %w", ErrEmpty)}
	}
	return jobs, nil
}

// parsePhillyRow converts one five-field trace row; on error it returns the
// index of the offending field.
func parsePhillyRow(rec []string) (PhillyJob, int, error) {
	var j PhillyJob
	ts, err := time.Parse(PhillyTimeLayout, rec[0])
	if err != nil {
		return PhillyJob{}, 0, fmt.Errorf("not a time in layout %q: %q", PhillyTimeLayout, rec[0])
	}
	j.Timestamp = ts
	if j.Duration, err = parseNonNegative(rec[1]); err != nil {
		return PhillyJob{}, 1, err
	}
	if j.NumGPUs, err = parseNonNegativeInt(rec[2]); err != nil {
		return PhillyJob{}, 2, err
	}
	if j.GPUTime, err = parseNonNegative(rec[3]); err != nil {
		return PhillyJob{}, 3, err
	}
	j.Cluster = rec[4]
	return j, 0, nil
}

// parseNonNegativeInt parses a decimal integer ≥ 0.
func parseNonNegativeInt(s string) (int, error) {
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("not an integer: %q", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("negative value %d", v)
	}
	return v, nil
}
