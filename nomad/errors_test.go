package nomad_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/nomad"
)

// TestClassify: a refusal or a TLS failure of a real HTTP exchange becomes
// an AccessError naming the operation and the fix; anything else passes
// through unchanged. The servers are httptest servers on 127.0.0.1 that
// answer as Nomad does (the e2e access test does the same against real
// ACL- and TLS-enabled agents).
func TestClassify(t *testing.T) {
	deny := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) { http.Error(w, body, http.StatusForbidden) }
	}
	broken := func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "boom", http.StatusInternalServerError) }
	need := nomad.NeedNode
	tests := map[string]struct {
		server     func(h http.Handler) *httptest.Server
		handler    http.HandlerFunc
		plainHTTP  bool // talk http:// to a TLS server
		wantDenied bool
		wantAccess bool
		want       []string
	}{
		"403 permission denied": {server: httptest.NewServer, handler: deny("Permission denied"), wantDenied: true, wantAccess: true,
			want: []string{"nomad: permission denied listing nodes", "the token needs " + need, nomad.PolicyFile}},
		"403 unknown token": {server: httptest.NewServer, handler: deny("ACL token not found"), wantDenied: true, wantAccess: true,
			want: []string{"the server does not know the token (check NOMAD_TOKEN)"}},
		"untrusted certificate": {server: httptest.NewTLSServer, handler: deny("unused"), wantAccess: true,
			want: []string{"nomad: TLS problem listing nodes", "not signed by a CA this client trusts", "set NOMAD_CACERT"}},
		"http to an https server": {server: httptest.NewTLSServer, handler: deny("unused"), plainHTTP: true, wantAccess: true,
			want: []string{"nomad: TLS problem listing nodes", "set NOMAD_ADDR=https://"}},
		"500 is not an access problem": {server: httptest.NewServer, handler: broken, want: []string{"500", "boom"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv := tc.server(tc.handler)
			defer srv.Close()
			cfg := api.DefaultConfig()
			cfg.Address = srv.URL
			if tc.plainHTTP {
				cfg.Address = strings.Replace(srv.URL, "https://", "http://", 1)
			}
			c, err := api.NewClient(cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, _, raw := c.Nodes().List(nil)
			if raw == nil {
				t.Fatal("request succeeded")
			}
			err = nomad.Classify(raw, "listing nodes", need)
			var ae *nomad.AccessError
			if got := errors.As(err, &ae); got != tc.wantAccess {
				t.Fatalf("AccessError %v, want %v: %v", got, tc.wantAccess, err)
			}
			if got := errors.Is(err, contract.ErrPermissionDenied); got != tc.wantDenied {
				t.Errorf("errors.Is(ErrPermissionDenied) = %v, want %v: %v", got, tc.wantDenied, err)
			}
			if !tc.wantAccess && err.Error() != raw.Error() {
				t.Errorf("error changed: %v -> %v", raw, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if again := nomad.Classify(err, "other", "other"); tc.wantAccess && again != err {
				t.Errorf("classifying twice changed the error: %v", again)
			}
		})
	}
	if nomad.Classify(nil, "x", "y") != nil {
		t.Error("Classify(nil) is not nil")
	}
}
