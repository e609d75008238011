package registry

import (
	"strings"
	"testing"
)

// TestRegistry: every listed policy is made by name, with its traits;
// an unknown name is refused naming the known ones.
func TestRegistry(t *testing.T) {
	for _, name := range Names() {
		p, err := New(name, Settings{})
		if err != nil || p.Name() != name {
			t.Fatalf("New(%q): %v, %v", name, p, err)
		}
		if _, err := TraitsOf(name); err != nil {
			t.Fatalf("TraitsOf(%q): %v", name, err)
		}
	}
	if _, err := New("fifo", Settings{}); err == nil || !strings.Contains(err.Error(), "pollux, tiresias, optimus, sia") {
		t.Fatalf("unknown policy: %v", err)
	}
	if _, err := New("pollux", Settings{Pollux: PolluxConfig{FairnessP: 1000}}); err == nil {
		t.Fatal("an invalid pollux setting was accepted")
	}
	pollux, _ := TraitsOf("pollux")
	tiresias, _ := TraitsOf("tiresias")
	optimus, _ := TraitsOf("optimus")
	if !pollux.UsesGoodput || !pollux.AdaptiveBatch || pollux.NeedsOracle || tiresias.UsesGoodput || tiresias.AdaptiveBatch || !optimus.NeedsOracle || optimus.AdaptiveBatch {
		t.Fatalf("traits: pollux %+v, tiresias %+v, optimus %+v", pollux, tiresias, optimus)
	}
	l := JobLimits{Requested: 3, Cap: 16, BatchLimit: 8, Profiled: 1, Explore: 4}
	for traits, want := range map[Traits]int{pollux: 4, tiresias: 3, optimus: 8} {
		if got := traits.MaxReplicas(l); got != want {
			t.Errorf("%+v: max replicas %d, want %d", traits, got, want)
		}
	}
	// A job not yet profiled starts within Start (1 if unset).
	for start, want := range map[int]int{0: 1, 1: 1, 4: 4, 32: 8} {
		l := JobLimits{Cap: 16, BatchLimit: 8, Explore: 4, Start: start}
		if got := pollux.MaxReplicas(l); got != want {
			t.Errorf("unprofiled job, start %d: max replicas %d, want %d", start, got, want)
		}
	}
	// Once profiled, the larger of Explore×Profiled and Start.
	if got := pollux.MaxReplicas(JobLimits{Cap: 64, BatchLimit: 64, Profiled: 1, Explore: 2, Start: 4}); got != 4 {
		t.Errorf("profiled on 1 GPU, explore 2, start 4: max replicas %d, want 4", got)
	}
	if sia, _ := TraitsOf("sia"); !sia.UsesGoodput || !sia.AdaptiveBatch || sia.Replicas != ExploreReplicas {
		t.Fatalf("traits: sia %+v", sia)
	}
	s := Settings{Pollux: PolluxConfig{Seed: 5}, Tiresias: TiresiasConfig{PromoteKnob: 2}, Sia: SiaConfig{ArtifactRestartPenalties: true}}
	if Relevant("sia", s) != (Settings{Sia: s.Sia}) {
		t.Fatalf("relevant settings: %+v", Relevant("sia", s))
	}
	if Relevant("tiresias", s) != (Settings{Tiresias: s.Tiresias}) || Relevant("pollux", s) != (Settings{Pollux: s.Pollux}) || Relevant("optimus", s) != (Settings{}) {
		t.Fatalf("relevant settings: %+v, %+v", Relevant("tiresias", s), Relevant("pollux", s))
	}
}
