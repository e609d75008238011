package workload

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// dataDir is the artifact data copied into the repository.
const dataDir = "../data"

// knownApps accepts the six applications of the Pollux artifact.
func knownApps(app string) bool {
	switch app {
	case "bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3":
		return true
	}
	return false
}

func TestParseArtifactWorkloads(t *testing.T) {
	tests := map[string]struct {
		file      string
		wantFirst Job
		wantLast  Job
	}{
		"workload-1": {file: "workload-1.csv"},
		"workload-2": {file: "workload-2.csv"},
		"workload-3": {file: "workload-3.csv"},
		"workload-4": {file: "workload-4.csv"},
		"workload-5": {file: "workload-5.csv"},
		"workload-6": {
			file:      "workload-6.csv",
			wantFirst: Job{Name: "cifar10-0", Time: 53, Application: "cifar10", NumReplicas: 6, BatchSize: 2048},
		},
		"workload-7": {file: "workload-7.csv"},
		"workload-8": {file: "workload-8.csv"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			jobs, err := ParseFile(filepath.Join(dataDir, "workloads", tc.file), knownApps)
			if err != nil {
				t.Fatalf("ParseFile: %v", err)
			}
			if got, want := len(jobs), 160; got != want {
				t.Fatalf("got %d jobs, want %d", got, want)
			}
			if tc.wantFirst != (Job{}) {
				if diff := cmp.Diff(tc.wantFirst, jobs[0]); diff != "" {
					t.Errorf("first job mismatch (-want +got):\n%s", diff)
				}
			}
			for i, j := range jobs {
				// The artifact names jobs "<app>-<index>" in time order.
				if want := j.Application + "-" + strconv.Itoa(i); j.Name != want {
					t.Errorf("job %d: name %q, want %q", i, j.Name, want)
				}
				if i > 0 && j.Time < jobs[i-1].Time {
					t.Errorf("job %d: time %v before previous %v", i, j.Time, jobs[i-1].Time)
				}
				if j.Time < 0 || j.Time >= 8*3600 {
					t.Errorf("job %d: time %v outside the 8 h window", i, j.Time)
				}
			}
		})
	}
}

func TestParseWorkload6Mix(t *testing.T) {
	// pollux-reference.md §4: "workload-6 mix: cifar10 67, ncf 54,
	// deepspeech2 16, bert 15, yolov3 5, imagenet 3".
	jobs, err := ParseFile(filepath.Join(dataDir, "workloads", "workload-6.csv"), knownApps)
	if err != nil {
		t.Fatalf("ParseFile: %v", err)
	}
	got := make(map[string]int)
	for _, j := range jobs {
		got[j.Application]++
	}
	want := map[string]int{"cifar10": 67, "ncf": 54, "deepspeech2": 16, "bert": 15, "yolov3": 5, "imagenet": 3}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("application mix mismatch (-want +got):\n%s", diff)
	}
}

func TestParseErrors(t *testing.T) {
	const hdr = "name,time,application,num_replicas,batch_size\n"
	tests := map[string]struct {
		input   string
		wantMsg string
		isEmpty bool
	}{
		"empty file": {
			input:   "",
			wantMsg: "workload-6.csv: header: missing in empty input: no data rows",
			isEmpty: true,
		},
		"header only": {
			input:   hdr,
			wantMsg: "workload-6.csv: empty workload: no data rows",
			isEmpty: true,
		},
		"wrong header": {
			input:   "name,submit,application,num_replicas,batch_size\na-0,1,ncf,1,256\n",
			wantMsg: `workload-6.csv:1: header: want "name,time,application,num_replicas,batch_size", got "name,submit,application,num_replicas,batch_size"`,
		},
		"missing header": {
			input:   "ncf-0,1,ncf,1,256\n",
			wantMsg: `workload-6.csv:1: header: want "name,time,application,num_replicas,batch_size", got "ncf-0,1,ncf,1,256"`,
		},
		"short row": {
			input:   hdr + "ncf-0,1,ncf,1,256\nncf-1,2,ncf\n",
			wantMsg: "workload-6.csv:3: expected 5 fields, got 3",
		},
		"long row": {
			input:   hdr + "ncf-0,1,ncf,1,256,7\n",
			wantMsg: "workload-6.csv:2: expected 5 fields, got 6",
		},
		"negative time": {
			input:   hdr + "ncf-0,1,ncf,1,256\n\nncf-1,-5,ncf,1,256\n",
			wantMsg: "workload-6.csv:4: time: negative value -5",
		},
		"time not a number": {
			input:   hdr + "ncf-0,soon,ncf,1,256\n",
			wantMsg: `workload-6.csv:2: time: not a number: "soon"`,
		},
		"time not finite": {
			input:   hdr + "ncf-0,NaN,ncf,1,256\n",
			wantMsg: `workload-6.csv:2: time: not a finite number: "NaN"`,
		},
		"unknown application": {
			input:   hdr + "gpt-0,1,gpt,1,256\n",
			wantMsg: `workload-6.csv:2: application: unknown "gpt"`,
		},
		"empty application": {
			input:   hdr + "x-0,1,,1,256\n",
			wantMsg: "workload-6.csv:2: application: empty value",
		},
		"empty name": {
			input:   hdr + ",1,ncf,1,256\n",
			wantMsg: "workload-6.csv:2: name: empty value",
		},
		"control character in name": {
			input:   hdr + "\"a\tb\",1,ncf,1,256\n",
			wantMsg: "workload-6.csv:2: name: control character U+0009 in \"a\\tb\"",
		},
		"duplicate name": {
			input:   hdr + "ncf-0,1,ncf,1,256\nncf-1,2,ncf,1,256\nncf-0,3,ncf,1,256\n",
			wantMsg: `workload-6.csv:4: name: duplicate job "ncf-0" (first on line 2)`,
		},
		"zero replicas": {
			input:   hdr + "ncf-0,1,ncf,0,256\n",
			wantMsg: "workload-6.csv:2: num_replicas: must be at least 1, got 0",
		},
		"fractional replicas": {
			input:   hdr + "ncf-0,1,ncf,1.5,256\n",
			wantMsg: `workload-6.csv:2: num_replicas: not an integer: "1.5"`,
		},
		"negative batch size": {
			input:   hdr + "ncf-0,1,ncf,1,-256\n",
			wantMsg: "workload-6.csv:2: batch_size: must be at least 1, got -256",
		},
		"bare quote": {
			input:   hdr + "ncf-0,1,n\"cf,1,256\n",
			wantMsg: `workload-6.csv:2: bare " in non-quoted-field`,
		},
		"quoted multi-line time": {
			input:   hdr + "ncf-0,1,ncf,1,256\nncf-1,\"1\n\",ncf,1,256\n",
			wantMsg: `workload-6.csv:3: time: not a number: "1\n"`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			jobs, err := Parse(strings.NewReader(tc.input), "workload-6.csv", knownApps)
			if err == nil {
				t.Fatalf("Parse succeeded with %d jobs, want error %q", len(jobs), tc.wantMsg)
			}
			if diff := cmp.Diff(tc.wantMsg, err.Error()); diff != "" {
				t.Errorf("error message mismatch (-want +got):\n%s", diff)
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Errorf("error %T is not a *ParseError", err)
			}
			if got := errors.Is(err, ErrEmpty); got != tc.isEmpty {
				t.Errorf("errors.Is(err, ErrEmpty) = %v, want %v", got, tc.isEmpty)
			}
		})
	}
}

func TestParseAccepts(t *testing.T) {
	tests := map[string]struct {
		input string
		known func(string) bool
		want  []Job
	}{
		"CRLF, BOM, blank lines and fractional times": {
			input: "\ufeffname,time,application,num_replicas,batch_size\r\n\r\nb-0,0.5,bert,2,24\r\na-1,0,cifar10,1,128\r\n",
			known: knownApps,
			want: []Job{
				{Name: "b-0", Time: 0.5, Application: "bert", NumReplicas: 2, BatchSize: 24},
				{Name: "a-1", Time: 0, Application: "cifar10", NumReplicas: 1, BatchSize: 128},
			},
		},
		"nil known accepts any application, order kept": {
			input: "name,time,application,num_replicas,batch_size\nz,10,gpt,4,1024\ny,10,llama,1,1\n",
			want: []Job{
				{Name: "z", Time: 10, Application: "gpt", NumReplicas: 4, BatchSize: 1024},
				{Name: "y", Time: 10, Application: "llama", NumReplicas: 1, BatchSize: 1},
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tc.input), "t.csv", tc.known)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("jobs mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseFileMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.csv")
	_, err := ParseFile(path, nil)
	if err == nil {
		t.Fatal("ParseFile succeeded on a missing file")
	}
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not report the missing file %s", err, path)
	}
}

func TestParseFileNamesPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.csv")
	if err := os.WriteFile(path, []byte("name,time,application,num_replicas,batch_size\nx,1,gpt,1,1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ParseFile(path, knownApps)
	want := path + `:2: application: unknown "gpt"`
	if err == nil || err.Error() != want {
		t.Errorf("ParseFile error = %v, want %q", err, want)
	}
}

func TestWriteRoundTrip(t *testing.T) {
	tests := map[string][]Job{
		"one job": {{Name: "ncf-0", Time: 0, Application: "ncf", NumReplicas: 1, BatchSize: 256}},
		"awkward values": {
			{Name: "has,comma", Time: 1e-7, Application: "a\"pp", NumReplicas: 1, BatchSize: 1},
			{Name: " leading space", Time: 123456789.125, Application: "é", NumReplicas: 64, BatchSize: 32768},
			{Name: `\.`, Time: 1e21, Application: "x", NumReplicas: math.MaxInt32, BatchSize: 3},
		},
	}
	for k := 1; k <= 8; k++ {
		name := fmt.Sprintf("workload-%d.csv", k)
		jobs, err := ParseFile(filepath.Join(dataDir, "workloads", name), knownApps)
		if err != nil {
			t.Fatalf("ParseFile: %v", err)
		}
		tests[name] = jobs
	}
	for name, jobs := range tests {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := Write(&buf, jobs); err != nil {
				t.Fatalf("Write: %v", err)
			}
			got, err := Parse(&buf, "round-trip", nil)
			if err != nil {
				t.Fatalf("Parse(Write(jobs)): %v", err)
			}
			if diff := cmp.Diff(jobs, got); diff != "" {
				t.Errorf("round trip mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWriteMatchesArtifactBytes(t *testing.T) {
	// The artifact's files use integer times, so Write reproduces them
	// byte for byte.
	path := filepath.Join(dataDir, "workloads", "workload-6.csv")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := Parse(bytes.NewReader(raw), path, knownApps)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Write(&buf, jobs); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(raw), buf.String()); diff != "" {
		t.Errorf("written file differs from %s (-want +got):\n%s", path, diff)
	}
}

func TestWriteRejectsInvalid(t *testing.T) {
	ok := Job{Name: "a", Time: 1, Application: "ncf", NumReplicas: 1, BatchSize: 1}
	tests := map[string]struct {
		jobs    []Job
		wantMsg string
	}{
		"negative time": {
			jobs:    []Job{ok, {Name: "b", Time: -1, Application: "ncf", NumReplicas: 1, BatchSize: 1}},
			wantMsg: `failed to write workload: job 1 ("b"): time: negative value -1`,
		},
		"NaN time": {
			jobs:    []Job{{Name: "b", Time: math.NaN(), Application: "ncf", NumReplicas: 1, BatchSize: 1}},
			wantMsg: `failed to write workload: job 0 ("b"): time: not a finite number: NaN`,
		},
		"duplicate": {
			jobs:    []Job{ok, ok},
			wantMsg: `failed to write workload: job 1: name: duplicate job "a" (also job 0)`,
		},
		"zero batch": {
			jobs:    []Job{{Name: "b", Time: 1, Application: "ncf", NumReplicas: 1}},
			wantMsg: `failed to write workload: job 0 ("b"): batch_size: must be at least 1, got 0`,
		},
		"newline in name": {
			jobs:    []Job{{Name: "b\n", Time: 1, Application: "ncf", NumReplicas: 1, BatchSize: 1}},
			wantMsg: `failed to write workload: job 0 ("b\n"): name: control character U+000A in "b\n"`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			err := Write(&buf, tc.jobs)
			if err == nil {
				t.Fatalf("Write succeeded, want error %q", tc.wantMsg)
			}
			if diff := cmp.Diff(tc.wantMsg, err.Error()); diff != "" {
				t.Errorf("error mismatch (-want +got):\n%s", diff)
			}
			if buf.Len() != 0 {
				t.Errorf("Write wrote %d bytes before failing", buf.Len())
			}
		})
	}
}

func TestFirstAndCompress(t *testing.T) {
	jobs := []Job{
		{Name: "a", Time: 0, Application: "ncf", NumReplicas: 1, BatchSize: 256},
		{Name: "b", Time: 60, Application: "ncf", NumReplicas: 1, BatchSize: 256},
		{Name: "c", Time: 90, Application: "ncf", NumReplicas: 1, BatchSize: 256},
	}
	firstTests := map[string]struct {
		n         int
		wantNames []string
	}{
		"zero":       {n: 0, wantNames: []string{}},
		"two":        {n: 2, wantNames: []string{"a", "b"}},
		"all":        {n: 3, wantNames: []string{"a", "b", "c"}},
		"more (cap)": {n: 10, wantNames: []string{"a", "b", "c"}},
	}
	for name, tc := range firstTests {
		t.Run("First/"+name, func(t *testing.T) {
			got := First(jobs, tc.n)
			names := []string{}
			for _, j := range got {
				names = append(names, j.Name)
			}
			if diff := cmp.Diff(tc.wantNames, names); diff != "" {
				t.Errorf("names mismatch (-want +got):\n%s", diff)
			}
			if len(got) > 0 {
				got[0].Name = "changed"
				if jobs[0].Name != "a" {
					t.Errorf("First shares its result with the input")
				}
			}
		})
	}
	compressTests := map[string]struct {
		factor    float64
		wantTimes []float64
	}{
		"identity": {factor: 1, wantTimes: []float64{0, 60, 90}},
		"double":   {factor: 2, wantTimes: []float64{0, 30, 45}},
		"slower":   {factor: 0.5, wantTimes: []float64{0, 120, 180}},
	}
	for name, tc := range compressTests {
		t.Run("Compress/"+name, func(t *testing.T) {
			got := Compress(jobs, tc.factor)
			var times []float64
			for i, j := range got {
				times = append(times, j.Time)
				if j.Name != jobs[i].Name {
					t.Errorf("job %d: name %q, want %q (order must be kept)", i, j.Name, jobs[i].Name)
				}
			}
			if diff := cmp.Diff(tc.wantTimes, times); diff != "" {
				t.Errorf("times mismatch (-want +got):\n%s", diff)
			}
			if jobs[1].Time != 60 {
				t.Errorf("Compress modified its input")
			}
		})
	}
}

func TestPreconditionPanics(t *testing.T) {
	tests := map[string]func(){
		"First negative":  func() { First(nil, -1) },
		"Compress zero":   func() { Compress(nil, 0) },
		"Compress NaN":    func() { Compress(nil, math.NaN()) },
		"Compress +Inf":   func() { Compress(nil, math.Inf(1)) },
		"Generate no cfg": func() { _, _ = Generate(nil, nil, 1, 0, 1, 0) },
	}
	for name, f := range tests {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range []string{"workload-1.csv", "workload-6.csv"} {
		raw, err := os.ReadFile(filepath.Join(dataDir, "workloads", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	for _, s := range []string{
		"",
		"name,time,application,num_replicas,batch_size\n",
		"name,time,application,num_replicas,batch_size\na,1,b,1,1\n",
		"name,time,application,num_replicas,batch_size\n\"a,\"\"x\",1e3,b,1,1\r\n",
		"name,time,application,num_replicas,batch_size\na,0x1p4,b,+1,1\na,1,b,1,1\n",
		"name,time,application,num_replicas,batch_size\na,-0,b,1,1\n",
		"name,time,application,num_replicas,batch_size\n\"a\rb\",1,b,1,1\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		jobs, err := Parse(bytes.NewReader(data), "fuzz.csv", nil)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.csv") {
				t.Errorf("error %q does not name the source", err)
			}
			return
		}
		var buf bytes.Buffer
		if err := Write(&buf, jobs); err != nil {
			t.Fatalf("Write rejected parsed jobs: %v", err)
		}
		again, err := Parse(&buf, "again.csv", nil)
		if err != nil {
			t.Fatalf("Parse(Write(jobs)): %v\n%s", err, buf.String())
		}
		if diff := cmp.Diff(jobs, again); diff != "" {
			t.Errorf("round trip mismatch (-want +got):\n%s", diff)
		}
	})
}

func BenchmarkParse(b *testing.B) {
	raw, err := os.ReadFile(filepath.Join(dataDir, "workloads", "workload-6.csv"))
	if err != nil {
		b.Fatal(err)
	}
	jobs, err := Parse(bytes.NewReader(raw), "w", nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, copies := range []int{1, 10} {
		var all []Job
		for c := range copies {
			for _, j := range jobs {
				j.Name = fmt.Sprintf("%s-%d", j.Name, c)
				all = append(all, j)
			}
		}
		var buf bytes.Buffer
		if err := Write(&buf, all); err != nil {
			b.Fatal(err)
		}
		data := buf.Bytes()
		b.Run(fmt.Sprintf("jobs=%d", len(all)), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := Parse(bytes.NewReader(data), "w", knownApps); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
