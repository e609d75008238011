// Package apps owns the application profiles of the Pollux simulator: the
// six measured training jobs of the Pollux OSDI '21 artifact (bert,
// cifar10, deepspeech2, imagenet, ncf, yolov3), loaded from their trace
// directories, and the lookups the simulator replays them with — true step
// and sync times per placement and micro-batch size, gradient statistics,
// statistical progress and iteration counts per epoch, and the "TunedJobs"
// configurations from which the artifact's workloads were drawn.
//
// Every lookup reproduces the artifact's simulator/applications.py
// (petuum/adaptdl, branch osdi21-artifact) and pollux-reference.md §4:
//
//   - Throughput: a measured placement (after dropping empty nodes and
//     rotating to the lexicographically smallest rotation) interpolates
//     linearly over local_bsz among its rows of placements.csv, as SciPy's
//     interp1d; any other placement interpolates piecewise-linearly over
//     (num_nodes ≤ 16, num_replicas, local_bsz) on a Delaunay tessellation
//     of the per-(N, K, m) means of placements.csv plus scalability.csv, as
//     SciPy's LinearNDInterpolator. The profile points are highly
//     degenerate (about one simplex in six of Qhull's tessellation is flat),
//     so the interpolant depends on which of the many Delaunay
//     triangulations is used; LoadAll therefore replays the tessellation
//     that SciPy/Qhull computes (recorded in qhull/*.txt.gz by
//     qhull/export.py), which reproduces the artifact's values exactly.
//     Profiles that do not match a recording are triangulated in Go
//     (package internal/delaunay): a valid Delaunay triangulation, but where
//     it chooses differently from Qhull the values differ (on the artifact's
//     profiles, measured on 18,656 grid queries: 57–69% identical, mean
//     |relative difference| 0.6–1.5%, 99th percentile 6–15%, up to 29%).
//   - GradStats, Iteration: linear interpolation between the two nearest
//     validated batch sizes, per epoch.
//   - Progress: the minimum over validated batch sizes of the cumulative
//     progress after an epoch.
//
// A typed application (LoadTypedAll, over the Sia artifact's profiles)
// carries one throughput table per GPU type (ThroughputOn, LocalBszBounds,
// MaxLocalBszFor, OneGPUThroughput); the statistical tables are shared by
// all types.
//
// The package does no I/O of its own: Load reads from the fs.FS its caller
// gives (data.Traces() for the embedded copy). An Application is immutable
// after Load apart from internal memoisation, and safe for concurrent use.
package apps
