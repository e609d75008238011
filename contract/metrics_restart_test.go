package contract

import (
	"strings"
	"testing"
	"time"
)

// TestMetricsRestart checks the optional restart object: encoded last,
// read back, and an invalid one dropped with its field named while the
// rest of the document is kept.
func TestMetricsRestart(t *testing.T) {
	d := *contractDoc
	d.Restart = &Restart{RestoreTime: 12.5, At: time.Date(2026, 12, 2, 12, 59, 0, 500_000_000, time.FixedZone("x", 3600))}
	b, err := MarshalMetrics(&d)
	if err != nil {
		t.Fatalf("MarshalMetrics: %v", err)
	}
	if want := `,"restart":{"restore_time":12.5,"at":"2026-12-02T11:59:00.5Z"}}`; !strings.HasSuffix(string(b), want) {
		t.Fatalf("encoding %s does not end with %s", b, want)
	}
	got, err := ParseMetrics(b)
	if err != nil {
		t.Fatalf("ParseMetrics: %v", err)
	}
	if got.Restart == nil || got.Restart.RestoreTime != 12.5 || !got.Restart.At.Equal(d.Restart.At) || got.RestartErr != nil {
		t.Fatalf("restart read back as %+v (err %v)", got.Restart, got.RestartErr)
	}

	for name, tc := range map[string]struct{ restart, field string }{
		"negative":  {`{"restore_time":-1,"at":"2026-12-02T12:59:00Z"}`, "restart.restore_time"},
		"too long":  {`{"restore_time":1e9,"at":"2026-12-02T12:59:00Z"}`, "restart.restore_time"},
		"no time":   {`{"restore_time":3}`, "restart.at"},
		"zero time": {`{"restore_time":3,"at":"0001-01-01T00:00:00Z"}`, "restart.at"},
	} {
		t.Run(name, func(t *testing.T) {
			doc := strings.TrimSuffix(string(readFile(t, "contract-example.json")), "\n")
			doc = strings.TrimSuffix(strings.TrimSpace(doc), "}") + `,"restart":` + tc.restart + `}`
			got, err := ParseMetrics([]byte(doc))
			if err != nil {
				t.Fatalf("ParseMetrics rejected the document for its restart object: %v", err)
			}
			if got.Restart != nil || got.RestartErr == nil || !strings.Contains(got.RestartErr.Error(), tc.field) {
				t.Fatalf("restart %+v, error %v; want it dropped with an error naming %s", got.Restart, got.RestartErr, tc.field)
			}
			if got.BatchSize != 1024 || len(got.Profile) != 1 {
				t.Fatalf("rest of the document not kept: %+v", got)
			}
			bad := *contractDoc
			bad.Restart = &Restart{RestoreTime: -1}
			if _, err := MarshalMetrics(&bad); err == nil || !strings.Contains(err.Error(), "restart.restore_time") {
				t.Fatalf("MarshalMetrics of an invalid restart: %v", err)
			}
		})
	}
}
