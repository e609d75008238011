package workload

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// maxErrorLen bounds Parse's message for any input.
const maxErrorLen = 1 << 10

func TestParseHostile(t *testing.T) {
	const hdr = "name,time,application,num_replicas,batch_size\n"
	long := strings.Repeat("x", 1<<20)
	tests := map[string]struct {
		input   string
		wantMsg string
	}{
		"cut in the header": {
			input:   "name,time,applic",
			wantMsg: `w.csv:1: header: want "name,time,application,num_replicas,batch_size", got "name,time,applic"`,
		},
		"cut after the header name": {
			input:   "na",
			wantMsg: `w.csv:1: header: want "name,time,application,num_replicas,batch_size", got "na"`,
		},
		"header missing a column": {
			input:   "name,time,application,num_replicas\nncf-0,1,ncf,1\n",
			wantMsg: `w.csv:1: header: want "name,time,application,num_replicas,batch_size", got "name,time,application,num_replicas"`,
		},
		"header columns reordered": {
			input:   "time,name,application,num_replicas,batch_size\n1,ncf-0,ncf,1,256\n",
			wantMsg: `w.csv:1: header: want "name,time,application,num_replicas,batch_size", got "time,name,application,num_replicas,batch_size"`,
		},
		"header with spaces": {
			input:   "name, time, application, num_replicas, batch_size\n",
			wantMsg: `w.csv:1: header: want "name,time,application,num_replicas,batch_size", got "name, time, application, num_replicas, batch_size"`,
		},
		"two byte order marks": {
			input:   "\ufeff\ufeff" + hdr + "ncf-0,1,ncf,1,256\n",
			wantMsg: `w.csv:1: header: want "name,time,application,num_replicas,batch_size", got "\ufeffname,time,application,num_replicas,batch_size"`,
		},
		"UTF-16 byte order mark": {
			input:   "\xff\xfen\x00a\x00m\x00e\x00",
			wantMsg: `w.csv:1: header: want "name,time,application,num_replicas,batch_size", got "\xff\xfen\x00a\x00m\x00e\x00"`,
		},
		"cut in the middle of a row": {
			input:   hdr + "ncf-0,1,ncf,1,256\nncf-1,2,nc",
			wantMsg: "w.csv:3: expected 5 fields, got 3",
		},
		"cut after a comma": {
			input:   hdr + "ncf-0,1,ncf,1,256\nncf-1,2,ncf,1,",
			wantMsg: "w.csv:3: batch_size: not an integer: \"\"",
		},
		"cut in the application": {
			input:   hdr + "ncf-0,1,ncf,1,256\nncf-1,2,nc,1,256\n",
			wantMsg: `w.csv:3: application: unknown "nc"`,
		},
		"cut in a quoted field": {
			input:   hdr + "ncf-0,1,ncf,1,256\n\"ncf-1,2,ncf,1,256\n",
			wantMsg: `w.csv:3: extraneous or missing " in quoted-field`,
		},
		"CRLF with a short row": {
			input:   strings.ReplaceAll(hdr, "\n", "\r\n") + "ncf-0,1,ncf,1,256\r\nncf-1,2,ncf,1\r\n",
			wantMsg: "w.csv:3: expected 5 fields, got 4",
		},
		"lone CR line ends": {
			input:   "name,time,application,num_replicas,batch_size\rncf-0,1,ncf,1,256\r",
			wantMsg: `w.csv:1: header: want "name,time,application,num_replicas,batch_size", got "name,time,application,num_replicas,batch_size\rncf-0,1,ncf,1,256"`,
		},
		"NUL in a row": {
			input:   hdr + "ncf-0,1,ncf,1,2\x0056\n",
			wantMsg: `w.csv:2: batch_size: not an integer: "2\x0056"`,
		},
		"huge time": {
			input:   hdr + "ncf-0,1e400,ncf,1,256\n",
			wantMsg: `w.csv:2: time: not a finite number: "1e400"`,
		},
		"infinite time": {
			input:   hdr + "ncf-0,-Inf,ncf,1,256\n",
			wantMsg: `w.csv:2: time: not a finite number: "-Inf"`,
		},
		"time with spaces": {
			input:   hdr + "ncf-0, 1,ncf,1,256\n",
			wantMsg: `w.csv:2: time: not a number: " 1"`,
		},
		"20-digit replicas": {
			input:   hdr + "ncf-0,1,ncf,99999999999999999999,256\n",
			wantMsg: `w.csv:2: num_replicas: integer out of range: "99999999999999999999"`,
		},
		"int64 overflow by one": {
			input:   hdr + "ncf-0,1,ncf,1,9223372036854775808\n",
			wantMsg: `w.csv:2: batch_size: integer out of range: "9223372036854775808"`,
		},
		"hex batch size": {
			input:   hdr + "ncf-0,1,ncf,1,0x100\n",
			wantMsg: `w.csv:2: batch_size: not an integer: "0x100"`,
		},
		"zero batch size": {
			input:   hdr + "ncf-0,1,ncf,1,0\n",
			wantMsg: "w.csv:2: batch_size: must be at least 1, got 0",
		},
		"1 MiB name with a control character": {
			input:   hdr + "\"\t" + long + "\",1,ncf,1,256\n",
			wantMsg: `w.csv:2: name: control character U+0009 in "\txxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx..."`,
		},
		"1 MiB application": {
			input:   hdr + "ncf-0,1," + long + ",1,256\n",
			wantMsg: `w.csv:2: application: unknown "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx..."`,
		},
		"1 MiB time": {
			input:   hdr + "ncf-0,1" + strings.Repeat("0", 1<<20) + ",ncf,1,256\n",
			wantMsg: `w.csv:2: time: not a finite number: "1000000000000000000000000000000000000000..."`,
		},
		"1 MiB duplicate name": {
			input:   hdr + long + ",1,ncf,1,256\n" + long + ",2,ncf,1,256\n",
			wantMsg: `w.csv:3: name: duplicate job "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx..." (first on line 2)`,
		},
		"1 MiB header": {
			input:   long + "\n",
			wantMsg: `w.csv:1: header: want "name,time,application,num_replicas,batch_size", got "` + strings.Repeat("x", 200) + `..."`,
		},
		"invalid UTF-8 cut at a rune boundary": {
			input:   hdr + strings.Repeat("é", 30) + "\xff,1,ncf,1,256\n",
			wantMsg: `w.csv:2: name: invalid UTF-8 in "` + strings.Repeat("é", 20) + `..."`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			jobs, err := Parse(strings.NewReader(tc.input), "w.csv", knownApps)
			if err == nil {
				t.Fatalf("Parse succeeded with %d jobs, want error %q", len(jobs), tc.wantMsg)
			}
			if diff := cmp.Diff(tc.wantMsg, err.Error()); diff != "" {
				t.Errorf("error message mismatch (-want +got):\n%s", diff)
			}
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Line < 1 {
				t.Errorf("error %#v is not a *ParseError with a line", err)
			}
			if len(err.Error()) > maxErrorLen {
				t.Errorf("error message is %d bytes", len(err.Error()))
			}
		})
	}
}

// TestParseTruncatedAtEveryByte cuts the artifact workloads at every
// byte. A cut is either an error naming the file and a line, or — when it
// falls at a line end or inside the last field of a row, which leaves a
// well-formed shorter file — the original jobs up to the cut, the last one
// possibly with a shortened batch size.
func TestParseTruncatedAtEveryByte(t *testing.T) {
	for _, name := range []string{"workload-1.csv", "workload-6.csv"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dataDir, "workloads", name)
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			full, err := Parse(bytes.NewReader(raw), path, knownApps)
			if err != nil {
				t.Fatal(err)
			}
			accepted, rejected := 0, 0
			for n := range len(raw) {
				jobs, err := Parse(bytes.NewReader(raw[:n]), path, knownApps)
				if err != nil {
					rejected++
					var pe *ParseError
					if !errors.As(err, &pe) || !strings.HasPrefix(err.Error(), path) {
						t.Fatalf("cut at byte %d: error %v does not name %s", n, err, path)
					}
					if pe.Line < 1 && !errors.Is(err, ErrEmpty) {
						t.Fatalf("cut at byte %d: error %v names no line", n, err)
					}
					continue
				}
				accepted++
				k := len(jobs)
				if diff := cmp.Diff(full[:k-1], jobs[:k-1]); diff != "" {
					t.Fatalf("cut at byte %d: jobs before the cut differ (-want +got):\n%s", n, diff)
				}
				last, want := jobs[k-1], full[k-1]
				if last != want {
					short := want
					short.BatchSize = last.BatchSize
					if last != short || !strings.HasPrefix(strconv.Itoa(want.BatchSize), strconv.Itoa(last.BatchSize)) {
						t.Fatalf("cut at byte %d: last job %+v is not a cut of %+v", n, last, want)
					}
				}
			}
			t.Logf("%d cuts: %d rejected with file and line, %d well-formed prefixes", len(raw), rejected, accepted)
		})
	}
}

// TestParseAcceptsArtifactVariants checks that the artifact workload with
// CRLF line ends, a byte order mark and no final newline parses to the
// same jobs.
func TestParseAcceptsArtifactVariants(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(dataDir, "workloads", "workload-6.csv"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := Parse(bytes.NewReader(raw), "w.csv", knownApps)
	if err != nil {
		t.Fatal(err)
	}
	for name, input := range map[string][]byte{
		"CRLF":             bytes.ReplaceAll(raw, []byte("\n"), []byte("\r\n")),
		"byte order mark":  append([]byte("\ufeff"), raw...),
		"no final newline": bytes.TrimRight(raw, "\n"),
		"blank lines":      bytes.ReplaceAll(raw, []byte("\n"), []byte("\n\n")),
	} {
		t.Run(name, func(t *testing.T) {
			got, err := Parse(bytes.NewReader(input), "w.csv", knownApps)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
