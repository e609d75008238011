package delaunay

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPredicates(t *testing.T) {
	a, b, c, d := vec{0, 0, 0}, vec{1, 0, 0}, vec{0, 1, 0}, vec{0, 0, 1}
	tests := map[string]struct {
		got, want int
	}{
		"orient right-handed":          {orient(a, b, c, d), 1},
		"orient left-handed":           {orient(b, a, c, d), -1},
		"orient coplanar":              {orient(a, b, c, vec{0.3, 0.7, 0}), 0},
		"orient nearly coplanar":       {orient(a, b, c, vec{0.3, 0.7, 1e-300}), 1},
		"orient coplanar huge":         {orient(vec{1e17, 0, 0}, vec{0, 1e17, 0}, vec{0, 0, 0}, vec{1e17 + 16, 16, 0}), 0},
		"insphere inside":              {inSphere(a, b, c, d, vec{0.25, 0.25, 0.25}), 1},
		"insphere outside":             {inSphere(a, b, c, d, vec{2, 2, 2}), -1},
		"insphere cospherical":         {inSphere(a, b, c, d, vec{1, 1, 1}), 0},
		"insphere reversed tet":        {inSphere(b, a, c, d, vec{0.25, 0.25, 0.25}), -1},
		"insphere cospherical shifted": {inSphere(add(a, 1e8), add(b, 1e8), add(c, 1e8), add(d, 1e8), add(vec{1, 1, 1}, 1e8)), 0},
		"insphere just inside shifted": {inSphere(add(a, 1e8), add(b, 1e8), add(c, 1e8), add(d, 1e8), add(vec{1, 1, 1 - 1.0/64}, 1e8)), 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("got %d, want %d", tc.got, tc.want)
			}
		})
	}
}

func add(p vec, s float64) vec { return vec{p[0] + s, p[1] + s, p[2] + s} }

// cubeGrid returns the n×n×n grid of integer points scaled by s along each
// axis: maximally degenerate (every cell's corners are cospherical).
func cubeGrid(n int, s [3]float64) [][3]float64 {
	var pts [][3]float64
	for i := range n {
		for j := range n {
			for k := range n {
				pts = append(pts, [3]float64{float64(i) * s[0], float64(j) * s[1], float64(k) * s[2]})
			}
		}
	}
	return pts
}

func randomPoints(n int, seed uint64) [][3]float64 {
	r := rand.New(rand.NewPCG(seed, 1))
	pts := make([][3]float64, n)
	for i := range pts {
		pts[i] = [3]float64{r.Float64(), r.Float64() * 10, r.Float64() * 1000}
	}
	return pts
}

func TestTriangulate(t *testing.T) {
	tests := map[string]struct {
		points     [][3]float64
		hullVolume float64
		// exactDelaunay: no empty-sphere violation at all is allowed (the
		// joggle can only choose among cospherical alternatives there).
		exactDelaunay bool
	}{
		"tetrahedron":           {[][3]float64{{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, 1.0 / 6, true},
		"cube corners":          {[][3]float64{{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {1, 1, 0}, {0, 0, 1}, {1, 0, 1}, {0, 1, 1}, {1, 1, 1}}, 1, true},
		"cube corners + centre": {[][3]float64{{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {1, 1, 0}, {0, 0, 1}, {1, 0, 1}, {0, 1, 1}, {1, 1, 1}, {0.5, 0.5, 0.5}}, 1, true},
		"grid 4x4x4":            {cubeGrid(4, [3]float64{1, 1, 1}), 27, true},
		"anisotropic grid":      {cubeGrid(5, [3]float64{1, 4, 8000}), 4 * 16 * 32000, true},
		"random 200":            {randomPoints(200, 1), math.NaN(), false},
		"random 1000":           {randomPoints(1000, 2), math.NaN(), false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m, err := Triangulate(tc.points)
			if err != nil {
				t.Fatalf("Triangulate: %v", err)
			}
			st, err := m.Check()
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			const tol = 1e-9 // relative, on volumes
			if !math.IsNaN(tc.hullVolume) && math.Abs(st.HullVolume-tc.hullVolume) > tol*tc.hullVolume {
				t.Errorf("hull volume = %g, want %g", st.HullVolume, tc.hullVolume)
			}
			if math.Abs(st.Volume-st.HullVolume) > tol*st.HullVolume {
				t.Errorf("volume = %g, hull volume = %g", st.Volume, st.HullVolume)
			}
			if tc.exactDelaunay && st.Violations > 0 {
				t.Errorf("%d empty-sphere violations (max %g)", st.Violations, st.MaxViolation)
			}
			if st.MaxViolation > 1e-6 {
				t.Errorf("max empty-sphere intrusion %g, want ≤ 1e-6", st.MaxViolation)
			}
			// Every input point is a vertex.
			seen := make([]bool, len(tc.points))
			for s := range m.Len() {
				for _, v := range m.Simplex(s) {
					seen[v] = true
				}
			}
			for i, ok := range seen {
				if !ok {
					t.Errorf("point %d is not a vertex", i)
				}
			}
			t.Logf("%+v", st)
		})
	}
}

// TestGlobalEmptySphere checks every simplex against every point on a small
// random set (general position: the triangulation is unique).
func TestGlobalEmptySphere(t *testing.T) {
	pts := randomPoints(60, 3)
	m, err := Triangulate(pts)
	if err != nil {
		t.Fatal(err)
	}
	for s := range m.Len() {
		v := m.Simplex(s)
		p := m.pts4(v)
		sign := orient(p[0], p[1], p[2], p[3])
		if sign == 0 {
			t.Fatalf("simplex %d is flat", s)
		}
		for i, q := range pts {
			if i == v[0] || i == v[1] || i == v[2] || i == v[3] {
				continue
			}
			if inSphere(p[0], p[1], p[2], p[3], q)*sign > 0 {
				t.Errorf("point %d inside the circumsphere of simplex %d", i, s)
			}
		}
	}
}

// TestInterpolateLinear checks that barycentric interpolation reproduces a
// linear function exactly (to rounding) anywhere inside the hull, and that
// points outside are not found.
func TestInterpolateLinear(t *testing.T) {
	f := func(p [3]float64) float64 { return 3 + 2*p[0] - 0.5*p[1] + 0.001*p[2] }
	tests := map[string]struct {
		points [][3]float64
	}{
		"cube corners + centre": {[][3]float64{{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {1, 1, 0}, {0, 0, 1}, {1, 0, 1}, {0, 1, 1}, {1, 1, 1}, {0.5, 0.5, 0.5}}},
		"anisotropic grid":      {cubeGrid(4, [3]float64{1, 4, 8000})},
		"random":                {randomPoints(300, 4)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m, err := Triangulate(tc.points)
			if err != nil {
				t.Fatal(err)
			}
			lo, hi := m.lo, m.hi
			r := rand.New(rand.NewPCG(5, 6))
			found := 0
			for range 2000 {
				var x [3]float64
				for i := range 3 {
					x[i] = lo[i] + r.Float64()*(hi[i]-lo[i])
				}
				s, c, ok := m.Locate(x)
				if !ok {
					continue
				}
				found++
				var got float64
				for j, v := range m.Simplex(s) {
					got += c[j] * f(m.Point(v))
				}
				const tol = 1e-9 // relative
				if want := f(x); math.Abs(got-want) > tol*math.Abs(want) {
					t.Fatalf("f(%v) = %g, interpolated %g", x, want, got)
				}
			}
			if found < 100 {
				t.Errorf("only %d of 2000 random points inside the hull", found)
			}
			// Vertices interpolate to their own value.
			for i, p := range tc.points {
				s, c, ok := m.Locate(p)
				if !ok {
					t.Fatalf("vertex %d not found", i)
				}
				var got float64
				for j, v := range m.Simplex(s) {
					got += c[j] * f(m.Point(v))
				}
				if math.Abs(got-f(p)) > 1e-9*math.Abs(f(p)) {
					t.Errorf("vertex %d: got %g, want %g", i, got, f(p))
				}
			}
			if _, _, ok := m.Locate([3]float64{hi[0] + 1, hi[1], hi[2]}); ok {
				t.Errorf("point beyond the bounding box was located")
			}
		})
	}
}

func TestTriangulateErrors(t *testing.T) {
	tests := map[string]struct {
		points [][3]float64
		want   string
	}{
		"too few":    {[][3]float64{{0, 0, 0}, {1, 0, 0}, {0, 1, 0}}, "need at least 4 points"},
		"coplanar":   {[][3]float64{{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {1, 1, 0}, {2, 3, 0}}, "coplanar"},
		"collinear":  {[][3]float64{{0, 0, 0}, {1, 1, 1}, {2, 2, 2}, {3, 3, 3}}, "collinear"},
		"duplicate":  {[][3]float64{{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {1, 0, 0}}, "duplicates"},
		"not finite": {[][3]float64{{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {0, 0, math.NaN()}}, "non-finite"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Triangulate(tc.points)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestReadQhull reads a hand-written tessellation of the unit cube split into
// two simplices... by a single tetrahedron, and checks the parse and errors.
func TestReadQhull(t *testing.T) {
	good := `# two tetrahedra sharing face (1,2,3)
points 5
0 0 0
1 0 0
0 1 0
0 0 1
1 1 1
paraboloid 1 0
simplices 2
0 1 2 3 1 -1 -1 -1 0 0 0 -1 0
4 1 2 3 0 -1 -1 -1 0 0 0 -1 0
`
	m, err := ReadQhull(strings.NewReader(good), "good.txt")
	if err != nil {
		t.Fatalf("ReadQhull: %v", err)
	}
	if diff := cmp.Diff([4]int{4, 1, 2, 3}, m.Simplex(1)); diff != "" {
		t.Errorf("simplex 1 (-want +got):\n%s", diff)
	}
	if _, err := m.Check(); err != nil {
		t.Errorf("Check: %v", err)
	}
	s, c, ok := m.Locate([3]float64{0.5, 0.5, 0.5})
	if !ok || s != 1 {
		t.Errorf("Locate(centre) = %d, %v, %v; want simplex 1", s, c, ok)
	}
	bad := map[string]struct {
		text, want string
	}{
		"bad count":    {"points x\n", "bad.txt:1: points: not a positive count"},
		"short point":  {"points 1\n0 0\n", "bad.txt:2: point 0: want 3 coordinates"},
		"bad float":    {"points 1\n0 0 abc\n", `bad.txt:2: point 0: coordinate 2: not a number "abc"`},
		"truncated":    {"points 2\n0 0 0\n", "bad.txt:2: unexpected end of file"},
		"short row":    {strings.Replace(good, "4 1 2 3 0 -1 -1 -1 0 0 0 -1 0", "4 1 2 3 0", 1), "bad.txt:11: simplex 1: want 13 fields, got 5"},
		"bad vertex":   {strings.Replace(good, "4 1 2 3 0", "9 1 2 3 0", 1), "vertex 9 out of range"},
		"extra data":   {good + "1 2 3\n", "bad.txt:12: unexpected data"},
		"wrong header": {strings.Replace(good, "paraboloid 1 0", "parabola 1 0", 1), `bad.txt:8: want "paraboloid"`},
	}
	for name, tc := range bad {
		t.Run(name, func(t *testing.T) {
			_, err := ReadQhull(strings.NewReader(tc.text), "bad.txt")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestExactPathsAgree checks the big.Float evaluation against big.Rat on
// inputs whose determinants vanish or nearly vanish, including exponent
// gaps wide enough to force the rational fallback.
func TestExactPathsAgree(t *testing.T) {
	tests := map[string][5]vec{
		"grid cospherical":   {{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {1, 1, 1}},
		"anisotropic":        {{1, 1, 32}, {4, 16, 32768}, {2, 8, 45}, {3, 9, 5803}, {16, 64, 8}},
		"tiny offsets":       {{1, 1, 1}, {1 + 0x1p-40, 1, 1}, {1, 1 + 0x1p-40, 1}, {1, 1, 1 + 0x1p-40}, {1 + 0x1p-40, 1 + 0x1p-40, 1 + 0x1p-40}},
		"huge exponent gaps": {{1e300, 1e-300, 0}, {1e-300, 1e300, 1e-300}, {1e300, 1e300, 1e300}, {1e-300, 1e-300, 1e300}, {1, 1e-300, 1e300}},
	}
	for name, p := range tests {
		t.Run(name, func(t *testing.T) {
			if got, want := orientExact(p[0], p[1], p[2], p[3]), orientRat(p[0], p[1], p[2], p[3]); got != want {
				t.Errorf("orient: big.Float %d, big.Rat %d", got, want)
			}
			if got, want := inSphereExact(p[0], p[1], p[2], p[3], p[4]), inSphereRat(p[0], p[1], p[2], p[3], p[4]); got != want {
				t.Errorf("insphere: big.Float %d, big.Rat %d", got, want)
			}
		})
	}
}

// FuzzReadQhull checks that arbitrary input never makes ReadQhull panic.
func FuzzReadQhull(f *testing.F) {
	f.Add([]byte("points 4\n0 0 0\n1 0 0\n0 1 0\n0 0 1\nparaboloid 1 0\nsimplices 1\n0 1 2 3 -1 -1 -1 -1 0 0 0 -1 0\n"))
	f.Add([]byte("points 1\n0 0 0\nparaboloid 1 0\nsimplices 1\n0 0 0 0 5 5 5 5 0 0 0 0 0\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ReadQhull(strings.NewReader(string(data)), "fuzz")
		if err != nil {
			return
		}
		m.Locate([3]float64{0.1, 0.1, 0.1})
	})
}

func TestNewMeshRejectsNaN(t *testing.T) {
	_, err := ReadQhull(strings.NewReader("points 4\n0 0 0\n1 0 0\n0 1 0\n0 0 nan\nparaboloid 1 0\nsimplices 1\n0 1 2 3 -1 -1 -1 -1 0 0 0 -1 0\n"), "nan.txt")
	if err == nil || !strings.Contains(err.Error(), "non-finite") {
		t.Errorf("error = %v, want a non-finite coordinate error", err)
	}
}

func TestReadQhullRejectsHugeCounts(t *testing.T) {
	// Found by FuzzReadQhull: a count sized an allocation before any data
	// was read, so a corrupt header ran the process out of memory.
	for _, in := range []string{"points 100000000000\n", "points 1\n0 0 0\nparaboloid 1 0\nsimplices 9999999999\n"} {
		_, err := ReadQhull(strings.NewReader(in), "huge.txt")
		if err == nil || !strings.Contains(err.Error(), "above") {
			t.Errorf("ReadQhull(%q) error = %v, want a count-too-large error", in, err)
		}
	}
}
