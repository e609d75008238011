package jobs

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/pollux-nomad/pollux/contract"
	"github.com/pollux-nomad/pollux/model"

	"github.com/pollux-nomad/pollux/contract/quote"
)

// maxMetaValue bounds a numeric meta value: beyond it a batch size or GPU
// count is certainly a typo.
const maxMetaValue = contract.MaxMetaValue

// maxInitLR bounds pollux_init_lr: beyond it a learning rate is certainly
// a typo, and below it every scaled rate (at most maxMetaValue times the
// initial one) stays finite.
const maxInitLR = 1e6

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
	// Model is the job's pollux_model ("" when not set): jobs of one
	// model share their throughput profiles.
	Model string
}

// Bounds are the batch-size limits for the goodput optimiser.
func (s Spec) Bounds() model.Bounds {
	return model.Bounds{MaxBatchSize: s.MaxBatchSize, MinLocalBsz: s.LocalBszMin, MaxLocalBsz: s.LocalBszMax, Accumulation: s.Accumulation}
}

// ParseSpec reads and validates a job's author-written meta keys. Every
// problem is reported at once, each on its own line naming its key and
// quoting at most 40 bytes of the value. Numbers are decimal (surrounding
// white space allowed): integers in [1, 2^24], pollux_init_lr in
// (0, 1e6]; pollux_min_gpus GPUs at pollux_local_bsz_min must fit in
// pollux_max_batch_size.
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
		if errors.Is(err, strconv.ErrRange) {
			errs = append(errs, fmt.Errorf("%s: must be in [1, %d], got %q", key, maxMetaValue, truncate(raw)))
			return def
		}
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
	s.InitBatchSize = intKey(contract.MetaInitBatchSize, 1, true)
	if raw, ok := meta[contract.MetaInitLR]; !ok {
		errs = append(errs, fmt.Errorf("%s: required", contract.MetaInitLR))
	} else if v, err := parseDecimal(raw); err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
		errs = append(errs, fmt.Errorf("%s: must be a positive finite number, got %q", contract.MetaInitLR, truncate(raw)))
	} else if v > maxInitLR {
		errs = append(errs, fmt.Errorf("%s: must be at most %g, got %q", contract.MetaInitLR, maxInitLR, truncate(raw)))
	} else {
		s.InitLR = v
	}
	s.MaxBatchSize = intKey(contract.MetaMaxBatchSize, s.InitBatchSize, false)
	s.LocalBszMin = intKey(contract.MetaLocalBszMin, 1, false)
	s.LocalBszMax = intKey(contract.MetaLocalBszMax, s.InitBatchSize, false)
	s.MinGPUs = intKey(contract.MetaMinGPUs, 1, false)
	if _, ok := meta[contract.MetaMaxGPUs]; ok {
		s.MaxGPUs = intKey(contract.MetaMaxGPUs, 0, false)
	}
	if raw, ok := meta[contract.MetaModel]; ok {
		if name := strings.TrimSpace(raw); validModelName(name) {
			s.Model = name
		} else {
			errs = append(errs, fmt.Errorf("%s: want 1 to %d letters, digits or . _ - : /, got %q", contract.MetaModel, maxModelName, truncate(raw)))
		}
	}
	s.Accumulation = true
	if raw, ok := meta[contract.MetaAccumulation]; ok {
		b, err := strconv.ParseBool(strings.TrimSpace(raw))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: want true or false, got %q", contract.MetaAccumulation, truncate(raw)))
		}
		s.Accumulation = b
	}
	rule, err := model.ParseLRScaling(strings.TrimSpace(meta[contract.MetaLRScaling]))
	if err != nil {
		// Not model's error: it quotes the whole value, which may be long.
		errs = append(errs, fmt.Errorf("%s: want adascale, adamscale, linear, sqrt, legw or none, got %q", contract.MetaLRScaling, truncate(meta[contract.MetaLRScaling])))
	}
	s.LRScaling = rule
	if s.MaxBatchSize < s.InitBatchSize {
		errs = append(errs, fmt.Errorf("%s: %d is below %s %d", contract.MetaMaxBatchSize, s.MaxBatchSize, contract.MetaInitBatchSize, s.InitBatchSize))
	}
	if s.LocalBszMax < s.LocalBszMin {
		errs = append(errs, fmt.Errorf("%s: %d is below %s %d", contract.MetaLocalBszMax, s.LocalBszMax, contract.MetaLocalBszMin, s.LocalBszMin))
	}
	if s.MaxGPUs > 0 && s.MaxGPUs < s.MinGPUs {
		errs = append(errs, fmt.Errorf("%s: %d is below %s %d", contract.MetaMaxGPUs, s.MaxGPUs, contract.MetaMinGPUs, s.MinGPUs))
	}
	if s.LocalBszMin > s.MaxBatchSize {
		errs = append(errs, fmt.Errorf("%s: %d is above the largest batch size %d", contract.MetaLocalBszMin, s.LocalBszMin, s.MaxBatchSize))
	} else if s.MinGPUs*s.LocalBszMin > s.MaxBatchSize {
		// Both are at most maxMetaValue, so the product cannot overflow.
		errs = append(errs, fmt.Errorf("%s: %d GPUs of at least %s %d exceed the largest batch size %d",
			contract.MetaMinGPUs, s.MinGPUs, contract.MetaLocalBszMin, s.LocalBszMin, s.MaxBatchSize))
	}
	return s, errors.Join(errs...)
}

// maxModelName bounds pollux_model.
const maxModelName = 128

// validModelName reports whether name is a usable pollux_model: 1 to
// maxModelName bytes of ASCII letters, digits and . _ - : /.
func validModelName(name string) bool {
	if name == "" || len(name) > maxModelName {
		return false
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-:/", r)
		if !ok {
			return false
		}
	}
	return true
}

// parseDecimal parses a decimal floating-point number, surrounding white
// space allowed. Unlike strconv.ParseFloat it refuses hexadecimal ("0x10")
// and digit separators, as the integer keys do.
func parseDecimal(raw string) (float64, error) {
	s := strings.TrimSpace(raw)
	if strings.ContainsAny(s, "xX_") {
		return 0, errors.New("not a decimal number")
	}
	return strconv.ParseFloat(s, 64)
}

// maxQuoted is how many bytes of a bad value an error message quotes.
const maxQuoted = 40

// truncate shortens s to at most maxQuoted bytes (see shorten), so that an
// error quoting a hostile value stays short.
func truncate(s string) string { return quote.Cut(s, maxQuoted) }
