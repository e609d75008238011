package apps

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/pollux-nomad/pollux/apps/internal/delaunay"
)

// ErrOutOfRange is returned (wrapped) by Throughput for a query the
// artifact's interpolators cannot answer: a local_bsz outside the measured
// range of a measured placement, or a point outside the convex hull of the
// 3-D interpolation points. The artifact fails an assertion there.
var ErrOutOfRange = errors.New("outside the measured range")

// maxNodes caps num_nodes in 3-D interpolation, as the artifact does (its
// profiles reach 16 nodes).
const maxNodes = 16

// throughputResult is a memoised Throughput answer.
type throughputResult struct {
	step, sync float64
	err        error
}

// Throughput returns the true (measured or interpolated) time of one
// synchronising step (stepTime) and the part of it spent in gradient
// synchronisation (syncTime), in seconds, for a job placed with
// placement[i] GPUs on node i and local (per-GPU) batch size localBsz
// (artifact applications.py, get_throughput; pollux-reference.md §4).
//
// Empty nodes are dropped and the placement is rotated to its
// lexicographically smallest rotation. If placements.csv has that
// placement, the result interpolates linearly over local_bsz between its
// rows (SciPy interp1d: a local_bsz outside the rows' range is an error).
// Otherwise it interpolates piecewise-linearly at (min(nodes, 16), GPUs,
// localBsz) over the tessellation of the 3-D interpolation points (SciPy
// LinearNDInterpolator: a point outside their convex hull is an error).
// Errors wrap ErrOutOfRange. Results are memoised; Throughput is safe for
// concurrent use.
func (a *Application) Throughput(placement []int, localBsz int) (stepTime, syncTime float64, err error) {
	return a.profile.throughput(placement, localBsz)
}

// ThroughputOn is Throughput on GPU type gpuType: the table of that type
// for a typed application ("" means the default type). It fails for a type
// the application was not profiled on.
func (a *Application) ThroughputOn(gpuType string, placement []int, localBsz int) (stepTime, syncTime float64, err error) {
	p, err := a.table(gpuType)
	if err != nil {
		return 0, 0, err
	}
	return p.throughput(placement, localBsz)
}

// table returns the throughput table of gpuType ("" = the default).
func (a *Application) table(gpuType string) (*profile, error) {
	if gpuType == "" || gpuType == a.gpuType {
		return a.profile, nil
	}
	p, ok := a.types[gpuType]
	if !ok {
		return nil, fmt.Errorf("application %s has no profile for GPU type %q (it has %v)", a.Name, gpuType, a.Types())
	}
	return p, nil
}

// Types returns the GPU types the application was profiled on, sorted; nil
// for an untyped application.
func (a *Application) Types() []string {
	out := make([]string, 0, len(a.types))
	for t := range a.types {
		out = append(out, t)
	}
	slices.Sort(out)
	if len(out) == 0 {
		return nil
	}
	return out
}

// HasType reports whether the application can run on GPU type gpuType (""
// always: the default type).
func (a *Application) HasType(gpuType string) bool {
	_, err := a.table(gpuType)
	return err == nil
}

// LocalBszBounds returns the per-GPU micro-batch bounds on gpuType (""
// = the default type, i.e. MinLocalBsz and MaxLocalBsz).
func (a *Application) LocalBszBounds(gpuType string) (minLocal, maxLocal int, err error) {
	p, err := a.table(gpuType)
	if err != nil {
		return 0, 0, err
	}
	return p.minLocal, p.maxLocal, nil
}

// MaxLocalBszFor returns the largest local_bsz profiled for a placement on
// gpuType, as the Sia artifact's Application.get_max_local_bsz: the rows of
// the placement itself if measured, else the largest local_bsz of the
// scalability rows with at least as many nodes and GPUs; 0 if there is
// none.
func (a *Application) MaxLocalBszFor(gpuType string, placement []int) int {
	p, err := a.table(gpuType)
	if err != nil {
		return 0
	}
	var buf [32]int
	q, ok := nonZero(buf[:0], placement)
	if !ok {
		return 0
	}
	start := smallestRotation(q)
	norm := append(slices.Clone(q[start:]), q[:start]...)
	if rows, ok := p.placements[placementID(norm)]; ok {
		m := 0
		for _, r := range rows {
			m = max(m, r.localBsz)
		}
		return m
	}
	k := 0
	for _, g := range norm {
		k += g
	}
	m := 0
	for _, r := range p.scal {
		if r.numNodes >= len(norm) && r.numReplicas >= k {
			m = max(m, r.localBsz)
		}
	}
	return m
}

// MaxLocalBszMeasured returns the largest local_bsz measured for a
// placement on gpuType, and whether the placement (up to rotation) is
// measured at all.
func (a *Application) MaxLocalBszMeasured(gpuType string, placement []int) (int, bool) {
	p, err := a.table(gpuType)
	if err != nil {
		return 0, false
	}
	var buf [32]int
	q, ok := nonZero(buf[:0], placement)
	if !ok {
		return 0, false
	}
	start := smallestRotation(q)
	rows, ok := p.placements[placementID(append(slices.Clone(q[start:]), q[:start]...))]
	if !ok {
		return 0, false
	}
	m := 0
	for _, r := range rows {
		m = max(m, r.localBsz)
	}
	return m, true
}

// MaxReplicasOn returns the most GPUs of the measured configurations on
// gpuType ("" = the default type): of its placements and scalability
// rows. ThroughputOn answers no placement with more GPUs (a measured
// placement has its own rows, any other lies outside the convex hull of
// the points). It returns 0 for a type the application was not profiled
// on.
func (a *Application) MaxReplicasOn(gpuType string) int {
	p, err := a.table(gpuType)
	if err != nil {
		return 0
	}
	return p.maxReplicas
}

// MaxLocalBszForReplicas returns the largest local_bsz among the measured
// placements of gpuType with exactly replicas GPUs, and whether there is
// one (the Sia artifact's memory correction in Job.update_local_bsz).
func (a *Application) MaxLocalBszForReplicas(gpuType string, replicas int) (int, bool) {
	p, err := a.table(gpuType)
	if err != nil {
		return 0, false
	}
	m, ok := p.maxLocalByReplicas[replicas]
	return m, ok
}

// throughput is Throughput on this table.
func (a *profile) throughput(placement []int, localBsz int) (stepTime, syncTime float64, err error) {
	// A memo hit allocates nothing: the key is built in stack buffers.
	var pbuf [32]int
	p, ok := nonZero(pbuf[:0], placement)
	if !ok {
		return 0, 0, fmt.Errorf("failed to look up throughput of %s: placement %v has no GPUs or a negative count", a.name, placement)
	}
	start := smallestRotation(p)
	var kbuf [128]byte
	key := appendKey(kbuf[:0], p, start, localBsz)
	a.memoMu.RLock()
	r, hit := a.memo[string(key)]
	a.memoMu.RUnlock()
	if hit {
		return r.step, r.sync, r.err
	}
	norm := append(slices.Clone(p[start:]), p[:start]...)
	if rows, ok := a.placements[placementID(norm)]; ok {
		r.step, r.sync, r.err = interp1(rows, localBsz)
	} else {
		gpus := 0
		for _, g := range norm {
			gpus += g
		}
		r.step, r.sync, r.err = a.interpolate3(min(len(norm), maxNodes), gpus, localBsz)
	}
	if r.err != nil {
		r.err = fmt.Errorf("failed to look up throughput of %s at placement %v, local_bsz %d: %w", a.name, placement, localBsz, r.err)
	}
	a.memoMu.Lock()
	if a.memo == nil {
		a.memo = map[string]throughputResult{}
	}
	a.memo[string(key)] = r
	a.memoMu.Unlock()
	return r.step, r.sync, r.err
}

// nonZero appends the non-zero entries of placement to dst; ok is false if
// there are none or one is negative.
func nonZero(dst, placement []int) (p []int, ok bool) {
	for _, g := range placement {
		if g < 0 {
			return nil, false
		}
		if g > 0 {
			dst = append(dst, g)
		}
	}
	return dst, len(dst) > 0
}

// smallestRotation returns the start of the lexicographically smallest
// rotation of p (the first such start if several rotations are equal).
func smallestRotation(p []int) int {
	n, start := len(p), 0
	for i := 1; i < n; i++ {
		for j := range n {
			if x, y := p[(i+j)%n], p[(start+j)%n]; x != y {
				if x < y {
					start = i
				}
				break
			}
		}
	}
	return start
}

// appendKey appends the memo key of a query: the rotated placement's GPU
// counts separated by commas, '|', and localBsz.
func appendKey(buf []byte, p []int, start, localBsz int) []byte {
	for j := range p {
		if j > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendInt(buf, int64(p[(start+j)%len(p)]), 10)
	}
	buf = append(buf, '|')
	return strconv.AppendInt(buf, int64(localBsz), 10)
}

// placementID joins the GPU counts' decimal digits, as the artifact's
// int("".join(map(str, placement))) lookup key does (so a node with 10 or
// more GPUs would alias a longer placement there too).
func placementID(p []int) string {
	var b strings.Builder
	for _, g := range p {
		b.WriteString(strconv.Itoa(g))
	}
	return b.String()
}

// interp1 interpolates (step_time, sync_time) linearly over local_bsz among
// rows sorted by local_bsz, with the arithmetic of SciPy's interp1d
// (_call_linear): the segment is found with a left binary search clipped to
// [1, n−1], and y = slope·(x − x_lo) + y_lo.
func interp1(rows []placementRow, x int) (float64, float64, error) {
	n := len(rows)
	if n < 2 {
		return 0, 0, fmt.Errorf("%w: one local_bsz row only, interpolation needs two", ErrOutOfRange)
	}
	if x < rows[0].localBsz || x > rows[n-1].localBsz {
		return 0, 0, fmt.Errorf("%w: local_bsz %d not in [%d, %d]", ErrOutOfRange, x, rows[0].localBsz, rows[n-1].localBsz)
	}
	i, _ := slices.BinarySearchFunc(rows, x, func(r placementRow, x int) int { return r.localBsz - x })
	i = min(max(i, 1), n-1)
	lo, hi := rows[i-1], rows[i]
	dx := float64(hi.localBsz - lo.localBsz)
	t := float64(x - lo.localBsz)
	step := (hi.stepTime-lo.stepTime)/dx*t + lo.stepTime
	sync := (hi.syncTime-lo.syncTime)/dx*t + lo.syncTime
	if math.IsNaN(step) || math.IsNaN(sync) {
		// A duplicated smallest local_bsz: interp1d divides 0 by 0.
		return 0, 0, fmt.Errorf("%w: local_bsz %d is duplicated at the start of the placement's rows", ErrOutOfRange, x)
	}
	return step, sync, nil
}

// tessellation returns the mesh for 3-D interpolation, reading the
// recorded tessellation or triangulating on first use.
func (a *profile) tessellation() (*delaunay.Mesh, error) {
	a.meshOnce.Do(func() {
		if a.reference != nil {
			a.mesh, a.meshErr = readReference(a.reference, a.name)
			return
		}
		a.mesh, a.meshErr = delaunay.Triangulate(a.points)
		if a.meshErr != nil {
			a.meshErr = fmt.Errorf("failed to triangulate the throughput profile of %s: %w", a.name, a.meshErr)
		}
	})
	return a.mesh, a.meshErr
}

// interpolate3 evaluates the 3-D piecewise-linear interpolant at (nodes,
// gpus, localBsz), summing c_j·value_j over the simplex's vertices in order
// as LinearNDInterpolator does.
func (a *profile) interpolate3(nodes, gpus, localBsz int) (float64, float64, error) {
	m, err := a.tessellation()
	if err != nil {
		return 0, 0, err
	}
	x := [3]float64{float64(nodes), float64(gpus), float64(localBsz)}
	s, c, ok := m.Locate(x)
	if !ok {
		return 0, 0, fmt.Errorf("%w: (nodes %d, GPUs %d, local_bsz %d) is outside the convex hull of the profile", ErrOutOfRange, nodes, gpus, localBsz)
	}
	var step, sync float64
	for j, v := range m.Simplex(s) {
		step += c[j] * a.values[v][0]
		sync += c[j] * a.values[v][1]
	}
	return step, sync, nil
}
