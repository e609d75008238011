// Package policytest holds test helpers for the policy package and its
// users: builders for jobs and nodes, a synthetic goodput model that needs
// no fitted parameters, a seeded generator of random scheduling inputs, and
// a checker of the invariants every returned allocation must satisfy.
//
// It imports no project package other than policy, so that policy's own
// external tests, the simulator's tests and benchmarks can all use it.
package policytest
