package pollux

import "testing"

// TestServiceStep: with steps the attained service the weight uses is
// rounded down to A0/8 times a power of two (0 below A0/8), so a job's
// weight changes only when its service doubles; without, it is the
// service itself.
func TestServiceStep(t *testing.T) {
	const a0 = 800.0 // unit 100 GPU-seconds
	for _, tc := range []struct {
		s, want float64
		steps   bool
	}{
		{0, 0, true}, {99, 0, true}, {100, 100, true}, {199, 100, true}, {200, 200, true},
		{399, 200, true}, {400, 400, true}, {1e6, 100 * 8192, true}, {-5, 0, true},
		{150, 150, false}, {0, 0, false},
	} {
		if got := serviceStep(tc.s, a0, tc.steps); got != tc.want {
			t.Errorf("serviceStep(%v, %v, %v) = %v, want %v", tc.s, a0, tc.steps, got, tc.want)
		}
	}
}
