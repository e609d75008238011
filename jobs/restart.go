package jobs

import (
	"slices"
	"time"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/internal/stats"
)

// Restart times: the controller measures how long each job
// makes no progress after it writes a new allocation, from that write to
// the job's first training step on it, and hands the median of the last
// few measurements to the policy (policy.Job.RestartTime) in place of the
// configured restart_penalty.

// openRestart starts the measurement of the restart that the write of
// alloc at s.AppliedAt causes (commit calls it).
func openRestart(s *State, alloc []string) {
	s.RestartOpen = len(alloc) > 0
	s.RestartProgress = s.Progress
}

// observeRestartAt takes a newly read, valid metrics document of a job
// whose newest allocation the scheduler created at started (Job.Started;
// zero if unknown): it logs an invalid restart object (ParseMetrics
// dropped it), and closes an open measurement when the document shows the
// first step after the write. The measurement starts at restartFrom: the
// later of the write's record and the allocation's creation, so that a
// pause of the controller between recording a write and making it (or a
// new leader completing the bookkeeping of an interrupted write) is not
// counted as the job's restart. The worker's restart object, when its
// first step is newer than that start, gives the time of that step (and a
// lower bound, its own restore time); otherwise the first document written
// after the start whose progress differs from the progress at the write
// gives an upper bound (the reporter writes at most once per its
// interval).
func (c *Controller) observeRestartAt(ref JobRef, s *State, doc *contract.Metrics, started time.Time) {
	if doc.RestartErr != nil {
		c.log.Warn("ignoring the metrics document's restart object", "job_id", ref.String(), "error", doc.RestartErr)
	}
	defer func() { s.Progress = doc.Progress }()
	if !s.RestartOpen || s.AppliedAt.IsZero() {
		return
	}
	from := restartFrom(s, started)
	var sample float64
	switch r := doc.Restart; {
	case r != nil && r.At.After(from):
		sample = max(r.At.Sub(from).Seconds(), r.RestoreTime)
	case r == nil && doc.Timestamp.After(from) && doc.Progress != s.RestartProgress:
		sample = doc.Timestamp.Sub(from).Seconds()
	default:
		return // the restart object, if any, is the previous start's
	}
	sample = min(sample, contract.MaxRestoreTime)
	s.RestartSamples = append(s.RestartSamples, sample)
	if n := len(s.RestartSamples); n > contract.MaxRestartSamples {
		s.RestartSamples = slices.Delete(s.RestartSamples, 0, n-contract.MaxRestartSamples)
	}
	s.RestartOpen = false
	c.log.Info("measured a restart", "job_id", ref.String(), "restart_s", sample, "estimate_s", stats.Quantile(s.RestartSamples, 0.5))
}

// restartFrom is when a restart's measurement starts: the write's time as
// recorded (s.AppliedAt), or, when the job's newest allocation was created
// later (the write was made after it was recorded, the controller having
// been paused in between), that creation.
func restartFrom(s *State, started time.Time) time.Time {
	if started.After(s.AppliedAt) {
		return started
	}
	return s.AppliedAt
}

// restartTime is the job's restart time for the policy: the median of its
// samples capped at restart_time_max, or 0 (the policy's restart_penalty)
// before the first measurement or with restart_time_max 0.
func restartTime(cfg Config, s *State) float64 {
	if cfg.RestartTimeMax <= 0 || len(s.RestartSamples) == 0 {
		return 0
	}
	// A measured 0 must not read as "unknown".
	return max(min(stats.Quantile(s.RestartSamples, 0.5), cfg.RestartTimeMax.Seconds()), 1e-3)
}

// restoring tells whether a job that holds GPUs is still restarting on its
// last allocation at now: its restart is not measured yet and the write
// is more recent than twice its restart time (restart_penalty before the
// first sample), and than restart_time_max, so that a job that never
// reports progress does not stay "restoring" for ever.
func restoring(cfg Config, s *State, running bool, now time.Time) bool {
	if !running || !s.RestartOpen || cfg.RestartTimeMax <= 0 {
		return false
	}
	window := min(cfg.RestartTimeMax.Seconds(), 2*max(restartTime(cfg, s), cfg.RestartPenalty.Seconds()))
	return now.Sub(s.AppliedAt).Seconds() < window
}
