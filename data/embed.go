// Package data embeds the Pollux OSDI '21 artifact's measurements and
// workloads (petuum/adaptdl, branch osdi21-artifact, commit c793c70,
// folder simulator/), so that the simulator runs on a fresh machine with no
// other files. See README.md in this directory for the file formats.
//
// The package owns only the embedded files; parsing lives in the packages
// that use them (apps for the application profiles, workload for the job
// traces).
package data

import (
	"embed"
	"fmt"
	"io/fs"
)

// FS holds the artifact's data: traces/ (one directory per application plus
// philly.csv), workloads/ (workload-1.csv ... workload-8.csv) and the
// published results reference-results.json and reference-jcts.json.
//
//go:embed traces workloads reference-results.json reference-jcts.json
var FS embed.FS

// Traces returns the traces directory (one sub-directory per application,
// plus philly.csv) as an fs.FS rooted at traces/.
func Traces() fs.FS { return sub("traces") }

// Workloads returns the workloads directory (workload-1.csv ...
// workload-8.csv) as an fs.FS rooted at workloads/.
func Workloads() fs.FS { return sub("workloads") }

// sub returns the embedded directory dir. The directories are fixed at
// compile time, so a failure is a programmer error.
func sub(dir string) fs.FS {
	f, err := fs.Sub(FS, dir)
	if err != nil {
		panic(fmt.Sprintf("failed to open embedded directory %q: %v", dir, err))
	}
	return f
}
