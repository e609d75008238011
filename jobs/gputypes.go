package jobs

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/pollux-nomad/pollux/contract"
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
//     (registry.Traits.TypeAware) may hand a job GPUs anywhere, so the
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
// profiles of the jobs of one model: one whose GPUs are all of one type
// is, for that, one implicit type, whether or not its types are read. It
// counts the distinct types and asks the policy's predicate, which the
// simulator uses too.
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
