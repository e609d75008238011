// Package record writes a scheduling round as a self-contained document
// and decides it again: the policy's name and settings, its whole input
// (jobs with their goodput models, nodes, the current allocation, the
// round number, the seed and what the previous round handed on) and the
// decision it made. Replaying a record re-creates the policy, runs it on
// the recorded input and compares the decision with the recorded one,
// which is how one round's decision is explained after the fact.
package record
