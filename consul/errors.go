package consul

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/pollux-nomad/pollux/internal/access"
)

// PolicyFile is the controller's least-privilege Consul ACL policy, which
// permission errors point to.
const PolicyFile = "deploy/acl/consul-policy.hcl"

// NeedSession is the rule the leader lock's session needs: sessions are
// created on the Consul agent's node, whichever node the controller runs on.
const NeedSession = `session_prefix "" write`

// AccessError is a call Consul refused for lack of ACL permission, or one
// that failed in TLS (see access.Error; its Server is "consul").
type AccessError = access.Error

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
			return accessErr(AccessError{Op: op, Denied: true, Fix: fix, Err: err})
		case se.Code == http.StatusBadRequest && strings.Contains(se.Body, "HTTP request to an HTTPS server"):
			return accessErr(AccessError{Op: op, Problem: "the agent speaks HTTPS, the client plain HTTP",
				Fix: "set CONSUL_HTTP_SSL=true (and CONSUL_CACERT to the CA that signed the agent's certificate)", Err: err})
		}
		return err
	}
	// Consul's API reports some refusals only as text (a transaction's
	// operations, "Failed request: ...").
	if msg := err.Error(); strings.Contains(msg, "Unexpected response code: 403") ||
		strings.Contains(msg, "Permission denied") || strings.Contains(msg, "ACL not found") {
		return accessErr(AccessError{Op: op, Denied: true, Fix: "the token needs " + need, Err: err})
	}
	if p, fix, ok := access.TLSAdvice(err, tlsVars); ok {
		return accessErr(AccessError{Op: op, Problem: p, Fix: fix, Err: err})
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

// accessErr completes an AccessError of this server.
func accessErr(e AccessError) *AccessError {
	e.Server, e.Policy = "consul", PolicyFile
	return &e
}

// tlsVars are the settings that fix this server's TLS failures.
var tlsVars = access.TLSVars{Peer: "agent", Addr: "CONSUL_HTTP_ADDR", CACert: "CONSUL_CACERT", ServerName: "CONSUL_TLS_SERVER_NAME",
	ClientCert: "CONSUL_CLIENT_CERT", ClientKey: "CONSUL_CLIENT_KEY",
	PlainFix: "unset CONSUL_HTTP_SSL (or enable HTTPS on the agent)",
	OtherFix: "check CONSUL_HTTP_ADDR, CONSUL_HTTP_SSL, CONSUL_CACERT, CONSUL_CLIENT_CERT and CONSUL_CLIENT_KEY"}
