package delaunay

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Stats summarises a Check of a mesh.
type Stats struct {
	Simplices  int     // number of simplices
	Degenerate int     // simplices with no usable barycentric transform (flat)
	Volume     float64 // Σ |volume| of the simplices
	HullVolume float64 // volume enclosed by the hull faces (faces with no neighbour)
	// Cospherical counts interior faces whose two opposite vertices lie on
	// one sphere with the face (where the Delaunay triangulation is not
	// unique); Violations counts faces where the opposite vertex lies
	// strictly inside the other simplex's circumsphere, and MaxViolation is
	// the largest such intrusion relative to the circumradius.
	Cospherical  int
	Violations   int
	MaxViolation float64
}

// Check validates the mesh as a triangulation of the convex hull of its
// points and measures its Delaunay property. It returns an error if
// neighbours are not mutual, if two non-degenerate simplices sharing a face
// lie on the same side of it, if a point lies strictly outside a hull face,
// or if the simplex volumes do not add up to the hull's volume (relative
// tolerance 1e-9). The Delaunay property (empty circumspheres, checked
// between neighbours, which suffices for a triangulation) is reported in
// Stats, not as an error, since the joggle of Triangulate may leave
// intrusions of the order of the joggle.
func (m *Mesh) Check() (Stats, error) {
	st := Stats{Simplices: len(m.simplices)}
	var errs []error
	vol := make([]float64, len(m.simplices))
	sign := make([]int, len(m.simplices))
	for s, v := range m.simplices {
		p := m.pts4(v)
		sign[s] = orient(p[0], p[1], p[2], p[3])
		vol[s] = math.Abs(det3f(sub3(p[1], p[0]), sub3(p[2], p[0]), sub3(p[3], p[0]))) / 6
		st.Volume += vol[s]
		if m.degenerate[s] {
			st.Degenerate++
		}
	}
	parity, perr := m.parities(sign)
	if perr != nil {
		errs = append(errs, perr)
	}
	// Centroid as the apex for the hull-volume sum.
	var o [3]float64
	for _, p := range m.points {
		for i := range 3 {
			o[i] += p[i] / float64(len(m.points))
		}
	}
	for s, v := range m.simplices {
		for k := range 4 {
			n := m.neighbors[s][k]
			if n == -1 {
				a, b, c := m.outwardFace(s, k, parity[s])
				if orient(a, b, c, vec{a[0] + 1, a[1], a[2]}) != 0 || orient(a, b, c, vec{a[0], a[1] + 1, a[2]}) != 0 || orient(a, b, c, vec{a[0], a[1], a[2] + 1}) != 0 {
					// A face with area: no point may lie beyond it.
					for i, q := range m.points {
						if orient(a, b, c, q) > 0 {
							errs = append(errs, fmt.Errorf("point %d lies outside hull face %v of simplex %d", i, v, s))
							break
						}
					}
				}
				st.HullVolume += det3f(sub3(a, o), sub3(b, o), sub3(c, o)) / 6
				continue
			}
			back := -1
			for q := range 4 {
				if m.neighbors[n][q] == s {
					back = q
				}
			}
			if back < 0 {
				errs = append(errs, fmt.Errorf("simplex %d lists %d as a neighbour, not vice versa", s, n))
				continue
			}
			if n < s || sign[s] == 0 || sign[n] == 0 {
				continue
			}
			face, opp := m.face(s, k)
			_, oppN := m.face(n, back)
			a, b, c := m.points[face[0]], m.points[face[1]], m.points[face[2]]
			if orient(a, b, c, m.points[opp])*orient(a, b, c, m.points[oppN]) >= 0 {
				errs = append(errs, fmt.Errorf("simplices %d and %d overlap across face %v", s, n, face))
			}
			p := m.pts4(v)
			is := inSphere(p[0], p[1], p[2], p[3], m.points[oppN]) * sign[s]
			switch {
			case is == 0:
				st.Cospherical++
			case is > 0:
				st.Violations++
				st.MaxViolation = max(st.MaxViolation, intrusion(p, m.points[oppN]))
			}
		}
	}
	if d := math.Abs(st.Volume - st.HullVolume); d > 1e-9*st.HullVolume {
		errs = append(errs, fmt.Errorf("simplex volumes add up to %g, hull volume is %g", st.Volume, st.HullVolume))
	}
	if len(errs) > 10 {
		errs = append(errs[:10], fmt.Errorf("and %d more errors", len(errs)-10))
	}
	return st, errors.Join(errs...)
}

// parities returns a combinatorial orientation (+1 or −1) for every simplex:
// the geometric orientation sign for a simplex with volume, and for a flat
// one the orientation consistent with its neighbours (two simplices sharing
// a face must induce opposite orientations on it). It reports an error if
// the orientations of simplices with volume are inconsistent.
func (m *Mesh) parities(sign []int) ([]int, error) {
	parity := slices.Clone(sign)
	var queue []int
	for s, p := range parity {
		if p != 0 {
			queue = append(queue, s)
		}
	}
	if len(queue) == 0 {
		return nil, errors.New("every simplex is flat")
	}
	var bad error
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for k := range 4 {
			n := m.neighbors[s][k]
			if n == -1 {
				continue
			}
			back := slices.Index(m.neighbors[n][:], s)
			if back < 0 {
				continue // reported by Check
			}
			want := -parity[s] * faceParity(m.simplices[s], k, m.simplices[n], back)
			switch parity[n] {
			case 0:
				parity[n] = want
				queue = append(queue, n)
			case want:
			default:
				if bad == nil {
					bad = fmt.Errorf("simplices %d and %d are inconsistently oriented", s, n)
				}
			}
		}
	}
	for s, p := range parity {
		if p == 0 {
			return nil, fmt.Errorf("simplex %d is not connected to the others", s)
		}
	}
	return parity, bad
}

// faceParity returns +1 if the face opposite vertex k of simplex v, ordered
// by faceOf, is an even permutation of the face opposite vertex q of simplex
// w, ordered the same way, and −1 if odd.
func faceParity(v [4]int, k int, w [4]int, q int) int {
	f := faceOf[k]
	g := faceOf[q]
	a := [3]int{v[f[0]], v[f[1]], v[f[2]]}
	b := [3]int{w[g[0]], w[g[1]], w[g[2]]}
	for r := range 3 {
		if a[0] == b[r] && a[1] == b[(r+1)%3] && a[2] == b[(r+2)%3] {
			return 1
		}
	}
	return -1
}

// outwardFace returns the vertices of the face of simplex s opposite vertex
// k, ordered so that the outside of the simplex is on the positive side,
// given the simplex's orientation parity.
func (m *Mesh) outwardFace(s, k, parity int) (a, b, c vec) {
	v := m.simplices[s]
	f := faceOf[k]
	a, b, c = m.points[v[f[0]]], m.points[v[f[1]]], m.points[v[f[2]]]
	if parity > 0 {
		b, c = c, b
	}
	return a, b, c
}

// face returns the vertices of the face of simplex s opposite its vertex k,
// and that vertex.
func (m *Mesh) face(s, k int) ([3]int, int) {
	v := m.simplices[s]
	var f [3]int
	j := 0
	for q := range 4 {
		if q != k {
			f[j] = v[q]
			j++
		}
	}
	return f, v[k]
}

func (m *Mesh) pts4(v [4]int) [4][3]float64 {
	return [4][3]float64{m.points[v[0]], m.points[v[1]], m.points[v[2]], m.points[v[3]]}
}

// intrusion returns (R − |e − centre|)/R for the circumsphere of p.
func intrusion(p [4][3]float64, e [3]float64) float64 {
	// Solve 2(p_i − p_0)·c = |p_i|² − |p_0|² for the centre c.
	var a [3][3]float64
	var rhs [3]float64
	for i := 1; i < 4; i++ {
		for k := range 3 {
			a[i-1][k] = 2 * (p[i][k] - p[0][k])
		}
		rhs[i-1] = dot(p[i], p[i]) - dot(p[0], p[0])
	}
	inv, ok := invert3(a)
	if !ok {
		return math.Inf(1)
	}
	var c [3]float64
	for i := range 3 {
		for k := range 3 {
			c[i] += inv[i][k] * rhs[k]
		}
	}
	r := math.Sqrt(dot(sub3(p[0], c), sub3(p[0], c)))
	return (r - math.Sqrt(dot(sub3(e, c), sub3(e, c)))) / r
}

func sub3(a, b [3]float64) [3]float64 { return [3]float64{a[0] - b[0], a[1] - b[1], a[2] - b[2]} }

func dot(a, b [3]float64) float64 { return a[0]*b[0] + a[1]*b[1] + a[2]*b[2] }

// det3f is the determinant of the matrix with rows a, b, c.
func det3f(a, b, c [3]float64) float64 {
	return a[0]*(b[1]*c[2]-b[2]*c[1]) - a[1]*(b[0]*c[2]-b[2]*c[0]) + a[2]*(b[0]*c[1]-b[1]*c[0])
}
