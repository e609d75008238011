package nomad

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/pollux-nomad/pollux/jobs"
)

// PolicyFile is the controller's least-privilege Nomad ACL policy, which
// permission errors point to.
const PolicyFile = "deploy/acl/nomad-policy.hcl"

// NeedNode is the rule Nodes needs: reading the nodes and their devices.
const NeedNode = `node { policy = "read" }`

// NeedNamespace returns the rule granting capability in namespace ns
// ("*": every namespace).
func NeedNamespace(capability, ns string) string {
	return fmt.Sprintf("namespace %q { capabilities = [%q] }", ns, capability)
}

// AccessError is a call Nomad refused for lack of ACL permission (HTTP 403;
// errors.Is(err, jobs.ErrPermissionDenied) holds), or one that failed in
// TLS (an untrusted or wrong certificate, http:// against an HTTPS server,
// ...). Its message names the server, the operation and what to change: the
// ACL rule the token needs, or the NOMAD_* variable to set.
type AccessError struct {
	// Op is what was refused: "listing nodes", "reading job default/train".
	Op string
	// Denied is true for a permission error, false for a TLS problem.
	Denied bool
	// Problem says what is wrong, Fix what to do.
	Problem, Fix string
	// Err is the API's error.
	Err error
}

func (e *AccessError) Error() string {
	if e.Denied {
		return fmt.Sprintf("nomad: permission denied %s: %s; see %s (%v)", e.Op, e.Fix, PolicyFile, e.Err)
	}
	return fmt.Sprintf("nomad: TLS problem %s: %s: %s (%v)", e.Op, e.Problem, e.Fix, e.Err)
}

// Unwrap returns the API's error.
func (e *AccessError) Unwrap() error { return e.Err }

// Is makes a permission error match jobs.ErrPermissionDenied.
func (e *AccessError) Is(target error) bool { return e.Denied && target == jobs.ErrPermissionDenied }

// Classify returns err as an *AccessError when it is a 403 (need is the
// ACL rule op needs) or a TLS failure; any other error is returned as it
// is. op says what was attempted ("listing nodes").
func Classify(err error, op, need string) error {
	if err == nil {
		return nil
	}
	var ae *AccessError
	if errors.As(err, &ae) {
		return err
	}
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) && ue.HasStatusCode() {
		body := strings.TrimSpace(ue.Body())
		switch {
		case ue.StatusCode() == http.StatusForbidden:
			fix := "the token needs " + need
			if strings.Contains(strings.ToLower(body), "token not found") {
				fix = "the server does not know the token (check NOMAD_TOKEN); the token needs " + need
			}
			return &AccessError{Op: op, Denied: true, Fix: fix, Err: err}
		case ue.StatusCode() == http.StatusBadRequest && strings.Contains(body, "HTTP request to an HTTPS server"):
			return &AccessError{Op: op, Problem: "the server speaks HTTPS, the client plain HTTP",
				Fix: "set NOMAD_ADDR=https://... (and NOMAD_CACERT to the CA that signed the server's certificate)", Err: err}
		}
		return err
	}
	if p, fix, ok := tlsProblem(err); ok {
		return &AccessError{Op: op, Problem: p, Fix: fix, Err: err}
	}
	return err
}

// tlsProblem recognises the TLS failures of a request and says which
// variable fixes them.
func tlsProblem(err error) (problem, fix string, ok bool) {
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	var rh tls.RecordHeaderError
	msg := err.Error()
	switch {
	case errors.As(err, &ua) || strings.Contains(msg, "certificate signed by unknown authority"):
		return "the server's certificate is not signed by a CA this client trusts",
			"set NOMAD_CACERT to the CA certificate that signed it", true
	case errors.As(err, &he):
		return "the server's certificate is not valid for " + he.Host,
			"use an address the certificate names in NOMAD_ADDR, or set NOMAD_TLS_SERVER_NAME", true
	case errors.As(err, &ci):
		return "the server's certificate is not valid (" + ci.Error() + ")",
			"renew the server's certificate or set NOMAD_CACERT to the CA that signed it", true
	case errors.As(err, &rh) || strings.Contains(msg, "server gave HTTP response to HTTPS client"):
		return "the server speaks plain HTTP, the client HTTPS", "set NOMAD_ADDR=http://... or enable TLS on the server", true
	case strings.Contains(msg, "tls: certificate required") || strings.Contains(msg, "tls: bad certificate"):
		return "the server wants a client certificate", "set NOMAD_CLIENT_CERT and NOMAD_CLIENT_KEY", true
	case strings.Contains(msg, "tls:") || strings.Contains(msg, "x509:"):
		return "TLS handshake failed", "check NOMAD_ADDR, NOMAD_CACERT, NOMAD_CLIENT_CERT and NOMAD_CLIENT_KEY", true
	}
	return "", "", false
}
