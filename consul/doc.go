// Package consul is the controller's adapter to HashiCorp Consul: it owns
// every use of github.com/hashicorp/consul/api.
//
// Client implements jobs.KV on Consul's key/value store under one prefix
// (default "pollux/", docs/contracts.md §2): reads, unconditional and
// check-and-set writes, blocking-query watches and deletes, with keys
// relative to the prefix and validated so that no key escapes it.
//
// Leader implements jobs.Leadership with a Consul lock on <prefix>leader
// held by a session with a TTL (default 10s), release behaviour and a short
// lock-delay (default 1s). Only the holder of the lock changes jobs; the
// others wait in Acquire. A holder that dies stops renewing its session;
// Consul invalidates the session at twice its TTL after the last renewal
// and a waiting instance takes the lock over once the lock-delay has
// passed: 16–21s after the death with the defaults (see Leader).
// A holder that cannot reach Consul gives leadership up itself, one TTL
// after its last renewal, so before Consul can hand the lock to another.
//
// The keys themselves are the contract package's (contract.MetricsKey,
// contract.StatusKey, ...). The package imports no other package of this
// project, so the worker libraries can use it without the controller; its
// tests assert that Client and Leader implement jobs.KV and
// jobs.Leadership.
package consul
