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

// LoadWorkload reads a workload CSV from path. A path that does not exist
// but names an embedded workload ("workload-6" or "workload-6.csv") reads
// the embedded copy of the artifact's workload. The returned name is the
// file's base name without ".csv".
func LoadWorkload(path string, applications map[string]*apps.Application) ([]workload.Job, string, error) {
	known := func(name string) bool { _, ok := applications[name]; return ok }
	name := strings.TrimSuffix(filepath.Base(path), ".csv")
	if _, err := os.Stat(path); err != nil {
		embedded := name + ".csv"
		f, ferr := data.Workloads().Open(embedded)
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
