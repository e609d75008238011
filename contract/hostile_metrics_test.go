package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"strings"
	"testing"

	"github.com/pollux-nomad/pollux/contract/contracttest"
)

// maxErrorLen bounds Parse's message for any input: encoding/json quotes
// number literals and timestamps whole, and Validate lists at most 50
// problems.
const maxErrorLen = 6 << 10

// checkParseError asserts the common shape of a Parse error.
func checkParseError(t *testing.T, err error) {
	t.Helper()
	if !strings.HasPrefix(err.Error(), "failed to parse metrics document: ") {
		t.Errorf("error %.200q lacks the failed-to-parse prefix", err)
	}
	if len(err.Error()) >= maxErrorLen {
		t.Errorf("error message is %d bytes, want < %d", len(err.Error()), maxErrorLen)
	}
}

// TestParseTruncatedAtEveryByte cuts valid documents at every byte: every
// cut must be an error naming where the input ended, and none may panic.
func TestParseTruncatedAtEveryByte(t *testing.T) {
	for _, name := range []string{"contract-example.json", "multi-node.json", "contract-example.canonical.json", "multi-node.canonical.json"} {
		t.Run(name, func(t *testing.T) {
			doc := bytes.TrimRight(readFile(t, name), " \t\r\n")
			if _, err := ParseMetrics(doc); err != nil {
				t.Fatalf("the whole document does not parse: %v", err)
			}
			for n := 0; n < len(doc); n++ {
				d, err := ParseMetrics(doc[:n])
				if err == nil {
					t.Errorf("cut at byte %d of %d parsed: %+v", n, len(doc), d)
					continue
				}
				checkParseError(t, err)
				if n > 0 && !strings.Contains(err.Error(), fmt.Sprintf("at byte %d: unexpected end of JSON input (truncated document?)", n)) {
					t.Errorf("cut at byte %d: error %q does not say the input ended", n, err)
				}
			}
		})
	}
}

func TestParseHostile(t *testing.T) {
	ok := contracttest.Entry()
	tests := map[string]struct {
		input   string
		wantErr []string
		wantIs  error
	}{
		"version 0":            {input: contracttest.DocJSON(map[string]string{"version": "0"}, ok), wantErr: []string{"version: unsupported version 0, want 1"}, wantIs: ErrUnsupportedVersion},
		"version -1":           {input: contracttest.DocJSON(map[string]string{"version": "-1"}, ok), wantErr: []string{"version: unsupported version -1, want 1"}, wantIs: ErrUnsupportedVersion},
		"version 1.5":          {input: contracttest.DocJSON(map[string]string{"version": "1.5"}, ok), wantErr: []string{"cannot unmarshal number 1.5 into Go struct field Metrics.version of type int"}},
		"version as a string":  {input: contracttest.DocJSON(map[string]string{"version": `"1"`}, ok), wantErr: []string{"Metrics.version of type int"}},
		"version 1e30":         {input: contracttest.DocJSON(map[string]string{"version": "1e30"}, ok), wantErr: []string{"cannot unmarshal number 1e30", "version"}},
		"version int overflow": {input: contracttest.DocJSON(map[string]string{"version": "9223372036854775808"}, ok), wantErr: []string{"cannot unmarshal number 9223372036854775808"}},
		"count 1e30":           {input: contracttest.DocJSON(nil, contracttest.Entry("count", "1e30")), wantErr: []string{"cannot unmarshal number 1e30 into Go struct field ProfileEntry.profile.count of type int"}},
		"count negative":       {input: contracttest.DocJSON(nil, contracttest.Entry("count", "-40")), wantErr: []string{"profile[0].count: must be at least 1, got -40"}},
		"count as a string":    {input: contracttest.DocJSON(nil, contracttest.Entry("count", `"40"`)), wantErr: []string{"profile.count of type int"}},
		"step_time 1e400":      {input: contracttest.DocJSON(nil, contracttest.Entry("step_time", "1e400")), wantErr: []string{"cannot unmarshal number 1e400", "profile.step_time"}},
		"step_time -1e308":     {input: contracttest.DocJSON(nil, contracttest.Entry("step_time", "-1e308")), wantErr: []string{"profile[0].step_time: must be finite and positive, got -1e+308"}},
		"compute_time -0":      {input: contracttest.DocJSON(nil, contracttest.Entry("compute_time", "-0")), wantErr: []string{"profile[0].compute_time: must be finite and positive, got 0"}},
		"sync_time negative":   {input: contracttest.DocJSON(nil, contracttest.Entry("sync_time", "-1e-300")), wantErr: []string{"profile[0].sync_time: must be finite and non-negative, got -1e-300"}},
		"num_replicas 1e30":    {input: contracttest.DocJSON(nil, contracttest.Entry("num_replicas", "1e30")), wantErr: []string{"profile.num_replicas of type int"}},
		"NaN literal":          {input: contracttest.DocJSON(nil, contracttest.Entry("step_time", "NaN")), wantErr: []string{"invalid character 'N'"}},
		"Infinity literal":     {input: contracttest.DocJSON(map[string]string{"progress": "Infinity"}, ok), wantErr: []string{"invalid character 'I'"}},
		"hex number":           {input: contracttest.DocJSON(map[string]string{"batch_size": "0x10"}, ok), wantErr: []string{"invalid character 'x'"}},
		"gradient sum overflows": {input: contracttest.DocJSON(map[string]string{"grad_sqr": "1e308", "grad_var": "1e308"}, ok),
			wantErr: []string{"grad_var: grad_sqr + grad_var must be finite, got 1e+308 + 1e+308"}},
		"year 10000":      {input: contracttest.DocJSON(map[string]string{"timestamp": `"10000-01-01T00:00:00Z"`}, ok), wantErr: []string{"parsing time"}},
		"far offset":      {input: contracttest.DocJSON(map[string]string{"timestamp": `"0001-01-01T00:30:00+01:00"`}, ok), wantErr: []string{"timestamp: must be set, in years 1 to 9999 UTC"}},
		"duplicate entry": {input: contracttest.DocJSON(nil, ok, ok), wantErr: []string{"profile[1]: same num_nodes, num_replicas, local_bsz, accum_steps and gpu_type as profile[0]"}},
		"400 KiB number literal": {input: contracttest.DocJSON(map[string]string{"batch_size": "1" + strings.Repeat("0", 400<<10)}, ok),
			wantErr: []string{"cannot unmarshal number 1000", "..."}},
		"400 KiB timestamp": {input: contracttest.DocJSON(map[string]string{"timestamp": `"` + strings.Repeat("9", 400<<10) + `"`}, ok),
			wantErr: []string{`parsing time "999`, "..."}},
		"400 KiB string for a number": {input: contracttest.DocJSON(map[string]string{"progress": `"` + strings.Repeat("é", 200<<10) + `"`}, ok),
			wantErr: []string{"cannot unmarshal string into Go struct field Metrics.progress of type float64"}},
		"4097 entries": {input: contracttest.DocJSON(nil, contracttest.ManyEntries(MaxProfileEntries+1)...), wantErr: []string{"profile: 4097 entries, at most 4096"}},
		"4096 broken entries": {input: contracttest.DocJSON(nil, brokenEntries(MaxProfileEntries)...),
			wantErr: []string{"profile[0].num_nodes: must be at least 1, got -1", "and 24526 more problems"}},
		"one byte over 512 KiB": {input: padTo(contracttest.DocJSON(nil, ok), MaxMetricsSize+1), wantErr: []string{"document too large: 524289 bytes, at most 524288"}, wantIs: ErrTooLarge},
		"1 MiB":                 {input: padTo(contracttest.DocJSON(nil, ok), 1<<20), wantErr: []string{"document too large: 1048576 bytes"}, wantIs: ErrTooLarge},
		"empty input":           {input: "", wantErr: []string{"unexpected end of JSON input"}},
		"only white space":      {input: " \n\t", wantErr: []string{"unexpected end of JSON input"}},
		"byte order mark":       {input: "\ufeff" + contracttest.DocJSON(nil, ok), wantErr: []string{"at byte 1: invalid character"}},
		"invalid UTF-8 key":     {input: "{\"\xff\":1}", wantErr: []string{"version: unsupported version 0"}},
		"deeply nested":         {input: strings.Repeat("[", 20000) + strings.Repeat("]", 20000), wantErr: []string{"exceeded max depth"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d, err := ParseMetrics([]byte(tc.input))
			if err == nil {
				t.Fatalf("Parse succeeded with %+v, want an error", d)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Parse error %.300q does not contain %q", err, want)
				}
			}
			checkParseError(t, err)
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("Parse error %q is not %v", err, tc.wantIs)
			}
		})
	}
}

// brokenEntries returns n distinct entries that break five rules each
// (missing fields are zero).
func brokenEntries(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(`{"num_nodes":-1,"local_bsz":-%d}`, i+1)
	}
	return out
}

// padTo pads a document with trailing spaces (valid JSON) to n bytes.
func padTo(doc string, n int) string {
	return doc + strings.Repeat(" ", n-len(doc))
}

// TestParseAtSizeLimit checks the boundary of the 512 KiB limit (Consul's
// largest value): exactly MaxMetricsSize bytes parse.
func TestParseAtSizeLimit(t *testing.T) {
	if _, err := ParseMetrics([]byte(padTo(contracttest.DocJSON(nil, contracttest.Entry()), MaxMetricsSize))); err != nil {
		t.Errorf("a document of exactly %d bytes: %v", MaxMetricsSize, err)
	}
}

// TestParseKeepsWrappedErrors checks that shortening a decoding error
// keeps it available to errors.As.
func TestParseKeepsWrappedErrors(t *testing.T) {
	_, err := ParseMetrics([]byte(`{"version":"one"}`))
	var typ *json.UnmarshalTypeError
	if !errors.As(err, &typ) || typ.Field != "version" {
		t.Errorf("error %v: errors.As(*json.UnmarshalTypeError) = %v", err, typ)
	}
}
