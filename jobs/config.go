package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/pollux-nomad/pollux/contract/quote"
	"github.com/pollux-nomad/pollux/policy/registry"
)

// Config is the controller's configuration (docs/contracts.md §4). It is read
// from a file (-config) and from <kv_prefix>config in Consul KV; the KV
// document wins field by field. Every field has a default.
type Config struct {
	// Interval between scheduling rounds. Default 60s.
	Interval time.Duration
	// FairnessP is the power-mean exponent of the Pollux fitness. Unset
	// (0), the policy's default: -1 on a cluster of one GPU type, 0.5 on
	// one of several (pollux.TypedFairnessP). An operator may not
	// write 0.
	FairnessP float64
	// RestartPenalty is the restart delay δ of the fitness for jobs
	// without a measured restart time. Default 30s; 0 (the document's
	// "off" or "0s") turns it off.
	RestartPenalty time.Duration
	// RestartTimeMax caps a job's measured restart time (the median of
	// its last samples, from the write of an allocation to its first
	// step on it) before the policy uses it in place of RestartPenalty.
	// Default 10m; 0 ignores measurements (RestartPenalty for every job).
	RestartTimeMax time.Duration
	// Device is the Nomad device type of a GPU. Default "nvidia/gpu".
	Device string
	// NodePool restricts the controller to nodes of one pool ("" = all).
	NodePool string
	// MaxGPUsPerJob caps every job's GPU count (0 = the cluster's total).
	MaxGPUsPerJob int
	// RecordRounds is how many of its last rounds the controller keeps
	// whole (the policy's input and decision, as pollux replay reads
	// them; served at /v1/rounds). Default 10; 0 keeps none.
	RecordRounds int
	// DryRun computes and publishes decisions but never changes a job.
	DryRun bool
	// KVPrefix is the Consul KV prefix. Default "pollux/".
	KVPrefix string
	// Population, Generations and Seed configure the genetic algorithm
	// (defaults 100, 100, 1).
	Population, Generations int
	Seed                    int64
	// InterferenceAvoidance keeps two distributed jobs off one node.
	// Default true.
	InterferenceAvoidance bool
	// ExploreFactor caps a job's growth at this many times the most GPUs
	// it has reported a profile for. Default 4.
	ExploreFactor int
	// ExploreStart caps the GPUs of a job that has reported no profile
	// yet (its first allocation). Default 4: a job skips the restart
	// from one GPU to four.
	ExploreStart int
	// StateGCGrace is how long the KV keys of a job that is no longer
	// listed (purged, or its pollux_enabled removed) are kept before the
	// leader deletes them. Default 24h; 0 keeps them forever.
	StateGCGrace time.Duration
	// Policy is "pollux" (default), or a baseline for comparisons:
	// "tiresias" (each job on pollux_max_gpus GPUs at its initial batch
	// size) or "optimus" (needs an oracle, see Options.Oracle).
	Policy string
	// GPUTypeSource says where a node's GPU type comes from (see
	// gputypes.go): "" (default: the controller does not tell GPU types
	// apart), "device.model" (the model name of the node's instances of
	// Device, as NVIDIA's device plugin reports it: "Tesla T4"),
	// "meta.<key>" (the node's meta key) or "attr.<key>" (the node's
	// attribute). A change applies from the next round.
	GPUTypeSource string
	// GPUTypeMap maps model names (what the source gives) to the GPU type
	// names the controller uses (t4, v100, a100, rtx6000, rtx2080ti, or an
	// operator's own), over the built-in rules for common NVIDIA names;
	// a name neither maps is its own type.
	GPUTypeMap map[string]string
	// GPUTypeSpeed is the relative per-GPU speed of each GPU type, over the
	// built-in defaults (DefaultGPUTypeSpeed): the prior with which a job's
	// throughput on a type it has not run on is predicted.
	GPUTypeSpeed map[string]float64
	// Pollux holds the Pollux policy's other settings (the pollux block,
	// ga.stall_generations, ga.workers); zero values leave the policy's
	// defaults for the cluster (PolluxConfig, EffectivePollux).
	Pollux PolluxKnobs
	// Autoscale is the autoscaling section (an HCL block in the file, an
	// object in the JSON document, which replaces the file's): the desired
	// node count per node pool that the controller publishes each round
	// (AutoscaleConfig). Off unless the section is given.
	Autoscale AutoscaleConfig
}

// DefaultConfig returns the defaults of docs/contracts.md §4.
func DefaultConfig() Config {
	return Config{
		Interval:              60 * time.Second,
		FairnessP:             0, // the policy's default
		RestartPenalty:        30 * time.Second,
		RestartTimeMax:        10 * time.Minute,
		StateGCGrace:          24 * time.Hour,
		Device:                "nvidia/gpu",
		KVPrefix:              "pollux/",
		Population:            100,
		Generations:           100,
		Seed:                  1,
		InterferenceAvoidance: true,
		ExploreFactor:         4,
		ExploreStart:          4,
		RecordRounds:          10,
		Policy:                "pollux",
	}
}

// configDoc is the document form, in JSON (the KV document and .json
// files) and in HCL (.hcl files); pointers tell "absent" from "zero".
type configDoc struct {
	Interval              *string             `json:"interval" hcl:"interval,optional"`
	FairnessP             *float64            `json:"fairness_p" hcl:"fairness_p,optional"`
	RestartPenalty        *string             `json:"restart_penalty" hcl:"restart_penalty,optional"`
	RestartTimeMax        *string             `json:"restart_time_max" hcl:"restart_time_max,optional"`
	StateGCGrace          *string             `json:"state_gc_grace" hcl:"state_gc_grace,optional"`
	Device                *string             `json:"device" hcl:"device,optional"`
	NodePool              *string             `json:"node_pool" hcl:"node_pool,optional"`
	MaxGPUsPerJob         *int                `json:"max_gpus_per_job" hcl:"max_gpus_per_job,optional"`
	RecordRounds          *int                `json:"record_rounds" hcl:"record_rounds,optional"`
	DryRun                *bool               `json:"dry_run" hcl:"dry_run,optional"`
	KVPrefix              *string             `json:"kv_prefix" hcl:"kv_prefix,optional"`
	InterferenceAvoidance *bool               `json:"interference_avoidance" hcl:"interference_avoidance,optional"`
	ExploreFactor         *int                `json:"explore_factor" hcl:"explore_factor,optional"`
	ExploreStart          *int                `json:"explore_start" hcl:"explore_start,optional"`
	Policy                *string             `json:"policy" hcl:"policy,optional"`
	GPUTypeSource         *string             `json:"gpu_type_source" hcl:"gpu_type_source,optional"`
	GPUTypeMap            *map[string]string  `json:"gpu_type_map" hcl:"gpu_type_map,optional"`
	GPUTypeSpeed          *map[string]float64 `json:"gpu_type_speed" hcl:"gpu_type_speed,optional"`
	GA                    *struct {
		Population       *int   `json:"population" hcl:"population,optional"`
		Generations      *int   `json:"generations" hcl:"generations,optional"`
		Seed             *int64 `json:"seed" hcl:"seed,optional"`
		StallGenerations *knob  `json:"stall_generations" hcl:"stall_generations,optional"`
		Workers          *knob  `json:"workers" hcl:"workers,optional"`
	} `json:"ga" hcl:"ga,block"`
	Pollux *polluxDoc `json:"pollux" hcl:"pollux,block"`
	// Autoscaling is read here from JSON only; MergeHCL hands the HCL
	// block to ParseAutoscaleHCL, which knows its positions.
	Autoscaling *autoscaleDoc `json:"autoscaling" hcl:"autoscaling,block"`
}

// MergeJSON applies the fields present in a JSON configuration document
// to c and validates the result. Unknown fields, bad durations and invalid
// values are errors naming the field; an empty document, null, a
// truncated document and trailing data are errors too, located at a byte
// offset. Messages quote at most a few hundred bytes of the input. On
// error c is unchanged.
func (c Config) MergeJSON(data []byte) (Config, error) {
	if len(bytes.Trim(data, jsonSpace)) == 0 {
		return c, errors.New("failed to parse configuration: empty document (want a JSON object; {} changes nothing)")
	}
	if string(bytes.Trim(data, jsonSpace)) == "null" {
		return c, errors.New("failed to parse configuration: want a JSON object, got null")
	}
	var d configDoc
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return c, fmt.Errorf("failed to parse configuration: %w", quote.JSONError(err, dec.InputOffset(), len(data)))
	}
	// Not dec.More, which does not see a stray ] or }.
	if rest := bytes.Trim(data[dec.InputOffset():], jsonSpace); len(rest) > 0 {
		return c, fmt.Errorf("failed to parse configuration: trailing data after the JSON object at byte %d: %q", dec.InputOffset(), truncate(string(rest)))
	}
	return c.merge(&d, func(string) string { return "" })
}

// merge applies the fields present in d to c and validates the result.
// Each error names its field (ga.population for a field of the ga block),
// preceded by at(field), which says where the document set it ("" if
// unknown). On error c is returned unchanged.
func (c Config) merge(d *configDoc, at func(field string) string) (Config, error) {
	out := c
	var errs []error
	dur := func(name string, s *string, dst *time.Duration) {
		if s == nil {
			return
		}
		if name == "restart_penalty" && strings.TrimSpace(*s) == off {
			*dst = 0
			return
		}
		v, err := time.ParseDuration(*s)
		if err != nil {
			// Not err, which quotes the whole value.
			errs = append(errs, fmt.Errorf("%s%s: want a duration such as \"60s\" or \"1m30s\", got %q", at(name), name, truncate(*s)))
			return
		}
		*dst = v
	}
	dur("interval", d.Interval, &out.Interval)
	dur("restart_penalty", d.RestartPenalty, &out.RestartPenalty)
	dur("restart_time_max", d.RestartTimeMax, &out.RestartTimeMax)
	dur("state_gc_grace", d.StateGCGrace, &out.StateGCGrace)
	if d.FairnessP != nil {
		out.FairnessP = *d.FairnessP
		if *d.FairnessP == 0 {
			errs = append(errs, fmt.Errorf("%sfairness_p: 0 is not allowed (use a small non-zero value for a near-geometric mean)", at("fairness_p")))
		}
	}
	if d.Device != nil {
		out.Device = *d.Device
	}
	if d.NodePool != nil {
		out.NodePool = *d.NodePool
	}
	if d.MaxGPUsPerJob != nil {
		out.MaxGPUsPerJob = *d.MaxGPUsPerJob
	}
	if d.RecordRounds != nil {
		out.RecordRounds = *d.RecordRounds
	}
	if d.DryRun != nil {
		out.DryRun = *d.DryRun
	}
	if d.KVPrefix != nil {
		out.KVPrefix = *d.KVPrefix
	}
	if d.InterferenceAvoidance != nil {
		out.InterferenceAvoidance = *d.InterferenceAvoidance
	}
	if d.ExploreFactor != nil {
		out.ExploreFactor = *d.ExploreFactor
	}
	if d.ExploreStart != nil {
		out.ExploreStart = *d.ExploreStart
	}
	if d.Policy != nil {
		out.Policy = *d.Policy
	}
	if d.GPUTypeSource != nil {
		out.GPUTypeSource = *d.GPUTypeSource
	}
	if d.GPUTypeMap != nil {
		out.GPUTypeMap = *d.GPUTypeMap
	}
	if d.GPUTypeSpeed != nil {
		out.GPUTypeSpeed = *d.GPUTypeSpeed
	}
	if d.GA != nil {
		if d.GA.Population != nil {
			out.Population = *d.GA.Population
		}
		if d.GA.Generations != nil {
			out.Generations = *d.GA.Generations
		}
		if d.GA.Seed != nil {
			out.Seed = *d.GA.Seed
		}
	}
	if d.Autoscaling != nil {
		a, err := d.Autoscaling.config(func(string) string { return "" }, func(int, string) string { return "" })
		if err != nil {
			errs = append(errs, err)
		} else {
			out.Autoscale = a
		}
	}
	for _, p := range out.Pollux.merge(d) {
		var fe fieldError
		if errors.As(p, &fe) && at(fe.field) != "" {
			p = fmt.Errorf("%s%w", at(fe.field), p)
		}
		errs = append(errs, p)
	}
	for _, p := range out.problems() {
		var fe fieldError
		if errors.As(p, &fe) && at(fe.field) != "" {
			p = fmt.Errorf("%s%w", at(fe.field), p)
		}
		errs = append(errs, p)
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("invalid configuration: %w", err)
	}
	return out, nil
}

// fieldError is an invalid value of one field, named as in the document.
type fieldError struct {
	field string
	err   error
}

func (e fieldError) Error() string { return e.field + ": " + e.err.Error() }
func (e fieldError) Unwrap() error { return e.err }

// Validate reports every invalid field at once.
func (c Config) Validate() error { return errors.Join(c.problems()...) }

// problems returns one fieldError for each invalid field.
func (c Config) problems() []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fieldError{field: field, err: fmt.Errorf(format, args...)})
	}
	if c.Interval < time.Second || c.Interval > maxConfigDuration {
		bad("interval", "must be in [1s, %s], got %s", maxConfigDuration, c.Interval)
	}
	if math.IsNaN(c.FairnessP) || math.Abs(c.FairnessP) > 100 { // 0: unset, the policy's default
		bad("fairness_p", "must be non-zero with |p| ≤ 100, got %g", c.FairnessP)
	}
	if c.RestartPenalty < 0 || c.RestartPenalty > maxConfigDuration {
		bad("restart_penalty", "must be in [0s, %s], got %s", maxConfigDuration, c.RestartPenalty)
	}
	if c.RestartTimeMax < 0 || c.RestartTimeMax > maxConfigDuration {
		bad("restart_time_max", "must be in [0s, %s], got %s", maxConfigDuration, c.RestartTimeMax)
	}
	if c.StateGCGrace < 0 || c.StateGCGrace > maxGCGrace {
		bad("state_gc_grace", "must be in [0s, %s], got %s", maxGCGrace, c.StateGCGrace)
	}
	if parts := strings.Split(c.Device, "/"); len(c.Device) > maxConfigString || len(parts) < 2 || len(parts) > 3 || slicesHasEmpty(parts) {
		bad("device", "want vendor/type or vendor/type/name, got %q", truncate(c.Device))
	}
	if len(c.NodePool) > maxConfigString {
		bad("node_pool", "at most %d bytes, got %d", maxConfigString, len(c.NodePool))
	}
	if c.MaxGPUsPerJob < 0 || c.MaxGPUsPerJob > maxMetaValue {
		bad("max_gpus_per_job", "must be in [0, %d], got %d", maxMetaValue, c.MaxGPUsPerJob)
	}
	if c.RecordRounds < 0 || c.RecordRounds > maxRecordRounds {
		bad("record_rounds", "must be in [0, %d], got %d", maxRecordRounds, c.RecordRounds)
	}
	if c.KVPrefix == "" || len(c.KVPrefix) > maxConfigString || !strings.HasSuffix(c.KVPrefix, "/") || strings.HasPrefix(c.KVPrefix, "/") {
		bad("kv_prefix", "must be non-empty, at most %d bytes, end with / and not start with /, got %q", maxConfigString, truncate(c.KVPrefix))
	}
	if c.Population < 2 || c.Population > 10000 {
		bad("ga.population", "must be in [2, 10000], got %d", c.Population)
	}
	if c.Generations < 1 || c.Generations > 100000 {
		bad("ga.generations", "must be in [1, 100000], got %d", c.Generations)
	}
	if _, err := registry.TraitsOf(c.Policy); err != nil {
		bad("policy", "want %s, got %q", oneOf(registry.Names()), truncate(c.Policy))
	}
	if c.ExploreFactor < 1 || c.ExploreFactor > maxExploreFactor {
		bad("explore_factor", "must be in [1, %d], got %d", maxExploreFactor, c.ExploreFactor)
	}
	if c.ExploreStart < 1 || c.ExploreStart > maxExploreFactor {
		bad("explore_start", "must be in [1, %d], got %d", maxExploreFactor, c.ExploreStart)
	}
	errs = append(errs, c.gpuTypeProblems()...)
	if err := c.PolluxConfig().Validate(); err != nil {
		bad("pollux", "%v", err)
	}
	return errs
}

// Bounds of configuration values beyond which a value is certainly a
// mistake (and, for explore_factor, a GPU cap could overflow).
const (
	maxConfigDuration = 24 * time.Hour
	// maxGCGrace bounds state_gc_grace: a year.
	maxGCGrace       = 365 * 24 * time.Hour
	maxConfigString  = 256
	maxExploreFactor = 1 << 10
)

// jsonSpace is the white space JSON allows between tokens.
const jsonSpace = " \t\r\n"

func slicesHasEmpty(parts []string) bool {
	for _, p := range parts {
		if p == "" {
			return true
		}
	}
	return false
}

// oneOf lists names as "a, b or c".
func oneOf(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
