package sim

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pollux-nomad/pollux/contract/quote"
)

// NodeGroup is one GPU type's share of a typed cluster: Nodes nodes of
// GPUsPerNode GPUs of type Type.
type NodeGroup struct {
	// Type is the GPU type ("t4", "v100", "a100", "rtx6000", "rtx2080ti"
	// for the embedded profiles); "" only for the one-type shortcut.
	Type string
	// Nodes is the number of nodes, GPUsPerNode the GPUs on each.
	Nodes, GPUsPerNode int
}

// DefaultHeteroCluster is Sia's default heterogeneous cluster (64 GPUs;
// sia-simulator/simulator_config.py, cluster_nnodes): 6 nodes of 4 T4s, 3
// nodes of 8 RTX 2080 Tis and 2 nodes of 8 A100s.
const DefaultHeteroCluster = "t4:6x4,rtx2080ti:3x8,a100:2x8"

// ParseCluster parses a cluster spec: a comma-separated list of
// TYPE:NODESxGPUS (for example "t4:6x4,rtx2080ti:3x8,a100:2x8"). Types
// are lower-case names of letters, digits, '-' and '_', each at most once;
// NODES and GPUS are positive integers, GPUS at most 9 (the profiles'
// placement format). The error names the bad part.
func ParseCluster(spec string) ([]NodeGroup, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, errors.New("cluster spec is empty (want TYPE:NODESxGPUS[,...], e.g. " + DefaultHeteroCluster + ")")
	}
	var out []NodeGroup
	seen := map[string]bool{}
	for i, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		bad := func(format string, a ...any) error {
			return fmt.Errorf("cluster spec part %d %q: %s (want TYPE:NODESxGPUS, e.g. t4:6x4)", i+1, quote.Cut(part, 40), fmt.Sprintf(format, a...))
		}
		typ, size, ok := strings.Cut(part, ":")
		if !ok {
			return nil, bad("missing ':'")
		}
		typ = strings.TrimSpace(typ)
		if typ == "" {
			return nil, bad("empty GPU type")
		}
		for _, r := range typ {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return nil, bad("GPU type %q: only lower-case letters, digits, '-' and '_'", quote.Cut(typ, 40))
			}
		}
		if seen[typ] {
			return nil, bad("GPU type %q given twice", typ)
		}
		seen[typ] = true
		ns, gs, ok := strings.Cut(strings.TrimSpace(size), "x")
		if !ok {
			return nil, bad("missing 'x' between nodes and GPUs per node")
		}
		nodes, err := strconv.Atoi(strings.TrimSpace(ns))
		if err != nil || nodes < 1 {
			return nil, bad("nodes %q: want a positive integer", quote.Cut(ns, 40))
		}
		gpus, err := strconv.Atoi(strings.TrimSpace(gs))
		if err != nil || gpus < 1 {
			return nil, bad("GPUs per node %q: want a positive integer", quote.Cut(gs, 40))
		}
		if gpus > 9 {
			return nil, bad("GPUs per node %d: at most 9 supported by the profiles' placement format", gpus)
		}
		out = append(out, NodeGroup{Type: typ, Nodes: nodes, GPUsPerNode: gpus})
	}
	return out, nil
}

// FormatCluster is the inverse of ParseCluster.
func FormatCluster(groups []NodeGroup) string {
	parts := make([]string, len(groups))
	for i, g := range groups {
		parts[i] = fmt.Sprintf("%s:%dx%d", g.Type, g.Nodes, g.GPUsPerNode)
	}
	return strings.Join(parts, ",")
}

// Rules selects whose simulator semantics a simulation follows.
type Rules string

const (
	// RulesPollux (the default, also ""): the Pollux OSDI '21 artifact's
	// simulator (petuum/adaptdl osdi21-artifact, simulator/), extended to
	// typed clusters.
	RulesPollux Rules = "pollux"
	// RulesSia: the Sia SOSP '23 artifact's simulator (siasosp23/artifacts,
	// sia-simulator/): per-application restart delays, calibration
	// slowdowns, per-placement micro-batch limits, restarts only when the
	// placement shape or GPU type changes, placements wider than the
	// profiled nodes reshaped, and the policy's view of a job's batch size
	// capped at its trace's. See docs/simulator.md, "Typed clusters".
	RulesSia Rules = "sia"
)

// ParseRules parses a -rules value.
func ParseRules(s string) (Rules, error) {
	switch Rules(s) {
	case "", RulesPollux:
		return RulesPollux, nil
	case RulesSia:
		return RulesSia, nil
	}
	return "", fmt.Errorf("unknown rules %q (want pollux or sia)", quote.Cut(s, 40))
}

// SiaRestartDelays are the Sia artifact's checkpoint-restore times per
// application (sia-simulator/applications.py, Application.__init__,
// rescale_time; 30 s for any other application).
var SiaRestartDelays = map[string]time.Duration{
	"cifar10": 50 * time.Second, "deepspeech2": 25 * time.Second, "bert": 120 * time.Second,
	"yolov3": 80 * time.Second, "imagenet": 250 * time.Second, "ncf": 15 * time.Second,
}

// SiaSlowdowns are the Sia artifact's calibration slowdowns: a job's true
// goodput is divided by its application's value (simulator_config.py,
// SLOWDOWNS; job.py, calibration_factor). An application not listed runs
// at 1.
var SiaSlowdowns = map[string]float64{
	"cifar10": 1.8, "imagenet": 1.2, "yolov3": 1.2, "bert": 1.2, "deepspeech2": 1.2, "ncf": 1.5, "gpt_pmp": 1.0,
}

// SiaMaxPhysicalNodes is the most nodes each GPU type was profiled on
// (simulator_config.py, cluster_max_physical_nnodes). Under RulesSia a
// placement on more nodes of the type is reshaped to this many nodes before
// its throughput is looked up, as the artifact's Cluster.optimize_policy
// does ("FIXING PLACEMENT FOR LARGE CLUSTER").
var SiaMaxPhysicalNodes = map[string]int{"t4": 16, "v100": 5, "a100": 2, "rtx6000": 1, "rtx2080ti": 3}
