#!/usr/bin/env bash
# Installs Debian's Docker engine (docker.io) unless present, and starts
# dockerd unless it answers. The example job's end-to-end test runs the
# training image under Nomad's docker driver; no image registry is needed:
# scripts/build-train-image.sh builds the image locally.
set -euo pipefail
log() { echo "install-docker: $*" >&2; }
sudo=
[ "$(id -u)" -eq 0 ] || sudo=sudo
if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
  log "installing docker.io debootstrap"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq docker.io debootstrap >/dev/null
fi
if docker info >/dev/null 2>&1; then
  exit 0
fi
log "starting dockerd (log: /tmp/pollux-dockerd.log)"
$sudo sh -c 'nohup dockerd >/tmp/pollux-dockerd.log 2>&1 &'
for _ in $(seq 1 60); do
  docker info >/dev/null 2>&1 && exit 0
  sleep 1
done
log "dockerd did not answer within 60 s; see /tmp/pollux-dockerd.log"
tail -20 /tmp/pollux-dockerd.log >&2 || true
exit 1
