package policy

import "testing"

func TestPolluxHelperBackoff(t *testing.T) {
	// A round that drops its helpers makes the next 1, 2, 4, ... 16
	// rounds go alone; a round that keeps them resets the backoff.
	pr := &polluxProblem{parallel: 2, adaptive: true}
	round := func(fellBack bool) {
		pr.startRound()
		if fellBack && pr.helpers > 0 {
			// What breed does after polluxMaxStrikes useless batches.
			pr.helpers, pr.fellBack = 0, true
		}
		pr.endRound()
	}
	var got []int
	for range 7 {
		round(true) // falls back, then sits out aloneRounds rounds
		got = append(got, pr.aloneRounds)
		for pr.aloneRounds > 0 {
			round(false)
		}
	}
	want := []int{1, 2, 4, 8, 16, 16, 16}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("rounds alone after each fallback %v, want %v", got, want)
		}
	}
	round(false) // keeps its helpers
	if pr.backoff != 0 || pr.aloneRounds != 0 {
		t.Errorf("after a round with helpers: backoff %d, alone %d; want 0, 0", pr.backoff, pr.aloneRounds)
	}
	round(true)
	if pr.aloneRounds != 1 {
		t.Errorf("after a fallback that follows a good round: alone %d, want 1", pr.aloneRounds)
	}
	if pr.startRound(); pr.helpers != 0 {
		t.Errorf("the round after a fallback has %d helpers, want 0", pr.helpers)
	}
	pr.endRound()
	if pr.startRound(); pr.helpers != 1 {
		t.Errorf("the round after the rounds alone has %d helpers, want 1", pr.helpers)
	}
}
