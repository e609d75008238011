package access_test

import (
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/internal/access"
)

// response stands for an API client's error carrying an HTTP response.
type response struct {
	code int
	body string
}

func (r response) Error() string {
	return fmt.Sprintf("Unexpected response code: %d (%s)", r.code, r.body)
}

var server = access.Server{Name: "test", Policy: "deploy/acl/test-policy.hcl",
	Response: func(err error) (int, string, bool) {
		var r response
		if errors.As(err, &r) {
			return r.code, r.body, true
		}
		return 0, "", false
	},
	TokenVar: "TEST_TOKEN", UnknownToken: "acl not found", NoToken: "anonymous token",
	DeniedText: []string{"Permission denied"},
	TLS:        access.TLSVars{Peer: "agent", CACert: "TEST_CACERT", HTTPSFix: "set TEST_SSL=true"}}

// TestClassify: each kind of refusal and TLS failure becomes an Error of
// the server naming the operation and the fix; anything else, and an
// Error already, passes through unchanged.
func TestClassify(t *testing.T) {
	const need = `key_prefix "pollux/" read`
	tests := map[string]struct {
		err        error
		wantDenied bool
		wantAccess bool
		want       []string
	}{
		"403": {err: response{403, "Permission denied"}, wantDenied: true, wantAccess: true,
			want: []string{"test: permission denied reading x: the token needs " + need, "see deploy/acl/test-policy.hcl"}},
		"403 unknown token": {err: fmt.Errorf("wrapped: %w", response{403, "ACL not found"}), wantDenied: true, wantAccess: true,
			want: []string{"the server does not know the token (check TEST_TOKEN); the token needs " + need}},
		"403 no token": {err: response{403, "anonymous token lacks permission"}, wantDenied: true, wantAccess: true,
			want: []string{"no token was sent (set TEST_TOKEN); the token needs " + need}},
		"http to an https server": {err: response{400, "Client sent an HTTP request to an HTTPS server.\n"}, wantAccess: true,
			want: []string{"test: TLS problem reading x: the agent speaks HTTPS, the client plain HTTP: set TEST_SSL=true"}},
		"refusal as text": {err: errors.New("Failed request: Permission denied"), wantDenied: true, wantAccess: true,
			want: []string{"the token needs " + need}},
		"untrusted certificate": {err: fmt.Errorf("Get: %w", x509.UnknownAuthorityError{}), wantAccess: true,
			want: []string{"not signed by a CA this client trusts", "set TEST_CACERT"}},
		"a response's refusal text is not read as text": {err: response{500, "Permission denied"}},
		"500":   {err: response{500, "boom"}},
		"other": {err: errors.New("connection refused")},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := server.Classify(tc.err, "reading x", need)
			var ae *access.Error
			if got := errors.As(err, &ae); got != tc.wantAccess {
				t.Fatalf("Error %v, want %v: %v", got, tc.wantAccess, err)
			}
			if got := errors.Is(err, contract.ErrPermissionDenied); got != tc.wantDenied {
				t.Errorf("errors.Is(ErrPermissionDenied) = %v, want %v: %v", got, tc.wantDenied, err)
			}
			if !tc.wantAccess && err != tc.err {
				t.Errorf("error changed: %v -> %v", tc.err, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if again := server.Classify(err, "other", "other"); again != err {
				t.Errorf("classifying twice changed the error: %v", again)
			}
		})
	}
	if server.Classify(nil, "x", "y") != nil {
		t.Error("Classify(nil) is not nil")
	}
}
