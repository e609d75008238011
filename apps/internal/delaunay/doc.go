// Package delaunay owns the 3-D piecewise-linear interpolation behind the
// application profiles: a Delaunay triangulation of scattered points, and
// point location with barycentric interpolation in the manner of SciPy's
// LinearNDInterpolator, which the Pollux artifact uses for throughput at
// placements it never measured (Pollux, OSDI '21, artifact
// simulator/applications.py, get_throughput).
//
// Two kinds of Mesh exist:
//
//   - Triangulate builds a Delaunay triangulation in Go (Bowyer–Watson with
//     ghost tetrahedra on a tiny deterministic joggle of the input, like
//     Qhull's QJ option, with exact predicates). Where the input has
//     cospherical points (the profile grids have very many) the Delaunay
//     triangulation is not unique and this one may differ from Qhull's.
//   - ReadQhull loads a tessellation recorded from SciPy (simplices,
//     neighbours and the lifted facet equations of Qhull 2019.1 with options
//     "Qbb Qc Qz Q12 Qt"), so that the artifact's interpolant is replayed
//     exactly, including its degenerate (zero-volume) simplices.
//
// Mesh.Locate follows SciPy's find_simplex (scipy/spatial/qhull.pyx): a walk
// over the lifted facet planes from simplex 0, a directed barycentric walk,
// and a brute-force scan as the fallback, with the same tolerances
// (100·DBL_EPSILON and sqrt(DBL_EPSILON)). On a face shared by a
// zero-volume simplex the interpolant is discontinuous, so the simplex that
// is found decides the value; following SciPy's search order reproduces its
// choice.
//
// All types are immutable after construction and safe for concurrent use.
package delaunay
