package results

import (
	"flag"
	"fmt"
	"image"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pollux-nomad/pollux/workload"
)

var plotDir = flag.String("plotdir", "", "also write TestWritePlots' PNGs to this directory, for inspection")

// fakeRun plays a crude scheduler over the artifact's workload-6 so that
// the plots have realistic shapes: 60 s rounds, 64 GPUs, jobs served in
// submission order, each asking for up to maxGPUs GPUs (or its trace
// num_replicas if fixed is set), with work in GPU·seconds by application.
func fakeRun(t testing.TB, policy string, maxGPUs int, fixed bool, seed uint64) Run {
	t.Helper()
	jobs, err := workload.ParseFile(filepath.Join("..", "data", "workloads", "workload-6.csv"), nil)
	if err != nil {
		t.Fatal(err)
	}
	work := map[string]float64{"cifar10": 3000, "ncf": 300, "bert": 8000, "deepspeech2": 20000, "yolov3": 100000, "imagenet": 400000}
	rng := rand.New(rand.NewPCG(seed, 1))
	const capacity, interval = 64, 60.0
	left := make([]float64, len(jobs))
	res := make([]JobResult, len(jobs))
	for i, j := range jobs {
		left[i] = work[j.Application] * (0.5 + rng.Float64())
		res[i] = JobResult{Name: j.Name, Application: j.Application, Submitted: j.Time, FinalBatchSize: j.BatchSize}
	}
	r := Run{Policy: policy, Workload: "workload-6", TotalGPUs: capacity}
	prev := make(map[string]int)
	for now := 0.0; ; now += interval {
		done := true
		free := capacity
		s := Sample{Time: now, JobGPUs: make(map[string]int)}
		for i, j := range jobs {
			if res[i].Completed {
				continue
			}
			done = false
			if j.Time > now || free == 0 {
				continue
			}
			want := min(maxGPUs, 1+int(left[i]/20000))
			if fixed {
				want = j.NumReplicas
			}
			if want > free {
				if fixed {
					continue
				}
				want = free
			}
			free -= want
			s.JobGPUs[j.Name] = want
			if p, ok := prev[j.Name]; ok && p != want {
				res[i].Restarts++
			}
			speed := float64(want) * math.Pow(0.85, math.Log2(float64(want)))
			res[i].GPUSeconds += float64(want) * interval
			if left[i] <= speed*interval {
				res[i].Completed = true
				res[i].Completion = now + math.Round(left[i]/speed)
			}
			left[i] -= speed * interval
		}
		if done {
			break
		}
		s.GPUsInUse = capacity - free
		r.Timeline = append(r.Timeline, s)
		r.OptimizeSeconds = append(r.OptimizeSeconds, 0.05+0.1*rng.Float64())
		prev = s.JobGPUs
	}
	r.Jobs = res
	return r
}

func TestWritePlots(t *testing.T) {
	runs := []Run{
		fakeRun(t, "pollux", 16, false, 1),
		fakeRun(t, "tiresias", 0, true, 2),
		fakeRun(t, "optimus", 8, false, 3),
	}
	dirs := []string{t.TempDir()}
	if *plotDir != "" {
		dirs = append(dirs, *plotDir)
	}
	for _, dir := range dirs {
		if err := WritePlots(dir, runs); err != nil {
			t.Fatalf("WritePlots: %v", err)
		}
	}
	tests := map[string]struct {
		file          string
		minW, minH    int
		minDistinctCo int
	}{
		"JCT CDF":             {file: JCTCDFFile, minW: 800, minH: 500, minDistinctCo: 4},
		"GPUs in use":         {file: GPUsInUseFile, minW: 800, minH: 500, minDistinctCo: 4},
		"pollux heat map":     {file: "pollux-job-gpus.png", minW: 1100, minH: 700, minDistinctCo: 8},
		"tiresias heat map":   {file: "tiresias-job-gpus.png", minW: 1100, minH: 700, minDistinctCo: 8},
		"optimus heat map":    {file: "optimus-job-gpus.png", minW: 1100, minH: 700, minDistinctCo: 8},
		"no other files made": {},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if tc.file == "" {
				entries, err := os.ReadDir(dirs[0])
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, e := range entries {
					got = append(got, e.Name())
				}
				want := []string{GPUsInUseFile, JCTCDFFile, "optimus-job-gpus.png", "pollux-job-gpus.png", "tiresias-job-gpus.png"}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("files mismatch (-want +got):\n%s", diff)
				}
				return
			}
			img := decodePNG(t, filepath.Join(dirs[0], tc.file))
			b := img.Bounds()
			if b.Dx() < tc.minW || b.Dy() < tc.minH {
				t.Errorf("image is %d×%d, want at least %d×%d", b.Dx(), b.Dy(), tc.minW, tc.minH)
			}
			if n := distinctColors(img, 4); n < tc.minDistinctCo {
				t.Errorf("image has %d distinct colours, want at least %d (blank plot?)", n, tc.minDistinctCo)
			}
		})
	}
}

func TestWritePlotsEdgeCases(t *testing.T) {
	tests := map[string]struct {
		runs      []Run
		wantErr   bool
		wantFiles []string
	}{
		"no runs": {wantErr: true},
		"nothing completed, no timeline": {
			runs:      []Run{{Policy: "pollux", Workload: "w", TotalGPUs: 4, Jobs: []JobResult{{Name: "a"}}}},
			wantFiles: []string{GPUsInUseFile, JCTCDFFile, "pollux-job-gpus.png"},
		},
		"empty run": {
			runs:      []Run{{}},
			wantFiles: []string{GPUsInUseFile, JCTCDFFile, "run-job-gpus.png"},
		},
		"one GPU, one round": {
			runs: []Run{{Policy: "p/1", Workload: "w", TotalGPUs: 1,
				Jobs:     []JobResult{{Name: "a", Completed: true, Completion: 0.5}},
				Timeline: []Sample{{Time: 0, GPUsInUse: 1, JobGPUs: map[string]int{"a": 1}}}}},
			wantFiles: []string{GPUsInUseFile, JCTCDFFile, "p_1-job-gpus.png"},
		},
		"autoscaled": {
			runs: []Run{{Policy: "pollux", Workload: "w", TotalGPUs: 8, Autoscaled: true,
				Jobs: []JobResult{{Name: "a", Completed: true, Completion: 120}},
				Timeline: []Sample{{Time: 60, GPUsUp: 4, JobGPUs: map[string]int{}},
					{Time: 120, GPUsInUse: 8, GPUsUp: 8, JobGPUs: map[string]int{"a": 8}}}}},
			wantFiles: []string{ClusterSizeFile, GPUsInUseFile, JCTCDFFile, "pollux-job-gpus.png"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "nested", "out")
			err := WritePlots(dir, tc.runs)
			if tc.wantErr {
				if err == nil {
					t.Fatal("WritePlots succeeded, want an error")
				}
				return
			}
			if err != nil {
				t.Fatalf("WritePlots: %v", err)
			}
			var got []string
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				got = append(got, e.Name())
				decodePNG(t, filepath.Join(dir, e.Name()))
			}
			if diff := cmp.Diff(tc.wantFiles, got); diff != "" {
				t.Errorf("files mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestJobGPUsFileNames(t *testing.T) {
	tests := map[string]struct {
		runs []Run
		want []string
	}{
		"distinct policies": {
			runs: []Run{{Policy: "pollux", Workload: "w1"}, {Policy: "tiresias", Workload: "w1"}},
			want: []string{"pollux-job-gpus.png", "tiresias-job-gpus.png"},
		},
		"same policy, two workloads": {
			runs: []Run{{Policy: "pollux", Workload: "workload-1"}, {Policy: "pollux", Workload: "workload-2"}, {Policy: "optimus", Workload: "workload-1"}},
			want: []string{"pollux-workload-1-job-gpus.png", "pollux-workload-2-job-gpus.png", "optimus-job-gpus.png"},
		},
		"fully duplicated": {
			runs: []Run{{Policy: "pollux", Workload: "w"}, {Policy: "pollux", Workload: "w"}},
			want: []string{"pollux-w-job-gpus.png", "pollux-w-1-job-gpus.png"},
		},
		"unsafe characters": {
			runs: []Run{{Policy: "../p ollux", Workload: "w"}},
			want: []string{".._p_ollux-job-gpus.png"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, jobGPUsFileNames(tc.runs)); diff != "" {
				t.Errorf("file names mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestJobGPUGrid(t *testing.T) {
	// Jobs listed out of submission order; b first at the top (last row).
	r := Run{
		Jobs: []JobResult{
			{Name: "a", Submitted: 60, Completed: true, Completion: 150},
			{Name: "b", Submitted: 0},
		},
		Timeline: []Sample{
			{Time: 0, JobGPUs: map[string]int{"b": 2}},
			{Time: 60, JobGPUs: map[string]int{"b": 4}}, // a waiting
			{Time: 120, JobGPUs: map[string]int{"a": 3, "b": 1}},
			{Time: 180, JobGPUs: map[string]int{"b": 1}}, // a finished
		},
	}
	g, peak := newJobGPUGrid(r)
	nan := math.NaN()
	// z[col][row]: row 0 = a (submitted last), row 1 = b.
	want := [][]float64{{nan, 2}, {0, 4}, {3, 1}, {nan, 1}}
	if diff := cmp.Diff(want, g.z, cmp.Comparer(func(x, y float64) bool {
		return x == y || (math.IsNaN(x) && math.IsNaN(y))
	})); diff != "" {
		t.Errorf("grid mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]float64{0, 60.0 / 3600, 120.0 / 3600, 180.0 / 3600}, g.times); diff != "" {
		t.Errorf("column times mismatch (-want +got):\n%s", diff)
	}
	if peak != 4 {
		t.Errorf("peak = %d, want 4", peak)
	}

	t.Run("grouped columns keep the maximum", func(t *testing.T) {
		long := Run{Jobs: []JobResult{{Name: "x", Submitted: 0}}}
		for k := range 3 * maxHeatColumns {
			gpus := 1
			if k%3 == 1 {
				gpus = 5
			}
			long.Timeline = append(long.Timeline, Sample{Time: float64(60 * k), JobGPUs: map[string]int{"x": gpus}})
		}
		g, _ := newJobGPUGrid(long)
		if c, _ := g.Dims(); c != maxHeatColumns {
			t.Fatalf("%d columns, want %d", c, maxHeatColumns)
		}
		for c, col := range g.z {
			if col[0] != 5 {
				t.Fatalf("column %d holds %v, want the group maximum 5", c, col[0])
			}
		}
		if got, want := g.times[1], 60.0*4/3600; math.Abs(got-want) > floatTol {
			t.Errorf("column 1 time %v h, want the group mean %v h", got, want)
		}
	})
}

// decodePNG checks that path is a non-empty, decodable PNG.
func decodePNG(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if info.Size() == 0 {
		t.Fatalf("%s is empty", path)
	}
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s is not a PNG: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() == 0 || b.Dy() == 0 {
		t.Fatalf("%s has empty bounds %v", path, b)
	}
	return img
}

// distinctColors counts distinct colours on a grid of every step-th pixel.
func distinctColors(img image.Image, step int) int {
	seen := make(map[[4]uint32]bool)
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += step {
		for x := b.Min.X; x < b.Max.X; x += step {
			r, g, bl, a := img.At(x, y).RGBA()
			seen[[4]uint32{r, g, bl, a}] = true
		}
	}
	return len(seen)
}

func BenchmarkWritePlots(b *testing.B) {
	runs := []Run{fakeRun(b, "pollux", 16, false, 1)}
	dir := b.TempDir()
	b.ResetTimer()
	for b.Loop() {
		if err := WritePlots(dir, runs); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSummarize(b *testing.B) {
	base := fakeRun(b, "pollux", 16, false, 1)
	for _, copies := range []int{1, 10} {
		r := base
		r.Jobs = nil
		for c := range copies {
			for _, j := range base.Jobs {
				j.Name = fmt.Sprintf("%s-%d", j.Name, c)
				r.Jobs = append(r.Jobs, j)
			}
		}
		b.Run(fmt.Sprintf("jobs=%d/rounds=%d", len(r.Jobs), len(r.Timeline)), func(b *testing.B) {
			for b.Loop() {
				_ = Summarize(r)
			}
		})
	}
}
