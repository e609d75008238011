package jobs

import (
	"net/http"
	"strings"
	"testing"
)

// TestAccessHealth: /healthz is 503 until a check has passed and while it
// finds access problems (naming them), 200 otherwise.
func TestAccessHealth(t *testing.T) {
	var none *AccessCheck
	if code, _ := none.Health(); code != http.StatusOK {
		t.Errorf("no access check: %d, want 200", code)
	}
	a := &AccessCheck{}
	if code, body := a.Health(); code != http.StatusServiceUnavailable || !strings.Contains(body, "checking access") {
		t.Errorf("before the first check: %d %q", code, body)
	}
	a.checked, a.problems = true, []string{"nomad: permission denied listing nodes: the token needs node"}
	if code, body := a.Health(); code != http.StatusServiceUnavailable || !strings.Contains(body, "access: nomad: permission denied listing nodes") {
		t.Errorf("with a problem: %d %q", code, body)
	}
	a.problems, a.notes = nil, []string{"consul unreachable"}
	if code, body := a.Health(); code != http.StatusOK || !strings.HasPrefix(body, "ok\n") || !strings.Contains(body, "note: consul unreachable") {
		t.Errorf("passed with a note: %d %q", code, body)
	}
}
