package contract

import "errors"

// Sentinel errors the server adapters wrap and callers test with
// errors.Is.
var (
	// ErrConflict: a check-and-set write lost because someone else changed
	// the object since it was read (Nomad: the job's JobModifyIndex moved;
	// Consul: the key's ModifyIndex moved).
	ErrConflict = errors.New("conflicting modification")
	// ErrNotFound: the job or key does not exist (any more).
	ErrNotFound = errors.New("not found")
	// ErrPermissionDenied: the server refused the call for lack of ACL
	// permission (HTTP 403: no token, an unknown token, or a token whose
	// policy lacks the rule). The wrapping error names the server, the
	// operation, the key or namespace and the rule the token needs.
	ErrPermissionDenied = errors.New("permission denied")
)
