// Package registry makes the policies by name: New creates one from its
// part of Settings, TraitsOf says what each needs from whoever runs it
// (the Nomad controller, the simulator, the demo), and Names lists them.
// It imports the policies (policy/pollux, policy/sia, policy/baseline),
// which import package policy for the types they share, so runners that
// choose a policy by name import this package and policy, not the
// policies themselves.
package registry
