package contract

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/pollux-nomad/pollux/contract/quote"
)

// NodeGPUs is a number of GPUs on one node.
type NodeGPUs struct {
	// Node is the Nomad node ID.
	Node string `json:"node"`
	// GPUs is the number of devices.
	GPUs int `json:"gpus"`
}

// Decision is one job's allocation and training configuration: the
// controller's meta keys (docs/contracts.md §1) and the JSON document of
// the decision key (§2).
type Decision struct {
	BatchSize   int     `json:"batch_size"`
	LocalBsz    int     `json:"local_bsz"`
	AccumSteps  int     `json:"accum_steps"`
	LR          float64 `json:"lr"`
	NumReplicas int     `json:"num_replicas"`
	NumNodes    int     `json:"num_nodes"`
	// Placement is "node-id:gpus,node-id:gpus,..." in rank order.
	Placement string `json:"placement"`
	Round     int64  `json:"round"`
	// GPUType is the GPU type of the placement's nodes (the controller's
	// profile type name, see ValidGPUType); empty when the controller does
	// not tell GPU types apart or the job holds no GPUs.
	GPUType string `json:"gpu_type,omitempty"`
}

// Meta returns the decision as the controller's output meta keys.
//
// pollux_gpu_type is in the map only when the decision has a GPU type; a
// writer removes the key from a job whose new decision has none.
func (d Decision) Meta() map[string]string {
	m := map[string]string{
		MetaBatchSize:   strconv.Itoa(d.BatchSize),
		MetaLocalBsz:    strconv.Itoa(d.LocalBsz),
		MetaAccumSteps:  strconv.Itoa(d.AccumSteps),
		MetaLR:          strconv.FormatFloat(d.LR, 'g', 8, 64),
		MetaNumReplicas: strconv.Itoa(d.NumReplicas),
		MetaNumNodes:    strconv.Itoa(d.NumNodes),
		MetaPlacement:   d.Placement,
		MetaRound:       strconv.FormatInt(d.Round, 10),
	}
	if d.GPUType != "" {
		m[MetaGPUType] = d.GPUType
	}
	return m
}

// MaxMetaValue bounds an integer meta value (batch sizes, GPU counts):
// beyond it a value is certainly a typo.
const MaxMetaValue = 1 << 24

// Validate reports every field of the decision that no controller
// writes: negative or absurd counts, a learning rate that is not finite
// and positive (for a decision with GPUs), a batch size that is not
// micro-batch x replicas x (accumulation + 1), or a placement that does
// not parse or does not add up to the replicas and nodes.
func (d Decision) Validate() error {
	var errs []error
	for _, f := range []struct {
		key   string
		value int
	}{
		{MetaBatchSize, d.BatchSize}, {MetaLocalBsz, d.LocalBsz}, {MetaAccumSteps, d.AccumSteps},
		{MetaNumReplicas, d.NumReplicas}, {MetaNumNodes, d.NumNodes},
	} {
		if f.value < 0 || f.value > MaxMetaValue {
			errs = append(errs, fmt.Errorf("%s: must be in [0, %d], got %d", f.key, MaxMetaValue, f.value))
		}
	}
	if d.Round < 0 {
		errs = append(errs, fmt.Errorf("%s: must be non-negative, got %d", MetaRound, d.Round))
	}
	if math.IsNaN(d.LR) || math.IsInf(d.LR, 0) || d.LR < 0 || (d.NumReplicas > 0 && d.LR == 0) {
		errs = append(errs, fmt.Errorf("%s: must be finite and positive, got %g", MetaLR, d.LR))
	}
	if d.NumReplicas > 0 && len(errs) == 0 {
		if want := d.LocalBsz * d.NumReplicas * (d.AccumSteps + 1); d.LocalBsz < 1 || want != d.BatchSize {
			errs = append(errs, fmt.Errorf("%s: %d is not %s x %s x (%s + 1) = %d x %d x %d",
				MetaBatchSize, d.BatchSize, MetaLocalBsz, MetaNumReplicas, MetaAccumSteps, d.LocalBsz, d.NumReplicas, d.AccumSteps+1))
		}
	}
	if d.GPUType != "" {
		if err := ValidGPUType(d.GPUType); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", MetaGPUType, err))
		}
	}
	p, err := ParsePlacement(d.Placement)
	if err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", MetaPlacement, err))
	} else if gpus := TotalGPUs(p); gpus != d.NumReplicas || len(p) != d.NumNodes {
		errs = append(errs, fmt.Errorf("%s: %q has %d GPUs on %d nodes, but %s=%d and %s=%d",
			MetaPlacement, quote.Cut(d.Placement, 40), gpus, len(p), MetaNumReplicas, d.NumReplicas, MetaNumNodes, d.NumNodes))
	}
	return errors.Join(errs...)
}

// ParseDecision decodes and validates a decision document (the value of
// the decision key).
func ParseDecision(data []byte) (Decision, error) {
	var d Decision
	if err := json.Unmarshal(data, &d); err != nil {
		return Decision{}, fmt.Errorf("failed to parse decision: %w", quote.JSONError(err, -1, len(data)))
	}
	if err := d.Validate(); err != nil {
		return Decision{}, fmt.Errorf("failed to parse decision: %w", err)
	}
	return d, nil
}

// DecisionFromMeta reads a decision from the controller's meta keys, as a
// worker sees them (lookup is, for instance, NOMAD_META_<key> in the
// environment). A missing key leaves its field at the zero value (a job
// the controller has not allocated yet has none); every malformed one is
// reported at once, named as lookup names it (name(key)).
func DecisionFromMeta(lookup func(key string) (string, bool), name func(key string) string) (Decision, error) {
	var d Decision
	var errs []error
	count := func(key string, dst *int) {
		raw, ok := lookup(key)
		if !ok {
			return
		}
		v, err := strconv.Atoi(strings.TrimSpace(raw))
		if err != nil || v < 0 {
			errs = append(errs, fmt.Errorf("%s: must be a non-negative integer, got %q", name(key), quote.Cut(raw, 40)))
			return
		}
		*dst = v
	}
	count(MetaBatchSize, &d.BatchSize)
	count(MetaLocalBsz, &d.LocalBsz)
	count(MetaAccumSteps, &d.AccumSteps)
	count(MetaNumReplicas, &d.NumReplicas)
	count(MetaNumNodes, &d.NumNodes)
	if raw, ok := lookup(MetaLR); ok {
		v, err := strconv.ParseFloat(strings.TrimSpace(raw), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			errs = append(errs, fmt.Errorf("%s: must be a finite non-negative number, got %q", name(MetaLR), quote.Cut(raw, 40)))
		} else {
			d.LR = v
		}
	}
	if raw, ok := lookup(MetaPlacement); ok {
		d.Placement = strings.TrimSpace(raw)
	}
	if raw, ok := lookup(MetaGPUType); ok && strings.TrimSpace(raw) != "" {
		t := strings.TrimSpace(raw)
		if err := ValidGPUType(t); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v, got %q", name(MetaGPUType), err, quote.Cut(raw, 40)))
		} else {
			d.GPUType = t
		}
	}
	if raw, ok := lookup(MetaRound); ok {
		v, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 64)
		if err != nil || v < 0 {
			errs = append(errs, fmt.Errorf("%s: must be a non-negative integer, got %q", name(MetaRound), quote.Cut(raw, 40)))
		} else {
			d.Round = v
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Decision{}, err
	}
	return d, nil
}

// FormatPlacement renders a placement as "node:gpus,node:gpus" (the
// pollux_placement meta value).
func FormatPlacement(p []NodeGPUs) string {
	parts := make([]string, len(p))
	for i, n := range p {
		parts[i] = n.Node + ":" + strconv.Itoa(n.GPUs)
	}
	return strings.Join(parts, ",")
}

// ParsePlacement reads a pollux_placement value; "" is no GPUs. Node IDs
// may not be empty or repeat, GPU counts are at least 1.
func ParsePlacement(s string) ([]NodeGPUs, error) {
	if s == "" {
		return nil, nil
	}
	var out []NodeGPUs
	seen := map[string]bool{}
	for i, part := range strings.Split(s, ",") {
		node, count, ok := strings.Cut(part, ":")
		n, err := strconv.Atoi(count)
		switch {
		case !ok || node == "":
			return nil, fmt.Errorf("entry %d %q: want node-id:gpus", i, quote.Cut(part, 40))
		case err != nil || n < 1 || n > MaxMetaValue:
			return nil, fmt.Errorf("entry %d %q: gpus must be an integer in [1, %d]", i, quote.Cut(part, 40), MaxMetaValue)
		case seen[node]:
			return nil, fmt.Errorf("entry %d: node %q appears twice", i, quote.Cut(node, 40))
		}
		seen[node] = true
		out = append(out, NodeGPUs{Node: node, GPUs: n})
	}
	return out, nil
}

// TotalGPUs adds up a placement's GPUs.
func TotalGPUs(p []NodeGPUs) int {
	k := 0
	for _, n := range p {
		k += n.GPUs
	}
	return k
}
