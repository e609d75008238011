// Package contract is the wire contract between the Pollux controller, the
// workers of the jobs it schedules, and the operators who run it: the job
// meta keys, the Consul KV key layout, the documents stored there (metrics,
// decision, state, status, rendezvous), their validation and canonical
// encoding, and the error sentinels that adapters wrap and callers test
// with errors.Is. docs/contracts.md is its prose.
//
// It imports nothing of this project but its own quote package, and no
// HashiCorp API, so that the controller, both server adapters, the worker
// libraries, the emulator and the demo can all depend on it without
// depending on each other.
//
// # Canonical encoding of the metrics document
//
// MarshalMetrics produces the one byte sequence that every reporter, in Go
// or in Python, must produce for the same document:
//
//   - a single JSON object without any whitespace and without a trailing
//     newline;
//   - the top-level fields in the order version, timestamp, batch_size,
//     progress, grad_sqr, grad_var, profile, and the profile entries'
//     fields in the order num_nodes, num_replicas, local_bsz, accum_steps,
//     compute_time, step_time, sync_time, count, all of them always
//     present, then gpu_type only when it is not empty; then, only when
//     set, the restart object with its fields in the order restore_time,
//     at (at formatted as timestamp);
//   - the profile sorted by (num_nodes, num_replicas, local_bsz,
//     accum_steps, gpu_type), ascending, gpu_type by bytes with an absent
//     one first, each such key at most once;
//   - timestamp in UTC as RFC 3339 with "Z", with fractional seconds only
//     when they are not zero and without trailing zeros
//     ("2026-12-02T13:00:00Z", "2026-12-02T13:00:00.25Z");
//   - integer fields as plain decimal integers; number fields as the
//     shortest decimal that reads back to the same float64, in plain
//     notation when 1e−6 ≤ |x| < 1e21 (an integral value without a
//     fraction: 1024, not 1024.0) and in exponent notation otherwise, with
//     the exponent's sign and no leading zeros (1e-7, 1.5e+21); zero as 0.
//     This is ECMAScript's Number-to-string conversion (JavaScript's
//     JSON.stringify), and what Go's encoding/json does for float64.
//
// Python's json.dumps does not follow the last rule (it writes 1024.0 and
// 1e-07, even for float subclasses), so a Python reporter must write its
// numbers by these rules itself; json.dumps(..., separators=(",", ":"))
// gives the rest.
//
// The package is pure: no I/O, no clock.
package contract
