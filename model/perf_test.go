package model

import (
	"math"
	"strings"
	"testing"
)

// testPerf is a hand-friendly parameter set.
var testPerf = PerfParams{AlphaC: 0.1, BetaC: 0.01, AlphaN: 0.5, BetaN: 0.05, AlphaR: 0.2, BetaR: 0.02, Gamma: 1}

func withGamma(p PerfParams, g float64) PerfParams { p.Gamma = g; return p }

// floatTol is the relative tolerance of the hand-computed checks.
const floatTol = 1e-12

func closeTo(got, want, rel float64) bool {
	return got == want || math.Abs(got-want) <= rel*math.Max(math.Abs(got), math.Abs(want))
}

func TestAccumStepTime(t *testing.T) {
	tests := map[string]struct {
		m, want float64
	}{
		"m=0":  {m: 0, want: 0.1},
		"m=10": {m: 10, want: 0.2},
		"m=64": {m: 64, want: 0.74},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := testPerf.AccumStepTime(tc.m); !closeTo(got, tc.want, floatTol) {
				t.Errorf("AccumStepTime(%g) = %.17g, want %.17g (relative tolerance %g)", tc.m, got, tc.want, floatTol)
			}
		})
	}
}

func TestSyncTime(t *testing.T) {
	tests := map[string]struct {
		nodes, replicas int
		want            float64
	}{
		"single GPU: 1e-8 + 1e-8·1e-8":           {1, 1, 1e-8 + 1e-16},
		"two GPUs one node: K−2 floored at 1e-8": {1, 2, 0.2 + 0.02*1e-8},
		"four GPUs one node":                     {1, 4, 0.2 + 0.02*2},
		"two nodes two GPUs":                     {2, 2, 0.5 + 0.05*1e-8},
		"two nodes eight GPUs":                   {2, 8, 0.5 + 0.05*6},
		"sixteen nodes 64 GPUs":                  {16, 64, 0.5 + 0.05*62},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := testPerf.SyncTime(tc.nodes, tc.replicas); !closeTo(got, tc.want, floatTol) {
				t.Errorf("SyncTime(%d, %d) = %.17g, want %.17g (relative tolerance %g)", tc.nodes, tc.replicas, got, tc.want, floatTol)
			}
		})
	}
}

func TestOptimStepTime(t *testing.T) {
	tests := map[string]struct {
		p               PerfParams
		nodes, replicas int
		m, want         float64
	}{
		"gamma 1 adds: 0.2 + 0.24":       {testPerf, 1, 4, 10, 0.44},
		"gamma 2 is the Euclidean norm":  {withGamma(testPerf, 2), 2, 8, 10, math.Sqrt(0.2*0.2 + 0.8*0.8)},
		"gamma 10 is nearly the max":     {withGamma(testPerf, 10), 2, 8, 10, 0.8 * math.Pow(1+math.Pow(0.25, 10), 0.1)},
		"single GPU is the compute time": {withGamma(testPerf, 2), 1, 1, 10, math.Sqrt(0.04 + (1e-8+1e-16)*(1e-8+1e-16))},
		"huge times with gamma 10 do not overflow": {
			PerfParams{AlphaC: 1e40, BetaC: 0, AlphaN: 1e40, BetaN: 0, AlphaR: 1, BetaR: 1, Gamma: 10},
			2, 2, 1, 1e40 * math.Pow(2, 0.1),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.p.OptimStepTime(tc.nodes, tc.replicas, tc.m); !closeTo(got, tc.want, floatTol) {
				t.Errorf("OptimStepTime(%d, %d, %g) = %.17g, want %.17g (relative tolerance %g)", tc.nodes, tc.replicas, tc.m, got, tc.want, floatTol)
			}
		})
	}
}

func TestIterTimeAndThroughput(t *testing.T) {
	p2 := withGamma(testPerf, 2)
	opt := math.Sqrt(0.68) // (0.2² + 0.8²)^(1/2) on 2 nodes, 8 GPUs, m = 10
	tests := map[string]struct {
		p               PerfParams
		nodes, replicas int
		m               float64
		s               int
		wantIter        float64
		wantThroughput  float64
	}{
		"no accumulation": {p2, 2, 8, 10, 0, opt, 80 / opt},
		"three accumulation steps: 3·T_grad + T_optstep, M = 8·10·4": {
			p2, 2, 8, 10, 3, 3*0.2 + opt, 320 / (3*0.2 + opt),
		},
		"single GPU, one accumulation step": {
			testPerf, 1, 1, 32, 1, 0.42 + 0.42 + 1e-8 + 1e-16, 64 / (0.84 + 1e-8 + 1e-16),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.p.IterTime(tc.nodes, tc.replicas, tc.m, tc.s); !closeTo(got, tc.wantIter, floatTol) {
				t.Errorf("IterTime = %.17g, want %.17g (relative tolerance %g)", got, tc.wantIter, floatTol)
			}
			if got := tc.p.Throughput(tc.nodes, tc.replicas, tc.m, tc.s); !closeTo(got, tc.wantThroughput, floatTol) {
				t.Errorf("Throughput = %.17g, want %.17g (relative tolerance %g)", got, tc.wantThroughput, floatTol)
			}
		})
	}
}

func TestPerfParamsValidate(t *testing.T) {
	tests := map[string]struct {
		p        PerfParams
		wantErrs []string // substrings; none means valid
	}{
		"valid":                 {p: testPerf},
		"floor values":          {p: PerfParams{1e-8, 1e-8, 1e-8, 1e-8, 1e-8, 1e-8, 1}},
		"gamma 10":              {p: withGamma(testPerf, 10)},
		"NaN alpha_c":           {p: PerfParams{math.NaN(), 0.01, 0.5, 0.05, 0.2, 0.02, 1}, wantErrs: []string{"alpha_c: must be finite and at least 1e-08, got NaN"}},
		"zero beta_n":           {p: PerfParams{0.1, 0.01, 0.5, 0, 0.2, 0.02, 1}, wantErrs: []string{"beta_n: must be finite and at least 1e-08, got 0"}},
		"infinite alpha_r":      {p: PerfParams{0.1, 0.01, 0.5, 0.05, math.Inf(1), 0.02, 1}, wantErrs: []string{"alpha_r: must be finite"}},
		"gamma below 1":         {p: withGamma(testPerf, 0.5), wantErrs: []string{"gamma: must be in [1, 10], got 0.5"}},
		"gamma NaN":             {p: withGamma(testPerf, math.NaN()), wantErrs: []string{"gamma: must be in [1, 10], got NaN"}},
		"zero value, all named": {p: PerfParams{}, wantErrs: []string{"alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r", "beta_r", "gamma"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.p.Validate()
			if len(tc.wantErrs) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want errors %q", tc.wantErrs)
			}
			for _, want := range tc.wantErrs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Validate() = %q, want it to contain %q", err, want)
				}
			}
		})
	}
}
