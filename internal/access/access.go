// Package access is the error both server adapters (nomad, consul) return
// for a call refused for lack of ACL permission or failed in TLS, and the
// classification of API errors into it that they share (Server.Classify).
// Each adapter describes its own API client and words the fix in its own
// server's variables (Server, TLSVars).
package access

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/pollux-nomad/pollux/contract"
)

// Error is a call a server refused for lack of ACL permission (HTTP 403;
// errors.Is(err, contract.ErrPermissionDenied) holds), or one that failed in
// TLS. Its message names the server, the operation and what to change:
// the ACL rule the token needs, or the variable to set.
type Error struct {
	// Server is "nomad" or "consul".
	Server string
	// Op is what was refused: "listing nodes", "writing pollux/status".
	Op string
	// Denied is true for a permission error, false for a TLS problem.
	Denied bool
	// Problem says what is wrong (TLS), Fix what to do.
	Problem, Fix string
	// Policy is the repository file with the least-privilege policy.
	Policy string
	// Err is the API's error.
	Err error
}

func (e *Error) Error() string {
	if e.Denied {
		return fmt.Sprintf("%s: permission denied %s: %s; see %s (%v)", e.Server, e.Op, e.Fix, e.Policy, e.Err)
	}
	return fmt.Sprintf("%s: TLS problem %s: %s: %s (%v)", e.Server, e.Op, e.Problem, e.Fix, e.Err)
}

// Unwrap returns the API's error.
func (e *Error) Unwrap() error { return e.Err }

// Is makes a permission error match contract.ErrPermissionDenied.
func (e *Error) Is(target error) bool { return e.Denied && target == contract.ErrPermissionDenied }

// TLSKind is a kind of TLS failure.
type TLSKind int

// The TLS failures TLS recognises.
const (
	NotTLS          TLSKind = iota
	UnknownCA               // the peer's certificate is signed by a CA the client does not trust
	WrongHost               // the certificate does not name the address used
	InvalidCert             // expired, not yet valid, wrong usage, ...
	PlainServer             // the client speaks HTTPS, the server plain HTTP
	NeedsClientCert         // the server wants a client certificate
	OtherTLS                // any other handshake failure
)

// TLS recognises the TLS failure of a request; for WrongHost, detail is
// the host, for InvalidCert the certificate's error.
func TLS(err error) (kind TLSKind, detail string) {
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	var rh tls.RecordHeaderError
	msg := err.Error()
	switch {
	case errors.As(err, &ua) || strings.Contains(msg, "certificate signed by unknown authority"):
		return UnknownCA, ""
	case errors.As(err, &he):
		return WrongHost, he.Host
	case errors.As(err, &ci):
		return InvalidCert, ci.Error()
	case errors.As(err, &rh) || strings.Contains(msg, "server gave HTTP response to HTTPS client"):
		return PlainServer, ""
	case strings.Contains(msg, "tls: certificate required") || strings.Contains(msg, "tls: bad certificate"):
		return NeedsClientCert, ""
	case strings.Contains(msg, "tls:") || strings.Contains(msg, "x509:"):
		return OtherTLS, ""
	}
	return NotTLS, ""
}

// TLSVars names, for one server's clients, the settings that fix a TLS
// failure: Peer is what the client talks to ("agent", "server"), the
// others the environment variables of its API client, PlainFix the fix
// when the peer speaks plain HTTP to an HTTPS client, HTTPSFix the one
// when the client speaks plain HTTP to an HTTPS peer, and OtherFix the one
// for any other handshake failure.
type TLSVars struct {
	Peer, Addr, CACert, ServerName, ClientCert, ClientKey, PlainFix, HTTPSFix, OtherFix string
}

// TLSAdvice says what a TLS failure of a request means and which setting
// fixes it; ok is false when err is no TLS failure.
func TLSAdvice(err error, v TLSVars) (problem, fix string, ok bool) {
	switch kind, detail := TLS(err); kind {
	case UnknownCA:
		return "the " + v.Peer + "'s certificate is not signed by a CA this client trusts", "set " + v.CACert + " to the CA certificate that signed it", true
	case WrongHost:
		return "the " + v.Peer + "'s certificate is not valid for " + detail, "use an address the certificate names in " + v.Addr + ", or set " + v.ServerName, true
	case InvalidCert:
		return "the " + v.Peer + "'s certificate is not valid (" + detail + ")", "renew the " + v.Peer + "'s certificate or set " + v.CACert + " to the CA that signed it", true
	case PlainServer:
		return "the " + v.Peer + " speaks plain HTTP, the client HTTPS", v.PlainFix, true
	case NeedsClientCert:
		return "the " + v.Peer + " wants a client certificate", "set " + v.ClientCert + " and " + v.ClientKey, true
	case OtherTLS:
		return "TLS handshake failed", v.OtherFix, true
	}
	return "", "", false
}

// Server describes one server's API client to Classify: how its errors
// carry an HTTP response, how its 403 bodies tell a missing or unknown
// token, and the settings that fix its failures.
type Server struct {
	// Name is the server ("nomad", "consul"), Policy the repository file
	// with its least-privilege policy; both go into every Error.
	Name, Policy string
	// Response returns the HTTP status code and body of an error the API
	// client returns for a response; ok is false for any other error.
	Response func(err error) (code int, body string, ok bool)
	// TokenVar is the variable holding the client's token
	// ("NOMAD_TOKEN").
	TokenVar string
	// UnknownToken and NoToken are lower-case texts of a 403 body saying
	// that the server does not know the token, or that none was sent;
	// empty when the server does not say.
	UnknownToken, NoToken string
	// DeniedText are texts of an error that is no response (Response is
	// not ok) yet reports a refusal, as some API clients give only as text.
	DeniedText []string
	// TLS names the settings that fix TLS failures.
	TLS TLSVars
}

// Classify returns err as an *Error of s when it is a 403 (need is the
// ACL rule op needs), a plain-HTTP request to an HTTPS peer or a TLS
// failure; an *Error already, or any other error, is returned as it is.
// op says what was attempted ("listing nodes").
func (s *Server) Classify(err error, op, need string) error {
	if err == nil {
		return nil
	}
	var ae *Error
	if errors.As(err, &ae) {
		return err
	}
	if code, body, ok := s.Response(err); ok {
		switch {
		case code == http.StatusForbidden:
			fix := "the token needs " + need
			switch lower := strings.ToLower(body); {
			case s.UnknownToken != "" && strings.Contains(lower, s.UnknownToken):
				fix = "the server does not know the token (check " + s.TokenVar + "); the token needs " + need
			case s.NoToken != "" && strings.Contains(lower, s.NoToken):
				fix = "no token was sent (set " + s.TokenVar + "); the token needs " + need
			}
			return s.err(Error{Op: op, Denied: true, Fix: fix, Err: err})
		case code == http.StatusBadRequest && strings.Contains(body, "HTTP request to an HTTPS server"):
			return s.err(Error{Op: op, Problem: "the " + s.TLS.Peer + " speaks HTTPS, the client plain HTTP", Fix: s.TLS.HTTPSFix, Err: err})
		}
		return err
	}
	msg := err.Error()
	for _, t := range s.DeniedText {
		if strings.Contains(msg, t) {
			return s.err(Error{Op: op, Denied: true, Fix: "the token needs " + need, Err: err})
		}
	}
	if p, fix, ok := TLSAdvice(err, s.TLS); ok {
		return s.err(Error{Op: op, Problem: p, Fix: fix, Err: err})
	}
	return err
}

// err completes an Error of this server.
func (s *Server) err(e Error) *Error {
	e.Server, e.Policy = s.Name, s.Policy
	return &e
}
