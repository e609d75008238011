// Package e2e holds the end-to-end tests of the controller against a real
// Nomad and Consul cluster (make cluster-up, or scripts/with-cluster.sh,
// which make test uses, sets POLLUX_E2E=1). Without POLLUX_E2E=1 the
// package runs nothing (TestMain); with it the tests fail, never skip,
// without a cluster.
package e2e
