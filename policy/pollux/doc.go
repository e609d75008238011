// Package pollux is the Pollux policy (Qiao et al., OSDI '21, §4): each
// round a genetic algorithm (NSGA-II, ga.go) searches the jobs × nodes
// allocation matrices for the best power mean of the jobs' goodput
// speedups, penalising restarts. Config holds its knobs; Config.Resolve
// gives the values it runs with on a cluster's regime.
//
// The files: pollux_config.go is the configuration (Config, its defaults,
// Resolve, Validate); pollux.go the search (Policy, Optimize: the jobs it
// pins, the seeds, the GA run, the choice and settling of the result);
// pollux_setup.go builds a round's problem from its input (job order,
// weights, speedup tables, restart factors); pollux_problem.go is the
// problem and its genetic operators; ga.go the NSGA-II engine.
package pollux
