package nomad

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/pollux-nomad/pollux/internal/access"
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

// AccessError is a call Nomad refused for lack of ACL permission, or one
// that failed in TLS (see access.Error; its Server is "nomad").
type AccessError = access.Error

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
			return accessErr(AccessError{Op: op, Denied: true, Fix: fix, Err: err})
		case ue.StatusCode() == http.StatusBadRequest && strings.Contains(body, "HTTP request to an HTTPS server"):
			return accessErr(AccessError{Op: op, Problem: "the server speaks HTTPS, the client plain HTTP",
				Fix: "set NOMAD_ADDR=https://... (and NOMAD_CACERT to the CA that signed the server's certificate)", Err: err})
		}
		return err
	}
	if p, fix, ok := access.TLSAdvice(err, tlsVars); ok {
		return accessErr(AccessError{Op: op, Problem: p, Fix: fix, Err: err})
	}
	return err
}

// accessErr completes an AccessError of this server.
func accessErr(e AccessError) *AccessError {
	e.Server, e.Policy = "nomad", PolicyFile
	return &e
}

// tlsVars are the settings that fix this server's TLS failures.
var tlsVars = access.TLSVars{Peer: "server", Addr: "NOMAD_ADDR", CACert: "NOMAD_CACERT", ServerName: "NOMAD_TLS_SERVER_NAME",
	ClientCert: "NOMAD_CLIENT_CERT", ClientKey: "NOMAD_CLIENT_KEY",
	PlainFix: "set NOMAD_ADDR=http://... or enable TLS on the server",
	OtherFix: "check NOMAD_ADDR, NOMAD_CACERT, NOMAD_CLIENT_CERT and NOMAD_CLIENT_KEY"}
