package pollux_test

import (
	"context"
	"testing"

	pt "github.com/pollux-nomad/pollux/policy/policytest"
	"github.com/pollux-nomad/pollux/policy/pollux"
)

// TestPolluxConfigSeed: on the Sia cluster at 16x and 32x (1,024 and
// 2,048 GPUs of three types) with more jobs than the search's budget
// covers, the round started also from the configuration seed reaches a
// better fitness than the search alone at the same budget, and its
// allocation passes the generic checks (capacity, caps, one type per job,
// no two distributed jobs on a node). Inputs at seeds the seed's design
// was not tried on.
func TestPolluxConfigSeed(t *testing.T) {
	for _, tc := range []struct {
		k, jobs int
		seed    uint64
	}{{16, 600, 11}, {32, 1500, 23}} {
		in := pt.TypedClusterInput(tc.seed, pt.SiaCluster(tc.k), tc.jobs)
		fitness := map[int]float64{}
		for _, on := range []int{-1, 1} {
			p, err := pollux.New(pollux.Config{Seed: 5, Population: 30, Generations: 20, ConfigSeed: on})
			if err != nil {
				t.Fatal(err)
			}
			out, err := p.Optimize(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			if err := pt.Check(in, out, pt.CheckOptions{NoInterference: true, NodeOrder: true}); err != nil {
				t.Fatalf("%dx, config seed %d: %v", tc.k, on, err)
			}
			fitness[on] = p.LastStats().BestFitness
		}
		t.Logf("%dx, %d jobs: fitness %.4f without the configuration seed, %.4f with it", tc.k, tc.jobs, fitness[-1], fitness[1])
		if !(fitness[1] > fitness[-1]) {
			t.Errorf("%dx: fitness with the configuration seed %.4f, without %.4f: want better", tc.k, fitness[1], fitness[-1])
		}
	}
}
