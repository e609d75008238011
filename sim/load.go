package sim

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/pollux-nomad/pollux/apps"
	"github.com/pollux-nomad/pollux/data"
	"github.com/pollux-nomad/pollux/workload"
)

// ErrBadInput marks errors caused by the user's input files or flags (exit
// code 2 in the CLI), as opposed to failures while simulating.
var ErrBadInput = errors.New("bad input")

// badInput wraps err so that errors.Is(err, ErrBadInput) holds.
func badInput(err error) error { return fmt.Errorf("%w: %w", ErrBadInput, err) }

// LoadApplications loads the six application profiles from dir, or from
// the copy embedded in the binary when dir is empty.
func LoadApplications(dir string) (map[string]*apps.Application, error) {
	var fsys fs.FS = data.Traces()
	if dir != "" {
		st, err := os.Stat(dir)
		if err != nil {
			return nil, badInput(fmt.Errorf("profiles: %w", err))
		}
		if !st.IsDir() {
			return nil, badInput(fmt.Errorf("profiles: %s is not a directory", dir))
		}
		fsys = os.DirFS(dir)
	}
	a, err := apps.LoadAll(fsys)
	if err != nil {
		if dir != "" {
			return nil, badInput(fmt.Errorf("failed to load profiles from %s: %w", dir, err))
		}
		return nil, fmt.Errorf("failed to load embedded profiles: %w", err)
	}
	return a, nil
}

// LoadTypedApplications loads the six applications with one throughput
// table per GPU type from the embedded Sia artifact profiles
// (apps.LoadTypedAll), with the constants of the given rules' artifact.
func LoadTypedApplications(rules Rules) (map[string]*apps.Application, error) {
	c := apps.PolluxConstants
	if rules == RulesSia {
		c = apps.SiaConstants
	}
	a, err := apps.LoadTypedAll(data.SiaTraces(), c)
	if err != nil {
		return nil, fmt.Errorf("failed to load embedded typed profiles: %w", err)
	}
	return a, nil
}

// LoadTypedApplicationsFrom is LoadTypedApplications reading the profiles
// from dir (laid out as data.SiaTraces(): placements-<suffix>.csv per GPU
// type, suffixes as apps.SiaGPUTypes).
func LoadTypedApplicationsFrom(dir string, rules Rules) (map[string]*apps.Application, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, badInput(fmt.Errorf("profiles: %w", err))
	}
	if !st.IsDir() {
		return nil, badInput(fmt.Errorf("profiles: %s is not a directory", dir))
	}
	c := apps.PolluxConstants
	if rules == RulesSia {
		c = apps.SiaConstants
	}
	a, err := apps.LoadTypedAll(os.DirFS(dir), c)
	if err != nil {
		return nil, badInput(fmt.Errorf("failed to load typed profiles from %s: %w", dir, err))
	}
	return a, nil
}

// siaWorkloads maps the embedded Sia workloads' name prefixes to their
// folders in data.SiaWorkloads().
var siaWorkloads = []struct{ prefix, dir string }{
	{"sia-philly-", "philly"}, {"sia-helios-", "saturn"}, {"sia-newtrace-", "newtrace"},
}

// embeddedWorkload returns the embedded file of a workload name:
// workload-1..8 (Pollux), sia-philly-1..8, sia-helios-1..10,
// sia-newtrace-1..10 and sia-scale-<k>x (k = 2, 4, 8, 16, 32; the first
// workload of the Sia scalability series).
func embeddedWorkload(name string) (fs.File, error) {
	for _, w := range siaWorkloads {
		if n, ok := strings.CutPrefix(name, w.prefix); ok {
			return data.SiaWorkloads().Open(w.dir + "/workload-" + n + ".csv")
		}
	}
	if k, ok := strings.CutPrefix(name, "sia-scale-"); ok {
		return data.SiaWorkloads().Open("scale/scale_" + k + "/workload-1.csv")
	}
	return data.Workloads().Open(name + ".csv")
}

// EmbeddedWorkloadNames lists the names LoadWorkload resolves to embedded
// workloads.
func EmbeddedWorkloadNames() []string {
	var out []string
	for i := 1; i <= 8; i++ {
		out = append(out, fmt.Sprintf("workload-%d", i))
	}
	for i := 1; i <= 8; i++ {
		out = append(out, fmt.Sprintf("sia-philly-%d", i))
	}
	for i := 1; i <= 10; i++ {
		out = append(out, fmt.Sprintf("sia-helios-%d", i))
	}
	for i := 1; i <= 10; i++ {
		out = append(out, fmt.Sprintf("sia-newtrace-%d", i))
	}
	for _, k := range []int{2, 4, 8, 16, 32} {
		out = append(out, fmt.Sprintf("sia-scale-%dx", k))
	}
	return out
}

// LoadWorkload reads a workload CSV from path. A path that does not exist
// but names an embedded workload (EmbeddedWorkloadNames, e.g. "workload-6",
// "workload-6.csv" or "sia-helios-3") reads the embedded copy. The
// returned name is the file's base name without ".csv".
func LoadWorkload(path string, applications map[string]*apps.Application) ([]workload.Job, string, error) {
	known := func(name string) bool { _, ok := applications[name]; return ok }
	name := strings.TrimSuffix(filepath.Base(path), ".csv")
	if _, err := os.Stat(path); err != nil {
		embedded := name + ".csv"
		f, ferr := embeddedWorkload(name)
		if ferr != nil || strings.ContainsRune(path, os.PathSeparator) {
			return nil, "", badInput(fmt.Errorf("workload: %w", err))
		}
		defer f.Close()
		jobs, perr := workload.Parse(f, "embedded "+embedded, known)
		if perr != nil {
			return nil, "", badInput(perr)
		}
		return jobs, name, nil
	}
	jobs, err := workload.ParseFile(path, known)
	if err != nil {
		return nil, "", badInput(err)
	}
	return jobs, name, nil
}
