package apps

import (
	"slices"
	"testing"

	"github.com/pollux-nomad/pollux/data"
)

// TestTypedT4IsTheArtifactProfile: the t4 table of the typed applications
// (the Sia artifact's aws files) answers exactly as the Pollux artifact's
// untyped profile, on measured and interpolated placements.
func TestTypedT4IsTheArtifactProfile(t *testing.T) {
	typed, err := LoadTypedAll(data.SiaTraces(), PolluxConstants)
	if err != nil {
		t.Fatal(err)
	}
	untyped := artifact(t)
	for _, name := range Names() {
		ta, ua := typed[name], untyped[name]
		if !ta.ReplaysQhull() {
			t.Errorf("%s: t4 table does not replay the recorded tessellation", name)
		}
		if ta.MinLocalBsz != ua.MinLocalBsz || ta.MaxLocalBsz != ua.MaxLocalBsz || ta.MaxBatchSize != ua.MaxBatchSize {
			t.Errorf("%s: bounds differ: typed %d..%d/%d, untyped %d..%d/%d", name, ta.MinLocalBsz, ta.MaxLocalBsz, ta.MaxBatchSize, ua.MinLocalBsz, ua.MaxLocalBsz, ua.MaxBatchSize)
		}
		for _, p := range [][]int{{1}, {2}, {4}, {2, 2}, {4, 4, 1}, {3, 1, 2}, {4, 4, 4, 4, 4}} {
			for m := ua.MinLocalBsz; m <= ua.MaxLocalBsz; m += max(1, (ua.MaxLocalBsz-ua.MinLocalBsz)/7) {
				s1, y1, e1 := ta.ThroughputOn("t4", p, m)
				s2, y2, e2 := ua.Throughput(p, m)
				if (e1 == nil) != (e2 == nil) || s1 != s2 || y1 != y2 {
					t.Fatalf("%s %v m=%d: typed (%v, %v, %v), untyped (%v, %v, %v)", name, p, m, s1, y1, e1, s2, y2, e2)
				}
			}
		}
	}
}

// TestTypedTables: every application has the five types, the types differ
// in speed, a missing type is an error naming it, and the Sia constants
// differ from the Pollux ones where the artifacts do.
func TestTypedTables(t *testing.T) {
	sia, err := LoadTypedAll(data.SiaTraces(), SiaConstants)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a100", "rtx2080ti", "rtx6000", "t4", "v100"}
	for name, a := range sia {
		if got := a.Types(); !slices.Equal(got, want) {
			t.Errorf("%s: types %v, want %v", name, got, want)
		}
	}
	a := sia["cifar10"]
	s4, _, err := a.ThroughputOn("t4", []int{1}, 128)
	if err != nil {
		t.Fatal(err)
	}
	s100, _, err := a.ThroughputOn("a100", []int{1}, 128)
	if err != nil {
		t.Fatal(err)
	}
	if !(s100 < s4) {
		t.Errorf("cifar10 step at 128 on one GPU: a100 %v s not faster than t4 %v s", s100, s4)
	}
	if _, _, err := a.ThroughputOn("h100", []int{1}, 128); err == nil {
		t.Error("throughput on an unknown type: no error")
	}
	if _, hi, _ := sia["deepspeech2"].LocalBszBounds("rtx2080ti"); hi != 57 {
		t.Errorf("deepspeech2 on rtx2080ti: max local bsz %d, want 57 (Sia's applications.py)", hi)
	}
	if _, hi, _ := sia["yolov3"].LocalBszBounds("t4"); hi != 16 {
		t.Errorf("yolov3 on t4 under Sia's constants: max local bsz %d, want 16", hi)
	}
	if m := a.MaxLocalBszFor("a100", []int{8}); m <= 0 {
		t.Errorf("cifar10 on a100 [8]: max local bsz %d", m)
	}
	if m, ok := a.MaxLocalBszForReplicas("t4", 1); !ok || m <= 0 {
		t.Errorf("cifar10 on t4, 1 GPU: max local bsz %d, %v", m, ok)
	}
	// Interpolated placements work on the 8-GPU types (recorded or Go
	// tessellation).
	for _, ty := range []string{"a100", "rtx2080ti", "v100"} {
		if _, _, err := a.ThroughputOn(ty, []int{8, 3}, 64); err != nil {
			t.Errorf("cifar10 on %s [8 3]: %v", ty, err)
		}
	}
}

// TestMaxReplicasOn: the most GPUs measured per type is where lookups
// end: a placement of that many GPUs on the type's most nodes has an
// answer, one more GPU has none; an unknown type has none.
func TestMaxReplicasOn(t *testing.T) {
	sia, err := LoadTypedAll(data.SiaTraces(), SiaConstants)
	if err != nil {
		t.Fatal(err)
	}
	a := sia["cifar10"]
	for _, tc := range []struct {
		typ       string
		want      int
		at, above []int
	}{
		{"a100", 16, []int{8, 8}, []int{9, 8}},
		{"rtx2080ti", 24, []int{8, 8, 8}, []int{9, 8, 8}},
		{"t4", 64, []int{4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4}, []int{5, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4}},
	} {
		if got := a.MaxReplicasOn(tc.typ); got != tc.want {
			t.Errorf("cifar10 on %s: MaxReplicasOn %d, want %d", tc.typ, got, tc.want)
		}
		if _, _, err := a.ThroughputOn(tc.typ, tc.at, 64); err != nil {
			t.Errorf("cifar10 on %s %v: %v", tc.typ, tc.at, err)
		}
		if _, _, err := a.ThroughputOn(tc.typ, tc.above, 64); err == nil {
			t.Errorf("cifar10 on %s %v: an answer beyond the measured GPUs", tc.typ, tc.above)
		}
	}
	if got := a.MaxReplicasOn("h100"); got != 0 {
		t.Errorf("cifar10 on an unknown type: MaxReplicasOn %d, want 0", got)
	}
}
