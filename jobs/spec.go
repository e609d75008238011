package jobs

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/pollux-nomad/pollux/model"
)

// Meta keys of contracts.md §1.
const (
	MetaEnabled       = "pollux_enabled"
	MetaGroup         = "pollux_group"
	MetaInitBatchSize = "pollux_init_batch_size"
	MetaInitLR        = "pollux_init_lr"
	MetaMaxBatchSize  = "pollux_max_batch_size"
	MetaLocalBszMin   = "pollux_local_bsz_min"
	MetaLocalBszMax   = "pollux_local_bsz_max"
	MetaAccumulation  = "pollux_accumulation"
	MetaLRScaling     = "pollux_lr_scaling"
	MetaMinGPUs       = "pollux_min_gpus"
	MetaMaxGPUs       = "pollux_max_gpus"

	MetaBatchSize   = "pollux_batch_size"
	MetaLocalBsz    = "pollux_local_bsz"
	MetaAccumSteps  = "pollux_accum_steps"
	MetaLR          = "pollux_lr"
	MetaNumReplicas = "pollux_num_replicas"
	MetaNumNodes    = "pollux_num_nodes"
	MetaPlacement   = "pollux_placement"
	MetaRound       = "pollux_round"
)

// maxMetaValue bounds a numeric meta value: beyond it a batch size or GPU
// count is certainly a typo.
const maxMetaValue = 1 << 24

// Spec is a job's parsed, validated Pollux settings.
type Spec struct {
	InitBatchSize int
	InitLR        float64
	MaxBatchSize  int
	LocalBszMin   int
	LocalBszMax   int
	Accumulation  bool
	LRScaling     model.LRScaling
	MinGPUs       int
	// MaxGPUs is 0 when the author set no bound.
	MaxGPUs int
}

// Bounds are the batch-size limits for the goodput optimiser.
func (s Spec) Bounds() model.Bounds {
	return model.Bounds{MaxBatchSize: s.MaxBatchSize, MinLocalBsz: s.LocalBszMin, MaxLocalBsz: s.LocalBszMax, Accumulation: s.Accumulation}
}

// ParseSpec reads and validates a job's author-written meta keys. Every
// problem is reported at once, each naming its key.
func ParseSpec(meta map[string]string) (Spec, error) {
	var errs []error
	intKey := func(key string, def int, required bool) int {
		raw, ok := meta[key]
		if !ok {
			if required {
				errs = append(errs, fmt.Errorf("%s: required", key))
			}
			return def
		}
		v, err := strconv.Atoi(strings.TrimSpace(raw))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: not an integer: %q", key, truncate(raw)))
			return def
		}
		if v < 1 || v > maxMetaValue {
			errs = append(errs, fmt.Errorf("%s: must be in [1, %d], got %d", key, maxMetaValue, v))
			return def
		}
		return v
	}
	s := Spec{}
	s.InitBatchSize = intKey(MetaInitBatchSize, 1, true)
	if raw, ok := meta[MetaInitLR]; !ok {
		errs = append(errs, fmt.Errorf("%s: required", MetaInitLR))
	} else if v, err := strconv.ParseFloat(strings.TrimSpace(raw), 64); err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
		errs = append(errs, fmt.Errorf("%s: must be a positive finite number, got %q", MetaInitLR, truncate(raw)))
	} else {
		s.InitLR = v
	}
	s.MaxBatchSize = intKey(MetaMaxBatchSize, s.InitBatchSize, false)
	s.LocalBszMin = intKey(MetaLocalBszMin, 1, false)
	s.LocalBszMax = intKey(MetaLocalBszMax, s.InitBatchSize, false)
	s.MinGPUs = intKey(MetaMinGPUs, 1, false)
	if _, ok := meta[MetaMaxGPUs]; ok {
		s.MaxGPUs = intKey(MetaMaxGPUs, 0, false)
	}
	s.Accumulation = true
	if raw, ok := meta[MetaAccumulation]; ok {
		b, err := strconv.ParseBool(strings.TrimSpace(raw))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: want true or false, got %q", MetaAccumulation, truncate(raw)))
		}
		s.Accumulation = b
	}
	rule, err := model.ParseLRScaling(strings.TrimSpace(meta[MetaLRScaling]))
	if err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", MetaLRScaling, err))
	}
	s.LRScaling = rule
	if s.MaxBatchSize < s.InitBatchSize {
		errs = append(errs, fmt.Errorf("%s: %d is below %s %d", MetaMaxBatchSize, s.MaxBatchSize, MetaInitBatchSize, s.InitBatchSize))
	}
	if s.LocalBszMax < s.LocalBszMin {
		errs = append(errs, fmt.Errorf("%s: %d is below %s %d", MetaLocalBszMax, s.LocalBszMax, MetaLocalBszMin, s.LocalBszMin))
	}
	if s.MaxGPUs > 0 && s.MaxGPUs < s.MinGPUs {
		errs = append(errs, fmt.Errorf("%s: %d is below %s %d", MetaMaxGPUs, s.MaxGPUs, MetaMinGPUs, s.MinGPUs))
	}
	if s.LocalBszMin > s.MaxBatchSize {
		errs = append(errs, fmt.Errorf("%s: %d is above the largest batch size %d", MetaLocalBszMin, s.LocalBszMin, s.MaxBatchSize))
	}
	return s, errors.Join(errs...)
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
