package model

import (
	"math"
	"testing"
)

func TestGainAndEfficiency(t *testing.T) {
	tests := map[string]struct {
		g                   GradParams
		m0, batch           float64
		wantGain, wantEffic float64
	}{
		"at M0 gain 1":                     {GradParams{Sqr: 1, Var: 3}, 100, 100, 1, 1},
		"r=2: 4/(1.5+1)":                   {GradParams{Sqr: 1, Var: 3}, 100, 200, 1.6, 0.8},
		"r=4: equals (phi+M0)/(phi+M)":     {GradParams{Sqr: 1, Var: 3}, 100, 400, 4 / 1.75, 400.0 / 700},
		"no noise: gain 1, efficiency 1/r": {GradParams{Sqr: 2, Var: 0}, 32, 128, 1, 0.25},
		"pure noise: gain r, efficiency 1": {GradParams{Sqr: 0, Var: 5}, 32, 128, 4, 1},
		"negative denominator: gain 1":     {GradParams{Sqr: -2, Var: 1}, 100, 200, 1, 0.5},
		"zero denominator: gain 1":         {GradParams{Sqr: -0.5, Var: 1}, 100, 200, 1, 0.5},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Gain(tc.g, tc.m0, tc.batch); !closeTo(got, tc.wantGain, floatTol) {
				t.Errorf("Gain = %.17g, want %.17g (relative tolerance %g)", got, tc.wantGain, floatTol)
			}
			if got := Efficiency(tc.g, tc.m0, tc.batch); !closeTo(got, tc.wantEffic, floatTol) {
				t.Errorf("Efficiency = %.17g, want %.17g (relative tolerance %g)", got, tc.wantEffic, floatTol)
			}
		})
	}
}

func TestScaleLR(t *testing.T) {
	g := GradParams{Sqr: 1, Var: 3}
	tests := map[string]struct {
		rule LRScaling
		want float64
	}{
		"adascale: lr0·gain(4) = 0.1·4/1.75": {AdaScale, 0.1 * 4 / 1.75},
		"adamscale: lr0·√(4/1.75)":           {AdamScale, 0.1 * math.Sqrt(4/1.75)},
		"legw: lr0·2 after the warm-up":      {LEGW, 0.2},
		"linear: lr0·4":                      {Linear, 0.4},
		"sqrt: lr0·2":                        {Sqrt, 0.2},
		"none: lr0":                          {NoScaling, 0.1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := ScaleLR(tc.rule, 0.1, g, 100, 400); !closeTo(got, tc.want, floatTol) {
				t.Errorf("ScaleLR(%q) = %.17g, want %.17g (relative tolerance %g)", tc.rule, got, tc.want, floatTol)
			}
		})
	}
}

func TestScaleLRPanicsOnUnknownRule(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("ScaleLR with an unknown rule did not panic")
		}
	}()
	ScaleLR(LRScaling("cubic"), 0.1, GradParams{}, 1, 2)
}

func TestParseLRScaling(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    LRScaling
		wantErr bool
	}{
		"adascale":          {in: "adascale", want: AdaScale},
		"adamscale":         {in: "adamscale", want: AdamScale},
		"legw":              {in: "legw", want: LEGW},
		"linear":            {in: "linear", want: Linear},
		"sqrt":              {in: "sqrt", want: Sqrt},
		"none":              {in: "none", want: NoScaling},
		"empty is default":  {in: "", want: AdaScale},
		"case matters":      {in: "Linear", wantErr: true},
		"unknown":           {in: "cubic", wantErr: true},
		"surrounding space": {in: " sqrt", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseLRScaling(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseLRScaling(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("ParseLRScaling(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestEfficiencyMatchesNoiseScale checks EFFICIENCY(M) = (φ + M0)/(φ + M)
// with φ = M0·var/sqr over a range of batch sizes.
func TestEfficiencyMatchesNoiseScale(t *testing.T) {
	g := GradParams{Sqr: 0.52, Var: 2.1}
	const m0 = 128.0
	phi := m0 * g.Var / g.Sqr
	for batch := m0; batch <= 65536; batch *= 1.7 {
		want := (phi + m0) / (phi + batch)
		if got := Efficiency(g, m0, batch); math.Abs(got-want) > 1e-12 {
			t.Errorf("Efficiency(M=%g) = %.17g, want %.17g (absolute tolerance 1e-12)", batch, got, want)
		}
	}
}
