package ui

import (
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/jobs"
	"github.com/pollux-nomad/pollux/metrics"
	"github.com/pollux-nomad/pollux/model"
)

// GPU kinds on the cluster map.
const (
	kindPollux  = "pollux" // a scheduled Pollux job
	kindHeld    = "held"   // a Pollux-tagged job the controller does not schedule (invalid, error)
	kindOther   = "other"  // a job Pollux does not manage
	kindFree    = "free"   // nobody
	gpuSize     = 26
	gpuGap      = 4
	nodeLabelW  = 170
	nodeRowH    = 34
	mapPaddingY = 6
)

// header is the top of every page.
type header struct {
	Round    int64
	Time     string
	Leader   string
	Term     uint64
	DryRun   bool
	Reader   string
	Nodes    int
	GPUs     int
	Used     int
	States   []stateCount
	Error    string
	NoStatus bool
	Refresh  int
}

type stateCount struct {
	State string
	Count int
}

type gpuCell struct {
	X, Y  int
	Kind  string
	Job   string // "" for free / other
	Fill  string
	Title string
}

type nodeRow struct {
	Y          int
	TextY      int
	Name, ID   string
	GPUs       int
	Type       string // the node's GPU type; empty when types are not told apart
	Cells      []gpuCell
	Overcommit int // GPUs the jobs hold beyond the node's count (moving)
}

type clusterMap struct {
	Width, Height int
	Nodes         []nodeRow
	Legend        []legendEntry
	// Others are the jobs Pollux does not manage that hold GPUs, by name.
	Others []legendEntry
}

type legendEntry struct {
	Job, Fill, Kind string
	GPUs            int
}

type jobRow struct {
	Job, Link            string
	State                string
	GPUs                 int
	Placement            string
	Batch, LR, Accum     string
	Goodput, Speedup     string
	Efficiency, Progress string
	Restarts             int
	Age, Waiting         string
	Reason, Message      string
	Fill                 string
}

type roundRow struct {
	Round                                       int64
	Time, Instance                              string
	Snapshot, Fit, Optimize, Plan, Apply, Total string
	Conflicts, Changed, Jobs                    int
	Errors                                      []string
	DryRun                                      bool
}

type overview struct {
	header
	Map    clusterMap
	Jobs   []jobRow
	Rounds []roundRow
	// Policy and Settings are the last round's policy and its effective
	// settings (Pollux's: the configuration's, else its defaults for the
	// cluster).
	Policy   string
	Settings []jobs.EffectiveSetting
	// Autoscaling is the last round's desired node count per node pool
	// and GPU type, with its reason (empty without autoscaling).
	Autoscaling []contract.AutoscalePool
}

// palette holds distinct colours for the first jobs (in name order);
// later ones get a colour from a hash of their name.
var palette = []string{"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7", "#9c755f", "#2f4b7c", "#a05195", "#66c2a5"}

// jobColors assigns each job of the status its colour.
func jobColors(st *jobs.Status) map[string]string {
	m := map[string]string{}
	if st == nil {
		return m
	}
	names := make([]string, 0, len(st.Jobs))
	for _, j := range st.Jobs {
		names = append(names, j.Job)
	}
	sort.Strings(names)
	for i, n := range names {
		if i < len(palette) {
			m[n] = palette[i]
		} else {
			m[n] = jobColor(n)
		}
	}
	return m
}

func jobColor(job string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(job))
	v := h.Sum32()
	return fmt.Sprintf("hsl(%d,%d%%,%d%%)", v%360, 55+int(v>>9)%25, 45+int(v>>17)%15)
}

func newHeader(s *Snapshot, now time.Time, refresh time.Duration) header {
	h := header{Reader: s.Reader, Refresh: int(refresh.Seconds())}
	st := s.Status
	if st == nil {
		h.NoStatus = true
		return h
	}
	h.Round, h.Time, h.Leader, h.DryRun = st.Round, st.Time.Format(time.RFC3339)+" ("+ago(st.Time, now)+" ago)", st.Instance, st.DryRun
	h.Term = st.Term
	h.Nodes, h.GPUs = st.Nodes, st.GPUs
	for _, n := range st.NodeMap {
		h.Used += n.Other
	}
	counts := map[string]int{}
	for _, j := range st.Jobs {
		counts[j.State]++
		h.Used += j.GPUs
	}
	for _, k := range []string{jobs.StateScheduled, jobs.StateInvalid, jobs.StateError, jobs.StateStopped} {
		if counts[k] > 0 {
			h.States = append(h.States, stateCount{k, counts[k]})
		}
	}
	return h
}

// buildMap lays the nodes out as rows of GPUs, each GPU coloured by the
// job Nomad runs on it: scheduled Pollux jobs, Pollux-tagged jobs the
// controller holds (invalid), jobs outside Pollux, then free GPUs.
func buildMap(st *jobs.Status, colors map[string]string) clusterMap {
	var m clusterMap
	if st == nil {
		return m
	}
	type holder struct {
		job, kind string
		gpus      int
	}
	perNode := map[string][]holder{}
	totals := map[string]*legendEntry{}
	others := map[string]int{} // GPUs per job Pollux does not manage
	for _, j := range st.Jobs {
		kind := kindPollux
		if j.State != jobs.StateScheduled {
			kind = kindHeld
		}
		for _, r := range j.Running {
			perNode[r.Node] = append(perNode[r.Node], holder{j.Job, kind, r.GPUs})
			if totals[j.Job] == nil {
				totals[j.Job] = &legendEntry{Job: j.Job, Fill: colors[j.Job], Kind: kind}
			}
			totals[j.Job].GPUs += r.GPUs
		}
	}
	maxGPUs := 0
	for _, n := range st.NodeMap {
		maxGPUs = max(maxGPUs, n.GPUs)
	}
	nodes := append([]jobs.NodeStatus(nil), st.NodeMap...)
	sort.SliceStable(nodes, func(a, b int) bool { return nodeName(nodes[a]) < nodeName(nodes[b]) })
	y := mapPaddingY
	for _, n := range nodes {
		hs := perNode[n.ID]
		sort.SliceStable(hs, func(a, b int) bool { return hs[a].job < hs[b].job })
		named := 0
		for _, o := range n.OtherJobs {
			hs = append(hs, holder{o.Job, kindOther, o.GPUs})
			named += o.GPUs
			others[o.Job] += o.GPUs
		}
		if n.Other > named { // a status without names
			hs = append(hs, holder{"", kindOther, n.Other - named})
		}
		row := nodeRow{Y: y, TextY: y + gpuSize/2 + 5, Name: n.Name, ID: n.ID, GPUs: n.GPUs, Type: n.GPUType}
		if row.Name == "" {
			row.Name = n.ID
		}
		i := 0
		add := func(kind, job string) {
			c := gpuCell{X: nodeLabelW + i*(gpuSize+gpuGap), Y: y, Kind: kind, Job: job}
			switch kind {
			case kindFree:
				c.Fill, c.Title = "#ffffff", fmt.Sprintf("GPU %d: free", i)
			case kindOther:
				c.Fill, c.Title = "#9e9e9e", fmt.Sprintf("GPU %d: a job Pollux does not manage", i)
				if job != "" {
					c.Title = fmt.Sprintf("GPU %d: %s (not a Pollux job)", i, job)
				}
			default:
				c.Fill, c.Title = colors[job], fmt.Sprintf("GPU %d: %s (%s)", i, job, kind)
			}
			row.Cells = append(row.Cells, c)
			i++
		}
		for _, h := range hs {
			for range h.gpus {
				if i >= n.GPUs {
					row.Overcommit++
					continue
				}
				add(h.kind, h.job)
			}
		}
		for i < n.GPUs {
			add(kindFree, "")
		}
		m.Nodes = append(m.Nodes, row)
		y += nodeRowH
	}
	m.Width = nodeLabelW + max(maxGPUs, 1)*(gpuSize+gpuGap) + 60
	m.Height = y + mapPaddingY
	for _, e := range totals {
		m.Legend = append(m.Legend, *e)
	}
	sort.Slice(m.Legend, func(a, b int) bool { return m.Legend[a].Job < m.Legend[b].Job })
	for job, n := range others {
		m.Others = append(m.Others, legendEntry{Job: job, Fill: "#9e9e9e", Kind: kindOther, GPUs: n})
	}
	sort.Slice(m.Others, func(a, b int) bool { return m.Others[a].Job < m.Others[b].Job })
	return m
}

func newOverview(s *Snapshot, now time.Time, refresh time.Duration) overview {
	colors := jobColors(s.Status)
	o := overview{header: newHeader(s, now, refresh), Map: buildMap(s.Status, colors)}
	if st := s.Status; st != nil {
		o.Policy, o.Settings, o.Autoscaling = st.Policy, st.Settings, st.Autoscaling
		names := nodeNames(st)
		for _, j := range st.Jobs {
			r := newJobRow(j, s.Jobs[j.Job], now, names)
			r.Fill = colors[j.Job]
			o.Jobs = append(o.Jobs, r)
		}
	}
	for _, r := range s.Rounds {
		o.Rounds = append(o.Rounds, newRoundRow(r, now))
	}
	return o
}

func newJobRow(j jobs.JobStatus, d *JobData, now time.Time, names map[string]string) jobRow {
	r := jobRow{Job: j.Job, Link: j.Job, State: j.State, GPUs: j.GPUs, Restarts: j.Restarts,
		Placement: "-", Batch: "-", LR: "-", Accum: "-", Goodput: "-", Speedup: "-", Efficiency: "-", Progress: "-", Age: "-", Waiting: "-"}
	if dec := j.Decision; dec != nil {
		r.Batch, r.LR, r.Accum = fmt.Sprint(dec.BatchSize), fmt.Sprintf("%.4g", dec.LR), fmt.Sprint(dec.AccumSteps)
		if dec.Placement != "" {
			r.Placement = namedPlacement(dec.Placement, names)
		}
	}
	if x := j.Explain; x != nil {
		r.Reason, r.Message = x.Reason, x.Message
		if x.Goodput > 0 {
			r.Goodput = shortNum(x.Goodput)
		}
		if x.Speedup > 0 {
			r.Speedup = fmt.Sprintf("%.2f", x.Speedup)
		}
		if x.Efficiency > 0 {
			r.Efficiency = fmt.Sprintf("%.2f", x.Efficiency)
		}
	} else if j.Error != "" {
		r.Reason, r.Message = j.State, j.Error
	}
	if d != nil && d.Metrics != nil {
		r.Progress = shortNum(d.Metrics.Progress)
	}
	if j.Submitted != nil {
		r.Age = ago(*j.Submitted, now)
	}
	if j.WaitingSince != nil {
		r.Waiting = ago(*j.WaitingSince, now)
	}
	return r
}

func newRoundRow(r RoundSummary, now time.Time) roundRow {
	ms := func(k string) string {
		if v, ok := r.Timings[k]; ok {
			return fmt.Sprintf("%.1f", v)
		}
		return "-"
	}
	return roundRow{Round: r.Round, Time: r.Time.Format("15:04:05") + " (" + ago(r.Time, now) + " ago)", Instance: r.Instance,
		Snapshot: ms("snapshot"), Fit: ms("fit"), Optimize: ms("optimize"), Plan: ms("plan"), Apply: ms("apply"), Total: ms("total"),
		Conflicts: r.Conflicts, Changed: r.Changed, Jobs: r.Jobs, Errors: r.Errors, DryRun: r.DryRun}
}

func ago(t, now time.Time) string {
	d := now.Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%.1fh", d.Hours())
	}
	return fmt.Sprintf("%.1fd", d.Hours()/24)
}

// detail is one job's page.
type detail struct {
	header
	Found      bool
	Job        string
	Row        jobRow
	Explain    *jobs.Explanation
	Decision   *jobs.Decision
	Running    string
	Key        string
	Speedup    *chart
	Efficiency *chart
	Perf       []param
	FitPoints  []fitPoint
	FitError   string
	NoModel    string
	History    []AllocChange
	AppliedAt  string
	Attained   string
	Metrics    string
}

type param struct{ Name, Value, Meaning string }

type fitPoint struct {
	Nodes, Replicas     int
	LocalBsz            string
	Observed, Predicted string
	Error               string
}

func newDetail(s *Snapshot, job string, now time.Time, refresh time.Duration) detail {
	d := detail{header: newHeader(s, now, refresh), Job: job}
	st := s.Status
	if st == nil {
		return d
	}
	var js *jobs.JobStatus
	for i := range st.Jobs {
		if st.Jobs[i].Job == job {
			js = &st.Jobs[i]
		}
	}
	if js == nil {
		return d
	}
	d.Found = true
	data := s.Jobs[job]
	names := nodeNames(st)
	d.Row = newJobRow(*js, data, now, names)
	d.Explain, d.Decision = js.Explain, js.Decision
	d.Running = namedPlacement(contract.FormatPlacement(js.Running), names)
	d.History = s.Allocations[job]
	if data != nil && data.MetricsError != "" {
		d.Metrics = data.MetricsError
	}
	var state *jobs.State
	if data != nil {
		state = data.State
	}
	if state != nil {
		if !state.AppliedAt.IsZero() {
			d.AppliedAt = state.AppliedAt.UTC().Format(time.RFC3339) + " (" + ago(state.AppliedAt, now) + " ago)"
		}
		d.Attained = fmt.Sprintf("%.0f GPU-seconds", state.AttainedService)
	}
	x := js.Explain
	switch {
	case state == nil || state.Perf == nil || state.Grad == nil:
		d.NoModel = "no model yet: the job's rank 0 has not reported a metrics document the controller accepted"
		return d
	case x == nil || x.Bounds == nil || x.InitBatchSize <= 0:
		d.NoModel = "the status has no batch settings for this job (not scheduled this round)"
	}
	perf := model.PerfParams(*state.Perf)
	d.Perf = []param{
		{"alpha_c", fmt.Sprintf("%.4g s", perf.AlphaC), "micro-step compute, constant"},
		{"beta_c", fmt.Sprintf("%.4g s", perf.BetaC), "micro-step compute, per example"},
		{"alpha_n", fmt.Sprintf("%.4g s", perf.AlphaN), "all-reduce across nodes, constant"},
		{"beta_n", fmt.Sprintf("%.4g s", perf.BetaN), "all-reduce across nodes, per extra replica"},
		{"alpha_r", fmt.Sprintf("%.4g s", perf.AlphaR), "all-reduce within a node, constant"},
		{"beta_r", fmt.Sprintf("%.4g s", perf.BetaR), "all-reduce within a node, per extra replica"},
		{"gamma", fmt.Sprintf("%.3g", perf.Gamma), "overlap of compute and all-reduce (1 none, 10 full)"},
		{"grad_sqr", fmt.Sprintf("%.4g", state.Grad.Sqr), "|g|², smoothed"},
		{"grad_var", fmt.Sprintf("%.4g", state.Grad.Var), "variance of an M0 batch gradient, smoothed"},
	}
	if data != nil && data.Metrics != nil {
		d.FitPoints, d.FitError = fitError(perf, metrics.ProfilePoints(data.Metrics))
	}
	if d.NoModel != "" {
		return d
	}
	f := model.GoodputFunc{Perf: perf, Grad: model.GradParams(*state.Grad), InitBatchSize: float64(x.InitBatchSize)}
	perNode := 1
	for _, n := range st.NodeMap {
		perNode = max(perNode, n.GPUs)
	}
	maxK := min(max(st.GPUs, x.MaxGPUs, js.GPUs+1, 2), 64)
	curve := jobs.SpeedupCurve(f, jobs.ModelBounds(*x.Bounds), x.BaseGoodput, maxK, perNode)
	var xs, ys []float64
	var titles []string
	mark := -1
	for i, p := range curve {
		xs, ys = append(xs, float64(p.GPUs)), append(ys, p.Speedup)
		titles = append(titles, fmt.Sprintf("%d GPUs on %d nodes: speedup %.2f, goodput %.4g, batch %d", p.GPUs, p.Nodes, p.Speedup, p.Goodput, p.BatchSize))
		if p.GPUs == js.GPUs {
			mark = i
		}
	}
	d.Speedup = newChart("speedup", xs, ys, mark, false, "GPUs", "speedup over fair share", titles)
	// Efficiency over batch sizes from M0 to the largest allowed.
	m0, mMax := float64(x.InitBatchSize), float64(max(x.Bounds.MaxBatchSize, x.InitBatchSize))
	xs, ys, titles, mark = nil, nil, nil, -1
	const n = 40
	chosen := 0.0
	if js.Decision != nil {
		chosen = float64(js.Decision.BatchSize)
	}
	best := math.Inf(1)
	for i := 0; i < n; i++ {
		b := m0
		if mMax > m0 {
			b = m0 * math.Pow(mMax/m0, float64(i)/(n-1))
		}
		e := f.Efficiency(b)
		xs, ys = append(xs, b), append(ys, e)
		titles = append(titles, fmt.Sprintf("batch %.0f: efficiency %.3f", b, e))
		if chosen > 0 && math.Abs(math.Log(b/chosen)) < best {
			best, mark = math.Abs(math.Log(b/chosen)), i
		}
		if mMax <= m0 {
			break
		}
	}
	d.Efficiency = newChart("efficiency", xs, ys, mark, true, "total batch size", "statistical efficiency", titles)
	return d
}

// fitError compares the model's optimizer-step times with the observed
// ones: per point and as the root mean square of the relative errors.
func fitError(p model.PerfParams, points []model.ProfilePoint) ([]fitPoint, string) {
	var out []fitPoint
	sum := 0.0
	for _, pt := range points {
		pred := p.OptimStepTime(pt.Nodes, pt.Replicas, pt.LocalBsz)
		rel := (pred - pt.OptimStepTime) / pt.OptimStepTime
		sum += rel * rel
		out = append(out, fitPoint{Nodes: pt.Nodes, Replicas: pt.Replicas, LocalBsz: fmt.Sprintf("%.0f", pt.LocalBsz),
			Observed: fmt.Sprintf("%.4g", pt.OptimStepTime), Predicted: fmt.Sprintf("%.4g", pred), Error: fmt.Sprintf("%+.1f%%", 100*rel)})
	}
	if len(points) == 0 {
		return nil, ""
	}
	return out, fmt.Sprintf("%.1f%% RMS relative error of the step time over %d configurations", 100*math.Sqrt(sum/float64(len(points))), len(points))
}

func nodeName(n jobs.NodeStatus) string {
	if n.Name != "" {
		return n.Name
	}
	return n.ID
}

// namedPlacement renders "node-id:gpus,..." with node names where the
// status knows them.
func namedPlacement(p string, names map[string]string) string {
	parts := strings.Split(p, ",")
	for i, part := range parts {
		if id, gpus, ok := strings.Cut(part, ":"); ok && names[id] != "" {
			parts[i] = names[id] + ":" + gpus
		}
	}
	return strings.Join(parts, ",")
}

func nodeNames(st *jobs.Status) map[string]string {
	m := map[string]string{}
	if st != nil {
		for _, n := range st.NodeMap {
			m[n.ID] = n.Name
		}
	}
	return m
}

// shortJob trims a long job name for the map legend.
func shortJob(s string) string {
	if len(s) > 48 {
		return strings.ToValidUTF8(s[:48], "") + "…"
	}
	return s
}
