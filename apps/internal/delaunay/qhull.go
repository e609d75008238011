package delaunay

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ReadQhull reads a tessellation recorded from SciPy's Delaunay (Qhull) in
// this text format (blank lines and lines starting with '#' are ignored):
//
//	points <n>
//	<x> <y> <z>                                    n lines
//	paraboloid <scale> <shift>
//	simplices <s>
//	<v0> <v1> <v2> <v3> <n0> <n1> <n2> <n3> <e0> <e1> <e2> <e3> <e4>   s lines
//
// where v are the simplex's vertex indices (Delaunay.simplices), n its
// neighbours (Delaunay.neighbors, −1 on the hull) and e the lifted facet
// equation (Delaunay.equations); paraboloid gives Delaunay.paraboloid_scale
// and paraboloid_shift. Floats must be written with enough digits to round
// trip (Python's repr does). name is used in error messages.
func ReadQhull(r io.Reader, name string) (*Mesh, error) {
	q := newQhullReader(r, name)
	points, err := q.points()
	if err != nil {
		return nil, err
	}
	pf, err := q.header("paraboloid", 2)
	if err != nil {
		return nil, err
	}
	var parab [2]float64
	for k := range 2 {
		if parab[k], err = strconv.ParseFloat(pf[k], 64); err != nil {
			return nil, q.fail("paraboloid: not a number %q", pf[k])
		}
	}
	ns, err := q.count("simplices")
	if err != nil {
		return nil, err
	}
	simplices := make([][4]int, ns)
	neighbors := make([][4]int, ns)
	equations := make([][5]float64, ns)
	for s := range ns {
		f, err := q.next()
		if err != nil {
			return nil, err
		}
		if len(f) != 13 {
			return nil, q.fail("simplex %d: want 13 fields, got %d", s, len(f))
		}
		for k := range 4 {
			if simplices[s][k], err = strconv.Atoi(f[k]); err != nil {
				return nil, q.fail("simplex %d: vertex %d: not an integer %q", s, k, f[k])
			}
			if neighbors[s][k], err = strconv.Atoi(f[4+k]); err != nil {
				return nil, q.fail("simplex %d: neighbour %d: not an integer %q", s, k, f[4+k])
			}
		}
		for k := range 5 {
			if equations[s][k], err = strconv.ParseFloat(f[8+k], 64); err != nil {
				return nil, q.fail("simplex %d: equation %d: not a number %q", s, k, f[8+k])
			}
		}
	}
	if f, err := q.next(); err == nil {
		return nil, q.fail("unexpected data after the last simplex: %q", strings.Join(f, " "))
	}
	m, err := NewMesh(points, simplices, neighbors, equations, parab[0], parab[1])
	if err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", name, err)
	}
	return m, nil
}

// ReadQhullPoints reads only the points section of a recorded tessellation
// (see ReadQhull), to check cheaply which points it tessellates.
func ReadQhullPoints(r io.Reader, name string) ([][3]float64, error) {
	return newQhullReader(r, name).points()
}

// qhullReader reads the fields of the significant lines of a recording.
type qhullReader struct {
	sc   *bufio.Scanner
	name string
	line int
}

func newQhullReader(r io.Reader, name string) *qhullReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	return &qhullReader{sc: sc, name: name}
}

// next returns the fields of the next line that is neither blank nor a
// comment.
func (q *qhullReader) next() ([]string, error) {
	for q.sc.Scan() {
		q.line++
		t := strings.TrimSpace(q.sc.Text())
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		return strings.Fields(t), nil
	}
	if err := q.sc.Err(); err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", q.name, err)
	}
	return nil, fmt.Errorf("%s:%d: unexpected end of file", q.name, q.line)
}

func (q *qhullReader) fail(format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s", q.name, q.line, fmt.Sprintf(format, args...))
}

// header reads a line "key v1 ... vn" and returns the values.
func (q *qhullReader) header(key string, nvals int) ([]string, error) {
	f, err := q.next()
	if err != nil {
		return nil, err
	}
	if f[0] != key || len(f) != nvals+1 {
		return nil, q.fail("want %q with %d value(s), got %q", key, nvals, strings.Join(f, " "))
	}
	return f[1:], nil
}

// maxCount bounds a section's count, which sizes its allocation: far
// above any profile's tessellation.
const maxCount = 1 << 18

// count reads a line "key n" with 0 < n ≤ maxCount.
func (q *qhullReader) count(key string) (int, error) {
	f, err := q.header(key, 1)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= 0 {
		return 0, q.fail("%s: not a positive count %q", key, f[0])
	}
	if n > maxCount {
		return 0, q.fail("%s: count %d above %d", key, n, maxCount)
	}
	return n, nil
}

// points reads the points section.
func (q *qhullReader) points() ([][3]float64, error) {
	np, err := q.count("points")
	if err != nil {
		return nil, err
	}
	points := make([][3]float64, np)
	for i := range points {
		f, err := q.next()
		if err != nil {
			return nil, err
		}
		if len(f) != 3 {
			return nil, q.fail("point %d: want 3 coordinates, got %d", i, len(f))
		}
		for k := range 3 {
			if points[i][k], err = strconv.ParseFloat(f[k], 64); err != nil {
				return nil, q.fail("point %d: coordinate %d: not a number %q", i, k, f[k])
			}
		}
	}
	return points, nil
}
