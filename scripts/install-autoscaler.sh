#!/usr/bin/env bash
# Builds the Nomad Autoscaler (MPL-2.0) from the Go module proxy into the
# same cache as scripts/install-servers.sh, once; later runs reuse it.
#
#   POLLUX_CACHE (default $HOME/.cache/pollux)
#     bin/nomad-autoscaler
#     bin/autoscaler-plugins/pollux-local-clients   the target plugin of
#       deploy/autoscaler/local-clients (local Nomad clients as the instance
#       group, for the end-to-end test), built in the autoscaler's module
#       with its SDK; rebuilt when its source changes
#
# v0.4.5: the release line that talks to Nomad 1.6 (its API client is
# compatible with 1.6 servers) and has the node_pool filter of cluster
# targets (Nomad 1.6 node pools), added in 0.4.1.
set -euo pipefail

AUTOSCALER_VERSION=${AUTOSCALER_VERSION:-v0.4.5}

cache=${POLLUX_CACHE:-$HOME/.cache/pollux}
bin=$cache/bin
mkdir -p "$bin"
log() { echo "install-autoscaler: $*" >&2; }

version() { local out; out=$("$1" version 2>/dev/null) || true; printf '%s\n' "${out%%$'\n'*}"; }

if [ ! -x "$bin/nomad-autoscaler" ] || [[ "$(version "$bin/nomad-autoscaler")" != *"${AUTOSCALER_VERSION#v}"* ]]; then
  log "building nomad-autoscaler $AUTOSCALER_VERSION (a few minutes on 2 cores)"
  # go mod download + go build in the module's directory, as
  # install-servers.sh does: `go install module@version` also lists the
  # module's versions, which the proxy may refuse.
  export GONOSUMDB=${GONOSUMDB:-github.com/hashicorp/nomad-autoscaler}
  export GOFLAGS=-mod=mod
  dir=$(go mod download -json "github.com/hashicorp/nomad-autoscaler@$AUTOSCALER_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -n "$dir" ] || { log "go mod download github.com/hashicorp/nomad-autoscaler@$AUTOSCALER_VERSION failed"; exit 1; }
  src=$cache/src/nomad-autoscaler-$AUTOSCALER_VERSION
  if [ ! -d "$src" ]; then
    mkdir -p "$cache/src"
    cp -r "$dir" "$src.tmp"
    chmod -R u+w "$src.tmp"
    mv "$src.tmp" "$src"
  fi
  (cd "$src" && go build -o "$bin/nomad-autoscaler.tmp" . && mv "$bin/nomad-autoscaler.tmp" "$bin/nomad-autoscaler")
fi

src=$cache/src/nomad-autoscaler-$AUTOSCALER_VERSION
repo=$(cd "$(dirname "$0")/.." && pwd)
plugin_src=$repo/deploy/autoscaler/local-clients/main.go
plugin=$bin/autoscaler-plugins/pollux-local-clients
sum=$(sha256sum "$plugin_src" | cut -d' ' -f1)
if [ ! -x "$plugin" ] || [ "$(cat "$plugin.sha256" 2>/dev/null)" != "$sum" ]; then
  log "building the pollux-local-clients target plugin"
  [ -d "$src" ] || {
    export GONOSUMDB=${GONOSUMDB:-github.com/hashicorp/nomad-autoscaler}
    dir=$(GOFLAGS=-mod=mod go mod download -json "github.com/hashicorp/nomad-autoscaler@$AUTOSCALER_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    mkdir -p "$cache/src"
    cp -r "$dir" "$src.tmp"
    chmod -R u+w "$src.tmp"
    mv "$src.tmp" "$src"
  }
  mkdir -p "$src/pollux-local-clients" "$bin/autoscaler-plugins"
  cp "$plugin_src" "$src/pollux-local-clients/main.go"
  (cd "$src" && GOFLAGS=-mod=mod go vet ./pollux-local-clients && GOFLAGS=-mod=mod go build -o "$plugin.tmp" ./pollux-local-clients && mv "$plugin.tmp" "$plugin")
  echo "$sum" >"$plugin.sha256"
fi

version "$bin/nomad-autoscaler" >&2
echo "$bin"
