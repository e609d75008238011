#!/usr/bin/env bash
# Builds the example job's image (deploy/examples/Dockerfile) locally, with
# no image registry: a Debian bookworm base made with debootstrap from
# Debian's packages (python3-torch, python3-sklearn, python3-pip), imported
# once as BASE_IMAGE and reused, then the pollux worker package and the
# training script on top (rebuilt when they change; Docker caches layers).
#
#   IMAGE (default pollux-train:local)         the image the e2e test runs
#   BASE_IMAGE (default pollux-debian-torch:bookworm)
#   DEBIAN_MIRROR (default http://deb.debian.org/debian)
#
# Needs dockerd (scripts/install-docker.sh) and root for debootstrap (sudo
# when not root). The
# base takes a few minutes the first time; later runs take seconds.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
image=${IMAGE:-pollux-train:local}
base=${BASE_IMAGE:-pollux-debian-torch:bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
log() { echo "build-train-image: $*" >&2; }
sudo=
[ "$(id -u)" -eq 0 ] || sudo=sudo

if ! docker image inspect "$base" >/dev/null 2>&1; then
  root=$(mktemp -d /tmp/pollux-rootfs.XXXXXX)
  trap '$sudo rm -rf "$root"' EXIT
  log "debootstrap bookworm with python3-torch into $root (a few minutes, once)"
  start=$SECONDS
  $sudo debootstrap --variant=minbase \
    --include=python3,python3-torch,python3-sklearn,python3-pip,ca-certificates \
    bookworm "$root" "$mirror" >"$root.log" 2>&1 ||
    { tail -20 "$root.log" >&2; log "debootstrap failed (log: $root.log)"; exit 1; }
  $sudo sh -c 'rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*' - "$root"
  $sudo tar -C "$root" -c . | docker import - "$base" >/dev/null
  log "base image $base in $((SECONDS - start)) s"
fi

# The build context is the two folders the image needs, not the whole tree.
log "building $image"
tar -C "$repo" --exclude='__pycache__' --exclude='*.pyc' \
  -c deploy/examples worker/python |
  docker build -q -f deploy/examples/Dockerfile --build-arg BASE="$base" -t "$image" - >/dev/null
docker run --rm --network none "$image" python3 -c 'import pollux, pollux.torch; print("pollux", pollux.__version__)'
