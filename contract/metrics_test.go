package contract

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/pollux-nomad/pollux/contract/contracttest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

func readFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("failed to read %s: %v", name, err)
	}
	return b
}

var (
	contractDoc = &Metrics{
		Version:   1,
		Timestamp: time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC),
		BatchSize: 1024, Progress: 12345.6, GradSqr: 0.52, GradVar: 2.10,
		Profile: []ProfileEntry{{NumNodes: 1, NumReplicas: 2, LocalBsz: 128, AccumSteps: 0,
			ComputeTime: 0.101, StepTime: 0.124, SyncTime: 0.021, Count: 40}},
	}
	multiNodeDoc = &Metrics{
		Version:   1,
		Timestamp: time.Date(2026, 12, 2, 13, 30, 5, 250_000_000, time.UTC),
		BatchSize: 2048, Progress: 250000, GradSqr: 4e-7, GradVar: 1.5e21,
		Profile: []ProfileEntry{
			{NumNodes: 2, NumReplicas: 8, LocalBsz: 256, AccumSteps: 0, ComputeTime: 0.180, StepTime: 0.310, SyncTime: 0.125, Count: 120},
			{NumNodes: 1, NumReplicas: 1, LocalBsz: 256, AccumSteps: 1, ComputeTime: 0.175, StepTime: 0.176, SyncTime: 0, Count: 300},
			{NumNodes: 1, NumReplicas: 1, LocalBsz: 256, AccumSteps: 3, ComputeTime: 0.179, StepTime: 0.180, SyncTime: 0, Count: 100},
			{NumNodes: 1, NumReplicas: 4, LocalBsz: 128, AccumSteps: 0, ComputeTime: 0.095, StepTime: 0.140, SyncTime: 0.041, Count: 75},
		},
	}
)

func TestParseValid(t *testing.T) {
	tests := map[string]struct {
		file string
		want *Metrics
	}{
		"contract example":                       {file: "contract-example.json", want: contractDoc},
		"multi-node, offset time, unknown field": {file: "multi-node.json", want: multiNodeDoc},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseMetrics(readFile(t, tc.file))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Parse mismatch (-want +got):\n%s", diff)
			}
			if got.Timestamp.Location() != time.UTC {
				t.Errorf("timestamp location %v, want UTC", got.Timestamp.Location())
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	ok := contracttest.Entry()
	tests := map[string]struct {
		input   string
		wantErr []string
		wantIs  error
	}{
		"truncated JSON":     {input: `{"version":1`, wantErr: []string{"unexpected end of JSON input"}},
		"trailing data":      {input: contracttest.DocJSON(nil, ok) + " x", wantErr: []string{"invalid character 'x' after top-level value"}},
		"not an object":      {input: `[1,2]`, wantErr: []string{"cannot unmarshal array"}},
		"null":               {input: `null`, wantErr: []string{"version: unsupported version 0, want 1", "profile: must have at least one entry"}},
		"version 2":          {input: contracttest.DocJSON(map[string]string{"version": "2"}, ok), wantErr: []string{"version: unsupported version 2, want 1"}, wantIs: ErrUnsupportedVersion},
		"missing version":    {input: contracttest.DocJSON(map[string]string{"version": "-"}, ok), wantErr: []string{"version: unsupported version 0"}, wantIs: ErrUnsupportedVersion},
		"missing timestamp":  {input: contracttest.DocJSON(map[string]string{"timestamp": "-"}, ok), wantErr: []string{"timestamp: must be set"}},
		"bad timestamp":      {input: contracttest.DocJSON(map[string]string{"timestamp": `"yesterday"`}, ok), wantErr: []string{`parsing time "yesterday"`}},
		"zero batch size":    {input: contracttest.DocJSON(map[string]string{"batch_size": "0"}, ok), wantErr: []string{"batch_size: must be finite and positive, got 0"}},
		"negative progress":  {input: contracttest.DocJSON(map[string]string{"progress": "-1"}, ok), wantErr: []string{"progress: must be finite and non-negative, got -1"}},
		"negative grad_sqr":  {input: contracttest.DocJSON(map[string]string{"grad_sqr": "-0.5"}, ok), wantErr: []string{"grad_sqr: must be finite and non-negative, got -0.5"}},
		"negative grad_var":  {input: contracttest.DocJSON(map[string]string{"grad_var": "-2"}, ok), wantErr: []string{"grad_var: must be finite and non-negative, got -2"}},
		"overflowing number": {input: contracttest.DocJSON(map[string]string{"grad_var": "1e999"}, ok), wantErr: []string{"grad_var"}},
		"string for number":  {input: contracttest.DocJSON(map[string]string{"progress": `"10"`}, ok), wantErr: []string{"progress"}},
		"empty profile":      {input: contracttest.DocJSON(nil), wantErr: []string{"profile: must have at least one entry"}},
		"null profile":       {input: contracttest.DocJSON(map[string]string{"profile": "null"}), wantErr: []string{"profile: must have at least one entry"}},
		"negative step time in the fourth entry": {
			input:   contracttest.DocJSON(nil, ok, contracttest.Entry("local_bsz", "32"), contracttest.Entry("local_bsz", "16"), contracttest.Entry("local_bsz", "8", "step_time", "-1")),
			wantErr: []string{"profile[3].step_time: must be finite and positive, got -1"},
		},
		"zero nodes":                  {input: contracttest.DocJSON(nil, contracttest.Entry("num_nodes", "0")), wantErr: []string{"profile[0].num_nodes: must be at least 1, got 0"}},
		"replicas below nodes":        {input: contracttest.DocJSON(nil, contracttest.Entry("num_nodes", "3")), wantErr: []string{"profile[0].num_replicas: must be at least num_nodes and 1, got 2"}},
		"zero local batch":            {input: contracttest.DocJSON(nil, contracttest.Entry("local_bsz", "0")), wantErr: []string{"profile[0].local_bsz: must be at least 1, got 0"}},
		"negative accumulation steps": {input: contracttest.DocJSON(nil, contracttest.Entry("accum_steps", "-1")), wantErr: []string{"profile[0].accum_steps: must be at least 0, got -1"}},
		"zero compute time":           {input: contracttest.DocJSON(nil, contracttest.Entry("compute_time", "0")), wantErr: []string{"profile[0].compute_time: must be finite and positive, got 0"}},
		"negative sync time":          {input: contracttest.DocJSON(nil, contracttest.Entry("sync_time", "-0.5")), wantErr: []string{"profile[0].sync_time: must be finite and non-negative, got -0.5"}},
		"zero count":                  {input: contracttest.DocJSON(nil, contracttest.Entry("count", "0")), wantErr: []string{"profile[0].count: must be at least 1, got 0"}},
		"fractional local batch":      {input: contracttest.DocJSON(nil, contracttest.Entry("local_bsz", "12.5")), wantErr: []string{"local_bsz"}},
		"duplicate configuration": {
			input:   contracttest.DocJSON(nil, ok, contracttest.Entry("count", "3")),
			wantErr: []string{"profile[1]: same num_nodes, num_replicas, local_bsz, accum_steps and gpu_type as profile[0]"},
		},
		"several problems at once": {
			input: contracttest.DocJSON(map[string]string{"version": "3", "progress": "-2"}, contracttest.Entry("count", "0", "step_time", "0")),
			wantErr: []string{"version: unsupported version 3", "progress: must be finite and non-negative, got -2",
				"profile[0].step_time: must be finite and positive, got 0", "profile[0].count: must be at least 1, got 0"},
		},
		"too many entries": {
			input:   contracttest.DocJSON(nil, contracttest.ManyEntries(MaxProfileEntries+1)...),
			wantErr: []string{"profile: 4097 entries, at most 4096"},
		},
		"too large": {
			input:   contracttest.DocJSON(nil, ok) + strings.Repeat(" ", MaxMetricsSize),
			wantErr: []string{"document too large"},
			wantIs:  ErrTooLarge,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d, err := ParseMetrics([]byte(tc.input))
			if err == nil {
				t.Fatalf("Parse succeeded with %+v, want an error", d)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Parse error %q does not contain %q", err, want)
				}
			}
			if !strings.HasPrefix(err.Error(), "failed to parse metrics document: ") {
				t.Errorf("Parse error %q lacks the failed-to-parse prefix", err)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("Parse error %q is not %v", err, tc.wantIs)
			}
		})
	}
}

func TestValidateCapsProblemList(t *testing.T) {
	d := *contractDoc
	d.Profile = make([]ProfileEntry, 100) // every entry breaks 5 rules
	for i := range d.Profile {
		d.Profile[i].LocalBsz = i + 1 // distinct keys
	}
	err := d.Validate()
	if err == nil {
		t.Fatal("Validate() = nil, want errors")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != maxReported+1 {
		t.Errorf("Validate() reported %d lines, want %d", len(lines), maxReported+1)
	}
	if want := fmt.Sprintf("and %d more problems", 100*5-maxReported); lines[len(lines)-1] != want {
		t.Errorf("last line %q, want %q", lines[len(lines)-1], want)
	}
}

func TestMarshalCanonical(t *testing.T) {
	tests := map[string]struct {
		doc    *Metrics
		golden string
	}{
		"contract example": {doc: contractDoc, golden: "contract-example.canonical.json"},
		"multi-node":       {doc: multiNodeDoc, golden: "multi-node.canonical.json"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			before := cloneDoc(tc.doc)
			got, err := MarshalMetrics(tc.doc)
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			if diff := cmp.Diff(before, tc.doc); diff != "" {
				t.Errorf("Marshal modified its input (-before +after):\n%s", diff)
			}
			if *update {
				if err := os.WriteFile(filepath.Join("testdata", tc.golden), got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if want := readFile(t, tc.golden); !bytes.Equal(want, got) {
				t.Errorf("Marshal mismatch (-want +got):\n%s", cmp.Diff(string(want), string(got)))
			}
		})
	}
	// The contract example, spelled out: the rules of the package doc.
	want := `{"version":1,"timestamp":"2026-12-02T13:00:00Z","batch_size":1024,"progress":12345.6,"grad_sqr":0.52,"grad_var":2.1,` +
		`"profile":[{"num_nodes":1,"num_replicas":2,"local_bsz":128,"accum_steps":0,"compute_time":0.101,"step_time":0.124,"sync_time":0.021,"count":40}]}`
	if got, _ := MarshalMetrics(contractDoc); string(got) != want {
		t.Errorf("MarshalMetrics(contract example) =\n%s\nwant\n%s", got, want)
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	for _, doc := range []*Metrics{contractDoc, multiNodeDoc} {
		b, err := MarshalMetrics(doc)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		got, err := ParseMetrics(b)
		if err != nil {
			t.Fatalf("ParseMetrics(MarshalMetrics(d)): %v", err)
		}
		sorted := cmpopts.SortSlices(func(a, b ProfileEntry) bool { return compareKeys(a.key(), b.key()) < 0 })
		if diff := cmp.Diff(doc, got, sorted); diff != "" {
			t.Errorf("round trip mismatch (-want +got):\n%s", diff)
		}
	}
}

func TestMarshalRejectsInvalid(t *testing.T) {
	d := cloneDoc(contractDoc)
	d.Profile[0].StepTime = -1
	if _, err := MarshalMetrics(d); err == nil || !strings.Contains(err.Error(), "profile[0].step_time") {
		t.Errorf("MarshalMetrics(invalid) error = %v, want one naming profile[0].step_time", err)
	}
}

func cloneDoc(d *Metrics) *Metrics {
	c := *d
	c.Profile = append([]ProfileEntry(nil), d.Profile...)
	return &c
}

func FuzzParseMetrics(f *testing.F) {
	for _, name := range []string{"contract-example.json", "multi-node.json", "contract-example.canonical.json"} {
		f.Add(readFile(f, name))
	}
	f.Add([]byte(`{"version":1,"timestamp":"0000-01-01T00:30:00+01:00","batch_size":1,"progress":-0,"grad_sqr":0,"grad_var":5e-324,` +
		`"profile":[{"num_nodes":1,"num_replicas":1,"local_bsz":1,"accum_steps":0,"compute_time":1e308,"step_time":1,"sync_time":0,"count":9223372036854775807}]}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"profile":[{}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := ParseMetrics(data)
		if err != nil {
			return
		}
		b, err := MarshalMetrics(d)
		if err != nil {
			t.Fatalf("accepted document does not marshal: %v\ninput: %q", err, data)
		}
		d2, err := ParseMetrics(b)
		if err != nil {
			t.Fatalf("canonical form does not parse: %v\ncanonical: %s", err, b)
		}
		b2, err := MarshalMetrics(d2)
		if err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("canonical form not stable (err %v):\n%s\n%s", err, b, b2)
		}
		sorted := cmpopts.SortSlices(func(a, b ProfileEntry) bool { return compareKeys(a.key(), b.key()) < 0 })
		if diff := cmp.Diff(d, d2, sorted); diff != "" {
			t.Fatalf("re-parsed document differs (-parsed +re-parsed):\n%s", diff)
		}
	})
}

func BenchmarkParseMetrics(b *testing.B) {
	data := readFile(b, "multi-node.json")
	for b.Loop() {
		if _, err := ParseMetrics(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMarshalMetrics(b *testing.B) {
	for b.Loop() {
		if _, err := MarshalMetrics(multiNodeDoc); err != nil {
			b.Fatal(err)
		}
	}
}
