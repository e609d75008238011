#!/usr/bin/env bash
# Builds the last open-source (MPL-2.0) releases of Consul and Nomad from the
# Go module proxy, plus Nomad's example device plugin (fake GPUs), into a
# cache outside the repository, once. Later runs reuse the binaries.
#
#   POLLUX_CACHE (default $HOME/.cache/pollux)
#     bin/consul, bin/nomad, bin/plugins/example-fs-device
set -euo pipefail

CONSUL_VERSION=v1.16.1
NOMAD_VERSION=v1.6.1
# Nomad's go.mod points its api module at ./api, which is not in the module
# archive; use the api pseudo-version of the v1.6.1 release instead.
NOMAD_API=v0.0.0-20230721134942-515895c7690c

cache=${POLLUX_CACHE:-$HOME/.cache/pollux}
bin=$cache/bin
mkdir -p "$bin/plugins" "$cache/src"
log() { echo "install-servers: $*" >&2; }

# fetch MODULE VERSION: prints a writable copy of the module's source dir.
fetch() {
  local mod=$1 ver=$2 dir
  dir=$(go mod download -json "$mod@$ver" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -n "$dir" ] || { log "go mod download $mod@$ver failed"; exit 1; }
  local dst=$cache/src/$(basename "$mod")-$ver
  if [ ! -d "$dst" ]; then
    cp -r "$dir" "$dst.tmp"
    chmod -R u+w "$dst.tmp"
    mv "$dst.tmp" "$dst"
  fi
  echo "$dst"
}

export GOFLAGS=-mod=mod
# Consul's and Nomad's own sub-modules (envoyextensions, api, ...) are checked
# against the hashes in their go.sum; their checksum-database look-ups have
# failed here at times (404 through the proxy), which must not fail a build.
export GONOSUMDB=${GONOSUMDB:-github.com/hashicorp/consul,github.com/hashicorp/nomad}
export CGO_ENABLED=${CGO_ENABLED:-1}

# version BIN: the binary's version line (no pipes that could SIGPIPE under pipefail).
version() { local out; out=$("$1" version 2>/dev/null) || true; printf '%s\n' "${out%%$'\n'*}"; }

if [ ! -x "$bin/consul" ] || [[ "$(version "$bin/consul")" != *"${CONSUL_VERSION}"* ]]; then
  log "building consul $CONSUL_VERSION (about 12 minutes on 2 cores)"
  src=$(fetch github.com/hashicorp/consul "$CONSUL_VERSION")
  # Drop the replace block of local sub-modules (not in the module archive).
  sed -i '/^replace (/,/^)/d' "$src/go.mod"
  (cd "$src" && go build -o "$bin/consul.tmp" . && mv "$bin/consul.tmp" "$bin/consul")
fi

if [ ! -x "$bin/nomad" ] || [[ "$(version "$bin/nomad")" != *"${NOMAD_VERSION#v}"* ]]; then
  log "building nomad $NOMAD_VERSION (about 7 minutes on 2 cores)"
  src=$(fetch github.com/hashicorp/nomad "$NOMAD_VERSION")
  sed -i "s#github.com/hashicorp/nomad/api => ./api#github.com/hashicorp/nomad/api => github.com/hashicorp/nomad/api $NOMAD_API#" "$src/go.mod"
  (cd "$src" && go build -o "$bin/nomad.tmp" . && mv "$bin/nomad.tmp" "$bin/nomad")
fi

# The example device plugin gives each fake GPU to a task as an environment
# variable (FAKE_GPU_IDS), as the NVIDIA plugin does, instead of a bind
# mount of its file: Nomad 1.6.1's task runner keeps only the device hook's
# mounts when a device plugin returns any (hookResources.setMounts replaces
# the volume hook's), which would drop the host volume of a docker task
# such as the example job's checkpoints. The stamp file marks that build.
stamp=$bin/plugins/.example-fs-device-env
if [ ! -x "$bin/plugins/example-fs-device" ] || [ ! -f "$stamp" ]; then
  log "building nomad's example device plugin (devices as environment, not mounts)"
  src=$(fetch github.com/hashicorp/nomad "$NOMAD_VERSION")
  dev=$src/plugins/device/cmd/example/device.go
  if ! grep -q FAKE_GPU_IDS "$dev"; then
    perl -0pi -e 's{\t\t// Add a mount\n\t\tresp\.Mounts = append\(resp\.Mounts, &device\.Mount\{.*?\n\t\t\}\)\n}{\t\t// Hand the device over as an environment variable.\n\t\tif resp.Envs == nil {\n\t\t\tresp.Envs = map[string]string{}\n\t\t}\n\t\tif v := resp.Envs["FAKE_GPU_IDS"]; v != "" {\n\t\t\tid = v + "," + id\n\t\t}\n\t\tresp.Envs["FAKE_GPU_IDS"] = id\n\t\t_ = deviceDir\n}s' "$dev"
    grep -q FAKE_GPU_IDS "$dev" || { log "could not patch $dev"; exit 1; }
  fi
  (cd "$src" && go build -o "$bin/plugins/example-fs-device.tmp" ./plugins/device/cmd/example/cmd \
     && mv "$bin/plugins/example-fs-device.tmp" "$bin/plugins/example-fs-device")
  : >"$stamp"
fi

version "$bin/consul" >&2
version "$bin/nomad" >&2
echo "$bin"
