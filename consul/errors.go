package consul

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/pollux-nomad/pollux/jobs"
)

// PolicyFile is the controller's least-privilege Consul ACL policy, which
// permission errors point to.
const PolicyFile = "deploy/acl/consul-policy.hcl"

// NeedSession is the rule the leader lock's session needs: sessions are
// created on the Consul agent's node, whichever node the controller runs on.
const NeedSession = `session_prefix "" write`

// AccessError is a call Consul refused for lack of ACL permission (HTTP
// 403; errors.Is(err, jobs.ErrPermissionDenied) holds), or one that failed
// in TLS (an untrusted certificate, plain HTTP against an HTTPS-only agent,
// ...). Its message names the server, the operation and key, and what to
// change: the ACL rule the token needs, or the CONSUL_* variable to set.
type AccessError struct {
	// Op is what was refused: "writing pollux/status".
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
		return fmt.Sprintf("consul: permission denied %s: %s; see %s (%v)", e.Op, e.Fix, PolicyFile, e.Err)
	}
	return fmt.Sprintf("consul: TLS problem %s: %s: %s (%v)", e.Op, e.Problem, e.Fix, e.Err)
}

// Unwrap returns the API's error.
func (e *AccessError) Unwrap() error { return e.Err }

// Is makes a permission error match jobs.ErrPermissionDenied.
func (e *AccessError) Is(target error) bool { return e.Denied && target == jobs.ErrPermissionDenied }

// Classify returns err as an *AccessError when it is a 403 (need is the
// ACL rule op needs) or a TLS failure; any other error is returned as it
// is. op says what was attempted ("writing pollux/status").
func Classify(err error, op, need string) error {
	if err == nil {
		return nil
	}
	var ae *AccessError
	if errors.As(err, &ae) {
		return err
	}
	var se api.StatusError
	if errors.As(err, &se) {
		switch {
		case se.Code == http.StatusForbidden:
			fix := "the token needs " + need
			switch body := strings.ToLower(se.Body); {
			case strings.Contains(body, "acl not found"):
				fix = "the server does not know the token (check CONSUL_HTTP_TOKEN); the token needs " + need
			case strings.Contains(body, "anonymous token"):
				fix = "no token was sent (set CONSUL_HTTP_TOKEN); the token needs " + need
			}
			return &AccessError{Op: op, Denied: true, Fix: fix, Err: err}
		case se.Code == http.StatusBadRequest && strings.Contains(se.Body, "HTTP request to an HTTPS server"):
			return &AccessError{Op: op, Problem: "the agent speaks HTTPS, the client plain HTTP",
				Fix: "set CONSUL_HTTP_SSL=true (and CONSUL_CACERT to the CA that signed the agent's certificate)", Err: err}
		}
		return err
	}
	// Consul's API reports some refusals only as text (a transaction's
	// operations, "Failed request: ...").
	if msg := err.Error(); strings.Contains(msg, "Unexpected response code: 403") ||
		strings.Contains(msg, "Permission denied") || strings.Contains(msg, "ACL not found") {
		return &AccessError{Op: op, Denied: true, Fix: "the token needs " + need, Err: err}
	}
	if p, fix, ok := tlsProblem(err); ok {
		return &AccessError{Op: op, Problem: p, Fix: fix, Err: err}
	}
	return err
}

// needKey is the rule reading (write false) or writing keys under the
// prefix needs.
func (c *Client) needKey(write bool) string {
	if write {
		return fmt.Sprintf("key_prefix %q write", c.cfg.Prefix)
	}
	return fmt.Sprintf("key_prefix %q read (write includes it)", c.cfg.Prefix)
}

// denied classifies err of an operation on the absolute key full.
func (c *Client) denied(err error, verb, full string, write bool) error {
	return Classify(err, verb+" "+full, c.needKey(write))
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
		return "the agent's certificate is not signed by a CA this client trusts",
			"set CONSUL_CACERT to the CA certificate that signed it", true
	case errors.As(err, &he):
		return "the agent's certificate is not valid for " + he.Host,
			"use an address the certificate names in CONSUL_HTTP_ADDR, or set CONSUL_TLS_SERVER_NAME", true
	case errors.As(err, &ci):
		return "the agent's certificate is not valid (" + ci.Error() + ")",
			"renew the agent's certificate or set CONSUL_CACERT to the CA that signed it", true
	case errors.As(err, &rh) || strings.Contains(msg, "server gave HTTP response to HTTPS client"):
		return "the agent speaks plain HTTP, the client HTTPS", "unset CONSUL_HTTP_SSL (or enable HTTPS on the agent)", true
	case strings.Contains(msg, "tls: certificate required") || strings.Contains(msg, "tls: bad certificate"):
		return "the agent wants a client certificate", "set CONSUL_CLIENT_CERT and CONSUL_CLIENT_KEY", true
	case strings.Contains(msg, "tls:") || strings.Contains(msg, "x509:"):
		return "TLS handshake failed", "check CONSUL_HTTP_ADDR, CONSUL_HTTP_SSL, CONSUL_CACERT, CONSUL_CLIENT_CERT and CONSUL_CLIENT_KEY", true
	}
	return "", "", false
}
