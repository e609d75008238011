package pollux

import (
	"context"
	"math"
	"testing"

	"github.com/pollux-nomad/pollux/policy"
)

// TestPolluxStandInKnee: on a cluster of several GPU types the stand-in
// speedup of a job without a model rises at StandInKneeSlope per GPU
// past StandInKnee GPUs (so 8 GPUs are worth 4 + 0.5·4 = 6 of the first),
// linearly with StandInKnee < 0 and on a cluster of one type; and a lone
// new job still takes every idle GPU it may have.
func TestPolluxStandInKnee(t *testing.T) {
	typed := []policy.Node{{ID: "t4-0", GPUs: 8, Type: "t4"}, {ID: "a100-0", GPUs: 8, Type: "a100"}}
	one := []policy.Node{{ID: "n0", GPUs: 8}, {ID: "n1", GPUs: 8}}
	for _, tc := range []struct {
		name  string
		nodes []policy.Node
		knee  int
		want  float64 // speedup on 8 GPUs over speedup on 4
	}{
		{"typed, default knee", typed, 0, (TypedStandInKnee + StandInKneeSlope*4) / 4},
		{"typed, knee off", typed, -1, 2},
		{"typed, knee 2", typed, 2, (2 + StandInKneeSlope*6) / (2 + StandInKneeSlope*2)},
		{"one type", one, 0, 2},
	} {
		p, err := New(Config{Seed: 1, StandInKnee: tc.knee})
		if err != nil {
			t.Fatal(err)
		}
		in := policy.Input{Now: 100, Nodes: tc.nodes, Current: policy.Allocations{}, Jobs: []policy.Job{
			{ID: "new", MaxReplicas: 8, Age: 10, ProbeSpeed: map[string]float64{"t4": 1, "a100": 4}},
		}}
		out, err := p.Optimize(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(out["new"]); n != 8 {
			t.Errorf("%s: a lone new job got %d GPUs, want all 8 of one node", tc.name, n)
		}
		pr := &p.prob
		for ty := range pr.ntypes {
			got := pr.computeSpeedup(0, ty, 1, 8) / pr.computeSpeedup(0, ty, 1, 4)
			if math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("%s, type %d: stand-in speedup on 8 GPUs / on 4 = %v, want %v", tc.name, ty, got, tc.want)
			}
		}
	}
}
