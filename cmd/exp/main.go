package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"

	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/report"
	"github.com/pollux-nomad/pollux/sim"
)

func main() {
	whole := flag.Bool("whole", false, "")
	pen := flag.Float64("penalty", 0, "")
	p := flag.Float64("p", 0, "")
	gens := flag.Int("gens", 0, "")
	par := flag.Int("par", 2, "")
	explore := flag.Int("explore", 0, "")
	flag.Parse()
	a, err := sim.LoadApplications("")
	if err != nil {
		panic(err)
	}
	ref := map[string]float64{"workload-1": 2088.8, "workload-2": 3322.9, "workload-3": 2188.5, "workload-4": 2721.0, "workload-5": 2673.7, "workload-6": 2446.1, "workload-7": 3616.1, "workload-8": 2951.9}
	res := make([]report.Summary, 8)
	var wg sync.WaitGroup
	sem := make(chan struct{}, *par)
	for i := 1; i <= 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			jobs, name, err := sim.LoadWorkload(fmt.Sprintf("workload-%d", i), a)
			if err != nil {
				panic(err)
			}
			pol, _ := policy.NewPollux(policy.PolluxConfig{Seed: 1, SeedFromWholePopulation: *whole, RestartPenalty: *pen, FairnessP: *p, Generations: *gens})
			s, err := sim.New(sim.Config{ExploreFactor: *explore}, a, jobs, name, pol)
			if err != nil {
				panic(err)
			}
			r, err := s.Run(context.Background(), nil)
			if err != nil {
				panic(err)
			}
			res[i-1] = report.Summarize(r)
		}()
	}
	wg.Wait()
	var tot, rst, p99 float64
	for _, s := range res {
		fmt.Printf("%s %.1f (%+.1f%%) rst %.2f p99 %.0f ms %.1f wall %.1f\n", s.Workload, s.AvgJCT, 100*(s.AvgJCT/ref[s.Workload]-1), s.RestartsPerJob, s.P99JCT, s.OptimizeMsMedian, s.WallSeconds)
		tot += s.AvgJCT
		rst += s.RestartsPerJob
		p99 += s.P99JCT
	}
	fmt.Printf("MEAN %.1f (%+.2f%% vs 2751.1) restarts/job %.2f p99 %.0f\n", tot/8, 100*(tot/8/2751.1-1), rst/8, p99/8)
	_ = json.NewEncoder(os.Stderr)
}
