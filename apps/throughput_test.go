package apps

import (
	"compress/gzip"
	"encoding/csv"
	"errors"
	"math"
	"os"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pollux-nomad/pollux/data"
)

// goDelaunay returns the application loaded without the recorded
// tessellation, so that it is triangulated in Go.
func goDelaunay(t testing.TB, name string) *Application {
	t.Helper()
	ref := artifact(t)[name]
	a, err := Load(data.Traces(), name, Options{MaxEpochs: ref.MaxEpochs, MaxLocalBsz: ref.MaxLocalBsz})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func digits(t testing.TB, s string) []int {
	t.Helper()
	out := make([]int, len(s))
	for i, c := range s {
		out[i] = int(c - '0')
	}
	return out
}

func relDiff(got, want float64) float64 {
	if got == want {
		return 0
	}
	return math.Abs(got-want) / math.Abs(want)
}

// TestThroughputMeasured checks every row of every placements.csv: a
// measured point returns the measurement.
func TestThroughputMeasured(t *testing.T) {
	const tol = 1e-14 // relative: interp1d's slope·Δx + y_lo rounds
	for name, a := range artifact(t) {
		t.Run(name, func(t *testing.T) {
			for i, r := range readCSV(t, data.Traces(), name+"/placements.csv") {
				step, sync, err := a.Throughput(digits(t, r[0]), atoi(t, r[1]))
				if err != nil {
					t.Fatalf("row %d: %v", i+2, err)
				}
				if relDiff(step, atof(t, r[2])) > tol || relDiff(sync, atof(t, r[3])) > tol {
					t.Errorf("row %d %v: got (%v, %v)", i+2, r, step, sync)
				}
			}
		})
	}
}

// TestThroughputLookups hand-checks interpolation over local_bsz, the
// rotation and zero-dropping of placements, and errors.
func TestThroughputLookups(t *testing.T) {
	all := artifact(t)
	tests := map[string]struct {
		app              string
		placement        []int
		localBsz         int
		step, sync       float64
		wantOutOfRange   bool
		wantOtherFailure bool
	}{
		// bert placement "1": local_bsz 4 → (0.45532354712486267,
		// 0.013738612174987792), 6 → (0.5693899691104889,
		// 0.013729131996631623); 5 is the midpoint.
		"midpoint of two local_bsz": {app: "bert", placement: []int{1}, localBsz: 5,
			step: (0.45532354712486267 + 0.5693899691104889) / 2, sync: (0.013738612174987792 + 0.013729131996631623) / 2},
		"measured point": {app: "bert", placement: []int{1}, localBsz: 4,
			step: 0.45532354712486267, sync: 0.013738612174987792},
		// cifar10 "12" at local_bsz 32 (placements.csv line 211).
		"rotation [2,1] finds 12": {app: "cifar10", placement: []int{2, 1}, localBsz: 32,
			step: 0.12787373065948487, sync: 0.08611848678588867},
		"zeros dropped [0,1,0,2]": {app: "cifar10", placement: []int{0, 1, 0, 2}, localBsz: 32,
			step: 0.12787373065948487, sync: 0.08611848678588867},
		"local_bsz below range": {app: "bert", placement: []int{1}, localBsz: 3, wantOutOfRange: true},
		"local_bsz above range": {app: "bert", placement: []int{1}, localBsz: 13, wantOutOfRange: true},
		// ncf's scalability rows stop at local_bsz 5803.
		"outside the hull": {app: "ncf", placement: []int{4, 4, 4, 4, 4, 4}, localBsz: 20000, wantOutOfRange: true},
		"empty placement":  {app: "bert", placement: []int{0, 0}, localBsz: 4, wantOtherFailure: true},
		"negative GPUs":    {app: "bert", placement: []int{1, -1}, localBsz: 4, wantOtherFailure: true},
		// bert scalability.csv line 162: 6 nodes, 24 GPUs, local_bsz 4.
		"scalability point": {app: "bert", placement: []int{4, 4, 4, 4, 4, 4}, localBsz: 4,
			step: 1.8420631438493729, sync: 1.4416297073364257},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			step, sync, err := all[tc.app].Throughput(tc.placement, tc.localBsz)
			switch {
			case tc.wantOutOfRange:
				if !errors.Is(err, ErrOutOfRange) {
					t.Errorf("error = %v, want ErrOutOfRange", err)
				}
				return
			case tc.wantOtherFailure:
				if err == nil || errors.Is(err, ErrOutOfRange) {
					t.Errorf("error = %v, want a failure other than ErrOutOfRange", err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			const tol = 1e-14 // relative
			if relDiff(step, tc.step) > tol || relDiff(sync, tc.sync) > tol {
				t.Errorf("got (%v, %v), want (%v, %v)", step, sync, tc.step, tc.sync)
			}
		})
	}
}

// golden is one row of testdata/scipy-throughput.csv.gz: SciPy's
// LinearNDInterpolator at (nodes, GPUs, local_bsz); NaN outside the hull.
type golden struct {
	app        string
	n, k, m    int
	step, sync float64
}

func readGolden(t testing.TB) []golden {
	t.Helper()
	f, err := os.Open("testdata/scipy-throughput.csv.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(zr).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]golden, 0, len(rows)-1)
	for _, r := range rows[1:] {
		out = append(out, golden{r[0], atoi(t, r[1]), atoi(t, r[2]), atoi(t, r[3]), atof(t, r[4]), atof(t, r[5])})
	}
	return out
}

// TestInterpolationMatchesSciPy replays SciPy's tessellation and checks the
// 3-D interpolant against SciPy's own values on 18,656 queries: exact to
// rounding, including which queries fall outside the hull.
func TestInterpolationMatchesSciPy(t *testing.T) {
	all := artifact(t)
	const tol = 1e-12 // relative: transforms inverted differently from LAPACK
	bad := 0
	for _, g := range readGolden(t) {
		step, sync, err := all[g.app].interpolate3(g.n, g.k, g.m)
		outside := math.IsNaN(g.step)
		switch {
		case outside && !errors.Is(err, ErrOutOfRange):
			t.Errorf("%s (%d, %d, %d): SciPy gives NaN, got (%v, %v, %v)", g.app, g.n, g.k, g.m, step, sync, err)
			bad++
		case !outside && err != nil:
			t.Errorf("%s (%d, %d, %d): %v, SciPy gives (%v, %v)", g.app, g.n, g.k, g.m, err, g.step, g.sync)
			bad++
		case !outside && (relDiff(step, g.step) > tol || relDiff(sync, g.sync) > tol):
			t.Errorf("%s (%d, %d, %d): got (%v, %v), SciPy (%v, %v)", g.app, g.n, g.k, g.m, step, sync, g.step, g.sync)
			bad++
		}
		if bad > 20 {
			t.Fatal("too many mismatches")
		}
	}
}

// TestGoDelaunayVsSciPy measures how far the Go triangulation's interpolant
// is from SciPy's on the golden queries (they differ where the Delaunay
// triangulation is not unique) and checks the Go triangulation itself.
func TestGoDelaunayVsSciPy(t *testing.T) {
	byApp := map[string][]golden{}
	for _, g := range readGolden(t) {
		byApp[g.app] = append(byApp[g.app], g)
	}
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			a := goDelaunay(t, name)
			m, err := a.tessellation()
			if err != nil {
				t.Fatal(err)
			}
			st, err := m.Check()
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if math.Abs(st.Volume-st.HullVolume) > 1e-9*st.HullVolume {
				t.Errorf("volume %g, hull %g", st.Volume, st.HullVolume)
			}
			ref, err := artifact(t)[name].tessellation()
			if err != nil {
				t.Fatal(err)
			}
			refSt, err := ref.Check()
			if err != nil {
				t.Fatalf("Check of SciPy's tessellation: %v", err)
			}
			if math.Abs(refSt.HullVolume-st.HullVolume) > 1e-9*st.HullVolume {
				t.Errorf("hull volume %g, SciPy's %g", st.HullVolume, refSt.HullVolume)
			}
			if st.Violations != 0 || refSt.Violations != 0 {
				t.Errorf("empty-sphere violations: Go %d (max %g), SciPy %d (max %g)", st.Violations, st.MaxViolation, refSt.Violations, refSt.MaxViolation)
			}
			// Every interpolation point is a vertex: the interpolant returns
			// its value there.
			for i, p := range a.points {
				step, sync, err := a.interpolate3(int(p[0]), int(p[1]), int(p[2]))
				if err != nil || relDiff(step, a.values[i][0]) > 1e-12 || relDiff(sync, a.values[i][1]) > 1e-12 {
					t.Errorf("vertex %v: got (%v, %v, %v), want %v", p, step, sync, err, a.values[i])
				}
			}
			var diffs []float64
			var hullMismatch int
			for _, g := range byApp[name] {
				step, _, err := a.interpolate3(g.n, g.k, g.m)
				if math.IsNaN(g.step) != (err != nil) {
					hullMismatch++
					continue
				}
				if err == nil {
					diffs = append(diffs, relDiff(step, g.step))
				}
			}
			if hullMismatch != 0 {
				t.Errorf("%d queries inside one hull and outside the other", hullMismatch)
			}
			sort.Float64s(diffs)
			var mean float64
			exact := 0
			for _, d := range diffs {
				mean += d / float64(len(diffs))
				if d <= 1e-12 {
					exact++
				}
			}
			p99 := diffs[len(diffs)*99/100]
			t.Logf("Go vs SciPy step_time on %d queries: %.1f%% equal, mean |rel diff| %.4f, p99 %.4f, max %.4f; Go: %d simplices (%d flat in the original coordinates), SciPy: %d (%d flat); cospherical neighbour pairs Go %d, SciPy %d",
				len(diffs), 100*float64(exact)/float64(len(diffs)), mean, p99, diffs[len(diffs)-1], st.Simplices, st.Degenerate, refSt.Simplices, refSt.Degenerate, st.Cospherical, refSt.Cospherical)
			// Bounds measured on the artifact's data (see the log), with a
			// margin: a regression in the triangulation shows up here.
			if mean > 0.03 || p99 > 0.2 {
				t.Errorf("Go interpolant too far from SciPy's: mean %.4f (limit 0.03), p99 %.4f (limit 0.2)", mean, p99)
			}
		})
	}
}

// TestCrossCheckMeasured compares the 3-D interpolant (Go triangulation and
// SciPy's) at the (N, K, m) of measured placements with the measurement, and
// logs off-grid queries against neighbouring measurements.
func TestCrossCheckMeasured(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			ref := artifact(t)[name]
			goA := goDelaunay(t, name)
			var worstGo, worstRef float64
			for _, r := range readCSV(t, data.Traces(), name+"/placements.csv") {
				p := digits(t, r[0])
				k := 0
				for _, g := range p {
					k += g
				}
				m := atoi(t, r[1])
				want, _, err := ref.Throughput(p, m)
				if err != nil {
					t.Fatal(err)
				}
				// The 3-D interpolant at a vertex is the mean over the
				// placements sharing (N, K, m), not this placement's value.
				sGo, _, err1 := goA.interpolate3(len(p), k, m)
				sRef, _, err2 := ref.interpolate3(len(p), k, m)
				if err1 != nil || err2 != nil {
					t.Fatalf("%v at %d: %v, %v", p, m, err1, err2)
				}
				worstGo = max(worstGo, relDiff(sGo, want))
				worstRef = max(worstRef, relDiff(sRef, want))
				if relDiff(sGo, sRef) > 1e-12 {
					t.Errorf("%v at %d: Go %v, SciPy %v differ at a vertex", p, m, sGo, sRef)
				}
			}
			t.Logf("measured placements vs the 3-D interpolant at their (N, K, m): max |rel diff| Go %.4f, SciPy %.4f (placements sharing (N, K) are averaged)", worstGo, worstRef)
			a := ref
			for _, q := range [][2]int{{5, 20}, {6, 24}, {7, 28}, {10, 40}} {
				for _, m := range []int{a.MinLocalBsz, (a.MinLocalBsz + a.MaxLocalBsz) / 2, a.MaxLocalBsz} {
					sRef, _, errRef := ref.interpolate3(q[0], q[1], m)
					sGo, _, errGo := goA.interpolate3(q[0], q[1], m)
					s4, _, _ := ref.Throughput([]int{4, 4, 4, 4}, m)
					s6, _, _ := ref.interpolate3(6, 24, m)
					t.Logf("(N %d, K %d, m %d): SciPy %.4g (%v), Go %.4g (%v); measured 4×4 GPUs %.4g, 6 nodes 24 GPUs %.4g", q[0], q[1], m, sRef, errRef, sGo, errGo, s4, s6)
				}
			}
		})
	}
}

// placementsUpTo returns the placements the simulator may ask for: for
// 1..64 GPUs, packed as full 4-GPU nodes plus a remainder, and fragmented
// over N = ⌈K/4⌉+1 .. min(K, 16) nodes as evenly as possible and as
// "full nodes plus single GPUs".
func placementsUpTo() [][]int {
	var out [][]int
	for k := 1; k <= 64; k++ {
		var packed []int
		for left := k; left > 0; left -= min(left, 4) {
			packed = append(packed, min(left, 4))
		}
		out = append(out, packed)
		for n := len(packed) + 1; n <= min(k, 16); n++ {
			even := make([]int, n)
			for i := range k {
				even[i%n]++
			}
			out = append(out, even)
			// Full nodes then ones: f·4 + (n−f) = k.
			if f := (k - n) / 3; (k-n)%3 == 0 && f <= n {
				ones := make([]int, n)
				for i := range n {
					ones[i] = 1
					if i < f {
						ones[i] = 4
					}
				}
				out = append(out, ones)
			}
		}
	}
	return out
}

// localSizes returns every local_bsz in [lo, hi] for small ranges, else 60
// geometrically spread ones plus the ends.
func localSizes(lo, hi int) []int {
	if hi-lo <= 200 {
		var out []int
		for m := lo; m <= hi; m++ {
			out = append(out, m)
		}
		return out
	}
	out := []int{lo, hi}
	for i := range 60 {
		out = append(out, int(math.Round(float64(lo)*math.Pow(float64(hi)/float64(lo), float64(i)/59))))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestThroughputCoverage queries every placement shape the simulator may
// ask for at every local_bsz in [MinLocalBsz, MaxLocalBsz]: each answer is
// finite and positive, or ErrOutOfRange (outside the profile's hull, where
// the artifact would fail too). The counts are logged.
func TestThroughputCoverage(t *testing.T) {
	shapes := placementsUpTo()
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			a := artifact(t)[name]
			ok, outside := 0, 0
			outsideNK := map[[2]int]bool{}
			for _, p := range shapes {
				k := 0
				for _, g := range p {
					k += g
				}
				for _, m := range localSizes(a.MinLocalBsz, a.MaxLocalBsz) {
					step, sync, err := a.Throughput(p, m)
					switch {
					case errors.Is(err, ErrOutOfRange):
						outside++
						outsideNK[[2]int{len(p), k}] = true
					case err != nil:
						t.Fatalf("%v at %d: %v", p, m, err)
					case !(step > 0) || math.IsInf(step, 0) || !(sync >= 0) || math.IsInf(sync, 0):
						t.Errorf("%v at %d: (%v, %v)", p, m, step, sync)
					default:
						ok++
					}
				}
			}
			t.Logf("%d placements × local sizes: %d answered, %d outside the profile's hull (%d (N, K) pairs)", len(shapes), ok, outside, len(outsideNK))
			if ok == 0 {
				t.Errorf("no query answered")
			}
			// Packed placements up to the exploration cap always fit inside
			// the hull at the smallest local batch size.
			for k := 1; k <= min(64, a.MaxBatchSize/a.MinLocalBsz); k++ {
				if k > 16 && name == "ncf" {
					break
				}
				var packed []int
				for left := k; left > 0; left -= min(left, 4) {
					packed = append(packed, min(left, 4))
				}
				if _, _, err := a.Throughput(packed, a.MinLocalBsz); err != nil {
					t.Errorf("packed %d GPUs: %v", k, err)
				}
			}
		})
	}
}

// TestThroughputConcurrent runs lookups from several goroutines on a fresh
// application (run with -race to check the memo and the lazy build).
func TestThroughputConcurrent(t *testing.T) {
	a := goDelaunay(t, "yolov3")
	ref := artifact(t)["yolov3"]
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 1; k <= 32; k++ {
				p := []int{k%4 + 1, 4, (k + g) % 4}
				for m := 4; m <= 8; m++ {
					if _, _, err := a.Throughput(p, m); err != nil && !errors.Is(err, ErrOutOfRange) {
						errs <- err
						return
					}
					if _, _, err := ref.Throughput(p, m); err != nil && !errors.Is(err, ErrOutOfRange) {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Memoised answers are the same as fresh ones.
	s1, y1, err1 := a.Throughput([]int{1, 4, 4, 4, 4}, 6)
	s2, y2, err2 := a.interpolate3(5, 17, 6)
	if diff := cmp.Diff([]any{s2, y2, err2 == nil}, []any{s1, y1, err1 == nil}); diff != "" {
		t.Errorf("memoised vs fresh (-fresh +memo):\n%s", diff)
	}
}

func TestPlacementID(t *testing.T) {
	tests := map[string]struct {
		in   []int
		want string
	}{
		"single":            {[]int{4}, "4"},
		"rotated":           {[]int{3, 1, 2}, "123"},
		"smallest rotation": {[]int{2, 1, 2, 1, 1}, "11212"},
		"ties":              {[]int{4, 4, 4}, "444"},
		"zeros":             {[]int{0, 2, 0, 1}, "12"},
		"two digits":        {[]int{12, 1}, "112"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p, ok := nonZero(nil, tc.in)
			if !ok {
				t.Fatal("nonZero failed")
			}
			start := smallestRotation(p)
			norm := append(slices.Clone(p[start:]), p[:start]...)
			if got := placementID(norm); got != tc.want {
				t.Errorf("placementID of %v rotated = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
