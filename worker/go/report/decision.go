package report

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/pollux-nomad/pollux/contract"
)

// Decision is the controller's choice for the job (docs/contracts.md §2, the
// decision key): batch size, micro-batch, accumulation steps and learning
// rate for the job's current allocation, which a worker adopts without a
// restart, and the allocation itself.
type Decision = contract.Decision

// Allocation is the allocation a worker was started with: the
// controller's meta keys (docs/contracts.md §1), the same fields as a Decision.
type Allocation = contract.Decision

// Allocation reads the allocation the worker was started with from the
// environment Nomad sets from the job's meta: NOMAD_META_pollux_batch_size,
// _local_bsz, _accum_steps, _lr, _num_replicas, _num_nodes, _placement and
// _round. A missing key leaves its field at the zero value (a job the
// controller has not allocated yet has none); a malformed one is an error
// naming the variable, and all of them are reported at once.
func (r *Reporter) Allocation() (Allocation, error) {
	a, err := contract.DecisionFromMeta(
		func(key string) (string, bool) { return os.LookupEnv("NOMAD_META_" + key) },
		func(key string) string { return "NOMAD_META_" + key })
	if err != nil {
		return Allocation{}, fmt.Errorf("failed to read allocation: %w", err)
	}
	return a, nil
}

// Decisions follows the job's decision key, <prefix>jobs/<ns>/<id>/decision,
// with Consul blocking queries, and delivers every decision that differs
// from the one delivered before, starting with the current one if there
// is one. The channel holds at most one decision: if the receiver falls
// behind, an undelivered decision is replaced by the newer one. A value
// that is not a decision is logged and skipped; while Consul cannot be
// reached it retries with backoff (up to 10s). The channel is closed when
// ctx is done. Every rank may call it.
func (r *Reporter) Decisions(ctx context.Context) <-chan Decision {
	ch := make(chan Decision, 1)
	go func() {
		defer close(ch)
		var index uint64
		var last *Decision
		var bad []byte
		backoff := 100 * time.Millisecond
		for {
			value, next, err := r.watch.Watch(ctx, r.dkey, index, r.cfg.DecisionWait)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				r.log.Warn("failed to read decision, will retry", "retry_in", backoff, "error", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, 10*time.Second)
				continue
			}
			backoff = 100 * time.Millisecond
			index = next
			if value == nil || string(value) == string(bad) {
				continue
			}
			var d Decision
			if err := json.Unmarshal(value, &d); err != nil {
				r.log.Warn("ignoring invalid decision", "error", err)
				bad = value
				continue
			}
			bad = nil
			if last != nil && *last == d {
				continue
			}
			last = &d
			// Replace an undelivered decision by the newer one. Only this
			// goroutine sends, so the second send cannot block.
			select {
			case ch <- d:
			default:
				select {
				case <-ch:
				default:
				}
				ch <- d
			}
		}
	}()
	return ch
}
