package jobs

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/model"
	"github.com/pollux-nomad/pollux/policy"
)

// GPU types on Nomad. With Config.GPUTypeSource
// set, the controller reads each node's GPU model name (jobs.Node.GPUModel:
// the device's name, or a node meta key or attribute), maps it to a GPU
// type (Config.GPUTypeMap over the built-in rules), and:
//
//   - gives the policy each node's type (policy.Node.Type) and each job's
//     throughput model per type (policy.Job.TypedGoodput): fitted from
//     the job's profile entries of that type, predicted for the others;
//   - keeps every job on one type: a policy that is not type-aware
//     (policy.Traits.TypeAware) may hand a job GPUs anywhere, so the
//     controller chooses the job's type (preferredType) and moves the
//     policy's GPU count onto that type's free GPUs, or else keeps only
//     the GPUs of one type (keepOneType); a type-aware policy's choice is
//     kept, and only a split allocation (a bug) is trimmed;
//   - writes the type into the decision (pollux_gpu_type) and has the
//     adapter add a constraint on the type to the job's groups.

// Kinds of GPU type source.
const (
	// GPUTypeFromDevice: the model name of the node's instances of the
	// configured device (Nomad's ${device.model}).
	GPUTypeFromDevice = "device.model"
	gpuTypeMeta       = "meta."
	gpuTypeAttr       = "attr."
)

// GPUTypeSource is a parsed Config.GPUTypeSource.
type GPUTypeSource struct {
	// Kind is "device", "meta" or "attr"; "" when types are off.
	Kind string
	// Key is the node meta key or attribute name (meta and attr).
	Key string
}

// ParseGPUTypeSource parses a gpu_type_source value: "", "device.model",
// "meta.<key>" or "attr.<key>" with a key of 1 to 128 letters, digits,
// '.', '_' and '-'.
func ParseGPUTypeSource(s string) (GPUTypeSource, error) {
	var kind, key string
	switch {
	case s == "":
		return GPUTypeSource{}, nil
	case s == GPUTypeFromDevice:
		return GPUTypeSource{Kind: "device"}, nil
	case strings.HasPrefix(s, gpuTypeMeta):
		kind, key = "meta", s[len(gpuTypeMeta):]
	case strings.HasPrefix(s, gpuTypeAttr):
		kind, key = "attr", s[len(gpuTypeAttr):]
	default:
		return GPUTypeSource{}, fmt.Errorf(`want "", %q, "meta.<key>" or "attr.<key>", got %q`, GPUTypeFromDevice, truncate(s))
	}
	if !nodeKeyRE.MatchString(key) {
		return GPUTypeSource{}, fmt.Errorf("the %s key must be 1 to 128 letters, digits, '.', '_' or '-', got %q", kind, truncate(key))
	}
	return GPUTypeSource{Kind: kind, Key: key}, nil
}

var nodeKeyRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// DefaultGPUTypeSpeed is the built-in relative per-GPU speed of the
// profile types: the median over bert, cifar10, deepspeech2, imagenet
// and yolov3 of the T4 step time over the type's, at one GPU and the
// same local batch size, in the Sia artifact's placements-<type>.csv
// (../shared/data/sia-artifact; ncf left out, its V100 profile is an
// outlier). Operators override it with gpu_type_speed.
var DefaultGPUTypeSpeed = map[string]float64{
	"t4": 1, "v100": 1.8, "a100": 2.0, "rtx6000": 1.6, "rtx2080ti": 1.5,
}

// builtinGPUTypes map common NVIDIA model names (as nvidia-smi and the
// NVIDIA device plugin give them) to the profile types, after the
// operator's gpu_type_map.
var builtinGPUTypes = []struct {
	re  *regexp.Regexp
	typ string
}{
	{regexp.MustCompile(`(?i)\bA100\b`), "a100"},
	{regexp.MustCompile(`(?i)\bV100S?\b`), "v100"},
	{regexp.MustCompile(`(?i)\bT4\b`), "t4"},
	{regexp.MustCompile(`(?i)\bRTX ?6000\b`), "rtx6000"},
	{regexp.MustCompile(`(?i)\bRTX ?2080 ?Ti\b`), "rtx2080ti"},
}

// Bounds of the GPU type settings.
const (
	maxGPUTypeEntries = 256
	maxGPUTypeSpeed   = 1e6
)

// gpuTypeProblems validates the GPU type settings.
func (c Config) gpuTypeProblems() []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fieldError{field: field, err: fmt.Errorf(format, args...)})
	}
	if _, err := ParseGPUTypeSource(c.GPUTypeSource); err != nil {
		bad("gpu_type_source", "%v", err)
	}
	if len(c.GPUTypeMap) > maxGPUTypeEntries {
		bad("gpu_type_map", "at most %d entries, got %d", maxGPUTypeEntries, len(c.GPUTypeMap))
	} else {
		for _, name := range slices.Sorted(maps.Keys(c.GPUTypeMap)) {
			if err := contract.ValidGPUType(name); err != nil {
				bad("gpu_type_map", "model name %q: %v", truncate(name), err)
			}
			if err := contract.ValidGPUType(c.GPUTypeMap[name]); err != nil {
				bad("gpu_type_map", "type of %q: %v", truncate(name), err)
			}
		}
	}
	if len(c.GPUTypeSpeed) > maxGPUTypeEntries {
		bad("gpu_type_speed", "at most %d entries, got %d", maxGPUTypeEntries, len(c.GPUTypeSpeed))
	} else {
		for _, t := range slices.Sorted(maps.Keys(c.GPUTypeSpeed)) {
			if err := contract.ValidGPUType(t); err != nil {
				bad("gpu_type_speed", "type %q: %v", truncate(t), err)
			}
			if v := c.GPUTypeSpeed[t]; !(v > 0 && v <= maxGPUTypeSpeed) {
				bad("gpu_type_speed", "speed of %q must be in (0, %g], got %g", truncate(t), float64(maxGPUTypeSpeed), v)
			}
		}
	}
	return errs
}

// typed reports whether the configuration tells GPU types apart: nodes
// and decisions carry their GPU type. Whether the cluster has several
// types is SeveralGPUTypes.
func (c Config) typed() bool { return c.GPUTypeSource != "" }

// SeveralGPUTypes reports whether the nodes (node ID to GPU type, "" for
// none) hold GPUs of more than one type. Only such a cluster pools the
// profiles of the jobs of one model, and one whose GPUs are all of one
// type is scheduled as an untyped one would be, however its types are
// read. It counts the distinct types and asks the policy's predicate,
// which the simulator uses too.
func SeveralGPUTypes(nodeType map[string]string) bool {
	types := map[string]bool{}
	for _, t := range nodeType {
		if t != "" {
			types[t] = true
		}
	}
	return policy.SeveralTypes(len(types))
}

// speed is a GPU type's relative per-GPU speed (1 if unknown).
func (c Config) speed(t string) float64 {
	if v, ok := c.GPUTypeSpeed[t]; ok {
		return v
	}
	if v, ok := DefaultGPUTypeSpeed[t]; ok {
		return v
	}
	return 1
}

// gpuTyper maps GPU model names to types, logging each name that maps to
// nothing once.
type gpuTyper struct {
	log hclog.Logger
	// mu guards unknown: fits map names from several goroutines.
	mu      sync.Mutex
	unknown map[string]bool
}

// typeOf returns the GPU type of a model name under cfg: the operator's
// mapping, else the built-in rules, else the name itself (made a valid
// type name). "" stays "" (the node has no model name).
func (g *gpuTyper) typeOf(cfg Config, name string) string {
	if name == "" {
		return ""
	}
	if t, ok := cfg.GPUTypeMap[name]; ok {
		return t
	}
	for _, b := range builtinGPUTypes {
		if b.re.MatchString(name) {
			return b.typ
		}
	}
	t := sanitizeGPUType(name)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.unknown == nil {
		g.unknown = map[string]bool{}
	}
	if !g.unknown[name] {
		g.unknown[name] = true
		g.log.Info("GPU model name has no type mapping: it is a type of its own (map it with gpu_type_map)", "gpu_model", name, "gpu_type", t)
	}
	return t
}

// sanitizeGPUType makes a model name a valid type name: other bytes
// become '_', and it is cut to contract.MaxGPUTypeLen bytes.
func sanitizeGPUType(name string) string {
	b := []byte(name)
	if len(b) > contract.MaxGPUTypeLen {
		b = b[:contract.MaxGPUTypeLen]
	}
	for i, c := range b {
		if contract.ValidGPUType(string(c)) != nil {
			b[i] = '_'
		}
	}
	return string(b)
}

// typesOf returns, for the round's nodes, each node's GPU type and each
// type's model names (sorted), under cfg.
func (c *Controller) typesOf(cfg Config, nodes []Node) (map[string]string, map[string][]string) {
	nodeType := map[string]string{}
	models := map[string][]string{}
	if !cfg.typed() {
		return nodeType, models
	}
	for _, n := range nodes {
		t := c.typer.typeOf(cfg, n.GPUModel)
		nodeType[n.ID] = t
		if t != "" && !slices.Contains(models[t], n.GPUModel) {
			models[t] = append(models[t], n.GPUModel)
		}
	}
	for _, m := range models {
		slices.Sort(m)
	}
	return nodeType, models
}

// clusterTypes returns the distinct GPU types of the nodes, sorted.
func clusterTypes(nodeType map[string]string) []string {
	var out []string
	for _, t := range nodeType {
		if t != "" && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

// typeOfPlacement returns the GPU type that holds most of p's GPUs (ties:
// the smaller name), or "" for none.
func typeOfPlacement(p []NodeGPUs, nodeType map[string]string) string {
	count := map[string]int{}
	for _, n := range p {
		if t := nodeType[n.Node]; t != "" {
			count[t] += n.GPUs
		}
	}
	best := ""
	for t, k := range count {
		if best == "" || k > count[best] || k == count[best] && t < best {
			best = t
		}
	}
	return best
}

// TypedFit is a job's throughput model fitted on one GPU type.
type TypedFit struct {
	Perf model.PerfParams
	// Points is the number of profile configurations the fit used.
	Points int
}

// TypeHint is what the cluster knows of how throughput changes from one
// GPU type to another.
type TypeHint struct {
	// Speedup is the destination's per-GPU compute speed over the
	// source's: the median, over the jobs fitted on both types, of the
	// ratio of their fitted compute times at hintLocalBsz examples per
	// GPU; without such jobs, the ratio of the gpu_type_speed prior.
	Speedup float64
	// Measured is true when Speedup comes from jobs fitted on both types.
	Measured bool
	// Net scales the synchronisation terms (model.NetworkScaleBetween
	// over the same jobs; zero fields: no estimate).
	Net model.NetworkScale
}

// hintLocalBsz is the micro-batch at which jobs' compute times are
// compared across types.
const hintLocalBsz = 64

// Bootstrapper predicts a job's throughput model on GPU type target, on
// which it has not run, from its fits on the types it has (at least one)
// and what the cluster knows of the types (hint). It is the seam for a
// better predictor.
type Bootstrapper func(fitted map[string]TypedFit, target string, hint func(src, dst string) TypeHint) model.PerfParams

// SpeedRatioBootstrap is the default Bootstrapper. Sia profiles every job
// on one GPU of each type and scales its model from there (Sia, SOSP '23;
// model.BootstrapPerf); the controller has no such probes on a type the
// job has not run on, so it makes them from the hint: the fit with the
// most profile points (ties: the smaller type name) predicts one-GPU
// compute times at two micro-batch sizes, divided by the hint's speedup
// (measured on other jobs, else the prior), and model.BootstrapPerf fits
// the target's compute terms through them. The synchronisation terms are
// scaled by the hint's network estimate, else kept: they model the
// network, not the GPU.
func SpeedRatioBootstrap(fitted map[string]TypedFit, target string, hint func(src, dst string) TypeHint) model.PerfParams {
	src := ""
	for t, f := range fitted {
		if src == "" || f.Points > fitted[src].Points || f.Points == fitted[src].Points && t < src {
			src = t
		}
	}
	p := fitted[src].Perf
	h := hint(src, target)
	if !(h.Speedup > 0) || math.IsInf(h.Speedup, 0) {
		return p
	}
	var probes []model.ProfilePoint
	for _, m := range []float64{32, 64} {
		probes = append(probes, model.ProfilePoint{Nodes: 1, Replicas: 1, LocalBsz: m, AccumStepTime: p.AccumStepTime(m) / h.Speedup})
	}
	ns := model.NetworkScale{Inter: cmp.Or(h.Net.Inter, 1), Intra: cmp.Or(h.Net.Intra, 1)}
	out, err := model.BootstrapPerf(p, probes, ns)
	if err != nil {
		return p
	}
	return out
}

// typeSwitchMargin is how much better (relative predicted goodput) a job's
// best GPU type must be than the type it runs on before the controller
// moves it there for a policy that is not type-aware: a move restarts it.
const typeSwitchMargin = 0.1

// preferredType chooses a job's GPU type for a policy that is not
// type-aware: the type on which its model predicts the highest goodput
// at its current GPU count (at least its minimum; capped by the type's
// GPUs), unless that is within typeSwitchMargin of the type it runs on.
// A job without a model stays on its type ("" if it has none: the
// policy's allocation decides).
func preferredType(pj policy.Job, cur string, capacity map[string]int, maxPerNode map[string]int, k int) string {
	if len(pj.TypedGoodput) == 0 {
		return cur
	}
	k = max(k, pj.MinReplicas, 1)
	value := func(t string) float64 {
		m := pj.TypedGoodput[t]
		kt := min(k, capacity[t])
		if m == nil || kt < max(pj.MinReplicas, 1) {
			return -1
		}
		nodes := (kt + maxPerNode[t] - 1) / max(maxPerNode[t], 1)
		return m.Goodput(nodes, kt)
	}
	types := slices.Sorted(maps.Keys(capacity))
	best, bestV := "", -1.0
	for _, t := range types {
		if v := value(t); v > bestV {
			best, bestV = t, v
		}
	}
	if cur != "" && best != cur {
		if cv := value(cur); cv > 0 && bestV < cv*(1+typeSwitchMargin) {
			return cur
		}
	}
	if bestV <= 0 {
		return cur
	}
	return best
}

// keepOneType makes every job's allocation in r.next lie on one GPU type
// (see the comment at the top of this file). pref is each job's chosen
// type (nil for a type-aware policy).
func (c *Controller) keepOneType(r *round, pref map[string]string) {
	if !r.cfg.typed() || len(r.next) == 0 {
		return
	}
	capacity := map[string]int{}
	typeOfNode := map[string]string{}
	for _, n := range r.in.Nodes {
		capacity[n.ID] = n.GPUs
		typeOfNode[n.ID] = n.Type
	}
	used := r.next.UsedGPUs()
	for _, j := range r.in.Jobs {
		alloc := r.next[j.ID]
		if len(alloc) == 0 {
			continue
		}
		p := PlacementOf(alloc)
		target := pref[j.ID]
		if target == "" {
			target = typeOfPlacement(p, typeOfNode)
		}
		if onType(p, typeOfNode, target) {
			continue
		}
		for _, n := range alloc {
			used[n]--
		}
		var moved []string
		if pref != nil {
			moved = relocate(r.in.Nodes, used, capacity, target, len(alloc), j.MinReplicas)
		}
		if moved == nil {
			// Keep the policy's GPUs of the type that holds most of them.
			keep := typeOfPlacement(p, typeOfNode)
			for _, n := range alloc {
				if typeOfNode[n] == keep {
					moved = append(moved, n)
				}
			}
			if len(moved) < max(j.MinReplicas, 1) {
				moved = nil
			}
		}
		for _, n := range moved {
			used[n]++
		}
		if pref == nil {
			c.log.Warn("the policy split a job across GPU types; keeping one type", "job_id", j.ID, "from", contract.FormatPlacement(p), "to", contract.FormatPlacement(PlacementOf(moved)))
		} else {
			c.log.Debug("kept a job on one GPU type", "job_id", j.ID, "gpu_type", target, "from", contract.FormatPlacement(p), "to", contract.FormatPlacement(PlacementOf(moved)))
		}
		r.next[j.ID] = moved
	}
}

// onType reports whether every GPU of p is of type t.
func onType(p []NodeGPUs, typeOfNode map[string]string, t string) bool {
	for _, n := range p {
		if typeOfNode[n.Node] != t {
			return false
		}
	}
	return true
}

// relocate picks up to k GPUs (at least minK, at least 1) free on nodes
// of type t, on as few nodes as possible (the nodes with the most free
// GPUs first), as an allocation; nil if there are not enough.
func relocate(nodes []policy.Node, used, capacity map[string]int, t string, k, minK int) []string {
	type cand struct {
		id   string
		free int
	}
	var cands []cand
	total := 0
	for _, n := range nodes {
		if n.Type != t {
			continue
		}
		if f := capacity[n.ID] - used[n.ID]; f > 0 {
			cands = append(cands, cand{n.ID, f})
			total += f
		}
	}
	if total < max(minK, 1) {
		return nil
	}
	k = min(k, total)
	sort.SliceStable(cands, func(a, b int) bool {
		return cmp.Or(cmp.Compare(cands[b].free, cands[a].free), cmp.Compare(cands[a].id, cands[b].id)) < 0
	})
	var out []string
	for _, cd := range cands {
		for range min(cd.free, k-len(out)) {
			out = append(out, cd.id)
		}
		if len(out) == k {
			break
		}
	}
	return out
}

// sharedKey is the key under which job e's profile points are pooled
// with those of the other jobs of its model: its pollux_model on a
// cluster of several GPU types when the round's policy wants shared
// profiles, else "" (not pooled). On one type a job's own fit is kept, as
// the simulator does: sharing there was measured slower (sia-philly-1..8
// on t4:16x4 under -rules sia: 6933 -> 7075 s), while on the 3-type
// cluster it is what places jobs right (README, "Shared profiles").
func (c *Controller) sharedKey(r *round, e *entry) string {
	if !r.traits.SharedProfiles || !SeveralGPUTypes(r.nodeType) {
		return ""
	}
	return e.spec.Model
}

// typeHints returns the round's TypeHint for a pair of GPU types, from
// the jobs fitted on both and the configured speed prior.
func typeHints(cfg Config, entries []*entry) func(src, dst string) TypeHint {
	pairs := map[[2]string][][2]model.PerfParams{}
	for _, e := range entries {
		if e.state == nil {
			continue
		}
		for a, pa := range e.state.Typed {
			for b, pb := range e.state.Typed {
				if a != b {
					pairs[[2]string{a, b}] = append(pairs[[2]string{a, b}], [2]model.PerfParams{model.PerfParams(pa.Perf), model.PerfParams(pb.Perf)})
				}
			}
		}
	}
	cache := map[[2]string]TypeHint{}
	return func(src, dst string) TypeHint {
		k := [2]string{src, dst}
		if h, ok := cache[k]; ok {
			return h
		}
		h := TypeHint{Speedup: cfg.speed(dst) / cfg.speed(src)}
		if ps := pairs[k]; len(ps) > 0 {
			ratios := make([]float64, len(ps))
			for i, p := range ps {
				ratios[i] = p[0].AccumStepTime(hintLocalBsz) / p[1].AccumStepTime(hintLocalBsz)
			}
			slices.Sort(ratios)
			n := len(ratios)
			h.Speedup, h.Measured = (ratios[(n-1)/2]+ratios[n/2])/2, true
			h.Net = model.NetworkScaleBetween(ps)
		}
		cache[k] = h
		return h
	}
}

// typedModels sets the job's model on every GPU type of the cluster:
// its fit where it has one, else a prediction from its fits.
func (c *Controller) typedModels(r *round, e *entry, hint func(src, dst string) TypeHint) {
	if e.state.Grad == nil || len(e.state.Typed) == 0 {
		return
	}
	fitted := map[string]TypedFit{}
	for t, tp := range e.state.Typed {
		fitted[t] = TypedFit{Perf: model.PerfParams(tp.Perf), Points: tp.ProfilePoints}
	}
	// A job of a named model takes, per type, the fit on every point its
	// model's jobs measured there (its own among them).
	shared := map[string]bool{}
	if key := c.sharedKey(r, e); key != "" {
		for _, t := range clusterTypes(r.nodeType) {
			if perf, n, ok := c.profiles.Fit(key, t); ok && perf.Validate() == nil {
				fitted[t] = TypedFit{Perf: perf, Points: n}
				shared[t] = true
			}
		}
	}
	grad := model.GradParams(*e.state.Grad)
	e.typed = map[string]*model.GoodputFunc{}
	e.st.Models = map[string]string{}
	for _, t := range clusterTypes(r.nodeType) {
		perf, source := fitted[t].Perf, "fitted"
		if shared[t] {
			source = "shared"
		}
		if _, ok := fitted[t]; !ok {
			perf, source = c.bootstrap(fitted, t, hint), "predicted"
			if perf.Validate() != nil {
				continue
			}
		}
		e.typed[t] = &model.GoodputFunc{Perf: perf, Grad: grad, InitBatchSize: float64(e.spec.InitBatchSize)}
		e.st.Models[t] = source
	}
}
