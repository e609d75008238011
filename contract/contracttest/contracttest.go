// Package contracttest builds contract documents for tests: raw JSON
// metrics documents with chosen fields replaced, so that a test can
// write exactly the bytes a worker (or an attacker) would.
package contracttest

import (
	"fmt"
	"strings"
)

// DocJSON renders a valid metrics document with entries, where fields overrides
// top-level fields by raw JSON and entries are raw JSON objects.
func DocJSON(fields map[string]string, entries ...string) string {
	base := map[string]string{
		"version": "1", "timestamp": `"2026-12-02T13:00:00Z"`, "batch_size": "256",
		"progress": "10", "grad_sqr": "0.5", "grad_var": "2",
	}
	for k, v := range fields {
		base[k] = v
	}
	if _, ok := fields["profile"]; !ok {
		base["profile"] = "[" + strings.Join(entries, ",") + "]"
	}
	var parts []string
	for _, k := range []string{"version", "timestamp", "batch_size", "progress", "grad_sqr", "grad_var", "profile"} {
		if v := base[k]; v != "-" {
			parts = append(parts, fmt.Sprintf("%q:%s", k, v))
		}
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// Entry renders a valid profile entry with some fields replaced.
func Entry(repl ...string) string {
	f := map[string]string{
		"num_nodes": "1", "num_replicas": "2", "local_bsz": "64", "accum_steps": "0",
		"compute_time": "0.1", "step_time": "0.12", "sync_time": "0.02", "count": "10",
	}
	for i := 0; i+1 < len(repl); i += 2 {
		f[repl[i]] = repl[i+1]
	}
	var parts []string
	for _, k := range []string{"num_nodes", "num_replicas", "local_bsz", "accum_steps", "compute_time", "step_time", "sync_time", "count"} {
		parts = append(parts, fmt.Sprintf("%q:%s", k, f[k]))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// ManyEntries returns n distinct valid compact entries.
func ManyEntries(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(`{"num_nodes":1,"num_replicas":1,"local_bsz":%d,"accum_steps":0,"compute_time":1,"step_time":1,"sync_time":0,"count":1}`, i+1)
	}
	return out
}
