package consul

import (
	"context"

	"github.com/hashicorp/consul/api"

	"github.com/pollux-nomad/pollux/contract"
)

// ProbeSession checks that the token may create the session the leader
// lock needs: it creates one and destroys it. A refusal or a TLS problem
// is returned as Classify does (an *access.Error).
func (c *Client) ProbeSession(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	w := (&api.WriteOptions{}).WithContext(ctx)
	id, _, err := c.api.Session().Create(&api.SessionEntry{
		Name: "pollux access check", TTL: "10s", Behavior: api.SessionBehaviorDelete,
	}, w)
	if err != nil {
		return Classify(err, "creating a session for the lock "+c.cfg.Prefix+contract.LeaderKey, NeedSession)
	}
	if _, err := c.api.Session().Destroy(id, w); err != nil {
		return Classify(err, "destroying a session", NeedSession)
	}
	return nil
}
