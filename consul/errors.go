package consul

import (
	"errors"
	"fmt"

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
func Classify(err error, op, need string) error { return server.Classify(err, op, need) }

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

// server is what access.Server.Classify needs to know of Consul's API
// client.
var server = access.Server{Name: "consul", Policy: PolicyFile,
	Response: func(err error) (int, string, bool) {
		var se api.StatusError
		if errors.As(err, &se) {
			return se.Code, se.Body, true
		}
		return 0, "", false
	},
	TokenVar: "CONSUL_HTTP_TOKEN", UnknownToken: "acl not found", NoToken: "anonymous token",
	// Consul's API reports some refusals only as text (a transaction's
	// operations, "Failed request: ...").
	DeniedText: []string{"Unexpected response code: 403", "Permission denied", "ACL not found"},
	TLS: access.TLSVars{Peer: "agent", Addr: "CONSUL_HTTP_ADDR", CACert: "CONSUL_CACERT", ServerName: "CONSUL_TLS_SERVER_NAME",
		ClientCert: "CONSUL_CLIENT_CERT", ClientKey: "CONSUL_CLIENT_KEY",
		PlainFix: "unset CONSUL_HTTP_SSL (or enable HTTPS on the agent)",
		HTTPSFix: "set CONSUL_HTTP_SSL=true (and CONSUL_CACERT to the CA that signed the agent's certificate)",
		OtherFix: "check CONSUL_HTTP_ADDR, CONSUL_HTTP_SSL, CONSUL_CACERT, CONSUL_CLIENT_CERT and CONSUL_CLIENT_KEY"}}
