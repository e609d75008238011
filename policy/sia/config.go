package sia

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Defaults of Config: the Sia artifact's settings (siasosp23/artifacts,
// sia-simulator/simulator_config.py and sia.py; Sia, SOSP '23, §3-4).
const (
	// DefaultFairnessP is sia_default_p_val = −0.5.
	DefaultFairnessP = -0.5
	// DefaultLambdaN is sia_default_lambda_n = 1.1, the cost of leaving
	// a job without GPUs (more than the cost 1 of its slowest config).
	DefaultLambdaN = 1.1
	// DefaultRestartPenalty is the restart penalty of a job the
	// artifact's get_restart_penalty does not name: 30 s.
	DefaultRestartPenalty = 30.0
	// DefaultGap is sia_solver_thresh = 1e-4: the integer program is
	// solved to a relative gap of 0.01% (CBC's allowablePercentageGap).
	DefaultGap = 1e-4
	// GoodputClip is sia_goodput_clip_val: a cost above it is clipped.
	GoodputClip = 3000.0
	// siaMaxAbsP bounds |p| so that powers of normalised goodputs stay
	// finite.
	siaMaxAbsP = 100
)

// Config configures the Sia policy. The zero value gives the artifact's
// settings: p = −0.5, λn = 1.1, the Pollux restart factor, gap 1e-4.
//
// The artifact also takes λa (sia_default_lambda_a = 0.01, "penalty for
// change of alloc") but its objective never uses it (sia.py,
// __solve_mip_rescaled computes opt_lambda_alloc_change and drops it), so
// it is not a setting here either.
type Config struct {
	// FairnessP is the exponent p applied to each job's normalised goodput
	// (Sia, §3.3). 0 means −0.5. With p < 0 the programme minimises the
	// sum of powered goodputs (fairer for more negative p); with p > 0 it
	// maximises it. |p| must be at most 100.
	FairnessP float64
	// LambdaN is the cost of a job that gets no GPUs. 0 means 1.1 for
	// p < 0 and −1.1 for p > 0; its sign must be opposite to p's.
	LambdaN float64
	// RestartPenalty is the restart delay, in seconds, of the restart
	// factor max(T − R·δ, 0)/(T + δ) for a job whose RestartTime is 0.
	// 0 means 30.
	RestartPenalty float64
	// ArtifactRestartPenalties takes each job's δ from the artifact's
	// table by application name in the job ID (sia.py,
	// get_restart_penalty: deepspeech 25, imagenet 250, cifar 30, bert
	// 120, yolov3 45, others 30) instead of its RestartTime, as the
	// artifact's policy does in simulation whatever the simulated delay.
	ArtifactRestartPenalties bool
	// Gap is the relative optimality gap at which the integer programme
	// stops. 0 means 1e-4; a negative value means exact.
	Gap float64
	// IgnoreRestoring lets the policy move a job that is still restoring
	// from its last checkpoint. The default (false) keeps its allocation,
	// as the artifact (simulator_config.py, preserve_ckpt_allocs = True).
	IgnoreRestoring bool
	// MaxNodesByType caps the nodes of one job's configuration per GPU
	// type, as "type=nodes,type=nodes" (for example "t4=16,a100=2");
	// types not named are capped by their node count only. The artifact
	// caps each type at the nodes it was profiled on
	// (populate_valid_configs with cluster_max_physical_nnodes), which the
	// simulator passes under -rules sia.
	MaxNodesByType string
	// PreferCurrent breaks ties of the programme (equal costs after the
	// artifact's rounding to hundredths) in favour of a job's current
	// configuration, then its current type. The default (false) is the
	// artifact's: its solver picks any optimum, and the sia-philly
	// workloads come closer to its results that way (docs/experiments.md,
	// "Sia").
	PreferCurrent bool
	// Workers is the number of goroutines that evaluate goodputs. 0 means
	// GOMAXPROCS for at least 128 jobs and 1 below.
	Workers int
}

func (c Config) withDefaults() Config {
	if c.FairnessP == 0 {
		c.FairnessP = DefaultFairnessP
	}
	if c.LambdaN == 0 {
		c.LambdaN = DefaultLambdaN
		if c.FairnessP > 0 {
			c.LambdaN = -DefaultLambdaN
		}
	}
	if c.RestartPenalty == 0 {
		c.RestartPenalty = DefaultRestartPenalty
	}
	if c.Gap == 0 {
		c.Gap = DefaultGap
	}
	if c.Gap < 0 {
		c.Gap = 0
	}
	return c
}

// Validate reports every invalid field at once (zero fields are valid:
// they take the defaults).
func (c Config) Validate() error {
	var errs []error
	if math.IsNaN(c.FairnessP) || math.Abs(c.FairnessP) > siaMaxAbsP {
		errs = append(errs, fmt.Errorf("fairness p %v is not in [-%d, %d]", c.FairnessP, siaMaxAbsP, siaMaxAbsP))
	}
	d := c.withDefaults()
	if math.IsNaN(c.LambdaN) || math.IsInf(c.LambdaN, 0) {
		errs = append(errs, fmt.Errorf("lambda_n %v is not finite", c.LambdaN))
	} else if d.FairnessP < 0 && d.LambdaN <= 0 || d.FairnessP > 0 && d.LambdaN >= 0 {
		errs = append(errs, fmt.Errorf("lambda_n %v must have the sign opposite to p %v", d.LambdaN, d.FairnessP))
	}
	if math.IsNaN(c.RestartPenalty) || math.IsInf(c.RestartPenalty, 0) || c.RestartPenalty < 0 {
		errs = append(errs, fmt.Errorf("restart penalty %v s is not a finite non-negative number", c.RestartPenalty))
	}
	if math.IsNaN(c.Gap) || math.IsInf(c.Gap, 0) {
		errs = append(errs, fmt.Errorf("gap %v is not finite", c.Gap))
	}
	if c.Workers < 0 {
		errs = append(errs, fmt.Errorf("workers %d is negative", c.Workers))
	}
	if _, err := parseNodeLimits(c.MaxNodesByType); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid sia configuration: %w", err)
	}
	return nil
}

// parseNodeLimits parses MaxNodesByType.
func parseNodeLimits(spec string) (map[string]int, error) {
	out := map[string]int{}
	if strings.TrimSpace(spec) == "" {
		return out, nil
	}
	for _, part := range strings.Split(spec, ",") {
		name, num, ok := strings.Cut(strings.TrimSpace(part), "=")
		n, err := strconv.Atoi(strings.TrimSpace(num))
		if !ok || err != nil || n < 1 {
			return nil, fmt.Errorf("max nodes by type: %q is not type=nodes with nodes ≥ 1", part)
		}
		out[strings.TrimSpace(name)] = n
	}
	return out, nil
}
