package jobs

import (
	"cmp"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/model"
	"github.com/pollux-nomad/pollux/policy"
)

// ExplainInput is what Explain needs to know of one job after a round.
type ExplainInput struct {
	// State and Error are the job's status state and error.
	State string
	Error string
	// Conflict: the job's write lost a check-and-set this round.
	Conflict bool
	// GPUs and Nodes are the round's decision for the job.
	GPUs, Nodes int
	// BatchSize is the decided total batch size (for the efficiency).
	BatchSize int
	// Fit is the job's model (nil before any metrics); Bounds its batch
	// limits.
	Fit    *model.GoodputFunc
	Bounds model.Bounds
	// MinGPUs and MaxGPUs are the policy's bounds for the job; CapBy says
	// which limit set MaxGPUs.
	MinGPUs, MaxGPUs int
	CapBy            string
	// FreeGPUs is how many GPUs no scheduled job got this round.
	FreeGPUs int
	// PolicyGPUs and PolicyNodes are the GPUs and nodes the policy could
	// hand out, PolicyJobs the jobs it scheduled: they set the fair share.
	PolicyGPUs, PolicyNodes, PolicyJobs int
}

// FairShare is the fair-share configuration of the Pollux policy (OSDI
// '21, §4.1): K_f = ceil(GPUs/jobs) GPUs on N_f = min(ceil(nodes/GPUs·1),
// K_f) nodes. It returns zeros when there is nothing to share.
func FairShare(gpus, nodes, jobs int) (k, n int) {
	if gpus <= 0 || nodes <= 0 || jobs <= 0 {
		return 0, 0
	}
	k = (gpus + jobs - 1) / jobs
	n = min((nodes+gpus-1)/gpus, k)
	return k, n
}

// Explain says why a job has its allocation or waits. It is a pure
// function of the round's numbers.
func Explain(in ExplainInput) Explanation {
	x := Explanation{MinGPUs: in.MinGPUs, MaxGPUs: in.MaxGPUs, CapBy: in.CapBy}
	switch in.State {
	case StateInvalid:
		if key := metaKeyOf(in.Error); key != "" {
			x.Reason, x.Key = contract.ReasonInvalidMeta, key
			x.Message = "invalid meta " + key + ": left untouched until it is fixed (" + firstLineOf(in.Error) + ")"
		} else {
			x.Reason = contract.ReasonInvalidSpec
			x.Message = "cannot manage the job's spec: " + firstLineOf(in.Error)
		}
		return x
	case StateError:
		x.Reason, x.Message = contract.ReasonReadError, "held as it is: "+firstLineOf(in.Error)
		return x
	case StateStopped:
		x.Reason, x.Message = contract.ReasonStopped, "stopped: not scheduled"
		return x
	}
	// Scheduled: the numbers first.
	if in.Fit != nil {
		b := in.Bounds
		x.Bounds = &BatchBounds{MaxBatchSize: b.MaxBatchSize, MinLocalBsz: b.MinLocalBsz, MaxLocalBsz: b.MaxLocalBsz, Accumulation: b.Accumulation}
		x.InitBatchSize = int(in.Fit.InitBatchSize)
	}
	x.FairShareGPUs, x.FairShareNodes = FairShare(in.PolicyGPUs, in.PolicyNodes, in.PolicyJobs)
	if in.Fit != nil && x.FairShareGPUs > 0 {
		cache := model.NewGoodputCache(*in.Fit, in.Bounds)
		base := cache.Goodput(x.FairShareNodes, x.FairShareGPUs)
		if !(base > 0) || math.IsInf(base, 0) {
			base = cache.Goodput(1, 1) // the policy's fallback
		}
		if base > 0 && !math.IsInf(base, 0) {
			x.BaseGoodput = base
			at := func(k int) float64 {
				if k < 1 {
					return 0
				}
				n := min(max(in.Nodes, 1), k)
				return cache.Goodput(n, k) / base
			}
			if in.GPUs > 0 {
				x.Goodput = cache.Goodput(min(max(in.Nodes, 1), in.GPUs), in.GPUs)
				x.Speedup = at(in.GPUs)
				x.SpeedupLess = at(in.GPUs - 1)
			}
			x.SpeedupMore = at(in.GPUs + 1)
		}
		if in.BatchSize > 0 {
			x.Efficiency = in.Fit.Efficiency(float64(in.BatchSize))
		}
	}
	held := strings.HasPrefix(in.Error, "held: ") || strings.HasPrefix(in.Error, "deferred: ")
	switch {
	case in.Conflict:
		x.Reason, x.Message = contract.ReasonConflict, "the job changed since it was read (an operator's edit): their version stays, decided again next round"
	case held:
		x.Reason, x.Message = contract.ReasonHeld, "no change this round: "+strings.TrimPrefix(strings.TrimPrefix(firstLineOf(in.Error), "held: "), "deferred: ")
	case in.Fit == nil && strings.HasPrefix(in.Error, "not placed"):
		x.Reason, x.Message = contract.ReasonCapacity, firstLineOf(in.Error)
	case in.Fit == nil:
		x.Reason = contract.ReasonNoMetrics
		if in.Error != "" {
			x.Reason = contract.ReasonBadMetrics
		}
		x.Message = fmt.Sprintf("no model yet (no metrics from the job's rank 0): %s at the initial batch size", gpusWords(in.GPUs))
		if in.Error != "" {
			x.Message = "metrics rejected and no earlier model: " + firstLineOf(in.Error)
		}
	case in.GPUs == 0 && in.FreeGPUs < max(in.MinGPUs, 1):
		x.Reason = contract.ReasonCapacity
		x.Message = fmt.Sprintf("waiting: needs %s, %s free", gpusWords(max(in.MinGPUs, 1)), gpusWords(in.FreeGPUs))
	case in.GPUs == 0:
		x.Reason = contract.ReasonFairShare
		x.Message = fmt.Sprintf("waiting: other jobs gain more from the GPUs (speedup with 1 GPU would be %.2f)", x.SpeedupMore)
	case in.MaxGPUs > 0 && in.GPUs >= in.MaxGPUs:
		x.Reason = contract.ReasonAtCap
		x.Message = fmt.Sprintf("%s, its cap (%s): speedup %.2f", gpusWords(in.GPUs), in.CapBy, x.Speedup)
	case in.GPUs <= in.MinGPUs && in.MinGPUs > 1:
		x.Reason = contract.ReasonAtMin
		x.Message = fmt.Sprintf("%s, its minimum (pollux_min_gpus): speedup %.2f", gpusWords(in.GPUs), x.Speedup)
	case x.SpeedupMore > x.Speedup && in.FreeGPUs == 0:
		x.Reason = contract.ReasonCapacity
		x.Message = fmt.Sprintf("%s: one more would raise its speedup from %.2f to %.2f, but no GPU is free", gpusWords(in.GPUs), x.Speedup, x.SpeedupMore)
	case x.SpeedupMore > x.Speedup:
		x.Reason = contract.ReasonFairShare
		x.Message = fmt.Sprintf("%s: one more would raise its speedup from %.2f to %.2f, but the fitness weighs other jobs' gains higher", gpusWords(in.GPUs), x.Speedup, x.SpeedupMore)
	default:
		x.Reason = contract.ReasonGoodput
		x.Message = fmt.Sprintf("%s: speedup %.2f; one more would give %.2f, one fewer %.2f", gpusWords(in.GPUs), x.Speedup, x.SpeedupMore, x.SpeedupLess)
	}
	if in.State == StateScheduled && in.Error != "" && x.Reason != contract.ReasonBadMetrics && !held && x.Reason != contract.ReasonCapacity {
		x.Message += " (" + firstLineOf(in.Error) + ")"
	}
	// Four significant digits are plenty to read and keep the status
	// document small (it holds every job).
	for _, f := range []*float64{&x.Speedup, &x.SpeedupLess, &x.SpeedupMore, &x.Goodput, &x.Efficiency, &x.BaseGoodput} {
		*f = sig4(*f)
	}
	return x
}

func sig4(v float64) float64 {
	r, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 4, 64), 64)
	if err != nil {
		return v
	}
	return r
}

// CurvePoint is a job's predicted goodput and speedup on some GPUs.
type CurvePoint struct {
	GPUs      int     `json:"gpus"`
	Nodes     int     `json:"nodes"`
	Goodput   float64 `json:"goodput"`
	Speedup   float64 `json:"speedup"`
	BatchSize int     `json:"batch_size"`
}

// ModelBounds converts a status document's batch bounds for the model.
func ModelBounds(b BatchBounds) model.Bounds {
	return model.Bounds{MaxBatchSize: b.MaxBatchSize, MinLocalBsz: b.MinLocalBsz, MaxLocalBsz: b.MaxLocalBsz, Accumulation: b.Accumulation}
}

// SpeedupCurve predicts a job's goodput on 1..maxGPUs GPUs packed on as
// few nodes of perNode GPUs as possible, and its speedup over base (no
// speedups when base is not positive). Configurations the bounds forbid
// have goodput 0.
func SpeedupCurve(f model.GoodputFunc, b model.Bounds, base float64, maxGPUs, perNode int) []CurvePoint {
	perNode = max(perNode, 1)
	cache := model.NewGoodputCache(f, b)
	out := make([]CurvePoint, 0, max(maxGPUs, 0))
	for k := 1; k <= maxGPUs; k++ {
		n := (k + perNode - 1) / perNode
		c := cache.Choice(n, k)
		p := CurvePoint{GPUs: k, Nodes: n, Goodput: c.Goodput, BatchSize: c.BatchSize}
		if base > 0 {
			p.Speedup = c.Goodput / base
		}
		out = append(out, p)
	}
	return out
}

// metaKeyOf returns the meta key an invalid-meta error names first
// (ParseSpec's lines start with "pollux_<key>: ").
func metaKeyOf(msg string) string {
	key, _, ok := strings.Cut(firstLineOf(msg), ":")
	if !ok || !strings.HasPrefix(key, "pollux_") || strings.ContainsAny(key, " \t") {
		return ""
	}
	return key
}

func firstLineOf(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

func gpusWords(n int) string {
	if n == 1 {
		return "1 GPU"
	}
	return fmt.Sprintf("%d GPUs", n)
}

// explain fills each job's explanation and the node map of the round's
// status (one call at the end of Round), from its job lines (r.stats),
// the jobs as read (r.read, aligned with them), the scheduled jobs
// (r.entries), the policy's input (r.in) and output (r.next).
func (c *Controller) explain(r *round) {
	cfg, status, stats, read, entries, in, next := r.cfg, r.status, r.stats, r.read, r.entries, r.in, r.next
	status.Policy = cmp.Or(cfg.Policy, "pollux")
	if status.Policy == "pollux" {
		status.Settings = cfg.EffectivePollux(policy.RegimeOf(in.Nodes))
	}
	for _, n := range r.nodes {
		ns := NodeStatus{ID: n.ID, Name: n.Name, GPUs: n.GPUs, Other: n.UsedByOthers, OtherJobs: n.OtherJobs}
		if cfg.typed() {
			ns.GPUType = c.typer.typeOf(cfg, n.GPUModel)
		}
		status.NodeMap = append(status.NodeMap, ns)
	}
	policyGPUs, given := 0, 0
	for _, n := range in.Nodes {
		policyGPUs += n.GPUs
	}
	for _, a := range next {
		given += len(a)
	}
	bounds := make(map[string]policy.Job, len(in.Jobs))
	for _, j := range in.Jobs {
		bounds[j.ID] = j
	}
	byStatus := make(map[*JobStatus]*entry, len(entries))
	for _, e := range entries {
		byStatus[e.st] = e
	}
	for i, st := range stats {
		job := read[i]
		st.Running = job.Running
		if !job.SubmitTime.IsZero() {
			t := job.SubmitTime.UTC()
			st.Submitted = &t
		}
		xin := ExplainInput{State: st.State, Error: st.Error, Conflict: st.Conflict, FreeGPUs: policyGPUs - given,
			PolicyGPUs: policyGPUs, PolicyNodes: len(in.Nodes), PolicyJobs: len(in.Jobs)}
		if e := byStatus[st]; e != nil {
			st.Restarts = e.state.Restarts
			if st.GPUs == 0 && len(job.Running) == 0 {
				since := job.SubmitTime
				if e.state.Decision != nil && e.state.AppliedAt.After(since) {
					since = e.state.AppliedAt
				}
				if !since.IsZero() {
					s := since.UTC()
					st.WaitingSince = &s
				}
			}
			xin.Fit, xin.Bounds = e.fit, e.spec.Bounds()
			if cfg.Policy != "pollux" && cfg.Policy != "" {
				xin.Fit = nil
			}
			if st.Decision != nil {
				xin.GPUs, xin.Nodes, xin.BatchSize = st.Decision.NumReplicas, st.Decision.NumNodes, st.Decision.BatchSize
			}
			pj := bounds[st.Job]
			xin.MinGPUs, xin.MaxGPUs = pj.MinReplicas, pj.MaxReplicas
			xin.CapBy = capBy(cfg, e, policyGPUs, pj.MaxReplicas)
		}
		x := Explain(xin)
		st.Explain = &x
	}
}

// capBy names the limit that sets a job's most GPUs (see input).
func capBy(cfg Config, e *entry, total, maxGPUs int) string {
	switch {
	case e.spec.MaxGPUs > 0 && maxGPUs == e.spec.MaxGPUs:
		return "pollux_max_gpus"
	case cfg.MaxGPUsPerJob > 0 && maxGPUs == cfg.MaxGPUsPerJob:
		return "max_gpus_per_job"
	case e.spec.LocalBszMin > 0 && maxGPUs == e.spec.MaxBatchSize/e.spec.LocalBszMin:
		return "pollux_max_batch_size / pollux_local_bsz_min"
	case maxGPUs == max(cfg.ExploreFactor*e.state.MaxProfiled, cfg.ExploreStart, 1):
		switch {
		case e.state.MaxProfiled == 0:
			return fmt.Sprintf("explore_start %d (no profile yet)", cfg.ExploreStart)
		case cfg.ExploreFactor*e.state.MaxProfiled < cfg.ExploreStart:
			return fmt.Sprintf("explore_start %d", cfg.ExploreStart)
		}
		return fmt.Sprintf("explore_factor %d × the %d GPUs profiled", cfg.ExploreFactor, e.state.MaxProfiled)
	case maxGPUs == total:
		return "all free GPUs"
	}
	return "policy bound"
}
