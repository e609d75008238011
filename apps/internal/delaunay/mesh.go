package delaunay

import (
	"fmt"
	"math"
)

// Tolerances of SciPy's point location (scipy/spatial/qhull.pyx,
// LinearNDInterpolator): a barycentric coordinate within eps of [0, 1]
// counts as inside; epsBroad is the leeway towards a degenerate neighbour.
const (
	dblEpsilon = 0x1p-52
	eps        = 100 * dblEpsilon // 100·DBL_EPSILON
	epsBroad   = 0x1p-26          // sqrt(DBL_EPSILON)
	rcondLimit = 1000 * dblEpsilon
)

// Mesh is a tessellation of a point set into tetrahedra, ready for point
// location and linear interpolation. It is immutable and safe for concurrent
// use.
type Mesh struct {
	points    [][3]float64
	simplices [][4]int
	neighbors [][4]int
	// equations holds, per simplex, the hyperplane (normal, offset) of its
	// facet of the lifted convex hull, used by the first stage of Locate;
	// nil skips that stage.
	equations       [][5]float64
	paraboloidScale float64
	paraboloidShift float64
	// transform holds, per simplex, the inverse T⁻¹ of T = [v_j − v_3]
	// (columns j = 0, 1, 2) in rows 0–2 and v_3 in row 3, so that the
	// barycentric coordinates of x are c_j = Σ_k T⁻¹[j][k]·(x_k − v3_k),
	// c_3 = 1 − Σ c_j. Degenerate simplices have degenerate[s] set.
	transform  [][4][3]float64
	degenerate []bool
	lo, hi     [3]float64
	// boxes holds each simplex's bounding box, widened by boxMargin of its
	// extent, a conservative filter before the barycentric test of the
	// brute-force scan (it never changes the outcome).
	boxes [][2][3]float64
}

// boxMargin widens the bounding boxes of the brute-force filter: far more
// than the barycentric tolerances (at most epsBroad ≈ 1.5e-8 of a
// simplex's extent) allow a point to lie outside its simplex.
const boxMargin = 1e-6

// NewMesh returns a mesh over points made of simplices (indices into points)
// with their neighbours (neighbors[s][k] is the simplex across the face
// opposite vertex k of simplex s, or −1). equations, if not nil, are the
// lifted facet planes of Qhull's Delaunay (one per simplex, normal then
// offset), with the lift z = Σ x_i² · paraboloidScale + paraboloidShift.
// A simplex whose barycentric transform is singular or ill-conditioned
// (reciprocal condition number below 1000·DBL_EPSILON, as SciPy) is kept
// for adjacency but never reported by Locate.
func NewMesh(points [][3]float64, simplices, neighbors [][4]int, equations [][5]float64, paraboloidScale, paraboloidShift float64) (*Mesh, error) {
	if len(points) == 0 || len(simplices) == 0 {
		return nil, fmt.Errorf("failed to build mesh: %d points and %d simplices", len(points), len(simplices))
	}
	if len(neighbors) != len(simplices) {
		return nil, fmt.Errorf("failed to build mesh: %d neighbour rows for %d simplices", len(neighbors), len(simplices))
	}
	if equations != nil && len(equations) != len(simplices) {
		return nil, fmt.Errorf("failed to build mesh: %d equations for %d simplices", len(equations), len(simplices))
	}
	for i, p := range points {
		for _, x := range p {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return nil, fmt.Errorf("failed to build mesh: point %d: non-finite coordinate in %v", i, p)
			}
		}
	}
	for s := range simplices {
		for k := range 4 {
			if v := simplices[s][k]; v < 0 || v >= len(points) {
				return nil, fmt.Errorf("failed to build mesh: simplex %d: vertex %d out of range [0, %d)", s, v, len(points))
			}
			if n := neighbors[s][k]; n < -1 || n >= len(simplices) {
				return nil, fmt.Errorf("failed to build mesh: simplex %d: neighbour %d out of range", s, n)
			}
		}
	}
	m := &Mesh{
		points:          points,
		simplices:       simplices,
		neighbors:       neighbors,
		equations:       equations,
		paraboloidScale: paraboloidScale,
		paraboloidShift: paraboloidShift,
		transform:       make([][4][3]float64, len(simplices)),
		degenerate:      make([]bool, len(simplices)),
		boxes:           make([][2][3]float64, len(simplices)),
	}
	m.lo, m.hi = points[0], points[0]
	for _, p := range points {
		for i := range 3 {
			m.lo[i] = min(m.lo[i], p[i])
			m.hi[i] = max(m.hi[i], p[i])
		}
	}
	for s, simplex := range simplices {
		m.transform[s], m.degenerate[s] = barycentricTransform(points, simplex)
		lo, hi := points[simplex[0]], points[simplex[0]]
		for _, v := range simplex[1:] {
			for i := range 3 {
				lo[i] = min(lo[i], points[v][i])
				hi[i] = max(hi[i], points[v][i])
			}
		}
		ext := max(hi[0]-lo[0], hi[1]-lo[1], hi[2]-lo[2]) * boxMargin
		for i := range 3 {
			lo[i] -= ext + math.Abs(lo[i])*dblEpsilon
			hi[i] += ext + math.Abs(hi[i])*dblEpsilon
		}
		m.boxes[s] = [2][3]float64{lo, hi}
	}
	return m, nil
}

// barycentricTransform returns the transform of one simplex (see
// Mesh.transform) and whether the simplex is degenerate.
func barycentricTransform(points [][3]float64, s [4]int) ([4][3]float64, bool) {
	var out [4][3]float64
	r := points[s[3]]
	out[3] = r
	if orient(points[s[0]], points[s[1]], points[s[2]], r) == 0 {
		return out, true
	}
	var t [3][3]float64
	for i := range 3 {
		for j := range 3 {
			t[i][j] = points[s[j]][i] - r[i]
		}
	}
	inv, ok := invert3(t)
	if !ok || norm1(t)*norm1(inv) > 1/rcondLimit {
		return out, true
	}
	copy(out[:3], inv[:])
	return out, false
}

// invert3 inverts a 3×3 matrix by Gaussian elimination with partial
// pivoting; ok is false if it is singular.
func invert3(a [3][3]float64) (inv [3][3]float64, ok bool) {
	for i := range 3 {
		inv[i][i] = 1
	}
	for c := range 3 {
		p := c
		for r := c + 1; r < 3; r++ {
			if math.Abs(a[r][c]) > math.Abs(a[p][c]) {
				p = r
			}
		}
		if a[p][c] == 0 {
			return inv, false
		}
		a[c], a[p] = a[p], a[c]
		inv[c], inv[p] = inv[p], inv[c]
		for r := range 3 {
			if r == c {
				continue
			}
			f := a[r][c] / a[c][c]
			for k := range 3 {
				a[r][k] -= f * a[c][k]
				inv[r][k] -= f * inv[c][k]
			}
		}
	}
	for r := range 3 {
		d := a[r][r]
		for k := range 3 {
			inv[r][k] /= d
		}
	}
	return inv, true
}

// norm1 is the maximum absolute column sum.
func norm1(a [3][3]float64) float64 {
	var n float64
	for j := range 3 {
		n = max(n, math.Abs(a[0][j])+math.Abs(a[1][j])+math.Abs(a[2][j]))
	}
	return n
}

// Len returns the number of simplices.
func (m *Mesh) Len() int { return len(m.simplices) }

// Simplex returns the vertex indices of simplex s.
func (m *Mesh) Simplex(s int) [4]int { return m.simplices[s] }

// Neighbor returns the simplex across the face opposite vertex k of simplex
// s, or −1 on the hull.
func (m *Mesh) Neighbor(s, k int) int { return m.neighbors[s][k] }

// Degenerate reports whether simplex s has no usable barycentric transform
// (zero or nearly zero volume).
func (m *Mesh) Degenerate(s int) bool { return m.degenerate[s] }

// Point returns point i.
func (m *Mesh) Point(i int) [3]float64 { return m.points[i] }

// NumPoints returns the number of points.
func (m *Mesh) NumPoints() int { return len(m.points) }

// barycentric computes the barycentric coordinates of x in simplex s in
// SciPy's order of operations (_barycentric_coordinates).
func (m *Mesh) barycentric(s int, x [3]float64) [4]float64 {
	t := &m.transform[s]
	var c [4]float64
	c[3] = 1
	for i := range 3 {
		for j := range 3 {
			c[i] += t[i][j] * (x[j] - t[3][j])
		}
		c[3] -= c[i]
	}
	return c
}

// inside reports whether all barycentric coordinates lie in [−eps, 1+eps].
func inside(c [4]float64) bool {
	for _, v := range c {
		if !(v >= -eps && v <= 1+eps) {
			return false
		}
	}
	return true
}

// Locate finds a simplex containing x and the barycentric coordinates of x
// in it, following SciPy's find_simplex: outside the bounding box (with
// tolerance eps) nothing is found; otherwise a walk over the lifted facet
// planes from simplex 0 (when the mesh has equations), a directed walk by
// barycentric coordinates, and a brute-force scan if the walk meets a
// degenerate simplex or does not converge. ok is false if x lies outside the
// tessellation.
func (m *Mesh) Locate(x [3]float64) (simplex int, bary [4]float64, ok bool) {
	for i := range 3 {
		if x[i] < m.lo[i]-eps || x[i] > m.hi[i]+eps {
			return -1, bary, false
		}
	}
	s := 0
	if m.equations != nil {
		s = m.liftedWalk(x)
	}
	return m.directed(s, x)
}

// liftedWalk moves from simplex 0 to neighbours whose lifted facet plane
// lies further above the lifted point (SciPy's _find_simplex, first stage).
func (m *Mesh) liftedWalk(x [3]float64) int {
	var z [4]float64
	for i := range 3 {
		z[i] = x[i]
		z[3] += x[i] * x[i]
	}
	z[3] *= m.paraboloidScale
	z[3] += m.paraboloidShift
	dist := func(s int) float64 {
		e := &m.equations[s]
		d := e[4]
		for k := range 4 {
			d += e[k] * z[k]
		}
		return d
	}
	s := 0
	best := dist(s)
	for changed := true; changed && best <= 0; {
		changed = false
		for k := range 4 {
			n := m.neighbors[s][k]
			if n == -1 {
				continue
			}
			// SciPy moves on mid-cycle and carries on with the next k.
			if d := dist(n); d > best+eps*(1+math.Abs(best)) {
				s, best, changed = n, d, true
			}
		}
	}
	return s
}

// directed walks towards x by barycentric coordinates (SciPy's
// _find_simplex_directed).
func (m *Mesh) directed(s int, x [3]float64) (int, [4]float64, bool) {
	for range 1 + len(m.simplices)/4 {
		if m.degenerate[s] {
			return m.bruteForce(x)
		}
		t := &m.transform[s]
		var c [4]float64
		state := 1 // 1 inside, -1 hopped, 0 failed
		for k := range 4 {
			if k < 3 {
				for j := range 3 {
					c[k] += t[k][j] * (x[j] - t[3][j])
				}
			} else {
				c[3] = 1 - c[0] - c[1] - c[2]
			}
			if c[k] < -eps {
				n := m.neighbors[s][k]
				if n == -1 {
					return -1, c, false
				}
				s = n
				state = -1
				break
			} else if !(c[k] <= 1+eps) {
				state = 0
			}
		}
		switch state {
		case 1:
			return s, c, true
		case 0:
			return m.bruteForce(x)
		}
	}
	return m.bruteForce(x)
}

// inBox reports whether x lies in the widened bounding box of simplex s.
func (m *Mesh) inBox(s int, x [3]float64) bool {
	b := &m.boxes[s]
	return x[0] >= b[0][0] && x[0] <= b[1][0] && x[1] >= b[0][1] && x[1] <= b[1][1] && x[2] >= b[0][2] && x[2] <= b[1][2]
}

// bruteForce scans all simplices in order (SciPy's
// _find_simplex_bruteforce): a valid simplex containing x is returned; a
// degenerate one is replaced by a neighbour that contains x with extra
// leeway epsBroad towards the degenerate simplex.
func (m *Mesh) bruteForce(x [3]float64) (int, [4]float64, bool) {
	for s := range m.simplices {
		if !m.degenerate[s] {
			if !m.inBox(s, x) {
				continue
			}
			if c := m.barycentric(s, x); inside(c) {
				return s, c, true
			}
			continue
		}
		for k := range 4 {
			n := m.neighbors[s][k]
			if n == -1 || m.degenerate[n] || !m.inBox(n, x) {
				continue
			}
			c := m.barycentric(n, x)
			ok := true
			for q := range 4 {
				lo := -eps
				if m.neighbors[n][q] == s {
					lo = -epsBroad
				}
				if !(c[q] >= lo && c[q] <= 1+eps) {
					ok = false
					break
				}
			}
			if ok {
				return n, c, true
			}
		}
	}
	return -1, [4]float64{}, false
}
