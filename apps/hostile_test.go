package apps

import (
	"io/fs"
	"path"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"

	"github.com/pollux-nomad/pollux/data"
)

// maxErrorLen bounds Load's message for any profile.
const maxErrorLen = 1 << 10

func TestLoadHostile(t *testing.T) {
	const (
		placHdr = "placement,local_bsz,step_time,sync_time\n"
		scalHdr = "num_nodes,num_replicas,local_bsz,step_time,sync_time\n"
		valHdr  = "progress,iteration,metric,grad_sqr,grad_var\n"
	)
	long := strings.Repeat("9", 1<<20)
	tests := map[string]struct {
		edits map[string]string
		want  string
	}{
		"placements cut in the header": {map[string]string{"app/placements.csv": "placement,local_bsz,step_t"},
			`app/placements.csv:1: missing column "step_time" in header "placement,local_bsz,step_t"`},
		"placements cut mid-row": {map[string]string{"app/placements.csv": placHdr + "1,4,0.1,0.0\n1,8,0."},
			"app/placements.csv:3: want 4 fields, got 3"},
		"placements cut after a comma": {map[string]string{"app/placements.csv": placHdr + "1,4,0.1,0.0\n1,8,0.2,"},
			`app/placements.csv:3: sync_time: not a number ""`},
		"placements cut in a quote": {map[string]string{"app/placements.csv": placHdr + "1,4,0.1,0.0\n\"1,8,0.2,0.0\n"},
			`app/placements.csv:3: extraneous or missing " in quoted-field`},
		"placements bare quote": {map[string]string{"app/placements.csv": placHdr + "1,4,0.1,0.0\n1,8,0\"2,0.0\n"},
			`app/placements.csv:3: bare " in non-quoted-field`},
		"placements with a zero digit": {map[string]string{"app/placements.csv": placHdr + "10,4,0.1,0.0\n"},
			`app/placements.csv:2: placement: want digits 1-9 (GPUs per node), got "10"`},
		"placements 1 MiB placement": {map[string]string{"app/placements.csv": placHdr + "1" + strings.Repeat("x", 1<<20) + ",4,0.1,0.0\n"},
			`app/placements.csv:2: placement: want digits 1-9 (GPUs per node), got "1xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx..."`},
		"placements 1 MiB number": {map[string]string{"app/placements.csv": placHdr + "1,4," + long + ",0.0\n"},
			`app/placements.csv:2: step_time: not a finite number "9999999999999999999999999999999999999999..."`},
		"placements 1 MiB header": {map[string]string{"app/placements.csv": strings.Repeat("h", 1<<20) + "\n1\n"},
			`app/placements.csv:1: missing column "placement" in header "` + strings.Repeat("h", 200) + `..."`},
		"placements NaN": {map[string]string{"app/placements.csv": placHdr + "1,4,NaN,0.0\n"},
			`app/placements.csv:2: step_time: not a finite number "NaN"`},
		"placements huge local_bsz": {map[string]string{"app/placements.csv": placHdr + "1,99999999999999999999,0.1,0.0\n"},
			`app/placements.csv:2: local_bsz: integer out of range "99999999999999999999"`},
		"placements duplicate column": {map[string]string{"app/placements.csv": "placement,local_bsz,step_time,sync_time,step_time\n1,4,0.1,0,0.2\n"},
			`app/placements.csv:1: column "step_time" twice in the header (columns 3 and 5)`},
		"placements two byte order marks": {map[string]string{"app/placements.csv": "\ufeff\ufeff" + placHdr + "1,4,0.1,0.0\n"},
			`app/placements.csv:1: missing column "placement"`},
		"placements only a header after blank lines": {map[string]string{"app/placements.csv": "\n\n" + placHdr + "\n"},
			"app/placements.csv: no data rows"},
		"placements binary garbage": {map[string]string{"app/placements.csv": "\x00\x01\x02\xff\xfe\n\x00"},
			`app/placements.csv:1: missing column "placement" in header "\x00\x01\x02\xff\xfe"`},
		"scalability cut mid-header": {map[string]string{"app/scalability.csv": "num_nodes,num_repl"},
			`app/scalability.csv:1: missing column "num_replicas" in header "num_nodes,num_repl"`},
		"scalability missing a column": {map[string]string{"app/scalability.csv": "num_nodes,num_replicas,local_bsz,step_time\n6,6,4,0.5\n"},
			`app/scalability.csv:1: missing column "sync_time"`},
		"scalability cut mid-row with CRLF": {map[string]string{"app/scalability.csv": strings.ReplaceAll(scalHdr, "\n", "\r\n") + "6,6,4,0.5,0.4\r\n6,6"},
			"app/scalability.csv:3: want 5 fields, got 2"},
		"scalability replicas below nodes": {map[string]string{"app/scalability.csv": scalHdr + "6,6,4,0.5,0.4\n6,3,4,0.5,0.4\n"},
			"app/scalability.csv:3: num_replicas: 3 is below num_nodes 6"},
		"scalability zero nodes": {map[string]string{"app/scalability.csv": scalHdr + "0,6,4,0.5,0.4\n"},
			"app/scalability.csv:2: num_nodes: want a positive integer, got 0"},
		"scalability negative sync": {map[string]string{"app/scalability.csv": scalHdr + "6,6,4,0.5,-0.4\n"},
			"app/scalability.csv:2: sync_time: negative value -0.4"},
		"scalability fractional replicas": {map[string]string{"app/scalability.csv": scalHdr + "6,6.5,4,0.5,0.4\n"},
			`app/scalability.csv:2: num_replicas: not an integer "6.5"`},
		"validation cut mid-header": {map[string]string{"app/validation-8.csv": "progress,iteration,met"},
			`app/validation-8.csv:1: missing column "metric"`},
		"validation cut mid-row": {map[string]string{"app/validation-8.csv": valHdr + "10,10,0.5,1,2\n20,20,0.6"},
			"app/validation-8.csv:3: want 5 fields, got 3"},
		"validation garbled number": {map[string]string{"app/validation-8.csv": valHdr + "10,10,0.5,1,2\n20,2O,0.6,1,2\n"},
			`app/validation-8.csv:3: iteration: not a number "2O"`},
		"validation negative grad_var": {map[string]string{"app/validation-8.csv": valHdr + "10,10,0.5,1,-2\n20,20,0.6,1,2\n"},
			"app/validation-8.csv:2: grad_var: negative value -2"},
		"validation negative grad_sqr": {map[string]string{"app/validation-8.csv": valHdr + "10,10,0.5,-1,2\n20,20,0.6,1,2\n"},
			"app/validation-8.csv:2: grad_sqr: negative value -1"},
		"validation progress going back": {map[string]string{"app/validation-8.csv": valHdr + "10,10,0.5,1,2\n9,20,0.6,1,2\n"},
			"app/validation-8.csv:3: progress: 9 is below the previous row's 10 (the column is cumulative)"},
		"validation iteration going back": {map[string]string{"app/validation-8.csv": valHdr + "10,10,0.5,1,2\n20,5,0.6,1,2\n"},
			"app/validation-8.csv:3: iteration: 5 is below the previous row's 10 (the column is cumulative)"},
		"validation infinite metric": {map[string]string{"app/validation-8.csv": valHdr + "10,10,-Inf,1,2\n20,20,0.6,1,2\n"},
			`app/validation-8.csv:2: metric: not a finite number "-Inf"`},
		"validation overflowing progress": {map[string]string{"app/validation-8.csv": valHdr + "1e400,10,0.5,1,2\n20,20,0.6,1,2\n"},
			`app/validation-8.csv:2: progress: not a finite number "1e400"`},
		"validation huge batch in the name": {map[string]string{"app/validation-99999999999999999999.csv": valHdr + "10,10,0.5,1,2\n20,20,0.6,1,2\n"},
			"app/validation-99999999999999999999.csv: file name does not end in a positive batch size"},
		"validation zero batch in the name": {map[string]string{"app/validation-0.csv": valHdr + "10,10,0.5,1,2\n20,20,0.6,1,2\n"},
			"app/validation-0.csv: file name does not end in a positive batch size"},
		"validation duplicate batch size": {map[string]string{"app/validation-008.csv": valHdr + "10,10,0.5,1,2\n20,20,0.6,1,2\n"},
			"failed to load app: two validation files for batch size 8"},
		"validation only blank lines": {map[string]string{"app/validation-8.csv": "\n\r\n\n"},
			"app/validation-8.csv: empty file"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Load(profileFS(tc.edits), "app", Options{MaxEpochs: 2})
			if err == nil {
				t.Fatalf("Load succeeded, want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %.400q\nwant it to contain %q", err, tc.want)
			}
			if len(err.Error()) > maxErrorLen {
				t.Errorf("error message is %d bytes", len(err.Error()))
			}
		})
	}
}

// TestLoadAcceptsVariants checks that CRLF line ends, a byte order mark,
// padded header names and no final newline change nothing.
func TestLoadAcceptsVariants(t *testing.T) {
	want, err := Load(profileFS(nil), "app", Options{MaxEpochs: 2})
	if err != nil {
		t.Fatal(err)
	}
	base := profileFS(nil)
	for name, edit := range map[string]func(string) string{
		"CRLF":             func(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") },
		"byte order mark":  func(s string) string { return "\ufeff" + s },
		"no final newline": func(s string) string { return strings.TrimSuffix(s, "\n") },
		"padded header":    func(s string) string { return " " + strings.Replace(s, ",", " , ", 1) },
	} {
		t.Run(name, func(t *testing.T) {
			edits := map[string]string{}
			for p, f := range base {
				edits[p] = edit(string(f.Data))
			}
			got, err := Load(profileFS(edits), "app", Options{MaxEpochs: 2})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(observe(t, want), observe(t, got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// observe returns what an application answers: its constants, points,
// validated batch sizes, progress, gradient statistics and throughput.
func observe(t *testing.T, a *Application) []any {
	t.Helper()
	out := []any{a.Name, a.MaxEpochs, a.InitBatchSize, a.MaxBatchSize, a.MinLocalBsz, a.MaxLocalBsz, a.NumPoints(), a.ValidatedBatchSizes()}
	for e := 0; e <= a.MaxEpochs; e++ {
		out = append(out, a.Progress(e))
	}
	for _, m := range []float64{8, 16, 32} {
		sqr, v := a.GradStats(m, 0)
		out = append(out, sqr, v, a.Iteration(m, a.MaxEpochs-1))
	}
	for _, p := range [][]int{{1}, {2}, {1, 1}, {3}, {4, 4}} {
		step, sync, err := a.Throughput(p, a.MinLocalBsz)
		if err != nil {
			t.Fatalf("Throughput(%v): %v", p, err)
		}
		out = append(out, step, sync)
	}
	return out
}

// locatedError matches an error naming a profile file and a line, or a
// whole-file problem of an empty table.
var locatedError = regexp.MustCompile(`^[a-z0-9/_.-]+\.csv(:[1-9][0-9]*: |: (empty file|no data rows)$)`)

// checkTruncations cuts the file at path in fsys at every stride-th byte
// (and at each of the first and last 64 bytes) and reads it with read. A
// cut is either an error naming the file and a line, or — when it falls at
// a line end or inside a row's last field, which leaves a well-formed
// shorter file — rows equal to the original's up to the cut, the last with
// a prefix of its last field.
func checkTruncations(t *testing.T, fsys fs.FS, file string, stride int, read func(fs.FS, string) error, columns ...string) {
	t.Helper()
	raw, err := fs.ReadFile(fsys, file)
	if err != nil {
		t.Fatal(err)
	}
	full, err := readTable(fsys, file, columns...)
	if err != nil {
		t.Fatal(err)
	}
	accepted, rejected := 0, 0
	for n := 0; n < len(raw); n++ {
		if n >= 64 && n < len(raw)-64 && n%stride != 0 {
			continue
		}
		cut := fstest.MapFS{file: &fstest.MapFile{Data: raw[:n]}}
		if err := read(cut, file); err != nil {
			rejected++
			if !locatedError.MatchString(err.Error()) || !strings.HasPrefix(err.Error(), file) {
				t.Fatalf("cut at byte %d: error %q does not name %s and a line", n, err, file)
			}
			continue
		}
		accepted++
		got, err := readTable(cut, file, columns...)
		if err != nil {
			t.Fatalf("cut at byte %d: read, but not as a table: %v", n, err)
		}
		k := len(got.rows)
		if diff := cmp.Diff(full.rows[:k-1], got.rows[:k-1]); diff != "" {
			t.Fatalf("cut at byte %d: rows before the cut differ (-want +got):\n%s", n, diff)
		}
		last, want := got.rows[k-1], full.rows[k-1]
		m := len(want) - 1
		if !cmp.Equal(last[:m], want[:m]) || !strings.HasPrefix(want[m], last[m]) {
			t.Fatalf("cut at byte %d: last row %q is not a cut of %q", n, last, want)
		}
	}
	t.Logf("%s: %d cuts: %d rejected with file and line, %d well-formed prefixes", file, accepted+rejected, rejected, accepted)
}

func TestReadTruncatedArtifactProfiles(t *testing.T) {
	traces := data.Traces()
	for _, app := range Names() {
		t.Run(app, func(t *testing.T) {
			checkTruncations(t, traces, path.Join(app, "placements.csv"), 300, func(fsys fs.FS, p string) error {
				_, err := readPlacements(fsys, p)
				return err
			}, "placement", "local_bsz", "step_time", "sync_time")
			checkTruncations(t, traces, path.Join(app, "scalability.csv"), 100, func(fsys fs.FS, p string) error {
				_, err := readScalability(fsys, p)
				return err
			}, "num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")
			files, err := fs.Glob(traces, path.Join(app, "validation-*.csv"))
			if err != nil || len(files) == 0 {
				t.Fatalf("validation files: %v, %v", files, err)
			}
			checkTruncations(t, traces, files[0], 40, func(fsys fs.FS, p string) error {
				_, err := readValidation(fsys, p, 1)
				return err
			}, "progress", "iteration", "metric", "grad_sqr", "grad_var")
		})
	}
}

// TestLoadTruncatedAtEveryByte cuts each file of a small profile at every
// byte and loads the whole profile: no panic, and every failure names the
// file and line (or the whole-profile check that failed).
func TestLoadTruncatedAtEveryByte(t *testing.T) {
	for file, f := range profileFS(nil) {
		raw := string(f.Data)
		for n := range len(raw) {
			_, err := Load(profileFS(map[string]string{file: raw[:n]}), "app", Options{MaxEpochs: 1})
			if n == 0 {
				// An empty edit deletes the file in profileFS.
				continue
			}
			if err != nil && !strings.HasPrefix(err.Error(), file) && !strings.HasPrefix(err.Error(), "failed to load app") {
				t.Errorf("%s cut at byte %d: error %q names neither the file nor the profile", file, n, err)
			}
		}
	}
}
