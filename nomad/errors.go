package nomad

import (
	"errors"
	"fmt"
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
func Classify(err error, op, need string) error { return server.Classify(err, op, need) }

// server is what access.Server.Classify needs to know of Nomad's API
// client.
var server = access.Server{Name: "nomad", Policy: PolicyFile,
	Response: func(err error) (int, string, bool) {
		var ue api.UnexpectedResponseError
		if errors.As(err, &ue) && ue.HasStatusCode() {
			return ue.StatusCode(), strings.TrimSpace(ue.Body()), true
		}
		return 0, "", false
	},
	TokenVar: "NOMAD_TOKEN", UnknownToken: "token not found",
	TLS: access.TLSVars{Peer: "server", Addr: "NOMAD_ADDR", CACert: "NOMAD_CACERT", ServerName: "NOMAD_TLS_SERVER_NAME",
		ClientCert: "NOMAD_CLIENT_CERT", ClientKey: "NOMAD_CLIENT_KEY",
		PlainFix: "set NOMAD_ADDR=http://... or enable TLS on the server",
		HTTPSFix: "set NOMAD_ADDR=https://... (and NOMAD_CACERT to the CA that signed the server's certificate)",
		OtherFix: "check NOMAD_ADDR, NOMAD_CACERT, NOMAD_CLIENT_CERT and NOMAD_CLIENT_KEY"}}
