package jobs

import (
	"io"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
)

// Telemetry holds the controller's Prometheus metrics in a registry of its
// own (not the process-wide default one, so that two controllers in one
// process, or a test, never share or clash), together with the Go runtime
// and process collectors (go_* and process_*). It is safe for concurrent
// use.
//
// Why prometheus/client_golang and not hashicorp/go-metrics with its
// Prometheus sink (Nomad's choice): the sink is a layer over client_golang
// that would change what operators scrape today. It gives every
// AddSample summary the quantiles 0.5, 0.9 and 0.99 (pollux_round_phase_seconds
// has only _sum and _count), uses the metric's name as its help unless
// each metric is declared up front, and expires a series that was not
// updated within its Expiration (60 s by default, the default round
// interval), so pollux_leader or a job's GPUs would vanish between two
// slow rounds. It has no way to remove one series, which the
// pollux_job_gpus fix needs. go-metrics pays off for a program that sends
// the same measurements to several sinks (statsd, in-memory); Pollux only
// serves Prometheus, so the maintained Prometheus library used directly is
// the smaller dependency with exact control of names, types and help.
type Telemetry struct {
	reg       *prometheus.Registry
	rounds    prometheus.Counter
	leader    prometheus.Gauge
	conflicts prometheus.Counter
	errors    *prometheus.CounterVec
	phase     *prometheus.SummaryVec
	lastPhase *prometheus.GaugeVec
	jobs      *prometheus.GaugeVec
	jobGPUs   *prometheus.GaugeVec
	gpus      prometheus.Gauge
	fenced    *prometheus.CounterVec

	mu sync.Mutex
	// decided holds the jobs given GPUs (setJobGPUs) since the last
	// observeRound; gpuJobs and states the label values shown in
	// pollux_job_gpus and pollux_jobs.
	decided, gpuJobs, states map[string]bool
}

// NewTelemetry returns empty metrics in a new private registry.
func NewTelemetry() *Telemetry {
	t := &Telemetry{
		reg: prometheus.NewRegistry(),
		rounds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pollux_rounds_total", Help: "Scheduling rounds completed.",
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pollux_leader", Help: "1 if this instance holds the leader lock.",
		}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pollux_apply_conflicts_total",
			Help: "Job writes that lost a check-and-set because the job changed since it was read.",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pollux_errors_total", Help: "Errors by kind.",
		}, []string{"kind"}),
		// No Objectives: a summary of _sum and _count only (what the dashboards read).
		phase: prometheus.NewSummaryVec(prometheus.SummaryOpts{
			Name: "pollux_round_phase_seconds",
			Help: "Time spent in each phase of a round (total = whole round, optimize = policy time).",
		}, []string{"phase"}),
		lastPhase: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pollux_last_round_phase_seconds", Help: "Duration of each phase in the last round.",
		}, []string{"phase"}),
		jobs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pollux_jobs", Help: "Jobs by state in the last round.",
		}, []string{"state"}),
		jobGPUs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pollux_job_gpus", Help: "GPUs allocated to each job by the last round's decision.",
		}, []string{"job"}),
		gpus: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pollux_cluster_gpus", Help: "GPUs the last round could hand to Pollux jobs (healthy, not held by other jobs).",
		}),
		fenced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pollux_fence_refused_total",
			Help: "Writes refused because this instance's leadership term was over: by target (consul, nomad) and reason.",
		}, []string{"target", "reason"}),
		decided: map[string]bool{}, gpuJobs: map[string]bool{}, states: map[string]bool{},
	}
	t.reg.MustRegister(t.rounds, t.leader, t.conflicts, t.errors, t.phase, t.lastPhase, t.jobs, t.jobGPUs, t.gpus, t.fenced,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return t
}

func (t *Telemetry) incError(kind string) { t.errors.WithLabelValues(kind).Inc() }

func (t *Telemetry) incConflict() { t.conflicts.Inc() }

func (t *Telemetry) observePhase(phase string, seconds float64) {
	t.phase.WithLabelValues(phase).Observe(seconds)
	t.lastPhase.WithLabelValues(phase).Set(seconds)
}

// setJobGPUs records the GPUs the round decided for job. The job stays in
// pollux_job_gpus only if every round decides it again (see observeRound).
func (t *Telemetry) setJobGPUs(job string, gpus int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.jobGPUs.WithLabelValues(job).Set(float64(gpus))
	t.decided[job], t.gpuJobs[job] = true, true
}

// FenceRefused counts one write refused by a fence: target is the store
// ("consul", "nomad"), reason why (no term, lease expired, session check).
func (t *Telemetry) FenceRefused(target, reason string) {
	t.fenced.WithLabelValues(target, reason).Inc()
}

// SetLeader records whether this instance leads.
func (t *Telemetry) SetLeader(leader bool) {
	if leader {
		t.leader.Set(1)
	} else {
		t.leader.Set(0)
	}
}

// observeRound closes a round: it counts it, sets pollux_jobs from the
// round's job states, and removes from pollux_job_gpus every job the round
// gave no decision (it turned invalid, stopped, could not be read, was
// purged or untagged, or the round was interrupted before reaching it).
// Removed rather than zeroed: a job that is gone should not leave a series
// behind forever, and 0 would claim a decision of no GPUs, which is what
// a series at 0 means (a scheduled job waiting for GPUs).
func (t *Telemetry) observeRound(s *Status) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rounds.Inc()
	t.gpus.Set(float64(s.GPUs))
	count := map[string]int{}
	for _, j := range s.Jobs {
		count[j.State]++
	}
	for state, n := range count {
		t.jobs.WithLabelValues(state).Set(float64(n))
		t.states[state] = true
	}
	for state := range t.states {
		if count[state] == 0 {
			t.jobs.DeleteLabelValues(state)
			delete(t.states, state)
		}
	}
	for job := range t.gpuJobs {
		if !t.decided[job] {
			t.jobGPUs.DeleteLabelValues(job)
			delete(t.gpuJobs, job)
		}
	}
	clear(t.decided)
}

// Handler serves the metrics over HTTP (Prometheus text format, or
// another format the scraper asks for).
func (t *Telemetry) Handler() http.Handler {
	return promhttp.HandlerFor(t.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// WritePrometheus writes all metrics in the Prometheus text exposition
// format (version 0.0.4).
func (t *Telemetry) WritePrometheus(w io.Writer) error {
	fams, err := t.reg.Gather()
	if err != nil {
		return err
	}
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range fams {
		if err := enc.Encode(f); err != nil {
			return err
		}
	}
	return nil
}
