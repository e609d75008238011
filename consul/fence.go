package consul

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/pollux-nomad/pollux/contract"
)

// ErrFenced: a write of the leader's KV view was refused because the
// leader's term is over, either already known to this instance (no write
// was sent) or found by Consul (the session no longer holds the lock).
// Errors wrapping it also wrap ErrNotLeader.
var ErrFenced = errors.New("write fenced")

// Fence reasons passed to FencedKV's OnRefused.
const (
	// RefusedNoTerm: this instance holds no term; nothing was sent.
	RefusedNoTerm = "no_term"
	// RefusedSession: Consul refused the transaction because the lock key
	// is not held by the term's session.
	RefusedSession = "session"
)

// FencedKV is the leader's view of the key/value store: reads as Client's,
// and every write (Put, PutMany, CAS, Delete) one Consul transaction that
// begins with a check-session on the leader lock, so that Consul applies
// it only while the lock is held by the session of this instance's
// current term. A write after the session was destroyed or invalidated,
// however late it is sent (a paused process, a slow network), is refused
// by Consul as a whole. It implements jobs.KV and the controller's batch,
// tree and key-list extensions.
type FencedKV struct {
	*Client
	// term returns the current term (Leader.Term).
	term func() (Term, bool)
	// OnRefused, if set, is called for every refused write with the
	// operation ("put", "put_many", "cas", "delete") and the reason
	// (RefusedNoTerm, RefusedSession), for telemetry.
	OnRefused func(op, reason string)
}

// KV returns the leader's fenced view of the key/value store: every write
// is checked by Consul against this Leader's current term.
func (l *Leader) KV() *FencedKV { return &FencedKV{Client: l.c, term: l.Term} }

// check is the transaction's first operation: the lock key must be held
// by the term's session. It fails with ErrFenced when no term is held.
func (f *FencedKV) check(op string) (*api.TxnOp, Term, error) {
	t, ok := f.term()
	if !ok {
		f.refused(op, RefusedNoTerm)
		return nil, Term{}, fmt.Errorf("%w: %w: this instance holds no leadership term", ErrFenced, ErrNotLeader)
	}
	return &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckSession, Key: t.Key, Session: t.Session}}, t, nil
}

func (f *FencedKV) refused(op, reason string) {
	if f.OnRefused != nil {
		f.OnRefused(op, reason)
	}
}

// Put writes a key unconditionally, if the term still holds the lock.
func (f *FencedKV) Put(ctx context.Context, key string, value []byte) error {
	full, err := f.full(key)
	if err != nil {
		return fmt.Errorf("failed to put key: %w", err)
	}
	if err := checkValue(value); err != nil {
		return fmt.Errorf("failed to put key %q: %w", full, err)
	}
	if err := f.run(ctx, "put", &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: full, Value: value}}); err != nil {
		return fmt.Errorf("failed to put key %q: %w", full, err)
	}
	return nil
}

// CAS writes a key only if its ModifyIndex is still index (0: only if
// absent) and the term still holds the lock. A changed key gives an error
// wrapping contract.ErrConflict, a lost term one wrapping ErrFenced.
func (f *FencedKV) CAS(ctx context.Context, key string, value []byte, index uint64) error {
	full, err := f.full(key)
	if err != nil {
		return fmt.Errorf("failed to write key: %w", err)
	}
	if err := checkValue(value); err != nil {
		return fmt.Errorf("failed to write key %q: %w", full, err)
	}
	if err := f.run(ctx, "cas", &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: full, Value: value, Index: index}}); err != nil {
		return fmt.Errorf("failed to write key %q at index %d: %w", full, index, err)
	}
	return nil
}

// Delete removes a key (with recurse, also every key under "<key>/"), if
// the term still holds the lock.
func (f *FencedKV) Delete(ctx context.Context, key string, recurse bool) error {
	full, err := f.full(key)
	if err != nil {
		return fmt.Errorf("failed to delete key: %w", err)
	}
	ops := []*api.TxnOp{{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: full}}}
	if recurse {
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVDeleteTree, Key: full + "/"}})
	}
	if err := f.run(ctx, "delete", ops...); err != nil {
		return fmt.Errorf("failed to delete key %q: %w", full, err)
	}
	return nil
}

// PutMany writes every pair in transactions of at most MaxTxnOps
// operations, each with the term's check first. A transaction is all or
// nothing; when one fails, those before it stay written.
func (f *FencedKV) PutMany(ctx context.Context, pairs []contract.KVPair) error {
	const per = MaxTxnOps - 1 // the check takes one operation
	for start := 0; start < len(pairs); start += per {
		chunk := pairs[start:min(start+per, len(pairs))]
		ops := make([]*api.TxnOp, 0, len(chunk))
		for _, p := range chunk {
			full, err := f.full(p.Key)
			if err != nil {
				return fmt.Errorf("failed to put keys: %w", err)
			}
			if err := checkValue(p.Value); err != nil {
				return fmt.Errorf("failed to put key %q: %w", full, err)
			}
			ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: full, Value: p.Value}})
		}
		if err := f.run(ctx, "put_many", ops...); err != nil {
			return fmt.Errorf("failed to put %d keys from %q: %w", len(chunk), chunk[0].Key, err)
		}
	}
	return nil
}

// run sends the term's check and ops in one transaction. A failed check
// gives an error wrapping ErrFenced and ErrNotLeader; a failed CAS one
// wrapping contract.ErrConflict.
func (f *FencedKV) run(ctx context.Context, op string, ops ...*api.TxnOp) error {
	chk, t, err := f.check(op)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, f.cfg.RequestTimeout)
	defer cancel()
	txn := append(api.TxnOps{chk}, ops...)
	ok, resp, _, err := f.api.Txn().Txn(txn, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return f.denied(err, "writing", f.cfg.Prefix, true)
	}
	if ok {
		return nil
	}
	var errs []error
	conflict := false
	if resp != nil {
		for _, e := range resp.Errors {
			if e.OpIndex == 0 {
				f.refused(op, RefusedSession)
				f.log.Warn("write fenced: the lock is no longer held by this term's session", "op", op, "term", t.Number, "session", t.Session, "consul", e.What)
				return fmt.Errorf("%w: %w: lock %q is not held by session %s of term %d (%s)", ErrFenced, ErrNotLeader, t.Key, t.Session, t.Number, e.What)
			}
			if ops[e.OpIndex-1].KV != nil && ops[e.OpIndex-1].KV.Verb == api.KVCAS && strings.Contains(e.What, "index") {
				conflict = true
			}
			errs = append(errs, fmt.Errorf("op %d: %s", e.OpIndex, e.What))
		}
	}
	if conflict {
		return fmt.Errorf("transaction rolled back: %w: %w", contract.ErrConflict, errors.Join(errs...))
	}
	if len(errs) == 0 {
		return errors.New("transaction rolled back; Consul gave no reason")
	}
	return fmt.Errorf("transaction rolled back: %w", errors.Join(errs...))
}
