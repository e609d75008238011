package workload

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// loadPhilly parses the artifact's Philly trace once per test binary.
var loadPhilly = sync.OnceValues(func() ([]PhillyJob, error) {
	f, err := os.Open(filepath.Join(dataDir, "traces", "philly.csv"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParsePhilly(f, "philly.csv")
})

func TestParsePhillyArtifact(t *testing.T) {
	jobs, err := loadPhilly()
	if err != nil {
		t.Fatalf("ParsePhilly: %v", err)
	}
	// The file has 82,248 non-blank lines (pollux-reference.md §4 counts
	// them as rows): the header and 82,247 jobs, then one blank line.
	if got, want := len(jobs), 82247; got != want {
		t.Fatalf("got %d rows, want %d", got, want)
	}
	tests := map[string]struct {
		index int
		want  PhillyJob
	}{
		"first row": {
			index: 0,
			want: PhillyJob{Timestamp: time.Date(2017, 10, 9, 7, 1, 55, 0, time.UTC),
				Duration: 66, NumGPUs: 1, GPUTime: 66, Cluster: "11cb48"},
		},
		"last row": {
			index: len(jobs) - 1,
			want: PhillyJob{Timestamp: time.Date(2017, 11, 8, 7, 33, 10, 0, time.UTC),
				Duration: 1896, NumGPUs: 1, GPUTime: 1896, Cluster: "6c71a0"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, jobs[tc.index]); diff != "" {
				t.Errorf("row mismatch (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("gpu_time is duration times GPUs", func(t *testing.T) {
		for i, j := range jobs {
			if want := j.Duration * float64(j.NumGPUs); math.Abs(j.GPUTime-want) > 1e-9*want {
				t.Fatalf("row %d: gpu_time %v, want %v", i, j.GPUTime, want)
			}
		}
	})
}

func TestParsePhillyErrors(t *testing.T) {
	const hdr = "timestamp,duration,num_gpus,gpu_time,cluster\n"
	const good = "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"
	tests := map[string]struct {
		input   string
		wantMsg string
	}{
		"header only": {
			input:   hdr,
			wantMsg: "philly.csv: empty trace: no data rows",
		},
		"wrong header": {
			input:   "time,duration,num_gpus,gpu_time,cluster\n" + good,
			wantMsg: `philly.csv:1: header: want "timestamp,duration,num_gpus,gpu_time,cluster", got "time,duration,num_gpus,gpu_time,cluster"`,
		},
		"bad timestamp": {
			input:   hdr + good + "2017-10-09T07:01:55,66.0,1,66.0,11cb48\n",
			wantMsg: `philly.csv:3: timestamp: not a time in layout "2006-01-02 15:04:05": "2017-10-09T07:01:55"`,
		},
		"negative duration": {
			input:   hdr + "2017-10-09 07:01:55,-1,1,66.0,11cb48\n",
			wantMsg: "philly.csv:2: duration: negative value -1",
		},
		"fractional GPUs": {
			input:   hdr + "2017-10-09 07:01:55,66.0,1.5,66.0,11cb48\n",
			wantMsg: `philly.csv:2: num_gpus: not an integer: "1.5"`,
		},
		"negative GPUs": {
			input:   hdr + "2017-10-09 07:01:55,66.0,-2,66.0,11cb48\n",
			wantMsg: "philly.csv:2: num_gpus: negative value -2",
		},
		"infinite gpu_time": {
			input:   hdr + "2017-10-09 07:01:55,66.0,1,+Inf,11cb48\n",
			wantMsg: `philly.csv:2: gpu_time: not a finite number: "+Inf"`,
		},
		"missing cluster": {
			input:   hdr + good + good + "2017-10-09 07:01:55,66.0,1,66.0\n",
			wantMsg: "philly.csv:4: expected 5 fields, got 4",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ParsePhilly(strings.NewReader(tc.input), "philly.csv")
			if err == nil {
				t.Fatalf("ParsePhilly succeeded, want error %q", tc.wantMsg)
			}
			if diff := cmp.Diff(tc.wantMsg, err.Error()); diff != "" {
				t.Errorf("error mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// fakeConfigs gives every application two recognisable configurations.
func fakeConfigs(app string) []Config {
	base := map[string]int{"bert": 12, "cifar10": 128, "deepspeech2": 20, "imagenet": 200, "ncf": 256, "yolov3": 8}[app]
	if base == 0 {
		return nil
	}
	return []Config{{Replicas: 1, BatchSize: base}, {Replicas: 4, BatchSize: 4 * base}}
}

// syntheticTrace builds a trace whose rows are told apart by their time of
// day: row i is submitted at 00:00:00 + i minutes on day 1 + i%3 and uses
// gpuTime(i) GPU·seconds over duration(i) seconds.
func syntheticTrace(rows int, gpuTime func(i int) float64, duration func(i int) float64) []PhillyJob {
	out := make([]PhillyJob, rows)
	for i := range out {
		out[i] = PhillyJob{
			Timestamp: time.Date(2017, 10, 1+i%3, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Minute),
			Duration:  duration(i),
			NumGPUs:   1,
			GPUTime:   gpuTime(i),
			Cluster:   "c",
		}
	}
	return out
}

// allowedApps lists the applications a row of this GPU time may become.
func allowedApps(gpuTime float64) []string {
	switch {
	case gpuTime < 3600:
		return []string{"cifar10", "ncf"}
	case gpuTime < 36000:
		return []string{"bert", "deepspeech2"}
	case gpuTime < 360000:
		return []string{"yolov3"}
	}
	return []string{"imagenet"}
}

func TestGenerateRules(t *testing.T) {
	// 24 h × 60 rows, one per minute of the day; GPU times cycle through
	// the four classes and both filters.
	classes := []float64{
		600,             // < 1 GPU·h
		5 * 3600,        // 1–10 GPU·h
		50 * 3600,       // 10–100 GPU·h
		500 * 3600,      // ≥ 100 GPU·h
		1000 * 3600,     // excluded: ≥ 1000 GPU·h
		3600 - 1e-9,     // < 1 GPU·h (boundary)
		10 * 3600,       // 10–100 GPU·h (boundary)
		100*3600 - 1e-6, // 10–100 GPU·h (boundary)
		100 * 3600,      // ≥ 100 GPU·h (boundary)
		1 * 3600,        // 1–10 GPU·h (boundary)
	}
	gpuTime := func(i int) float64 { return classes[i%len(classes)] }
	duration := func(i int) float64 {
		if i%7 == 3 {
			return 59 // excluded: shorter than a minute
		}
		return 60
	}
	trace := syntheticTrace(24*60, gpuTime, duration)
	tests := map[string]struct {
		n                    int
		startHours, duration float64
		seed                 uint64
	}{
		"2h..10h as the artifact": {n: 160, startHours: 2, duration: 8, seed: 6},
		"all eligible rows":       {n: -1, startHours: 0, duration: 24, seed: 1},
		"window across midnight":  {n: 100, startHours: 22, duration: 4, seed: 2},
		"fractional window":       {n: 20, startHours: 1.5, duration: 0.75, seed: 3},
		"negative start":          {n: 50, startHours: -3, duration: 5, seed: 4},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if tc.n < 0 { // every row that passes the filters
				tc.n = 0
				for i := range trace {
					if duration(i) >= 60 && gpuTime(i) < 1000*3600 {
						tc.n++
					}
				}
			}
			jobs, err := Generate(trace, fakeConfigs, tc.n, tc.startHours, tc.duration, tc.seed)
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if len(jobs) != tc.n {
				t.Fatalf("got %d jobs, want %d", len(jobs), tc.n)
			}
			seenRow := make(map[int]bool)
			for i, j := range jobs {
				if want := fmt.Sprintf("%s-%d", j.Application, i); j.Name != want {
					t.Errorf("job %d: name %q, want %q", i, j.Name, want)
				}
				if i > 0 && j.Time < jobs[i-1].Time {
					t.Errorf("job %d: time %v before previous %v", i, j.Time, jobs[i-1].Time)
				}
				if j.Time < 0 || j.Time >= tc.duration*3600 || j.Time != math.Trunc(j.Time) {
					t.Fatalf("job %d: time %v not a whole second in [0, %v h)", i, j.Time, tc.duration)
				}
				// Recover the trace row from the time of day: row r is
				// at minute r of the day.
				tod := math.Mod(j.Time+tc.startHours*3600+48*3600, 24*3600)
				if math.Mod(tod, 60) != 0 {
					t.Fatalf("job %d: time %v does not map back to a trace row", i, j.Time)
				}
				row := int(tod / 60)
				if seenRow[row] {
					t.Errorf("job %d: trace row %d sampled twice", i, row)
				}
				seenRow[row] = true
				if duration(row) < 60 || gpuTime(row) >= 1000*3600 {
					t.Errorf("job %d: trace row %d should have been filtered out (duration %v, gpu_time %v)", i, row, duration(row), gpuTime(row))
				}
				if allowed := allowedApps(gpuTime(row)); !slices.Contains(allowed, j.Application) {
					t.Errorf("job %d: application %s for gpu_time %v, want one of %v", i, j.Application, gpuTime(row), allowed)
				}
				if cfg := (Config{j.NumReplicas, j.BatchSize}); !slices.Contains(fakeConfigs(j.Application), cfg) {
					t.Errorf("job %d: configuration %+v not offered for %s", i, cfg, j.Application)
				}
			}
		})
	}
}

func TestGenerateDeterminism(t *testing.T) {
	trace := syntheticTrace(24*60, func(i int) float64 { return float64(i%200) * 600 }, func(int) float64 { return 120 })
	a, err := Generate(trace, fakeConfigs, 100, 2, 8, 42)
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		seed     uint64
		wantSame bool
	}{
		"same seed":      {seed: 42, wantSame: true},
		"different seed": {seed: 43, wantSame: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b, err := Generate(trace, fakeConfigs, 100, 2, 8, tc.seed)
			if err != nil {
				t.Fatal(err)
			}
			if same := cmp.Equal(a, b); same != tc.wantSame {
				t.Errorf("seed 42 vs %d: equal = %v, want %v", tc.seed, same, tc.wantSame)
			}
		})
	}
	t.Run("input unchanged", func(t *testing.T) {
		before := slices.Clone(trace)
		if _, err := Generate(trace, fakeConfigs, 100, 2, 8, 7); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(before, trace); diff != "" {
			t.Errorf("Generate modified the trace (-want +got):\n%s", diff)
		}
	})
}

func TestGenerateErrors(t *testing.T) {
	trace := syntheticTrace(24*60, func(int) float64 { return 600 }, func(int) float64 { return 600 })
	tests := map[string]struct {
		trace    []PhillyJob
		configs  func(string) []Config
		n        int
		start    float64
		duration float64
		wantMsg  string
	}{
		"zero jobs": {
			trace: trace, configs: fakeConfigs, n: 0, start: 2, duration: 8,
			wantMsg: "failed to generate workload: number of jobs must be at least 1, got 0",
		},
		"too few eligible": {
			trace: trace, configs: fakeConfigs, n: 61, start: 0, duration: 1,
			wantMsg: "failed to generate workload: 60 of 1440 trace rows are eligible (duration ≥ 60 s, gpu_time < 1000 GPU·h, in the 1 h window from hour 0), need 61",
		},
		"zero window": {
			trace: trace, configs: fakeConfigs, n: 1, start: 0, duration: 0,
			wantMsg: "failed to generate workload: window duration must be a finite number of hours > 0, got 0",
		},
		"NaN start": {
			trace: trace, configs: fakeConfigs, n: 1, start: math.NaN(), duration: 1,
			wantMsg: "failed to generate workload: start hour must be finite, got NaN",
		},
		"no configurations": {
			trace: trace, configs: func(string) []Config { return nil }, n: 5, start: 0, duration: 24,
			wantMsg: `failed to generate workload: no configurations for application "cifar10"`,
		},
		"invalid configuration": {
			trace: trace, configs: func(string) []Config { return []Config{{Replicas: 1, BatchSize: 0}} }, n: 5, start: 0, duration: 24,
			wantMsg: `failed to generate workload: configuration 0 of "cifar10" is invalid: {Replicas:1 BatchSize:0}`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Generate(tc.trace, tc.configs, tc.n, tc.start, tc.duration, 1)
			if err == nil {
				t.Fatalf("Generate succeeded, want error %q", tc.wantMsg)
			}
			// The application named in the configuration errors depends on
			// the first sampled row (cifar10 or ncf); accept either.
			got := strings.Replace(err.Error(), `"ncf"`, `"cifar10"`, 1)
			if diff := cmp.Diff(tc.wantMsg, got); diff != "" {
				t.Errorf("error mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestGenerateArtifactMix compares the application mix of generated
// workloads with the artifact's eight workloads, both drawn from the same
// trace window (2 h + 8 h, 160 jobs each).
func TestGenerateArtifactMix(t *testing.T) {
	philly, err := loadPhilly()
	if err != nil {
		t.Fatal(err)
	}
	classOf := map[string]string{
		"cifar10": "<1h", "ncf": "<1h", "deepspeech2": "1-10h", "bert": "1-10h", "yolov3": "10-100h", "imagenet": ">=100h",
	}
	count := func(seeds []uint64, gen func(uint64) ([]Job, error)) (map[string]float64, map[string]float64, int) {
		class, app := map[string]float64{}, map[string]float64{}
		total := 0
		for _, s := range seeds {
			jobs, err := gen(s)
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range jobs {
				class[classOf[j.Application]]++
				app[j.Application]++
				total++
			}
		}
		for k := range class {
			class[k] /= float64(total)
		}
		for k := range app {
			app[k] /= float64(total)
		}
		return class, app, total
	}
	seeds := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	artClass, artApp, artN := count(seeds, func(k uint64) ([]Job, error) {
		return ParseFile(filepath.Join(dataDir, "workloads", fmt.Sprintf("workload-%d.csv", k)), knownApps)
	})
	genClass, genApp, genN := count(seeds, func(k uint64) ([]Job, error) {
		return Generate(philly, fakeConfigs, 160, 2, 8, k)
	})
	// Two independent samples of 1280 jobs each: the difference of a
	// proportion p has standard error sqrt(2p(1-p)/1280); allow four.
	tol := func(p float64) float64 { return 4 * math.Sqrt(2*p*(1-p)/float64(artN)) }
	for _, k := range []string{"<1h", "1-10h", "10-100h", ">=100h"} {
		if d := math.Abs(genClass[k] - artClass[k]); d > tol(artClass[k]) {
			t.Errorf("class %s: generated %.3f, artifact %.3f (difference %.3f > %.3f)", k, genClass[k], artClass[k], d, tol(artClass[k]))
		}
	}
	for _, k := range []string{"cifar10", "ncf", "deepspeech2", "bert", "yolov3", "imagenet"} {
		if d := math.Abs(genApp[k] - artApp[k]); d > tol(artApp[k]) {
			t.Errorf("application %s: generated %.3f, artifact %.3f (difference %.3f > %.3f)", k, genApp[k], artApp[k], d, tol(artApp[k]))
		}
	}
	t.Logf("artifact (%d jobs) classes %v apps %v", artN, artClass, artApp)
	t.Logf("generated (%d jobs) classes %v apps %v", genN, genClass, genApp)
}

func BenchmarkParsePhilly(b *testing.B) {
	raw, err := os.ReadFile(filepath.Join(dataDir, "traces", "philly.csv"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := ParsePhilly(strings.NewReader(string(raw)), "philly.csv"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGenerate(b *testing.B) {
	philly, err := loadPhilly()
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{160, 1600} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := Generate(philly, fakeConfigs, n, 2, 8, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
