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
	// profile is the throughput table of the default GPU type (the
	// untyped placements.csv, or Options.DefaultType's); its fields are
	// promoted.
	*profile
	// types holds the throughput table of every GPU type the application
	// was profiled on (Options.Types); nil for an untyped application.
	types map[string]*profile
}

// profile is one GPU type's throughput table.
type profile struct {
	// name is the application's name, with the GPU type for a typed
	// table ("bert on a100"), for error messages.
	name string
	// gpuType is the table's GPU type ("" for an untyped application).
	gpuType string
	// minLocal and maxLocal are the local_bsz bounds of this type: the
	// extremes of its placements file unless overridden.
	minLocal, maxLocal int
	// placements holds, per placement digit string, its rows sorted stably
	// by local_bsz (interp1d sorts with a stable merge sort).
	placements map[string][]placementRow
	// maxLocalByReplicas is the largest local_bsz of the placements rows
	// with that many GPUs; scal the scalability rows (for MaxLocalBszFor).
	maxLocalByReplicas map[int]int
	scal               []scalabilityRow
	// points and values are the 3-D interpolation data: per-(N, K, m) means
	// of placements.csv sorted by (N, K, m), then scalability.csv in file
	// order (the artifact's DataFrame.append order).
	points [][3]float64
	values [][2]float64
	// maxReplicas is the most GPUs among points: no lookup answers for
	// more.
	maxReplicas int

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
	// Types, when not empty, makes the application typed: one throughput
	// table per entry, read from placements-<Suffix>.csv and
	// scalability-<Suffix>.csv (the Sia artifact's layout) instead of
	// placements.csv and scalability.csv. MinLocalBsz and MaxLocalBsz then
	// apply to every type unless the entry overrides them.
	Types []TypeFiles
	// DefaultType names the entry of Types whose table Throughput and the
	// promoted MinLocalBsz/MaxLocalBsz use (default: the first entry).
	DefaultType string
	// Reference, if not nil, is a tessellation of the profile's
	// interpolation points recorded from SciPy (the format of
	// internal/delaunay.ReadQhull, plain or gzip-compressed, as written by
	// qhull/export.py), replayed instead of building a Delaunay
	// triangulation in Go. Load fails with ErrReferenceMismatch if it
	// records other points.
	Reference []byte
}

// TypeFiles names one GPU type's profile files of a typed application.
type TypeFiles struct {
	// Type is the GPU type's name ("t4", "a100", ...).
	Type string
	// Suffix is the file-name suffix: placements-<Suffix>.csv.
	Suffix string
	// MaxLocalBsz, if positive, overrides this type's largest local_bsz.
	MaxLocalBsz int
	// Reference is a recorded SciPy tessellation of this type's points
	// (as Options.Reference), or nil.
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
	a.InitBatchSize = cmp.Or(opts.InitBatchSize, a.validation[0].batchSize)
	a.MaxBatchSize = cmp.Or(opts.MaxBatchSize, a.validation[len(a.validation)-1].batchSize)
	tables := opts.Types
	if len(tables) == 0 {
		tables = []TypeFiles{{MaxLocalBsz: opts.MaxLocalBsz, Reference: opts.Reference}}
	}
	defaultType := cmp.Or(opts.DefaultType, tables[0].Type)
	for _, tf := range tables {
		maxLocal := cmp.Or(tf.MaxLocalBsz, opts.MaxLocalBsz)
		p, err := loadProfile(fsys, dir, a.Name, tf, opts.MinLocalBsz, maxLocal, a.MaxBatchSize)
		if err != nil {
			return nil, err
		}
		if len(opts.Types) > 0 {
			if a.types == nil {
				a.types = map[string]*profile{}
			}
			if _, dup := a.types[tf.Type]; dup || tf.Type == "" {
				return nil, fmt.Errorf("failed to load %s: GPU type %q empty or given twice", dir, tf.Type)
			}
			a.types[tf.Type] = p
		}
		if tf.Type == defaultType {
			a.profile = p
		}
	}
	if a.profile == nil {
		return nil, fmt.Errorf("failed to load %s: default GPU type %q is not among the types loaded", dir, defaultType)
	}
	a.MinLocalBsz, a.MaxLocalBsz = a.minLocal, a.maxLocal
	return a, nil
}

// loadProfile reads one throughput table: placements.csv and
// scalability.csv of dir, or placements-<suffix>.csv and
// scalability-<suffix>.csv for a typed table. minLocal and maxLocal
// override the bounds derived from the placements when positive.
func loadProfile(fsys fs.FS, dir, appName string, tf TypeFiles, minLocal, maxLocal, maxBatch int) (*profile, error) {
	placementsFile, scalabilityFile := "placements.csv", "scalability.csv"
	name := appName
	if tf.Suffix != "" {
		placementsFile, scalabilityFile = "placements-"+tf.Suffix+".csv", "scalability-"+tf.Suffix+".csv"
		name = appName + " on " + tf.Type
	}
	rows, err := readPlacements(fsys, path.Join(dir, placementsFile))
	if err != nil {
		return nil, err
	}
	scal, err := readScalability(fsys, path.Join(dir, scalabilityFile))
	if err != nil {
		return nil, err
	}
	a := &profile{name: name, gpuType: tf.Type, scal: scal, placements: map[string][]placementRow{}, maxLocalByReplicas: map[int]int{}}
	a.minLocal, a.maxLocal = rows[0].localBsz, rows[0].localBsz
	type nkm struct{ n, k, m int }
	sums := map[nkm]*[3]float64{} // step sum, sync sum, count
	for _, r := range rows {
		a.placements[r.placement] = append(a.placements[r.placement], r)
		a.minLocal = min(a.minLocal, r.localBsz)
		a.maxLocal = max(a.maxLocal, r.localBsz)
		a.maxLocalByReplicas[r.numReplicas()] = max(a.maxLocalByReplicas[r.numReplicas()], r.localBsz)
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
	for _, pt := range a.points {
		a.maxReplicas = max(a.maxReplicas, int(pt[1]))
	}
	a.minLocal = cmp.Or(minLocal, a.minLocal)
	a.maxLocal = cmp.Or(maxLocal, a.maxLocal)
	if maxBatch < a.minLocal {
		return nil, fmt.Errorf("failed to load %s: MaxBatchSize %d is below MinLocalBsz %d", name, maxBatch, a.minLocal)
	}
	if a.minLocal > a.maxLocal {
		return nil, fmt.Errorf("failed to load %s: MinLocalBsz %d is above MaxLocalBsz %d", name, a.minLocal, a.maxLocal)
	}
	if tf.Reference != nil {
		// Check the recorded points now; parse the simplices lazily.
		r, err := referenceReader(tf.Reference, name)
		if err != nil {
			return nil, err
		}
		pts, err := delaunay.ReadQhullPoints(r, "tessellation of "+name)
		if err != nil {
			return nil, fmt.Errorf("failed to read the recorded tessellation of %s: %w", name, err)
		}
		if len(pts) != len(a.points) {
			return nil, fmt.Errorf("failed to load %s: %w: %d recorded points, %d in the profile", name, ErrReferenceMismatch, len(pts), len(a.points))
		}
		for i, p := range a.points {
			if pts[i] != p {
				return nil, fmt.Errorf("failed to load %s: %w: point %d is %v, recorded %v", name, ErrReferenceMismatch, i, p, pts[i])
			}
		}
		a.reference = tf.Reference
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
