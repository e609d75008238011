// The local-clients target plugin is built inside the Nomad Autoscaler's
// own module (scripts/install-autoscaler.sh copies main.go there), with
// the SDK of the release the autoscaler binary is built from; this file
// only keeps it out of the pollux module and records that version.
module github.com/pollux-nomad/pollux/deploy/autoscaler/local-clients

go 1.22

require github.com/hashicorp/nomad-autoscaler v0.4.5
