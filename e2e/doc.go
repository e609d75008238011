// Package e2e holds the end-to-end tests of the controller against a real
// Nomad and Consul cluster (make cluster-up, or scripts/with-cluster.sh,
// which make test uses). The tests fail, never skip, without a cluster.
package e2e
