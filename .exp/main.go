package main

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/pollux-nomad/pollux/policy"
	"github.com/pollux-nomad/pollux/results"
	"github.com/pollux-nomad/pollux/sim"
)

func main() {
	w, cl := os.Args[1], os.Args[2]
	mv, _ := strconv.ParseFloat(os.Args[3], 64)
	groups, _ := sim.ParseCluster(cl)
	a, _ := sim.LoadTypedApplications(sim.RulesSia)
	jobs, wl, err := sim.LoadWorkload(w, a)
	if err != nil {
		panic(err)
	}
	h, _ := strconv.ParseFloat(os.Args[4], 64)
	pol, _ := policy.NewPollux(policy.PolluxConfig{Seed: 1, TypeMoveProbability: mv, RestartHysteresis: h, ExemptGrowth: os.Args[5] == "1"})
	s, err := sim.New(sim.Config{Cluster: groups, Rules: sim.RulesSia}, a, jobs, wl, pol)
	if err != nil {
		panic(err)
	}
	run, err := s.Run(context.Background(), nil)
	if err != nil {
		panic(err)
	}
	m := results.Summarize(run)
	fmt.Printf("%s %v move=%v avg %.0f p99 %.0f rst %.2f mk %.0f\n", w, os.Args[3:], mv, m.AvgJCT, m.P99JCT, m.RestartsPerJob, m.Makespan)
}
