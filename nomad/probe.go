package nomad

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// probeJobID is the job ProbeSubmit registers. The probe cannot create it:
// it enforces a job modify index no job has, so a permitted register is
// refused by that check (made after the ACL check) and nothing is written.
const probeJobID = "pollux-access-probe"

// ProbeSubmit checks that the token may register jobs in namespace ns,
// without writing anything: it registers a job enforcing a modify index no
// job has. It returns nil when permitted, and an error classified as
// Classify does (an *access.Error for a refusal or a TLS problem)
// otherwise.
func (c *Client) ProbeSubmit(ctx context.Context, ns string) error {
	id := probeJobID
	job := &api.Job{
		ID: &id, Name: &id, Namespace: &ns,
		Type:        ptrTo(api.JobTypeBatch),
		Datacenters: []string{"*"},
		TaskGroups: []*api.TaskGroup{{
			Name:  ptrTo("probe"),
			Count: ptrTo(0),
			Tasks: []*api.Task{{Name: "probe", Driver: "raw_exec", Config: map[string]any{"command": "/bin/true"}}},
		}},
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	opts := &api.RegisterOptions{EnforceIndex: true, ModifyIndex: math.MaxUint64}
	w := (&api.WriteOptions{Namespace: ns}).WithContext(ctx)
	_, _, err := c.api.Jobs().RegisterOpts(job, opts, w)
	if err == nil {
		// Cannot happen (no job has that index); if it did, take the probe away.
		_, _, _ = c.api.Jobs().Deregister(id, true, w)
		return nil
	}
	if strings.Contains(err.Error(), "Enforcing job modify index") {
		return nil // permitted: refused by the index check, after the ACL check
	}
	return Classify(err, fmt.Sprintf("registering jobs in namespace %q", ns), NeedNamespace("submit-job", ns))
}

func ptrTo[T any](v T) *T { return &v }
