package jobs

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
)

// Telemetry holds the controller's Prometheus metrics and writes them in
// the Prometheus text exposition format (version 0.0.4). It is safe for
// concurrent use.
type Telemetry struct {
	mu          sync.Mutex
	rounds      uint64
	conflicts   uint64
	errors      map[string]uint64
	phaseSum    map[string]float64
	phaseCount  map[string]uint64
	lastRound   map[string]float64
	jobsByState map[string]int
	jobGPUs     map[string]int
	leader      bool
	clusterGPUs int
}

// NewTelemetry returns empty metrics.
func NewTelemetry() *Telemetry {
	return &Telemetry{
		errors: map[string]uint64{}, phaseSum: map[string]float64{}, phaseCount: map[string]uint64{},
		lastRound: map[string]float64{}, jobsByState: map[string]int{}, jobGPUs: map[string]int{},
	}
}

func (t *Telemetry) incError(kind string) {
	t.mu.Lock()
	t.errors[kind]++
	t.mu.Unlock()
}

func (t *Telemetry) incConflict() {
	t.mu.Lock()
	t.conflicts++
	t.mu.Unlock()
}

func (t *Telemetry) observePhase(phase string, seconds float64) {
	t.mu.Lock()
	t.phaseSum[phase] += seconds
	t.phaseCount[phase]++
	t.lastRound[phase] = seconds
	t.mu.Unlock()
}

func (t *Telemetry) setJobGPUs(job string, gpus int) {
	t.mu.Lock()
	t.jobGPUs[job] = gpus
	t.mu.Unlock()
}

// SetLeader records whether this instance leads.
func (t *Telemetry) SetLeader(leader bool) {
	t.mu.Lock()
	t.leader = leader
	t.mu.Unlock()
}

func (t *Telemetry) observeRound(s *Status) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rounds++
	t.clusterGPUs = s.GPUs
	t.jobsByState = map[string]int{}
	present := map[string]bool{}
	for _, j := range s.Jobs {
		t.jobsByState[j.State]++
		present[j.Job] = true
	}
	for job := range t.jobGPUs {
		if !present[job] {
			delete(t.jobGPUs, job)
		}
	}
}

// Rounds returns the number of completed rounds.
func (t *Telemetry) Rounds() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rounds
}

// WritePrometheus writes all metrics in the text exposition format.
func (t *Telemetry) WritePrometheus(w io.Writer) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	metric := func(name, typ, help string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	metric("pollux_rounds_total", "counter", "Scheduling rounds completed.")
	fmt.Fprintf(&b, "pollux_rounds_total %d\n", t.rounds)
	metric("pollux_leader", "gauge", "1 if this instance holds the leader lock.")
	fmt.Fprintf(&b, "pollux_leader %d\n", boolInt(t.leader))
	metric("pollux_apply_conflicts_total", "counter", "Job writes that lost a check-and-set because the job changed since it was read.")
	fmt.Fprintf(&b, "pollux_apply_conflicts_total %d\n", t.conflicts)
	metric("pollux_errors_total", "counter", "Errors by kind.")
	for _, k := range sortedKeys(t.errors) {
		fmt.Fprintf(&b, "pollux_errors_total{kind=%q} %d\n", k, t.errors[k])
	}
	metric("pollux_round_phase_seconds", "summary", "Time spent in each phase of a round (total = whole round, optimize = policy time).")
	for _, k := range sortedKeys(t.phaseSum) {
		fmt.Fprintf(&b, "pollux_round_phase_seconds_sum{phase=%q} %g\n", k, t.phaseSum[k])
		fmt.Fprintf(&b, "pollux_round_phase_seconds_count{phase=%q} %d\n", k, t.phaseCount[k])
	}
	metric("pollux_last_round_phase_seconds", "gauge", "Duration of each phase in the last round.")
	for _, k := range sortedKeys(t.lastRound) {
		fmt.Fprintf(&b, "pollux_last_round_phase_seconds{phase=%q} %g\n", k, t.lastRound[k])
	}
	metric("pollux_jobs", "gauge", "Jobs by state in the last round.")
	for _, k := range sortedKeys(t.jobsByState) {
		fmt.Fprintf(&b, "pollux_jobs{state=%q} %d\n", k, t.jobsByState[k])
	}
	metric("pollux_cluster_gpus", "gauge", "GPUs the last round could hand to Pollux jobs (healthy, not held by other jobs).")
	fmt.Fprintf(&b, "pollux_cluster_gpus %d\n", t.clusterGPUs)
	metric("pollux_job_gpus", "gauge", "GPUs allocated to each job by the last round's decision.")
	for _, k := range sortedKeys(t.jobGPUs) {
		fmt.Fprintf(&b, "pollux_job_gpus{job=%q} %d\n", k, t.jobGPUs[k])
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
