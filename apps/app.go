package apps

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/pollux-nomad/pollux/apps/internal/delaunay"
)

// ErrReferenceMismatch is returned (wrapped) by Load when Options.Reference
// records a tessellation of other points than the profile's.
var ErrReferenceMismatch = errors.New("recorded tessellation does not match the profile's points")

// Application is one profiled training job (pollux-reference.md §2 table and
// §4; artifact simulator/applications.py, class Application).
type Application struct {
	// Name is the application's directory name, e.g. "cifar10".
	Name string
	// InitBatchSize (M0) is the smallest validated batch size, MaxBatchSize
	// the largest, unless overridden by Options.
	InitBatchSize, MaxBatchSize int
	// MinLocalBsz and MaxLocalBsz are the smallest and largest local_bsz in
	// placements.csv, unless overridden (LoadAll sets yolov3's maximum to 8).
	MinLocalBsz, MaxLocalBsz int
	// MaxEpochs is the training length in epochs (Options.MaxEpochs).
	MaxEpochs int

	// validation holds the runs by increasing batch size.
	validation []*validationRun
	// progress[e] = Progress(e), e = 0..MaxEpochs.
	progress []float64
	// placements holds, per placement digit string, its rows sorted stably
	// by local_bsz (interp1d sorts with a stable merge sort).
	placements map[string][]placementRow
	// points and values are the 3-D interpolation data: per-(N, K, m) means
	// of placements.csv sorted by (N, K, m), then scalability.csv in file
	// order (the artifact's DataFrame.append order).
	points [][3]float64
	values [][2]float64

	reference []byte // recorded tessellation (Options.Reference), or nil
	meshOnce  sync.Once
	mesh      *delaunay.Mesh
	meshErr   error

	memoMu sync.RWMutex
	memo   map[string]throughputResult // by appendKey
}

// Options override the constants derived from the data; a zero field means
// "derive" (the artifact's Application constructor arguments).
type Options struct {
	// MaxEpochs is the number of epochs a job trains for; required, and at
	// most the number of rows of every validation file.
	MaxEpochs int
	// InitBatchSize overrides M0 (default: the smallest validated batch size).
	InitBatchSize int
	// MaxBatchSize overrides the largest batch size (default: the largest
	// validated batch size).
	MaxBatchSize int
	// MinLocalBsz and MaxLocalBsz override the per-GPU micro-batch bounds
	// (default: the extremes of local_bsz in placements.csv).
	MinLocalBsz, MaxLocalBsz int
	// Reference, if not nil, is a tessellation of the profile's
	// interpolation points recorded from SciPy (the format of
	// internal/delaunay.ReadQhull, plain or gzip-compressed, as written by
	// qhull/export.py), replayed instead of building a Delaunay
	// triangulation in Go. Load fails with ErrReferenceMismatch if it
	// records other points.
	Reference []byte
}

// artifactEpochs is the hard-coded training length of each artifact
// application (applications.py, APPLICATIONS).
var artifactEpochs = map[string]int{
	"bert": 2, "cifar10": 100, "deepspeech2": 80, "imagenet": 90, "ncf": 10, "yolov3": 50,
}

// Names returns the names of the six artifact applications, sorted.
func Names() []string {
	names := make([]string, 0, len(artifactEpochs))
	for n := range artifactEpochs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// LoadAll loads the six artifact applications from fsys (rooted like
// data.Traces(): one directory per application) with the artifact's
// constants: max epochs bert 2, cifar10 100, deepspeech2 80, imagenet 90,
// ncf 10, yolov3 50, and yolov3's MaxLocalBsz 8. Each application replays
// the embedded SciPy tessellation of its points when the profile matches
// the artifact's, and is triangulated in Go otherwise (see
// Application.ReplaysQhull).
func LoadAll(fsys fs.FS) (map[string]*Application, error) {
	out := make(map[string]*Application, len(artifactEpochs))
	for _, name := range Names() {
		opts := Options{MaxEpochs: artifactEpochs[name]}
		if name == "yolov3" {
			opts.MaxLocalBsz = 8
		}
		ref, err := ReferenceTessellation(name)
		if err != nil {
			return nil, err
		}
		opts.Reference = ref
		a, err := Load(fsys, name, opts)
		if errors.Is(err, ErrReferenceMismatch) {
			opts.Reference = nil
			a, err = Load(fsys, name, opts)
		}
		if err != nil {
			return nil, fmt.Errorf("failed to load application %s: %w", name, err)
		}
		out[name] = a
	}
	return out, nil
}

// Load reads one application's directory dir of fsys: placements.csv,
// scalability.csv and validation-<batch size>.csv files. Errors name the
// file, line and reason. The Delaunay triangulation is built lazily, on the
// first Throughput query that needs it.
func Load(fsys fs.FS, dir string, opts Options) (*Application, error) {
	if opts.MaxEpochs <= 0 {
		return nil, fmt.Errorf("failed to load %s: Options.MaxEpochs must be positive, got %d", dir, opts.MaxEpochs)
	}
	for _, o := range []struct {
		name string
		v    int
	}{{"InitBatchSize", opts.InitBatchSize}, {"MaxBatchSize", opts.MaxBatchSize}, {"MinLocalBsz", opts.MinLocalBsz}, {"MaxLocalBsz", opts.MaxLocalBsz}} {
		if o.v < 0 {
			return nil, fmt.Errorf("failed to load %s: Options.%s must not be negative, got %d", dir, o.name, o.v)
		}
	}
	a := &Application{Name: path.Base(dir), MaxEpochs: opts.MaxEpochs}

	// Validation runs.
	files, err := fs.Glob(fsys, path.Join(dir, "validation-*.csv"))
	if err != nil {
		return nil, fmt.Errorf("failed to list validation files in %s: %w", dir, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("failed to load %s: no validation-<batch size>.csv files", dir)
	}
	for _, f := range files {
		base := strings.TrimSuffix(path.Base(f), ".csv")
		bs, err := strconv.Atoi(base[strings.LastIndex(base, "-")+1:])
		if err != nil || bs <= 0 {
			return nil, fmt.Errorf("%s: file name does not end in a positive batch size", f)
		}
		v, err := readValidation(fsys, f, bs)
		if err != nil {
			return nil, err
		}
		if len(v.progress) < opts.MaxEpochs {
			return nil, fmt.Errorf("%s: %d epochs, fewer than MaxEpochs %d", f, len(v.progress), opts.MaxEpochs)
		}
		a.validation = append(a.validation, v)
	}
	slices.SortFunc(a.validation, func(x, y *validationRun) int { return cmp.Compare(x.batchSize, y.batchSize) })
	for i := 1; i < len(a.validation); i++ {
		if a.validation[i].batchSize == a.validation[i-1].batchSize {
			return nil, fmt.Errorf("failed to load %s: two validation files for batch size %d", dir, a.validation[i].batchSize)
		}
	}
	a.progress = make([]float64, opts.MaxEpochs+1)
	for e := 1; e <= opts.MaxEpochs; e++ {
		a.progress[e] = a.validation[0].progress[e-1]
		for _, v := range a.validation[1:] {
			a.progress[e] = min(a.progress[e], v.progress[e-1])
		}
	}

	// Throughput tables.
	rows, err := readPlacements(fsys, path.Join(dir, "placements.csv"))
	if err != nil {
		return nil, err
	}
	scal, err := readScalability(fsys, path.Join(dir, "scalability.csv"))
	if err != nil {
		return nil, err
	}
	a.placements = map[string][]placementRow{}
	a.MinLocalBsz, a.MaxLocalBsz = rows[0].localBsz, rows[0].localBsz
	type nkm struct{ n, k, m int }
	sums := map[nkm]*[3]float64{} // step sum, sync sum, count
	for _, r := range rows {
		a.placements[r.placement] = append(a.placements[r.placement], r)
		a.MinLocalBsz = min(a.MinLocalBsz, r.localBsz)
		a.MaxLocalBsz = max(a.MaxLocalBsz, r.localBsz)
		// Means summed in file order, as pandas' groupby-mean does.
		key := nkm{len(r.placement), r.numReplicas(), r.localBsz}
		s := sums[key]
		if s == nil {
			s = new([3]float64)
			sums[key] = s
		}
		s[0] += r.stepTime
		s[1] += r.syncTime
		s[2]++
	}
	for _, rs := range a.placements {
		slices.SortStableFunc(rs, func(x, y placementRow) int { return cmp.Compare(x.localBsz, y.localBsz) })
	}
	keys := make([]nkm, 0, len(sums))
	for key := range sums {
		keys = append(keys, key)
	}
	slices.SortFunc(keys, func(x, y nkm) int {
		return cmp.Or(cmp.Compare(x.n, y.n), cmp.Compare(x.k, y.k), cmp.Compare(x.m, y.m))
	})
	for _, key := range keys {
		s := sums[key]
		a.points = append(a.points, [3]float64{float64(key.n), float64(key.k), float64(key.m)})
		a.values = append(a.values, [2]float64{s[0] / s[2], s[1] / s[2]})
	}
	for _, r := range scal {
		a.points = append(a.points, [3]float64{float64(r.numNodes), float64(r.numReplicas), float64(r.localBsz)})
		a.values = append(a.values, [2]float64{r.stepTime, r.syncTime})
	}

	// Constants: derived unless overridden.
	a.InitBatchSize = cmp.Or(opts.InitBatchSize, a.validation[0].batchSize)
	a.MaxBatchSize = cmp.Or(opts.MaxBatchSize, a.validation[len(a.validation)-1].batchSize)
	a.MinLocalBsz = cmp.Or(opts.MinLocalBsz, a.MinLocalBsz)
	a.MaxLocalBsz = cmp.Or(opts.MaxLocalBsz, a.MaxLocalBsz)
	if a.MaxBatchSize < a.MinLocalBsz {
		return nil, fmt.Errorf("failed to load %s: MaxBatchSize %d is below MinLocalBsz %d", dir, a.MaxBatchSize, a.MinLocalBsz)
	}
	if a.MinLocalBsz > a.MaxLocalBsz {
		return nil, fmt.Errorf("failed to load %s: MinLocalBsz %d is above MaxLocalBsz %d", dir, a.MinLocalBsz, a.MaxLocalBsz)
	}

	if opts.Reference != nil {
		// Check the recorded points now; parse the simplices lazily.
		r, err := referenceReader(opts.Reference, a.Name)
		if err != nil {
			return nil, err
		}
		pts, err := delaunay.ReadQhullPoints(r, "tessellation of "+a.Name)
		if err != nil {
			return nil, fmt.Errorf("failed to read the recorded tessellation of %s: %w", a.Name, err)
		}
		if len(pts) != len(a.points) {
			return nil, fmt.Errorf("failed to load %s: %w: %d recorded points, %d in the profile", dir, ErrReferenceMismatch, len(pts), len(a.points))
		}
		for i, p := range a.points {
			if pts[i] != p {
				return nil, fmt.Errorf("failed to load %s: %w: point %d is %v, recorded %v", dir, ErrReferenceMismatch, i, p, pts[i])
			}
		}
		a.reference = opts.Reference
	}
	return a, nil
}

// referenceReader returns a reader of a recorded tessellation, gunzipping
// it if needed.
func referenceReader(data []byte, name string) (io.Reader, error) {
	if len(data) >= 2 && data[0] == 0x1f && data[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("failed to read the recorded tessellation of %s: %w", name, err)
		}
		return zr, nil
	}
	return bytes.NewReader(data), nil
}

// readReference parses a recorded tessellation.
func readReference(data []byte, name string) (*delaunay.Mesh, error) {
	r, err := referenceReader(data, name)
	if err != nil {
		return nil, err
	}
	m, err := delaunay.ReadQhull(r, "tessellation of "+name)
	if err != nil {
		return nil, fmt.Errorf("failed to read the recorded tessellation of %s: %w", name, err)
	}
	return m, nil
}

// ReplaysQhull reports whether 3-D throughput interpolation replays a
// recorded SciPy/Qhull tessellation (exactly the artifact's interpolant)
// rather than a triangulation built in Go.
func (a *Application) ReplaysQhull() bool { return a.reference != nil }

// NumPoints returns the number of 3-D interpolation points: distinct
// (num_nodes, num_replicas, local_bsz) of placements.csv plus the rows of
// scalability.csv.
func (a *Application) NumPoints() int { return len(a.points) }

// ValidatedBatchSizes returns the batch sizes with a validation run, sorted.
func (a *Application) ValidatedBatchSizes() []int {
	out := make([]int, len(a.validation))
	for i, v := range a.validation {
		out[i] = v.batchSize
	}
	return out
}
