// Package pollux is the Pollux policy (Qiao et al., OSDI '21, §4): each
// round a genetic algorithm (NSGA-II, ga.go) searches the jobs × nodes
// allocation matrices for the best power mean of the jobs' goodput
// speedups, penalising restarts. Config holds its knobs; Config.Resolve
// gives the values it runs with on a cluster's regime.
package pollux
