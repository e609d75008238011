package contract

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/pollux-nomad/pollux/contract/quote"
)

// Limits of a metrics document.
const (
	// MetricsVersion is the only metrics document version this package
	// reads and writes.
	MetricsVersion = 1
	// MaxMetricsSize is the largest document Parse accepts, in bytes.
	MaxMetricsSize = 512 << 10
	// MaxProfileEntries is the largest number of profile entries accepted.
	MaxProfileEntries = 4096
	// MaxRestoreTime is the largest restart.restore_time accepted, in
	// seconds (one day).
	MaxRestoreTime = 86400
	// maxReported bounds the problems Validate lists one by one.
	maxReported = 50
)

// Errors that callers may test with errors.Is.
var (
	// ErrTooLarge reports a document over MaxMetricsSize bytes.
	ErrTooLarge = errors.New("document too large")
	// ErrUnsupportedVersion reports a document whose version is not
	// MetricsVersion.
	ErrUnsupportedVersion = errors.New("unsupported version")
)

// Metrics is the metrics document, version 1 (docs/contracts.md §3): what a
// job's rank-0 worker reports to the controller.
type Metrics struct {
	// Version is the document format version, MetricsVersion.
	Version int `json:"version"`
	// Timestamp is when the worker wrote the document (required).
	Timestamp time.Time `json:"timestamp"`
	// BatchSize is the total batch size M the job currently trains with.
	BatchSize float64 `json:"batch_size"`
	// Progress is the statistical progress so far, in examples at
	// M0-equivalent (the sum over steps of batch size × statistical
	// efficiency), as in Pollux.
	Progress float64 `json:"progress"`
	// GradSqr is the smoothed estimate of |g|² (pollux-reference.md §2).
	GradSqr float64 `json:"grad_sqr"`
	// GradVar is the smoothed estimate of the variance of a gradient at the
	// initial batch size M0.
	GradVar float64 `json:"grad_var"`
	// Profile holds one entry per observed configuration (at least one).
	Profile []ProfileEntry `json:"profile"`
	// Restart is the worker's report of how long its last (re)start took
	// (optional).
	Restart *Restart `json:"restart,omitempty"`
	// RestartErr is set by ParseMetrics when the document's restart
	// object was invalid: the object is then dropped (Restart is nil) and
	// the rest of the document kept. It is never encoded.
	RestartErr error `json:"-"`
}

// Restart is the restart object of a metrics document: how long the
// worker's last start took, from its process start to its first training
// step (start-up, rendezvous and checkpoint restore), and when that step
// began. The controller adds it to the time from its reallocation to the
// worker's start to estimate the job's restart time.
type Restart struct {
	// RestoreTime is the start-up and checkpoint-restore time in seconds:
	// finite, in [0, MaxRestoreTime].
	RestoreTime float64 `json:"restore_time"`
	// At is when the first step after the restore began (required).
	At time.Time `json:"at"`
}

// Validate reports the restart object's problems, each naming its field
// ("restart.restore_time: ...").
func (r *Restart) Validate() error {
	var errs []error
	if !(r.RestoreTime >= 0 && r.RestoreTime <= MaxRestoreTime) {
		errs = append(errs, fmt.Errorf("restart.restore_time: must be finite and in [0, %d] seconds, got %g", MaxRestoreTime, r.RestoreTime))
	}
	if y := r.At.UTC().Year(); r.At.IsZero() || y < 1 || y > 9999 {
		errs = append(errs, fmt.Errorf("restart.at: must be set, in years 1 to 9999 UTC, got %s", r.At.Format(time.RFC3339Nano)))
	}
	return errors.Join(errs...)
}

// ProfileEntry is the mean step timing of one observed configuration.
type ProfileEntry struct {
	// NumNodes is the number of nodes N (at least 1).
	NumNodes int `json:"num_nodes"`
	// NumReplicas is the number of GPUs K (at least NumNodes).
	NumReplicas int `json:"num_replicas"`
	// LocalBsz is the per-GPU micro-batch m (at least 1).
	LocalBsz int `json:"local_bsz"`
	// AccumSteps is the number of accumulation micro-steps per optimizer
	// step (at least 0).
	AccumSteps int `json:"accum_steps"`
	// ComputeTime is the mean seconds of a micro-batch forward and
	// backward pass without synchronisation (positive).
	ComputeTime float64 `json:"compute_time"`
	// StepTime is the mean seconds of a synchronising optimizer step
	// (positive).
	StepTime float64 `json:"step_time"`
	// SyncTime is the mean seconds blocked in all-reduce per optimizer
	// step (at least 0).
	SyncTime float64 `json:"sync_time"`
	// Count is the number of steps the means cover (at least 1).
	Count int `json:"count"`
	// GPUType is the GPU type the steps ran on (optional; see
	// ValidGPUType): the worker's POLLUX_GPU_TYPE, else the controller's
	// pollux_gpu_type. Absent means the type of the nodes the job runs on
	// when the controller reads the document.
	GPUType string `json:"gpu_type,omitempty"`
}

// key is an entry's configuration, the canonical sort key.
type key struct {
	nodes, replicas, localBsz, accumSteps int
	gpuType                               string
}

func (e ProfileEntry) key() key {
	return key{e.NumNodes, e.NumReplicas, e.LocalBsz, e.AccumSteps, e.GPUType}
}

func compareKeys(a, b key) int {
	return cmp.Or(cmp.Compare(a.nodes, b.nodes), cmp.Compare(a.replicas, b.replicas),
		cmp.Compare(a.localBsz, b.localBsz), cmp.Compare(a.accumSteps, b.accumSteps),
		cmp.Compare(a.gpuType, b.gpuType))
}

// ParseMetrics decodes and validates a metrics document. It rejects documents
// over MaxMetricsSize bytes, malformed JSON or trailing data, and every
// problem that Validate reports. Fields it does not know are ignored, so
// that later minor revisions can add optional fields. The timestamp is
// returned in UTC and negative zeros as zeros, as MarshalMetrics writes them.
// An invalid restart object does not reject the document: it is dropped
// and its problems are kept in RestartErr.
func ParseMetrics(data []byte) (*Metrics, error) {
	if len(data) > MaxMetricsSize {
		return nil, fmt.Errorf("failed to parse metrics document: %w: %d bytes, at most %d", ErrTooLarge, len(data), MaxMetricsSize)
	}
	var d Metrics
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("failed to parse metrics document: %w", quote.JSONError(err, -1, len(data)))
	}
	d.Timestamp = d.Timestamp.UTC()
	for _, x := range []*float64{&d.BatchSize, &d.Progress, &d.GradSqr, &d.GradVar} {
		*x = noNegativeZero(*x)
	}
	for i := range d.Profile {
		e := &d.Profile[i]
		for _, x := range []*float64{&e.ComputeTime, &e.StepTime, &e.SyncTime} {
			*x = noNegativeZero(*x)
		}
	}
	if d.Restart != nil {
		d.Restart.RestoreTime = noNegativeZero(d.Restart.RestoreTime)
		d.Restart.At = d.Restart.At.UTC()
		if err := d.Restart.Validate(); err != nil {
			d.Restart, d.RestartErr = nil, err
		}
	}
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("failed to parse metrics document: %w", err)
	}
	return &d, nil
}

func noNegativeZero(x float64) float64 {
	if x == 0 {
		return 0
	}
	return x
}

// Validate reports every problem of the document at once (errors.Join),
// each naming its field, as in
// "profile[3].step_time: must be finite and positive, got -1". Past 50
// problems it adds a count of the rest. Besides each field's own rule,
// grad_sqr + grad_var, the gain ratio's numerator, must be finite.
func (d *Metrics) Validate() error {
	var errs []error
	extra := 0
	report := func(format string, args ...any) {
		if len(errs) < maxReported {
			errs = append(errs, fmt.Errorf(format, args...))
		} else {
			extra++
		}
	}
	if d.Version != MetricsVersion {
		errs = append(errs, fmt.Errorf("version: %w %d, want %d", ErrUnsupportedVersion, d.Version, MetricsVersion))
	}
	if y := d.Timestamp.UTC().Year(); d.Timestamp.IsZero() || y < 1 || y > 9999 {
		report("timestamp: must be set, in years 1 to 9999 UTC, got %s", d.Timestamp.Format(time.RFC3339Nano))
	}
	checkPositive(report, -1, "batch_size", d.BatchSize)
	checkNonNegative(report, -1, "progress", d.Progress)
	checkNonNegative(report, -1, "grad_sqr", d.GradSqr)
	checkNonNegative(report, -1, "grad_var", d.GradVar)
	if math.IsInf(d.GradSqr+d.GradVar, 1) {
		// Each is finite, but the gain ratio would be infinite.
		report("grad_var: grad_sqr + grad_var must be finite, got %g + %g", d.GradSqr, d.GradVar)
	}
	switch n := len(d.Profile); {
	case n == 0:
		report("profile: must have at least one entry")
	case n > MaxProfileEntries:
		report("profile: %d entries, at most %d", n, MaxProfileEntries)
	}
	seen := make(map[key]int, len(d.Profile))
	for i, e := range d.Profile {
		if e.NumNodes < 1 {
			report("profile[%d].num_nodes: must be at least 1, got %d", i, e.NumNodes)
		}
		if e.NumReplicas < max(e.NumNodes, 1) {
			report("profile[%d].num_replicas: must be at least num_nodes and 1, got %d", i, e.NumReplicas)
		}
		if e.LocalBsz < 1 {
			report("profile[%d].local_bsz: must be at least 1, got %d", i, e.LocalBsz)
		}
		if e.AccumSteps < 0 {
			report("profile[%d].accum_steps: must be at least 0, got %d", i, e.AccumSteps)
		}
		checkPositive(report, i, "compute_time", e.ComputeTime)
		checkPositive(report, i, "step_time", e.StepTime)
		checkNonNegative(report, i, "sync_time", e.SyncTime)
		if e.Count < 1 {
			report("profile[%d].count: must be at least 1, got %d", i, e.Count)
		}
		if e.GPUType != "" {
			if err := ValidGPUType(e.GPUType); err != nil {
				report("profile[%d].gpu_type: %v", i, err)
			}
		}
		if j, dup := seen[e.key()]; dup {
			report("profile[%d]: same num_nodes, num_replicas, local_bsz, accum_steps and gpu_type as profile[%d]", i, j)
		} else {
			seen[e.key()] = i
		}
	}
	if d.Restart != nil {
		if err := d.Restart.Validate(); err != nil {
			report("%w", err)
		}
	}
	if extra > 0 {
		errs = append(errs, fmt.Errorf("and %d more problems", extra))
	}
	return errors.Join(errs...)
}

// checkPositive reports x unless it is finite and positive; entry is the
// profile index of the field, or −1 for a top-level field.
func checkPositive(report func(string, ...any), entry int, name string, x float64) {
	if !(x > 0) || math.IsInf(x, 1) {
		report("%s: must be finite and positive, got %g", fieldName(entry, name), x)
	}
}

// checkNonNegative reports x unless it is finite and not negative.
func checkNonNegative(report func(string, ...any), entry int, name string, x float64) {
	if !(x >= 0) || math.IsInf(x, 1) {
		report("%s: must be finite and non-negative, got %g", fieldName(entry, name), x)
	}
}

func fieldName(entry int, name string) string {
	if entry < 0 {
		return name
	}
	return fmt.Sprintf("profile[%d].%s", entry, name)
}

// MarshalMetrics returns the canonical encoding of a valid document (see the
// package documentation); it does not modify d. It returns an error if d
// is not valid.
func MarshalMetrics(d *Metrics) ([]byte, error) {
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("failed to marshal metrics document: %w", err)
	}
	c := *d
	c.Timestamp = d.Timestamp.UTC()
	if d.Restart != nil {
		r := *d.Restart
		r.At = r.At.UTC()
		c.Restart = &r
	}
	c.Profile = slices.Clone(d.Profile)
	slices.SortFunc(c.Profile, func(a, b ProfileEntry) int { return compareKeys(a.key(), b.key()) })
	b, err := json.Marshal(&c)
	if err != nil {
		return nil, fmt.Errorf("failed to marshal metrics document: %w", err)
	}
	return b, nil
}
