// Package nomadtest holds helpers for tests that run against the real local
// Nomad cluster of scripts/cluster.sh (started for `make test` by
// scripts/with-cluster.sh): a client from NOMAD_ADDR that fails the test
// loudly when there is no cluster, a lock that gives one test at a time the
// cluster's GPUs (test binaries of several packages run in parallel), a
// builder for small raw_exec "training" jobs that request GPUs, and waits
// on what Nomad really holds. It never imitates Nomad's API.
package nomadtest
