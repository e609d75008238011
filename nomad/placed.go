package nomad

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
)

// evalWait is how long one blocking query for evaluations waits.
const evalWait = 5 * time.Second

// Placed tells whether Nomad placed everything the job asks for since
// sinceIndex (the JobModifyIndex Apply returned): it waits, until ctx ends,
// for the evaluations created since then to be processed, and then reports
// ok = false with a reason when one is blocked, when the latest one failed
// to place task groups (no node with the devices free, a missing device, an
// unsatisfiable constraint) or when the job summary has queued allocations.
// Nomad accepts such a job and leaves it pending; the controller treats it
// as a failed reallocation.
func (c *Client) Placed(ctx context.Context, ref jobs.JobRef, sinceIndex uint64) (ok bool, reason string, err error) {
	ctx, cancel := c.bounded(ctx, 0)
	defer cancel()
	ref.Namespace = namespace(ref)
	var waitIndex uint64
	var evals []*api.Evaluation
	for {
		q := c.query(ctx, ref.Namespace)
		q.WaitIndex = waitIndex
		q.WaitTime = evalWait
		all, qm, err := c.api.Jobs().Evaluations(ref.ID, q)
		if err != nil {
			if isNotFound(err) {
				return false, "", fmt.Errorf("failed to list evaluations of job %s: %w", ref, errors.Join(contract.ErrNotFound, err))
			}
			return false, "", fmt.Errorf("failed to list evaluations of job %s: %w", ref, Classify(err, "listing evaluations of job "+ref.String(), NeedNamespace("read-job", ref.Namespace)))
		}
		evals = evals[:0]
		pending := false
		for _, e := range all {
			if e.CreateIndex < sinceIndex {
				continue
			}
			evals = append(evals, e)
			if e.Status == api.EvalStatusPending || e.Status == "" {
				pending = true
			}
		}
		if !pending {
			break
		}
		if err := ctx.Err(); err != nil {
			return false, "", fmt.Errorf("failed to wait for evaluations of job %s: %w", ref, err)
		}
		waitIndex = qm.LastIndex
	}

	slices.SortFunc(evals, func(a, b *api.Evaluation) int { return cmp.Compare(a.CreateIndex, b.CreateIndex) })
	var reasons []string
	var latest *api.Evaluation
	for _, e := range evals {
		switch e.Status {
		case api.EvalStatusBlocked:
			reasons = append(reasons, "evaluation "+shortID(e.ID)+" is blocked")
		case api.EvalStatusComplete, api.EvalStatusFailed:
			latest = e
		}
	}
	if latest != nil {
		if latest.Status == api.EvalStatusFailed {
			reasons = append(reasons, fmt.Sprintf("evaluation %s failed: %s", shortID(latest.ID), latest.StatusDescription))
		}
		for _, tg := range slices.Sorted(maps.Keys(latest.FailedTGAllocs)) {
			reasons = append(reasons, fmt.Sprintf("group %q not placed: %s", tg, describeFailure(latest.FailedTGAllocs[tg])))
		}
	}
	sum, _, err := c.api.Jobs().Summary(ref.ID, c.query(ctx, ref.Namespace))
	if err != nil {
		if isNotFound(err) {
			return false, "", fmt.Errorf("failed to read summary of job %s: %w", ref, errors.Join(contract.ErrNotFound, err))
		}
		return false, "", fmt.Errorf("failed to read summary of job %s: %w", ref, Classify(err, "reading summary of job "+ref.String(), NeedNamespace("read-job", ref.Namespace)))
	}
	for _, tg := range slices.Sorted(maps.Keys(sum.Summary)) {
		if n := sum.Summary[tg].Queued; n > 0 {
			reasons = append(reasons, fmt.Sprintf("group %q has %d queued allocation(s)", tg, n))
		}
	}
	if len(reasons) > 0 {
		return false, strings.Join(reasons, "; "), nil
	}
	return true, "", nil
}

// describeFailure summarises why Nomad could not place a task group.
func describeFailure(m *api.AllocationMetric) string {
	if m == nil {
		return "no reason given"
	}
	var parts []string
	add := func(what string, counts map[string]int) {
		for _, k := range slices.Sorted(maps.Keys(counts)) {
			parts = append(parts, fmt.Sprintf("%s %q on %d node(s)", what, k, counts[k]))
		}
	}
	add("exhausted", m.DimensionExhausted)
	add("filtered by constraint", m.ConstraintFiltered)
	add("filtered by class", m.ClassFiltered)
	if len(parts) == 0 {
		parts = append(parts, fmt.Sprintf("%d node(s) evaluated, %d filtered, %d exhausted",
			m.NodesEvaluated, m.NodesFiltered, m.NodesExhausted))
	}
	if m.CoalescedFailures > 0 {
		parts = append(parts, fmt.Sprintf("%d more allocation(s) failed the same way", m.CoalescedFailures))
	}
	return strings.Join(parts, ", ")
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
