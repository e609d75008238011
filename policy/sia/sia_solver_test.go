package sia

import (
	"context"
	"math/rand/v2"
	"testing"
)

// randomSiaProblem draws a small programme: jobs with options on 2-3
// types of small capacities.
func randomSiaProblem(rng *rand.Rand) ([]siaJob, []int) {
	T := 2 + rng.IntN(2)
	capacity := make([]int, T)
	for t := range capacity {
		capacity[t] = 1 + rng.IntN(10)
	}
	jobs := make([]siaJob, 1+rng.IntN(7))
	for i := range jobs {
		jobs[i] = siaJob{idx: i, prev: -1}
		for range rng.IntN(6) {
			jobs[i].options = append(jobs[i].options, siaOption{
				typ:   rng.IntN(T),
				gpus:  1 << rng.IntN(4),
				score: int64(1 + rng.IntN(40)),
			})
		}
	}
	return jobs, capacity
}

// bruteForce returns the best total score by trying every combination.
func bruteForce(jobs []siaJob, capacity []int) int64 {
	best := int64(0)
	used := make([]int, len(capacity))
	var rec func(i int, total int64)
	rec = func(i int, total int64) {
		if i == len(jobs) {
			best = max(best, total)
			return
		}
		rec(i+1, total)
		for _, o := range jobs[i].options {
			if used[o.typ]+o.gpus <= capacity[o.typ] {
				used[o.typ] += o.gpus
				rec(i+1, total+o.score)
				used[o.typ] -= o.gpus
			}
		}
	}
	rec(0, 0)
	return best
}

// scoreOf checks a choice against the capacities and returns its score.
func scoreOf(t *testing.T, jobs []siaJob, capacity []int, choice []int) int64 {
	t.Helper()
	used := make([]int, len(capacity))
	var total int64
	for i, c := range choice {
		if c < 0 {
			continue
		}
		o := jobs[i].options[c]
		used[o.typ] += o.gpus
		total += o.score
	}
	for k := range used {
		if used[k] > capacity[k] {
			t.Fatalf("type %d: %d GPUs used of %d", k, used[k], capacity[k])
		}
	}
	return total
}

// TestSiaSolversExact: the dynamic programme and the branch and bound
// (at gap 0) both find the brute-force optimum of random small
// programmes.
func TestSiaSolversExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 12))
	for n := range 500 {
		jobs, capacity := randomSiaProblem(rng)
		want := bruteForce(jobs, capacity)
		free := make([]int, len(jobs))
		for i := range free {
			free[i] = i
		}
		dp := make([]int, len(jobs))
		for i := range dp {
			dp[i] = -1
		}
		siaDP(jobs, free, capacity, dp)
		if got := scoreOf(t, jobs, capacity, dp); got != want {
			t.Fatalf("problem %d: dp score %d, brute force %d", n, got, want)
		}
		bb := make([]int, len(jobs))
		_, gap := siaBranchAndBound(context.Background(), jobs, free, capacity, bb, 0, func(b int64) int64 { return 1000 - b })
		if got := scoreOf(t, jobs, capacity, bb); got != want || gap != 0 {
			t.Fatalf("problem %d: branch and bound score %d (gap %v), brute force %d", n, got, gap, want)
		}
	}
}
