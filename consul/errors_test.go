package consul_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/pollux-nomad/pollux/consul"
	"github.com/pollux-nomad/pollux/contract"
)

// TestClassify: a refusal or a TLS failure of a real HTTP exchange becomes
// an AccessError naming the operation and the fix; anything else passes
// through unchanged. The servers are httptest servers on 127.0.0.1 that
// answer as Consul does (the e2e access test does the same against a real
// ACL- and TLS-enabled agent).
func TestClassify(t *testing.T) {
	deny := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) { http.Error(w, body, http.StatusForbidden) }
	}
	broken := func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "boom", http.StatusInternalServerError) }
	const need = `key_prefix "pollux/" read`
	tests := map[string]struct {
		server     func(h http.Handler) *httptest.Server
		handler    http.HandlerFunc
		https      bool // the client uses https without the CA
		wantDenied bool
		wantAccess bool
		want       []string
	}{
		"403 permission denied": {server: httptest.NewServer, handler: deny("Permission denied: token with AccessorID '1' lacks permission 'key:read' on \"pollux/config\""),
			wantDenied: true, wantAccess: true, want: []string{"consul: permission denied reading pollux/config", "the token needs " + need, consul.PolicyFile}},
		"403 anonymous": {server: httptest.NewServer, handler: deny("Permission denied: anonymous token lacks permission 'key:read'"),
			wantDenied: true, wantAccess: true, want: []string{"no token was sent (set CONSUL_HTTP_TOKEN)"}},
		"403 unknown token": {server: httptest.NewServer, handler: deny("ACL not found"),
			wantDenied: true, wantAccess: true, want: []string{"the server does not know the token (check CONSUL_HTTP_TOKEN)"}},
		"untrusted certificate": {server: httptest.NewTLSServer, handler: deny("unused"), https: true, wantAccess: true,
			want: []string{"consul: TLS problem reading pollux/config", "not signed by a CA this client trusts", "set CONSUL_CACERT"}},
		"http to an https server": {server: httptest.NewTLSServer, handler: deny("unused"), wantAccess: true,
			want: []string{"consul: TLS problem reading pollux/config", "set CONSUL_HTTP_SSL=true"}},
		"500 is not an access problem": {server: httptest.NewServer, handler: broken, want: []string{"500", "boom"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv := tc.server(tc.handler)
			defer srv.Close()
			cfg := api.DefaultConfig()
			cfg.Address = srv.Listener.Addr().String()
			cfg.Scheme = "http"
			if tc.https {
				cfg.Scheme = "https"
			}
			c, err := api.NewClient(cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, _, raw := c.KV().Get("pollux/config", nil)
			if raw == nil {
				t.Fatal("request succeeded")
			}
			err = consul.Classify(raw, "reading pollux/config", need)
			var ae *consul.AccessError
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
		})
	}
}
