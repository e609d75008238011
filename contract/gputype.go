package contract

import "fmt"

// MaxGPUTypeLen bounds a GPU type name (a profile entry's gpu_type, a
// decision's gpu_type, a type in the state): the longest NVIDIA model
// names are about 30 bytes.
const MaxGPUTypeLen = 64

// MetaGPUType is the job meta key with the GPU type of the allocation
// the controller applied (Decision.GPUType); workers read it as
// NOMAD_META_pollux_gpu_type and report it as their profile entries'
// gpu_type (docs/contracts.md §1 and §3).
const MetaGPUType = "pollux_gpu_type"

// EnvGPUType is the environment variable a job author may set on the
// worker task (for example to "${meta.gpu_type}" or another node meta or
// attribute) to tell the reporters the GPU type the worker runs on; it
// wins over NOMAD_META_pollux_gpu_type.
const EnvGPUType = "POLLUX_GPU_TYPE"

// ValidGPUType reports why s is not a valid GPU type name: 1 to
// MaxGPUTypeLen bytes of ASCII letters, digits, space, '.', '_', '+',
// '-'. The set keeps the canonical metrics encoding the same in every
// language (no character that JSON encoders escape differently) and
// covers the names NVIDIA's device plugin gives ("Tesla T4",
// "NVIDIA A100-SXM4-40GB").
func ValidGPUType(s string) error {
	if s == "" || len(s) > MaxGPUTypeLen {
		return fmt.Errorf("must be 1 to %d bytes, got %d", MaxGPUTypeLen, len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == ' ' || c == '.' || c == '_' || c == '+' || c == '-'
		if !ok {
			return fmt.Errorf("byte %d (%q) is not a letter, digit, space, '.', '_', '+' or '-'", i, c)
		}
	}
	return nil
}
