package delaunay

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// infinite is the vertex index of the point at infinity that closes the
// triangulation of the convex hull into one of the whole space: every hull
// face is the base of a "ghost" tetrahedron whose apex is infinite.
const infinite = -1

// faceOf[k] lists the vertices of the face opposite vertex k of a tetrahedron
// in an order that keeps vertex k on the positive side: for a positively
// oriented tetrahedron v, orient(v[f[0]], v[f[1]], v[f[2]], v[k]) > 0.
var faceOf = [4][3]int{{1, 3, 2}, {0, 2, 3}, {0, 3, 1}, {0, 1, 2}}

// errDegenerate reports that the joggled input was still degenerate (a zero
// orientation or insphere determinant where general position is assumed);
// Triangulate retries with a larger joggle.
var errDegenerate = errors.New("degenerate joggled input")

// Joggle settings: each coordinate moves by at most joggleScale times the
// extent of the points along its axis (Qhull's QJ default is of the same
// order relative to the largest coordinate). Retries multiply the scale by
// joggleGrowth.
const (
	joggleScale   = 1e-9
	joggleGrowth  = 100
	joggleRetries = 3
)

// tet is one tetrahedron of the triangulation under construction: its
// vertices (infinite for a ghost's apex), positively oriented, and the
// neighbour across the face opposite each vertex.
type tet struct {
	v    [4]int32
	n    [4]int32
	dead bool
}

// Triangulate returns a Delaunay triangulation of points (at least four, not
// all coplanar, no duplicates, all finite). It is built with the
// Bowyer–Watson algorithm on a deterministic joggle of the points (each
// coordinate moved by at most 1e-9 of the points' extent along that axis),
// with exact predicates, so that it is a valid triangulation whatever the
// degeneracies of the input; it is Delaunay for the joggled points, and for
// the original points up to the joggle. Where the original points are
// cospherical, the triangulation is one of the valid choices, and some of
// its tetrahedra may be flat in the original coordinates; Locate never
// reports those.
func Triangulate(points [][3]float64) (*Mesh, error) {
	if err := checkInput(points); err != nil {
		return nil, fmt.Errorf("failed to triangulate: %w", err)
	}
	var simplices [][4]int
	var err error
	scale := joggleScale
	for try := range joggleRetries {
		jog := joggle(points, uint64(try), scale)
		simplices, err = bowyerWatson(jog)
		if err == nil {
			break
		}
		if !errors.Is(err, errDegenerate) {
			return nil, fmt.Errorf("failed to triangulate: %w", err)
		}
		scale *= joggleGrowth
	}
	if err != nil {
		return nil, fmt.Errorf("failed to triangulate after %d joggles: %w", joggleRetries, err)
	}
	neighbors := Neighbors(simplices)
	return NewMesh(points, simplices, neighbors, nil, 0, 0)
}

// checkInput rejects inputs that no triangulation can handle.
func checkInput(points [][3]float64) error {
	if len(points) < 4 {
		return fmt.Errorf("need at least 4 points, got %d", len(points))
	}
	if len(points) > math.MaxInt32 {
		return fmt.Errorf("too many points: %d", len(points))
	}
	for i, p := range points {
		for _, x := range p {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return fmt.Errorf("point %d: non-finite coordinate in %v", i, p)
			}
		}
	}
	if _, err := (&builder{pts: points}).independent(); err != nil {
		return err
	}
	order := make([]int, len(points))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(i, j int) int { return cmpPoint(points[i], points[j]) })
	for k := 1; k < len(order); k++ {
		if points[order[k]] == points[order[k-1]] {
			return fmt.Errorf("points %d and %d are duplicates: %v", order[k-1], order[k], points[order[k]])
		}
	}
	return nil
}

func cmpPoint(a, b [3]float64) int {
	for i := range 3 {
		if a[i] < b[i] {
			return -1
		}
		if a[i] > b[i] {
			return 1
		}
	}
	return 0
}

// joggle returns a copy of points with each coordinate moved by a
// deterministic pseudo-random amount in [−scale·extent, +scale·extent),
// extent being the range of the points along that axis.
func joggle(points [][3]float64, seed uint64, scale float64) [][3]float64 {
	var lo, hi [3]float64
	lo, hi = points[0], points[0]
	for _, p := range points {
		for i := range 3 {
			lo[i] = min(lo[i], p[i])
			hi[i] = max(hi[i], p[i])
		}
	}
	out := make([][3]float64, len(points))
	for k, p := range points {
		for i := range 3 {
			ext := hi[i] - lo[i]
			if ext == 0 {
				ext = max(abs(hi[i]), 1)
			}
			u := splitmix(seed*0x9e3779b97f4a7c15 + uint64(3*k+i))
			f := float64(u>>11)/(1<<53)*2 - 1 // uniform in [−1, 1)
			out[k][i] = p[i] + f*scale*ext
		}
	}
	return out
}

// splitmix is the SplitMix64 finaliser, a fixed hash used as a stateless
// pseudo-random source.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// builder holds the state of one Bowyer–Watson run.
type builder struct {
	pts  [][3]float64
	tets []tet
	last int32 // a live tetrahedron to start point location from

	// Scratch space reused across insertions.
	stack    []int32
	cavity   []int32
	inCavity map[int32]bool
	edges    map[[2]int32]edgeEnd
}

// edgeEnd records a new tetrahedron's face through the inserted point and a
// boundary edge, waiting for its twin.
type edgeEnd struct {
	tet  int32
	face int
}

// bowyerWatson triangulates points in general position. It returns the
// finite tetrahedra, positively oriented, or errDegenerate.
func bowyerWatson(pts [][3]float64) ([][4]int, error) {
	b := &builder{pts: pts, inCavity: map[int32]bool{}, edges: map[[2]int32]edgeEnd{}}
	first, err := b.initial()
	if err != nil {
		return nil, err
	}
	for i := range pts {
		if slices.Contains(first[:], int32(i)) {
			continue
		}
		if err := b.insert(int32(i)); err != nil {
			return nil, err
		}
	}
	var out [][4]int
	for _, t := range b.tets {
		if t.dead || isGhost(t) {
			continue
		}
		out = append(out, [4]int{int(t.v[0]), int(t.v[1]), int(t.v[2]), int(t.v[3])})
	}
	return out, nil
}

func isGhost(t tet) bool {
	return t.v[0] == infinite || t.v[1] == infinite || t.v[2] == infinite || t.v[3] == infinite
}

// initial creates the first tetrahedron from four affinely independent
// points and the four ghosts around it, and returns the points it used.
func (b *builder) initial() ([4]int32, error) {
	v, err := b.independent()
	if err != nil {
		return v, err
	}
	b.tets = append(b.tets, tet{v: v})
	for k := range 4 {
		f := faceOf[k]
		// The ghost's base is the face seen from outside: reversed.
		b.tets = append(b.tets, tet{v: [4]int32{v[f[0]], v[f[2]], v[f[1]], infinite}})
	}
	linkAll(b.tets)
	b.last = 0
	return v, nil
}

// independent returns four affinely independent points, positively
// oriented, or an error if all points are collinear or coplanar.
func (b *builder) independent() ([4]int32, error) {
	first := [4]int32{0, -1, -1, -1}
	for i := 1; i < len(b.pts) && first[1] < 0; i++ {
		if b.pts[i] != b.pts[0] {
			first[1] = int32(i)
		}
	}
	for i := 1; i < len(b.pts) && first[2] < 0; i++ {
		if !collinear(b.pts[first[0]], b.pts[first[1]], b.pts[i]) {
			first[2] = int32(i)
		}
	}
	if first[2] < 0 {
		return first, errors.New("all points are collinear")
	}
	var o int
	for i := 1; i < len(b.pts); i++ {
		o = orient(b.pts[first[0]], b.pts[first[1]], b.pts[first[2]], b.pts[i])
		if o != 0 {
			first[3] = int32(i)
			break
		}
	}
	if first[3] < 0 {
		return first, errors.New("all points are coplanar")
	}
	if o < 0 {
		first[0], first[1] = first[1], first[0]
	}
	return first, nil
}

// collinear reports whether a, b, c lie on one line (exactly).
func collinear(a, b, c vec) bool {
	// Collinear iff every coordinate-plane projection is degenerate; test
	// with orient against a point off each plane.
	for _, d := range [3]vec{{a[0] + 1, a[1], a[2]}, {a[0], a[1] + 1, a[2]}, {a[0], a[1], a[2] + 1}} {
		if orient(a, b, c, d) != 0 {
			return false
		}
	}
	return true
}

// linkAll sets every neighbour pointer of tets by matching faces.
func linkAll(tets []tet) {
	type end struct {
		t int32
		k int
	}
	faces := map[[3]int32]end{}
	for i := range tets {
		for k := range 4 {
			key := faceKey(tets[i].v, k)
			if e, ok := faces[key]; ok {
				tets[i].n[k] = e.t
				tets[e.t].n[e.k] = int32(i)
				delete(faces, key)
			} else {
				faces[key] = end{int32(i), k}
			}
		}
	}
}

// faceKey returns the sorted vertices of the face opposite vertex k.
func faceKey(v [4]int32, k int) [3]int32 {
	var f [3]int32
	j := 0
	for i := range 4 {
		if i != k {
			f[j] = v[i]
			j++
		}
	}
	slices.Sort(f[:])
	return f
}

// conflict reports whether point p lies strictly inside the circumsphere of
// tetrahedron t; for a ghost, whether p lies strictly beyond its hull face.
func (b *builder) conflict(t tet, p int32) (bool, error) {
	q := b.pts[p]
	for k := range 4 {
		if t.v[k] != infinite {
			continue
		}
		f := faceOf[k]
		o := orient(b.pts[t.v[f[0]]], b.pts[t.v[f[1]]], b.pts[t.v[f[2]]], q)
		if o == 0 {
			return false, errDegenerate
		}
		return o > 0, nil
	}
	s := inSphere(b.pts[t.v[0]], b.pts[t.v[1]], b.pts[t.v[2]], b.pts[t.v[3]], q)
	if s == 0 {
		return false, errDegenerate
	}
	return s > 0, nil
}

// locate returns a tetrahedron in conflict with point p, found by a
// visibility walk from the last tetrahedron created.
func (b *builder) locate(p int32) (int32, error) {
	q := b.pts[p]
	cur := b.last
	maxSteps := 4*len(b.tets) + 16
walk:
	for step := range maxSteps {
		t := b.tets[cur]
		if isGhost(t) {
			in, err := b.conflict(t, p)
			if err != nil {
				return 0, err
			}
			if in {
				return cur, nil
			}
			// Step back inside through the hull face.
			for k := range 4 {
				if t.v[k] == infinite {
					cur = t.n[k]
					continue walk
				}
			}
		}
		for j := range 4 {
			k := (j + step) % 4 // rotate the first face tried, so the walk cannot cycle
			f := faceOf[k]
			if orient(b.pts[t.v[f[0]]], b.pts[t.v[f[1]]], b.pts[t.v[f[2]]], q) < 0 {
				cur = t.n[k]
				continue walk
			}
		}
		return cur, nil // p is inside (or on the boundary of) t
	}
	// The walk did not settle (it should not happen on a Delaunay
	// triangulation); scan.
	for i, t := range b.tets {
		if t.dead {
			continue
		}
		in, err := b.conflict(t, p)
		if err != nil {
			return 0, err
		}
		if in {
			return int32(i), nil
		}
	}
	return 0, fmt.Errorf("found no tetrahedron in conflict with point %d", p)
}

// insert adds point p: it removes the cavity of tetrahedra in conflict with
// p and fills it with tetrahedra joining p to the cavity's boundary faces.
func (b *builder) insert(p int32) error {
	start, err := b.locate(p)
	if err != nil {
		return err
	}
	clear(b.inCavity)
	b.cavity = b.cavity[:0]
	b.stack = append(b.stack[:0], start)
	b.inCavity[start] = true
	type boundary struct {
		tet   int32 // cavity tetrahedron
		face  int   // its face on the boundary
		outer int32 // the neighbour outside the cavity
	}
	var faces []boundary
	for len(b.stack) > 0 {
		c := b.stack[len(b.stack)-1]
		b.stack = b.stack[:len(b.stack)-1]
		b.cavity = append(b.cavity, c)
		for k := range 4 {
			n := b.tets[c].n[k]
			if b.inCavity[n] {
				continue
			}
			in, err := b.conflict(b.tets[n], p)
			if err != nil {
				return err
			}
			if in {
				b.inCavity[n] = true
				b.stack = append(b.stack, n)
				continue
			}
			faces = append(faces, boundary{c, k, n})
		}
	}
	clear(b.edges)
	for _, bf := range faces {
		old := b.tets[bf.tet]
		f := faceOf[bf.face]
		nt := tet{v: [4]int32{old.v[f[0]], old.v[f[1]], old.v[f[2]], p}}
		if !isGhost(nt) && orient(b.pts[nt.v[0]], b.pts[nt.v[1]], b.pts[nt.v[2]], b.pts[p]) <= 0 {
			return errDegenerate // the cavity is not star-shaped from p
		}
		id := int32(len(b.tets))
		nt.n[3] = bf.outer
		// Point the outer neighbour back at the new tetrahedron.
		outer := &b.tets[bf.outer]
		for k := range 4 {
			if outer.n[k] == bf.tet {
				outer.n[k] = id
			}
		}
		b.tets = append(b.tets, nt)
		// Faces 0, 1, 2 of the new tetrahedron each contain p and the edge
		// of the base opposite that vertex; match them up by that edge.
		for k := range 3 {
			e := [2]int32{nt.v[(k+1)%3], nt.v[(k+2)%3]}
			if e[0] > e[1] {
				e[0], e[1] = e[1], e[0]
			}
			if twin, ok := b.edges[e]; ok {
				b.tets[id].n[k] = twin.tet
				b.tets[twin.tet].n[twin.face] = id
				delete(b.edges, e)
			} else {
				b.edges[e] = edgeEnd{id, k}
			}
		}
	}
	if len(b.edges) != 0 {
		return fmt.Errorf("inserting point %d left %d unmatched cavity edges", p, len(b.edges))
	}
	for _, c := range b.cavity {
		b.tets[c].dead = true
	}
	b.last = int32(len(b.tets) - 1)
	return nil
}

// Neighbors returns, for each simplex, the index of the simplex across the
// face opposite each of its vertices, or −1 on the hull.
func Neighbors(simplices [][4]int) [][4]int {
	type end struct{ s, k int }
	faces := make(map[[3]int]end, 2*len(simplices))
	out := make([][4]int, len(simplices))
	for i, s := range simplices {
		for k := range 4 {
			out[i][k] = -1
			var f [3]int
			j := 0
			for q := range 4 {
				if q != k {
					f[j] = s[q]
					j++
				}
			}
			slices.Sort(f[:])
			if e, ok := faces[f]; ok {
				out[i][k] = e.s
				out[e.s][e.k] = i
				delete(faces, f)
			} else {
				faces[f] = end{i, k}
			}
		}
	}
	return out
}
