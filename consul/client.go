package consul

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/pollux-nomad/pollux/contract"
)

// MaxValueSize is the largest value Put and CAS send: Consul's default
// kv_max_value_size, 512 KiB. A larger value is refused before it is sent,
// with an error wrapping ErrValueTooLarge.
const MaxValueSize = 512 * 1024

// Defaults of Config.
const (
	// DefaultPrefix is the KV prefix of docs/contracts.md §2.
	DefaultPrefix = contract.DefaultPrefix
	// DefaultSessionTTL is the leader session's TTL; it is also Consul's
	// smallest allowed TTL (the agent's session_ttl_min).
	DefaultSessionTTL = 10 * time.Second
	// DefaultLockDelay is the leader session's lock-delay (Consul's own
	// default is 15s).
	DefaultLockDelay = time.Second
	// DefaultLockKey is the leader lock's key, relative to the prefix.
	DefaultLockKey = contract.LeaderKey
	// DefaultRequestTimeout bounds a non-blocking Consul call.
	DefaultRequestTimeout = 10 * time.Second
	// DefaultLeaseMargin is taken off the leader's lease (see
	// Leader.Lease): room for the time between the lease check and the
	// write it guards, and for clocks that run at slightly different rates.
	DefaultLeaseMargin = 2 * time.Second
)

// Errors callers test with errors.Is.
var (
	// ErrInvalidKey: a key is empty, starts with "/", or has an empty, "."
	// or ".." segment, so it could name something outside the prefix.
	ErrInvalidKey = errors.New("invalid key")
	// ErrValueTooLarge: a value is longer than MaxValueSize.
	ErrValueTooLarge = errors.New("value too large")
)

// Config configures a Client and its Leaders. The zero value works: every
// field has a default.
type Config struct {
	// Prefix is the KV prefix every key is relative to. Default "pollux/".
	// It must end with "/" and must not start with "/".
	Prefix string
	// Logger receives the adapter's logs, under the names "consul" and
	// "consul.leader". Default: no logging.
	Logger hclog.Logger
	// SessionTTL is the TTL of a leader's Consul session. Default 10s,
	// which is also the smallest TTL a Consul agent accepts unless its
	// session_ttl_min is lowered. A leader that dies loses the lock when
	// Consul invalidates its session, 2×SessionTTL after its last renewal
	// (Consul's timer is twice the TTL).
	SessionTTL time.Duration
	// LockDelay is the leader session's lock-delay: after the session is
	// invalidated (leader died, session destroyed), Consul refuses the lock
	// to anyone for this long, so that the old holder can notice before a
	// new one acts. It adds this much to every takeover but a clean
	// Release's. Default 1s (Consul's default, 15s, would add 15s to every
	// takeover); at most 60s. All instances should use the same value: a
	// waiting instance waits its own LockDelay and tries again while the
	// lock is refused.
	LockDelay time.Duration
	// LockKey is the leader lock's key, relative to Prefix. Default
	// "leader".
	LockKey string
	// Instance names this controller instance in its session's name and in
	// the lock's value, e.g. the hostname or NOMAD_ALLOC_ID. Default: the
	// hostname.
	Instance string
	// RequestTimeout bounds every call that is not a blocking query (Get,
	// Put, CAS, Delete, Verify), so that a Consul that accepts connections
	// but answers nothing (overloaded, paused, a half-open network) makes a
	// call fail instead of hanging the round. A blocking Watch is bounded
	// by its wait plus RequestTimeout. Default 10s.
	RequestTimeout time.Duration
	// LeaseMargin is taken off the leader's lease: Leader.Lease ends
	// SessionTTL − LeaseMargin after the session's last successful renewal.
	// Default DefaultLeaseMargin, or SessionTTL/5 if that is smaller; it
	// must be below SessionTTL.
	LeaseMargin time.Duration
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = DefaultSessionTTL
	}
	if c.LockDelay == 0 {
		c.LockDelay = DefaultLockDelay
	}
	if c.LockKey == "" {
		c.LockKey = DefaultLockKey
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.LeaseMargin == 0 {
		c.LeaseMargin = min(DefaultLeaseMargin, c.SessionTTL/5)
	}
	if c.Instance == "" {
		if h, err := os.Hostname(); err == nil && h != "" {
			c.Instance = h
		} else {
			c.Instance = "pollux"
		}
	}
	return c
}

// validate reports every problem of a defaulted configuration at once.
func (c Config) validate() error {
	var errs []error
	if !strings.HasSuffix(c.Prefix, "/") {
		errs = append(errs, fmt.Errorf("prefix %q must end with \"/\"", c.Prefix))
	} else if err := checkKey(strings.TrimSuffix(c.Prefix, "/")); err != nil {
		errs = append(errs, fmt.Errorf("prefix %q: %w", c.Prefix, err))
	}
	if c.SessionTTL < time.Second {
		errs = append(errs, fmt.Errorf("session TTL %v is below 1s", c.SessionTTL))
	}
	if c.LockDelay < 0 || c.LockDelay > time.Minute {
		errs = append(errs, fmt.Errorf("lock delay %v is outside [0s, 60s]", c.LockDelay))
	}
	if err := checkKey(c.LockKey); err != nil {
		errs = append(errs, fmt.Errorf("lock key: %w", err))
	}
	if c.LeaseMargin < 0 || c.LeaseMargin >= c.SessionTTL {
		errs = append(errs, fmt.Errorf("lease margin %v is outside [0s, session TTL %v)", c.LeaseMargin, c.SessionTTL))
	}
	return errors.Join(errs...)
}

// Client is Consul's key/value store under one prefix. It implements
// jobs.KV; Leader makes leader elections on the same client. It is safe for
// concurrent use.
type Client struct {
	api *api.Client
	kv  *api.KV
	cfg Config
	log hclog.Logger
}

// New returns a Client on client (api.NewClient(api.DefaultConfig())
// honours CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN and the TLS variables). It
// fails if cfg is invalid; it does not contact Consul.
func New(client *api.Client, cfg Config) (*Client, error) {
	if client == nil {
		return nil, errors.New("failed to create consul client: nil api client")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("failed to create consul client: %w", err)
	}
	return &Client{
		api: client,
		kv:  client.KV(),
		cfg: cfg,
		log: cfg.Logger.Named("consul"),
	}, nil
}

// Prefix returns the prefix every key is relative to.
func (c *Client) Prefix() string { return c.cfg.Prefix }

// checkKey returns an error wrapping ErrInvalidKey if key is empty, starts
// with "/" or has an empty, "." or ".." segment.
func checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if strings.HasPrefix(key, "/") {
		return fmt.Errorf("%w %q: leading \"/\"", ErrInvalidKey, key)
	}
	for _, seg := range strings.Split(key, "/") {
		switch seg {
		case "":
			return fmt.Errorf("%w %q: empty segment", ErrInvalidKey, key)
		case ".", "..":
			return fmt.Errorf("%w %q: segment %q", ErrInvalidKey, key, seg)
		}
	}
	return nil
}

// full returns the absolute Consul key of a key relative to the prefix.
func (c *Client) full(key string) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	return c.cfg.Prefix + key, nil
}

// checkValue refuses a value Consul would refuse.
func checkValue(value []byte) error {
	if len(value) > MaxValueSize {
		return fmt.Errorf("%w: %d bytes, Consul's limit is %d", ErrValueTooLarge, len(value), MaxValueSize)
	}
	return nil
}

// valueOf returns the value of a pair: nil if absent, non-nil (maybe
// empty) if present.
func valueOf(pair *api.KVPair) []byte {
	if pair == nil {
		return nil
	}
	if pair.Value == nil {
		return []byte{}
	}
	return pair.Value
}

// Get returns a key's value and ModifyIndex, or an error wrapping
// contract.ErrNotFound if the key does not exist.
func (c *Client) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	full, err := c.full(key)
	if err != nil {
		return nil, 0, fmt.Errorf("failed to get key: %w", err)
	}
	pair, _, err := c.kv.Get(full, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, 0, fmt.Errorf("failed to get key %q: %w", full, c.denied(err, "reading", full, false))
	}
	if pair == nil {
		return nil, 0, fmt.Errorf("failed to get key %q: %w", full, contract.ErrNotFound)
	}
	return valueOf(pair), pair.ModifyIndex, nil
}

// List returns every key under dir (relative to the prefix, ending in
// "/") with its value, keyed relative to the prefix, in one request.
func (c *Client) List(ctx context.Context, dir string) (map[string][]byte, error) {
	pairs, err := c.ReadTree(ctx, dir)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(pairs))
	for _, p := range pairs {
		out[p.Key] = p.Value
	}
	return out, nil
}

// Put writes a key unconditionally.
func (c *Client) Put(ctx context.Context, key string, value []byte) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	full, err := c.full(key)
	if err != nil {
		return fmt.Errorf("failed to put key: %w", err)
	}
	if err := checkValue(value); err != nil {
		return fmt.Errorf("failed to put key %q: %w", full, err)
	}
	if _, err := c.kv.Put(&api.KVPair{Key: full, Value: value}, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("failed to put key %q: %w", full, c.denied(err, "writing", full, true))
	}
	return nil
}

// CAS writes a key only if its ModifyIndex is still index; index 0 writes
// it only if it does not exist. It returns an error wrapping
// contract.ErrConflict if the key changed (or exists, for index 0).
func (c *Client) CAS(ctx context.Context, key string, value []byte, index uint64) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	full, err := c.full(key)
	if err != nil {
		return fmt.Errorf("failed to write key: %w", err)
	}
	if err := checkValue(value); err != nil {
		return fmt.Errorf("failed to write key %q: %w", full, err)
	}
	ok, _, err := c.kv.CAS(&api.KVPair{Key: full, Value: value, ModifyIndex: index}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("failed to write key %q: %w", full, c.denied(err, "writing", full, true))
	}
	if !ok {
		return fmt.Errorf("failed to write key %q at index %d: %w", full, index, contract.ErrConflict)
	}
	return nil
}

// Watch is a Consul blocking query on one key: it returns when the key's
// index passes index or after wait (Consul adds up to wait/16 of jitter;
// wait ≤ 0 means Consul's default, 5 minutes). index 0 reads at once. It
// returns the key's value (nil if absent, non-nil if present and empty) and
// the index to pass to the next Watch. Consul's index of an absent key is
// the store's, so a Watch on an absent key may also return when other keys
// change; compare values, not indexes. If the index went backwards (a
// snapshot restore, a new cluster), Watch starts over as Consul's
// blocking-query rules ask: it reads the key again with index 0 and
// returns that. The returned index is never 0.
func (c *Client) Watch(ctx context.Context, key string, index uint64, wait time.Duration) ([]byte, uint64, error) {
	bound := wait
	if bound <= 0 {
		bound = 5 * time.Minute
	}
	// Consul adds up to wait/16 of jitter to a blocking query.
	ctx, cancel := context.WithTimeout(ctx, bound+bound/16+c.cfg.RequestTimeout)
	defer cancel()
	full, err := c.full(key)
	if err != nil {
		return nil, 0, fmt.Errorf("failed to watch key: %w", err)
	}
	q := &api.QueryOptions{WaitIndex: index}
	if wait > 0 {
		q.WaitTime = wait
	}
	pair, meta, err := c.kv.Get(full, q.WithContext(ctx))
	if err != nil {
		return nil, 0, fmt.Errorf("failed to watch key %q: %w", full, c.denied(err, "reading", full, false))
	}
	if indexWentBack(index, meta.LastIndex) {
		c.log.Debug("kv index went backwards, resetting", "key", full, "index", index, "new_index", meta.LastIndex)
		pair, meta, err = c.kv.Get(full, (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			return nil, 0, fmt.Errorf("failed to watch key %q: %w", full, c.denied(err, "reading", full, false))
		}
	}
	return valueOf(pair), clampIndex(meta.LastIndex), nil
}

// indexWentBack reports whether a blocking query that waited past prev
// came back with a lower index, which Consul's blocking-query rules answer
// by starting over from index 0.
func indexWentBack(prev, got uint64) bool { return prev > 0 && got < prev }

// clampIndex keeps an index at 1 or more: index 0 would make the next
// blocking query return at once (Consul's blocking-query rules).
func clampIndex(i uint64) uint64 {
	if i == 0 {
		return 1
	}
	return i
}

// Delete removes a key; with recurse, also every key under it ("<key>/..."),
// in one transaction. Keys that merely start with the same characters
// ("<key>2") are kept. Deleting a missing key is not an error.
func (c *Client) Delete(ctx context.Context, key string, recurse bool) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	full, err := c.full(key)
	if err != nil {
		return fmt.Errorf("failed to delete key: %w", err)
	}
	if !recurse {
		if _, err := c.kv.Delete(full, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
			return fmt.Errorf("failed to delete key %q: %w", full, c.denied(err, "deleting", full, true))
		}
		return nil
	}
	ops := api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: full}},
		{KV: &api.KVTxnOp{Verb: api.KVDeleteTree, Key: full + "/"}},
	}
	ok, resp, _, err := c.api.Txn().Txn(ops, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("failed to delete tree %q: %w", full, c.denied(err, "deleting", full+"/", true))
	}
	if !ok {
		errs := []error{errors.New("transaction rolled back")}
		if resp != nil {
			for _, e := range resp.Errors {
				errs = append(errs, fmt.Errorf("op %d: %s", e.OpIndex, e.What))
			}
		}
		return fmt.Errorf("failed to delete tree %q: %w", full, c.denied(errors.Join(errs...), "deleting", full+"/", true))
	}
	return nil
}

// ListKeys returns the keys under the folder dir (relative to the prefix,
// without their values), for instance every job's keys under "jobs/".
func (c *Client) ListKeys(ctx context.Context, dir string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	full, err := c.full(strings.TrimSuffix(dir, "/"))
	if err != nil {
		return nil, fmt.Errorf("failed to list keys: %w", err)
	}
	full += "/"
	keys, _, err := c.kv.Keys(full, "", (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("failed to list keys under %q: %w", full, c.denied(err, "listing", full, false))
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = strings.TrimPrefix(k, c.cfg.Prefix)
	}
	return out, nil
}

// ReadTree returns every key under the folder dir (relative to the
// prefix) with its value and ModifyIndex, keyed relative to the prefix,
// in one request (a `?recurse` read): the controller lists every job's
// keys once a round instead of reading them one by one.
func (c *Client) ReadTree(ctx context.Context, dir string) ([]contract.KVPair, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	full, err := c.full(strings.TrimSuffix(dir, "/"))
	if err != nil {
		return nil, fmt.Errorf("failed to read keys: %w", err)
	}
	full += "/"
	pairs, _, err := c.kv.List(full, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("failed to read keys under %q: %w", full, c.denied(err, "reading", full, false))
	}
	out := make([]contract.KVPair, len(pairs))
	for i, p := range pairs {
		out[i] = contract.KVPair{Key: strings.TrimPrefix(p.Key, c.cfg.Prefix), Value: valueOf(p), ModifyIndex: p.ModifyIndex}
	}
	return out, nil
}

// MaxTxnOps is the most operations Consul accepts in one transaction.
const MaxTxnOps = 64

// PutMany writes every pair unconditionally in transactions of at most
// MaxTxnOps keys (one request each instead of one per key). A transaction
// is all or nothing; when one fails, those before it stay written.
func (c *Client) PutMany(ctx context.Context, pairs []contract.KVPair) error {
	for start := 0; start < len(pairs); start += MaxTxnOps {
		chunk := pairs[start:min(start+MaxTxnOps, len(pairs))]
		ops := make(api.TxnOps, 0, len(chunk))
		for _, p := range chunk {
			full, err := c.full(p.Key)
			if err != nil {
				return fmt.Errorf("failed to put keys: %w", err)
			}
			if err := checkValue(p.Value); err != nil {
				return fmt.Errorf("failed to put key %q: %w", full, err)
			}
			ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: full, Value: p.Value}})
		}
		if err := c.txn(ctx, ops); err != nil {
			return fmt.Errorf("failed to put %d keys from %q: %w", len(chunk), chunk[0].Key, err)
		}
	}
	return nil
}

// txn runs one transaction within the request timeout.
func (c *Client) txn(ctx context.Context, ops api.TxnOps) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	ok, resp, _, err := c.api.Txn().Txn(ops, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return c.denied(err, "writing", c.cfg.Prefix, true)
	}
	if !ok {
		errs := []error{errors.New("transaction rolled back")}
		if resp != nil {
			for _, e := range resp.Errors {
				errs = append(errs, fmt.Errorf("op %d: %s", e.OpIndex, e.What))
			}
		}
		return errors.Join(errs...)
	}
	return nil
}
