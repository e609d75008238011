package apps

import (
	"encoding/csv"
	"errors"
	"io/fs"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/pollux-nomad/pollux/data"
)

var (
	loadOnce sync.Once
	loaded   map[string]*Application
	loadErr  error
)

// artifact returns the six applications loaded once from the embedded data.
func artifact(t testing.TB) map[string]*Application {
	t.Helper()
	loadOnce.Do(func() { loaded, loadErr = LoadAll(data.Traces()) })
	if loadErr != nil {
		t.Fatalf("LoadAll: %v", loadErr)
	}
	return loaded
}

// readCSV returns the data rows of a CSV file of fsys.
func readCSV(t testing.TB, fsys fs.FS, path string) [][]string {
	t.Helper()
	f, err := fsys.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return rows[1:]
}

func atof(t testing.TB, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func atoi(t testing.TB, s string) int {
	t.Helper()
	v, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestLoadAllConstants checks the constants table of pollux-reference.md §2.
func TestLoadAllConstants(t *testing.T) {
	type consts struct {
		M0, MaxM, MinLocal, MaxLocal, Epochs, Points int
		Qhull                                        bool
	}
	want := map[string]consts{
		"bert":        {12, 384, 4, 12, 2, 350, true},
		"cifar10":     {128, 4096, 32, 1024, 100, 700, true},
		"deepspeech2": {20, 640, 10, 80, 80, 434, true},
		"imagenet":    {200, 12800, 20, 200, 90, 560, true},
		"ncf":         {256, 32768, 32, 32768, 10, 1004, true},
		"yolov3":      {8, 512, 4, 8, 50, 278, true},
	}
	all := artifact(t)
	if diff := cmp.Diff(Names(), []string{"bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"}); diff != "" {
		t.Errorf("Names() (-want +got):\n%s", diff)
	}
	if len(all) != len(want) {
		t.Errorf("LoadAll returned %d applications, want %d", len(all), len(want))
	}
	for name, w := range want {
		t.Run(name, func(t *testing.T) {
			a := all[name]
			if a == nil {
				t.Fatalf("missing")
			}
			got := consts{a.InitBatchSize, a.MaxBatchSize, a.MinLocalBsz, a.MaxLocalBsz, a.MaxEpochs, a.NumPoints(), a.ReplaysQhull()}
			if diff := cmp.Diff(w, got); diff != "" {
				t.Errorf("constants (-want +got):\n%s", diff)
			}
			if a.Name != name {
				t.Errorf("Name = %q", a.Name)
			}
			if got := a.CompletionEpoch(); got != w.Epochs-1 {
				t.Errorf("CompletionEpoch() = %d, want %d", got, w.Epochs-1)
			}
		})
	}
}

// TestTotalWork checks Progress(MaxEpochs), the work of one job, against
// pollux-reference.md §4.
func TestTotalWork(t *testing.T) {
	want := map[string]float64{
		"bert": 14774, "cifar10": 39063, "deepspeech2": 28536,
		"imagenet": 576526, "ncf": 194174, "yolov3": 103444,
	}
	all := artifact(t)
	for name, w := range want {
		t.Run(name, func(t *testing.T) {
			a := all[name]
			const tol = 0.5 // the reference rounds to whole iterations
			if got := a.Progress(a.MaxEpochs); math.Abs(got-w) > tol {
				t.Errorf("Progress(%d) = %.3f, want %.0f ± %g", a.MaxEpochs, got, w, tol)
			}
			if got := a.Progress(0); got != 0 {
				t.Errorf("Progress(0) = %g, want 0", got)
			}
			for e := 1; e <= a.MaxEpochs; e++ {
				if a.Progress(e) <= a.Progress(e-1) {
					t.Fatalf("Progress(%d) = %g not above Progress(%d) = %g", e, a.Progress(e), e-1, a.Progress(e-1))
				}
			}
		})
	}
}

// TestProgressIndex checks get_progress's index semantics on bert, whose
// runs have two epochs: Progress(1) is the minimum over batch sizes of the
// first row's progress.
func TestProgressIndex(t *testing.T) {
	a := artifact(t)["bert"]
	first := math.Inf(1)
	for _, bs := range a.ValidatedBatchSizes() {
		rows := readCSV(t, data.Traces(), "bert/validation-"+strconv.Itoa(bs)+".csv")
		first = min(first, atof(t, rows[0][0]))
	}
	if got := a.Progress(1); got != first {
		t.Errorf("Progress(1) = %v, want %v", got, first)
	}
	if first != 7387 {
		t.Errorf("min first-epoch progress = %v, want 7387 (validation-12.csv)", first)
	}
}

func TestGradStatsAndIteration(t *testing.T) {
	a := artifact(t)["bert"]
	row := func(bs, epoch int) (sqr, variance, it float64) {
		rows := readCSV(t, data.Traces(), "bert/validation-"+strconv.Itoa(bs)+".csv")
		return atof(t, rows[epoch][3]), atof(t, rows[epoch][4]), atof(t, rows[epoch][1])
	}
	sqr12, var12, it12 := row(12, 1)
	sqr24, var24, it24 := row(24, 1)
	sqr384, var384, it384 := row(384, 0)
	tests := map[string]struct {
		batchSize         float64
		epoch             int
		sqr, variance, it float64
	}{
		"validated":        {12, 1, sqr12, var12, it12},
		"midpoint":         {18, 1, (sqr12 + sqr24) / 2, (var12 + var24) / 2, (it12 + it24) / 2},
		"quarter":          {15, 1, 0.75*sqr12 + 0.25*sqr24, 0.75*var12 + 0.25*var24, 0.75*it12 + 0.25*it24},
		"largest":          {384, 0, sqr384, var384, it384},
		"above: clamped":   {1000, 0, sqr384, var384, it384},
		"below: clamped":   {3, 1, sqr12, var12, it12},
		"fractional batch": {12.5, 1, sqr12 + (sqr24-sqr12)/24, var12 + (var24-var12)/24, it12 + (it24-it12)/24},
	}
	const tol = 1e-12 // relative
	approx := cmpopts.EquateApprox(tol, 0)
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			sqr, variance := a.GradStats(tc.batchSize, tc.epoch)
			it := a.Iteration(tc.batchSize, tc.epoch)
			want := []float64{tc.sqr, tc.variance, tc.it}
			if diff := cmp.Diff(want, []float64{sqr, variance, it}, approx); diff != "" {
				t.Errorf("(sqr, var, iteration) (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEpochPanics(t *testing.T) {
	a := artifact(t)["bert"]
	tests := map[string]func(){
		"GradStats epoch 2":  func() { a.GradStats(12, 2) },
		"GradStats epoch -1": func() { a.GradStats(12, -1) },
		"Iteration epoch 2":  func() { a.Iteration(12, 2) },
		"Progress epoch 3":   func() { a.Progress(3) },
	}
	for name, f := range tests {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("no panic")
				}
			}()
			f()
		})
	}
}

// TestConfigurationsMatchWorkloads checks Configurations(0.5, 0.8) against
// the artifact's workloads, which draw (num_replicas, batch_size) uniformly
// from it: every pair in the eight workloads must be offered, and every
// offered pair must occur somewhere.
func TestConfigurationsMatchWorkloads(t *testing.T) {
	all := artifact(t)
	type pair struct{ Replicas, BatchSize int }
	seen := map[string]map[pair]bool{}
	for w := 1; w <= 8; w++ {
		for _, r := range readCSV(t, data.Workloads(), "workload-"+strconv.Itoa(w)+".csv") {
			app := r[2]
			if seen[app] == nil {
				seen[app] = map[pair]bool{}
			}
			seen[app][pair{atoi(t, r[3]), atoi(t, r[4])}] = true
		}
	}
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			confs, err := all[name].Configurations(0.5, 0.8)
			if err != nil {
				t.Fatal(err)
			}
			got := map[pair]bool{}
			for _, c := range confs {
				got[pair{c.Replicas, c.BatchSize}] = true
				if !(c.JCT > 0 && c.JCT < 12*3600) {
					t.Errorf("%+v: JCT outside (0, 12 h)", c)
				}
			}
			if diff := cmp.Diff(seen[name], got); diff != "" {
				t.Errorf("configurations (-workloads +got):\n%s", diff)
			}
		})
	}
}

// TestConfigurationsValues pins the predicted JCTs of two applications,
// computed by hand from the profile: ncf falls back to 1 GPU; yolov3 keeps
// 4 GPUs at batch size 64 (local 16 = 2 micro-batches of 8).
func TestConfigurationsValues(t *testing.T) {
	all := artifact(t)
	y := all["yolov3"]
	step, sync, err := y.Throughput([]int{4}, 8)
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		app  string
		want []Configuration
	}{
		"ncf":    {"ncf", []Configuration{{1, 32768, 32.99644393920899}}},
		"yolov3": {"yolov3", []Configuration{{4, 64, y.Iteration(64, 49) * (step + (step - sync))}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := all[tc.app].Configurations(0.5, 0.8)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateApprox(1e-12, 0)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// profileFS returns a small valid profile under dir "app", with files
// replaced or removed by edits (an empty string removes the file).
func profileFS(edits map[string]string) fstest.MapFS {
	files := map[string]string{
		"app/placements.csv": "placement,local_bsz,step_time,sync_time\n" +
			"1,4,0.1,0.0\n1,8,0.2,0.0\n2,4,0.15,0.05\n2,8,0.25,0.05\n11,4,0.2,0.1\n11,8,0.3,0.1\n4,4,0.25,0.1\n4,8,0.35,0.1\n22,4,0.3,0.2\n22,8,0.4,0.2\n",
		"app/scalability.csv": "num_nodes,num_replicas,local_bsz,step_time,sync_time\n" +
			"6,6,4,0.5,0.4\n6,6,8,0.6,0.4\n6,24,4,0.7,0.6\n6,24,8,0.8,0.6\n",
		"app/validation-8.csv":  "progress,iteration,metric,grad_sqr,grad_var\n10,10,0.5,1,2\n20,20,0.6,1,2\n",
		"app/validation-32.csv": "progress,iteration,metric,grad_sqr,grad_var\n12,3,0.5,1,4\n22,6,0.6,1,4\n",
	}
	for k, v := range edits {
		if v == "" {
			delete(files, k)
		} else {
			files[k] = v
		}
	}
	fsys := fstest.MapFS{}
	for k, v := range files {
		fsys[k] = &fstest.MapFile{Data: []byte(v)}
	}
	return fsys
}

func TestLoadSmallProfile(t *testing.T) {
	a, err := Load(profileFS(nil), "app", Options{MaxEpochs: 2})
	if err != nil {
		t.Fatal(err)
	}
	if a.ReplaysQhull() {
		t.Errorf("ReplaysQhull() = true without a reference")
	}
	type consts struct{ M0, MaxM, MinLocal, MaxLocal int }
	if diff := cmp.Diff(consts{8, 32, 4, 8}, consts{a.InitBatchSize, a.MaxBatchSize, a.MinLocalBsz, a.MaxLocalBsz}); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// Placement (3) is not measured: 3-D interpolation at (1, 3, 6), on the
	// hull face N = 1, where the profile is linear:
	// step = 0.1 + 0.05·(K−1) + 0.025·(m−4).
	step, _, err := a.Throughput([]int{3}, 6)
	if err != nil {
		t.Fatal(err)
	}
	if want := 0.1 + 0.05*2 + 0.025*2; math.Abs(step-want) > 1e-12 {
		t.Errorf("step(3 GPUs, m 6) = %v, want %v", step, want)
	}
	// A reference of other points is refused.
	ref, err := ReferenceTessellation("bert")
	if err != nil || ref == nil {
		t.Fatalf("ReferenceTessellation(bert) = %d bytes, %v", len(ref), err)
	}
	if _, err := Load(profileFS(nil), "app", Options{MaxEpochs: 2, Reference: ref}); !errors.Is(err, ErrReferenceMismatch) {
		t.Errorf("Load with bert's reference: error %v, want ErrReferenceMismatch", err)
	}
	if ref, err := ReferenceTessellation("nonesuch"); ref != nil || err != nil {
		t.Errorf("ReferenceTessellation(nonesuch) = %d bytes, %v; want nil, nil", len(ref), err)
	}
}

func TestLoadErrors(t *testing.T) {
	tests := map[string]struct {
		edits map[string]string
		opts  Options
		want  string
	}{
		"missing placements": {map[string]string{"app/placements.csv": ""}, Options{MaxEpochs: 2},
			"failed to open app/placements.csv"},
		"missing scalability": {map[string]string{"app/scalability.csv": ""}, Options{MaxEpochs: 2},
			"failed to open app/scalability.csv"},
		"no validation files": {map[string]string{"app/validation-8.csv": "", "app/validation-32.csv": ""}, Options{MaxEpochs: 2},
			"no validation-<batch size>.csv files"},
		"malformed number": {map[string]string{"app/placements.csv": "placement,local_bsz,step_time,sync_time\n1,4,0.1,0\n1,8,abc,0\n"}, Options{MaxEpochs: 2},
			`app/placements.csv:3: step_time: not a number "abc"`},
		"truncated row": {map[string]string{"app/scalability.csv": "num_nodes,num_replicas,local_bsz,step_time,sync_time\n6,6,4,0.5,0.4\n6,6,8\n"}, Options{MaxEpochs: 2},
			"app/scalability.csv:3: want 5 fields, got 3"},
		"empty table": {map[string]string{"app/scalability.csv": "num_nodes,num_replicas,local_bsz,step_time,sync_time\n"}, Options{MaxEpochs: 2},
			"app/scalability.csv: no data rows"},
		"empty file": {map[string]string{"app/validation-8.csv": "\n"}, Options{MaxEpochs: 2},
			"app/validation-8.csv: empty file"},
		"missing column": {map[string]string{"app/validation-8.csv": "progress,iteration,metric,grad_sqr\n1,1,1,1\n"}, Options{MaxEpochs: 1},
			`app/validation-8.csv:1: missing column "grad_var"`},
		"bad placement": {map[string]string{"app/placements.csv": "placement,local_bsz,step_time,sync_time\n1,4,0.1,0\n1x,8,0.1,0\n"}, Options{MaxEpochs: 2},
			`app/placements.csv:3: placement: want digits 1-9`},
		"fractional local_bsz": {map[string]string{"app/placements.csv": "placement,local_bsz,step_time,sync_time\n1,4.5,0.1,0\n"}, Options{MaxEpochs: 2},
			`app/placements.csv:2: local_bsz: not an integer "4.5"`},
		"negative time": {map[string]string{"app/placements.csv": "placement,local_bsz,step_time,sync_time\n1,4,-0.1,0\n"}, Options{MaxEpochs: 2},
			"app/placements.csv:2: step_time: negative value -0.1"},
		"too few epochs": {nil, Options{MaxEpochs: 3},
			"app/validation-32.csv: 2 epochs, fewer than MaxEpochs 3"},
		"bad validation name": {map[string]string{"app/validation-x.csv": "progress,iteration,metric,grad_sqr,grad_var\n1,1,1,1,1\n"}, Options{MaxEpochs: 1},
			"app/validation-x.csv: file name does not end in a positive batch size"},
		"no MaxEpochs":    {nil, Options{}, "Options.MaxEpochs must be positive"},
		"negative option": {nil, Options{MaxEpochs: 1, MaxLocalBsz: -1}, "Options.MaxLocalBsz must not be negative"},
		"max batch below local": {nil, Options{MaxEpochs: 1, MaxBatchSize: 2},
			"MaxBatchSize 2 is below MinLocalBsz 4"},
		"corrupt reference": {nil, Options{MaxEpochs: 1, Reference: []byte("points 1\n")},
			"tessellation of app:1: unexpected end of file"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Load(profileFS(tc.edits), "app", tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}
