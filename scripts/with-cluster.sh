#!/usr/bin/env bash
# Runs a command with a local Consul + Nomad cluster (scripts/cluster.sh) and
# its environment (NOMAD_ADDR, CONSUL_HTTP_ADDR, POLLUX_DEVICE, ...,
# and POLLUX_E2E=1, which enables the tests that need the cluster):
#
#   scripts/with-cluster.sh go test ./...
#
# If the cluster is already up and answering, the command just uses it and it
# is left running. Otherwise the cluster is started for the command and
# stopped afterwards (also on Ctrl-C); when several with-cluster.sh runs share
# a cluster one of them started, the last one to finish stops it. The
# command's exit code is propagated.
set -uo pipefail

[ $# -gt 0 ] || { echo "usage: $0 CMD [ARG...]" >&2; exit 2; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cluster=$repo/scripts/cluster.sh
dir=${POLLUX_CLUSTER_DIR:-$repo/.cluster}
lockfile=${TMPDIR:-/tmp}/pollux-cluster-$(printf '%s' "$dir" | cksum | cut -d' ' -f1).lock

# Bookkeeping under the same lock as cluster.sh up/down: $dir/ephemeral marks
# a cluster started by this script, $dir/users/<pid> the runs using it.
exec 9>"$lockfile"
flock 9
if [ -f "$dir/env" ] && "$cluster" status >/dev/null 2>&1; then
  started=
else
  POLLUX_CLUSTER_LOCKED=$lockfile "$cluster" up || { echo "with-cluster: could not start the cluster" >&2; exit 1; }
  : >"$dir/ephemeral"
  started=1
fi
mkdir -p "$dir/users"
: >"$dir/users/$$"
flock -u 9

finish() {
  local rc=$?
  trap - EXIT INT TERM
  flock 9
  rm -f "$dir/users/$$"
  if [ -f "$dir/ephemeral" ]; then
    local u others=
    for u in "$dir"/users/*; do
      [ -e "$u" ] || continue
      if kill -0 "${u##*/}" 2>/dev/null; then others=1; else rm -f "$u"; fi
    done
    if [ -z "$others" ]; then
      POLLUX_CLUSTER_LOCKED=$lockfile "$cluster" down || { [ "$rc" -ne 0 ] || rc=1; }
    elif [ -n "$started" ]; then
      echo "with-cluster: cluster still in use by other runs; the last one stops it" >&2
    fi
  fi
  flock -u 9
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# shellcheck disable=SC1091
. "$dir/env"
# The tests that need a real cluster run only when asked (POLLUX_E2E=1);
# under this script the cluster is there, so ask.
export POLLUX_E2E=1
"$@" 9>&-
