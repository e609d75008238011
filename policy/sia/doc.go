// Package sia is the Sia policy (Jayaram Subramanya et al., SOSP '23):
// per job a set of configurations (GPU type, GPU count) scored by
// goodput, one chosen per job by an integer program each round.
package sia
