// Package data embeds the Pollux OSDI '21 artifact's measurements and
// workloads (petuum/adaptdl, branch osdi21-artifact, commit c793c70,
// folder simulator/), so that the simulator runs on a fresh machine with no
// other files, and the Sia SOSP '23 artifact's per-GPU-type profiles and
// workloads (siasosp23/artifacts, commit aaf7a0d, folder sia-simulator/)
// under sia/. See README.md in this directory for the file formats.
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
// published results reference-results.json and reference-jcts.json; and
// under sia/ the Sia (SOSP '23) artifact's data: sia/traces,
// sia/workloads and sia/reference-results.json (see README.md).
//
//go:embed traces workloads reference-results.json reference-jcts.json sia
var FS embed.FS

// Traces returns the traces directory (one sub-directory per application,
// plus philly.csv) as an fs.FS rooted at traces/.
func Traces() fs.FS { return sub("traces") }

// Workloads returns the workloads directory (workload-1.csv ...
// workload-8.csv) as an fs.FS rooted at workloads/.
func Workloads() fs.FS { return sub("workloads") }

// SiaTraces returns the Sia artifact's per-GPU-type profiles (sia/traces:
// one directory per application with placements-<type>.csv,
// scalability-<type>.csv and validation-<batch>.csv, <type> an artifact
// type name: aws, azure, dgx-ext, quad, rtx) as an fs.FS.
func SiaTraces() fs.FS { return sub("sia/traces") }

// SiaWorkloads returns the Sia artifact's workloads (sia/workloads:
// philly/, saturn/ and newtrace/ workload-<n>.csv, and
// scale/scale_<k>x/workload-1.csv) as an fs.FS.
func SiaWorkloads() fs.FS { return sub("sia/workloads") }

// sub returns the embedded directory dir. The directories are fixed at
// compile time, so a failure is a programmer error.
func sub(dir string) fs.FS {
	f, err := fs.Sub(FS, dir)
	if err != nil {
		panic(fmt.Sprintf("failed to open embedded directory %q: %v", dir, err))
	}
	return f
}
