#!/usr/bin/env bash
# A real Consul + Nomad cluster on 127.0.0.1 for development and tests.
#
#   scripts/cluster.sh up       start it (idempotent) and wait until it is ready
#   scripts/cluster.sh down     stop every job, agent and task it started; remove its state
#   scripts/cluster.sh status   exit 0 when it is up and answering, 1 otherwise
#   scripts/cluster.sh running  the agents whose process runs, one per line
#                               (no network call: fast enough for the
#                               autoscaler's target plugin to poll)
#
# Fault injection, for the reliability tests (AGENT is consul, nomad-server
# or client-<i>):
#
#   scripts/cluster.sh stop AGENT     SIGTERM (SIGINT for a client) and wait for it to exit
#   scripts/cluster.sh kill AGENT     SIGKILL (a client's tasks keep running, as in production)
#   scripts/cluster.sh start AGENT    start a stopped agent again with its configuration and wait until it is ready
#   scripts/cluster.sh pause AGENT    SIGSTOP: the agent holds its connections but answers nothing
#   scripts/cluster.sh resume AGENT   SIGCONT
#
# POLLUX_CONSUL_DEV=0 runs Consul as a one-node server with a data dir
# instead of a dev agent, so its KV store survives `stop consul` + `start
# consul` (a dev agent keeps everything in memory).
#
# A secure cluster, for the access tests (both off by default):
#
#   POLLUX_ACL=1  ACLs on both servers, default deny. Consul gets a random
#                 initial management token (also its agent token); Nomad's
#                 ACLs are bootstrapped with a random management token once
#                 the server is up. The Nomad agents use Consul's management
#                 token. <dir>/env exports both as NOMAD_TOKEN and
#                 CONSUL_HTTP_TOKEN; <dir>/acl holds them.
#   POLLUX_TLS=1  a CA and one certificate for every agent (SANs 127.0.0.1,
#                 localhost, server.global.nomad, client.global.nomad),
#                 made with openssl under <dir>/tls. Consul serves HTTPS
#                 only (on the port HTTP would have), Nomad TLS on HTTP and
#                 RPC (verify_server_hostname), and the Nomad agents talk to
#                 Consul over HTTPS. <dir>/env exports NOMAD_ADDR=https://...,
#                 NOMAD_CACERT, CONSUL_HTTP_SSL=true and CONSUL_CACERT.
#                 Client certificates are not required.
#
# Both are recorded in <dir>/secure at `up`, so later commands (start,
# status, down) need not repeat them.
#
# CLUSTER_SERVERS=3 (default 1; 1, 3 or 5) runs that many Consul servers and
# that many Nomad servers, a production-shaped control plane whose leaders
# the reliability tests kill: agents consul, consul-2, consul-3 and
# nomad-server, nomad-server-2, nomad-server-3 (Consul then keeps its data
# on disk, as with POLLUX_CONSUL_DEV=0). NOMAD_ADDR and CONSUL_HTTP_ADDR name
# the first server of each; <dir>/env also exports POLLUX_CONSUL_ADDRS and
# POLLUX_NOMAD_ADDRS, every server's HTTP address, comma-separated. Consul
# accepts session TTLs from 1s (session_ttl_min), for tests that run leader
# sessions shorter than the default 10s.
#
# One Consul dev agent, one Nomad server and NOMAD_CLIENTS Nomad clients
# (default 2), each its own process with its own data dir, ports and node name
# (client-1, client-2, ...). Every client has POLLUX_GPUS_PER_CLIENT (default
# 4) fake GPUs: empty files served by Nomad's example device plugin as devices
# "nomad/file/mock". raw_exec is enabled. Nothing binds or advertises anything
# but 127.0.0.1; update checks and cloud fingerprinters are off.
#
# POLLUX_GPU_TYPES (default empty) gives the clients GPU types, for the
# heterogeneous-GPU tests: a comma-separated list (t4,a100), one per client
# in order (the last repeats for further clients), set as each client's node
# meta key gpu_type (the controller's gpu_type_source = "meta.gpu_type").
# The fake devices stay nomad/file/mock on every client.
#
# POLLUX_DOCKER=1 enables Nomad's docker driver on the clients (dockerd must
# answer: scripts/install-docker.sh) and gives every client the host volume
# "pollux-checkpoints" at <dir>/checkpoints, the one directory all clients
# see, as the example job (deploy/examples/train.nomad.hcl) expects. `down`
# removes any container of the cluster's allocations that Nomad left.
#
# State, logs and PIDs live in POLLUX_CLUSTER_DIR (default <repo>/.cluster,
# git-ignored). `up` writes <dir>/env with export lines for NOMAD_ADDR,
# CONSUL_HTTP_ADDR, POLLUX_DEVICE and POLLUX_CLUSTER_DIR.
#
# Binaries: ${POLLUX_CACHE:-$HOME/.cache/pollux}/bin/{consul,nomad,plugins/example-fs-device}
# (built by scripts/install-servers.sh). Ports: POLLUX_PORT_OFFSET (default
# 11000) is added to the usual ones, so a developer's own agents on the
# default ports do not clash: Consul HTTP 19500, Nomad HTTP 15646, clients
# 16010, 16020, ... (all below the clients' dynamic port range 20000-32000).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${POLLUX_CLUSTER_DIR:-$repo/.cluster}
bin=${POLLUX_CACHE:-$HOME/.cache/pollux}/bin
clients=${NOMAD_CLIENTS:-2}
gpus=${POLLUX_GPUS_PER_CLIENT:-4}
off=${POLLUX_PORT_OFFSET:-11000}
ready_timeout=${POLLUX_CLUSTER_TIMEOUT:-90}
consul_dev=${POLLUX_CONSUL_DEV:-1}
servers=${CLUSTER_SERVERS:-1}
if [ -f "$dir/servers" ]; then servers=$(cat "$dir/servers"); fi
case "$servers" in 1 | 3 | 5) ;; *) echo "cluster: error: CLUSTER_SERVERS=$servers: want 1, 3 or 5" >&2; exit 1 ;; esac
if [ "$servers" -gt 1 ]; then consul_dev=0; fi
gpu_types=${POLLUX_GPU_TYPES:-}
docker=${POLLUX_DOCKER:-0}
device=nomad/file/mock

# secure_mode: ACL and TLS of this cluster: as recorded at `up`, else from
# POLLUX_ACL / POLLUX_TLS.
secure_mode() {
  acl=${POLLUX_ACL:-0}
  tls=${POLLUX_TLS:-0}
  if [ -f "$dir/secure" ]; then read -r acl tls <"$dir/secure"; fi
  return 0
}
secure_mode

consul_http=$((8500 + off))
consul_server=$((8300 + off))
consul_serf_lan=$((8301 + off))
consul_serf_wan=$((8302 + off))
nomad_http=$((4646 + off))
nomad_rpc=$((4647 + off))
nomad_serf=$((4648 + off))
# client_gpu_type I: the GPU type of client I from POLLUX_GPU_TYPES (the last
# entry repeats).
client_gpu_type() {
  local IFS=, types
  read -r -a types <<<"$gpu_types"
  local n=${#types[@]} i=$(($1 - 1))
  [ "$i" -lt "$n" ] || i=$((n - 1))
  [[ "${types[$i]}" =~ ^[A-Za-z0-9._+\ -]{1,64}$ ]] ||
    die "POLLUX_GPU_TYPES: entry $(($i + 1)) \"${types[$i]}\" is not 1 to 64 letters, digits, spaces, '.', '_', '+' or '-'"
  printf '%s' "${types[$i]}"
}
client_port() { echo $((5000 + off + 10 * $1 + $2)); } # client_port I K: K=0 http, 1 rpc, 2 serf
# consul_port I K: Consul server I's port K (0 http, 1 server, 2 serf_lan,
# 3 serf_wan); server 1 has the usual ones.
consul_port() {
  if [ "$1" = 1 ]; then
    case "$2" in 0) echo "$consul_http" ;; 1) echo "$consul_server" ;; 2) echo "$consul_serf_lan" ;; 3) echo "$consul_serf_wan" ;; esac
  else
    echo $((8400 + off + 10 * $1 + $2))
  fi
}
# nomad_port I K: Nomad server I's port K (0 http, 1 rpc, 2 serf).
nomad_port() {
  if [ "$1" = 1 ]; then
    case "$2" in 0) echo "$nomad_http" ;; 1) echo "$nomad_rpc" ;; 2) echo "$nomad_serf" ;; esac
  else
    echo $((4600 + off + 10 * $1 + $2))
  fi
}
# server_index NAME: the server number of consul[-I] or nomad-server[-I].
server_index() {
  case "$1" in
    consul | nomad-server) echo 1 ;;
    consul-[0-9]*) echo "${1#consul-}" ;;
    nomad-server-[0-9]*) echo "${1#nomad-server-}" ;;
  esac
}

log() { echo "cluster: $*" >&2; }
die() { log "error: $*"; exit 1; }

# The lock serialises up/down/with-cluster bookkeeping between processes. It
# lives outside $dir because down removes $dir.
lockfile=${TMPDIR:-/tmp}/pollux-cluster-$(printf '%s' "$dir" | cksum | cut -d' ' -f1).lock
with_lock() {
  if [ "${POLLUX_CLUSTER_LOCKED:-}" = "$lockfile" ]; then
    "$@"
    return
  fi
  exec 9>"$lockfile"
  flock 9
  POLLUX_CLUSTER_LOCKED=$lockfile "$@"
  local rc=$?
  flock -u 9
  exec 9>&-
  return $rc
}

# --- processes ---------------------------------------------------------------

alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

# pid_of NAME: the recorded PID of an agent, if any.
pid_of() { cat "$dir/pids/$1.pid" 2>/dev/null || true; }

# agent_alive NAME: the recorded process exists and still runs our binary.
agent_alive() {
  local pid exe
  pid=$(pid_of "$1")
  alive "$pid" || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null || true)
  case "$exe" in "$bin"/*) return 0 ;; esac
  return 1
}

agents() {
  local i
  echo consul
  for i in $(seq 2 "$servers"); do echo "consul-$i"; done
  echo nomad-server
  for i in $(seq 2 "$servers"); do echo "nomad-server-$i"; done
  for i in $(seq 1 "$(cat "$dir/clients" 2>/dev/null || echo "$clients")"); do echo "client-$i"; done
}

# start NAME CWD CMD...: runs CMD in its own session (so a signal to the
# caller's process group does not reach it), output to logs/NAME.log.
start() {
  local name=$1 cwd=$2
  shift 2
  (cd "$cwd" && exec setsid "$@" >"$dir/logs/$name.log" 2>&1 </dev/null 9>&-) &
  echo $! >"$dir/pids/$name.pid"
}

# descendants PID...: every process below the given ones.
descendants() {
  local table
  table=$(ps -e -o pid=,ppid=)
  local todo=("$@") out=() p c
  while [ ${#todo[@]} -gt 0 ]; do
    p=${todo[0]}
    todo=("${todo[@]:1}")
    for c in $(awk -v p="$p" '$2 == p {print $1}' <<<"$table"); do
      out+=("$c")
      todo+=("$c")
    done
  done
  echo "${out[@]:-}"
  return 0
}

# under_dir: PIDs of processes whose working directory or command line is
# inside $dir (agents, nomad executor/logmon plugins, raw_exec tasks), other
# than this script, its ancestors and its session.
under_dir() {
  local keep=" $$ " p=$$ pid sid s
  sid=$(ps -o sid= -p $$ | tr -d ' ')
  while [ "$p" -gt 1 ] 2>/dev/null; do
    p=$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null || echo 1)
    keep+="$p "
  done
  {
    find /proc/[0-9]*/cwd -maxdepth 0 \( -lname "$dir" -o -lname "$dir/*" \) 2>/dev/null | cut -d/ -f3
    grep -laF -- "$dir/" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3
  } | sort -un | while read -r pid; do
    case "$keep" in *" $pid "*) continue ;; esac
    # Skip this script's own session (its pipelines, whose command lines
    # name $dir); the agents and everything they start have their own.
    s=$(ps -o sid= -p "$pid" 2>/dev/null | tr -d ' ')
    if [ -n "$s" ] && [ "$s" != "$sid" ]; then echo "$pid"; fi
  done
  return 0
}

# in_sessions SID...: PIDs of the processes of these sessions. Every agent
# is started as the leader of its own session (setsid), and the executors,
# logmons, device plugins and tasks it starts stay in it, even when the agent
# has died and they were re-parented.
in_sessions() {
  [ $# -gt 0 ] || return 0
  local mysid
  mysid=$(ps -o sid= -p $$ | tr -d ' ')
  ps -e -o pid=,sid= | awk -v s=" $* " -v me=$$ -v mysid="$mysid" \
    'index(s, " " $2 " ") && $1 != me && $2 != mysid {print $1}'
  return 0
}

# stop_pids SIGNAL GRACE PID...: signal, wait up to GRACE seconds, then KILL.
stop_pids() {
  local sig=$1 grace=$2
  shift 2
  local live=() p
  for p in "$@"; do alive "$p" && live+=("$p"); done
  [ ${#live[@]} -gt 0 ] || return 0
  kill "-$sig" "${live[@]}" 2>/dev/null || true
  local deadline=$((SECONDS + grace))
  while [ $SECONDS -lt $deadline ]; do
    local any=0
    for p in "${live[@]}"; do alive "$p" && any=1; done
    [ $any = 1 ] || return 0
    sleep 0.2
  done
  for p in "${live[@]}"; do
    if alive "$p"; then
      log "pid $p did not stop after $grace s; killing it"
      kill -KILL "$p" 2>/dev/null || true
    fi
  done
}

port_busy() { ss -ltnH "( sport = :$1 )" 2>/dev/null | grep -q .; }

# --- HTTP checks -------------------------------------------------------------

scheme() { if [ "$tls" = 1 ]; then echo https; else echo http; fi; }
consul_addr() { echo "$(scheme)://127.0.0.1:$consul_http"; }
nomad_addr() { echo "$(scheme)://127.0.0.1:$nomad_http"; }

# set_auth URL: the curl options a request to URL needs in auth: on a TLS
# cluster the CA, with ACLs the server's management token (from a header
# file, so it is not on a command line). Empty on a default cluster.
auth=()
set_auth() {
  auth=()
  case "$1" in https://*) auth+=(--cacert "$dir/tls/ca.pem") ;; esac
  case "$1" in
    "$(nomad_addr)"*) if [ -f "$dir/acl/nomad.header" ]; then auth+=(-H "@$dir/acl/nomad.header"); fi ;;
    "$(consul_addr)"*) if [ -f "$dir/acl/consul.header" ]; then auth+=(-H "@$dir/acl/consul.header"); fi ;;
  esac
  return 0
}
# get [CURL-OPTION...] URL
get() {
  set_auth "${@: -1}"
  curl -fsS --max-time 3 ${auth[@]+"${auth[@]}"} "$@"
}

consul_leader() { [ -n "$(get "$(consul_addr)/v1/status/leader" 2>/dev/null | tr -d '"')" ]; }
nomad_leader() { [ -n "$(get "$(nomad_addr)/v1/status/leader" 2>/dev/null | tr -d '"')" ]; }
# server_leader NAME: server NAME (consul-I, nomad-server-I) answers and
# knows a leader.
server_leader() {
  local i
  i=$(server_index "$1")
  case "$1" in
    consul*) [ -n "$(get "$(scheme)://127.0.0.1:$(consul_port "$i" 0)/v1/status/leader" 2>/dev/null | tr -d '"')" ] ;;
    nomad-server*) [ -n "$(get "$(scheme)://127.0.0.1:$(nomad_port "$i" 0)/v1/status/leader" 2>/dev/null | tr -d '"')" ] ;;
  esac
}

# consul_ready: a leader, and with ACLs the management token works (Consul
# creates it only after it became leader).
consul_ready() {
  consul_leader || return 1
  [ "$acl" = 1 ] || return 0
  get "$(consul_addr)/v1/acl/token/self" >/dev/null 2>&1
}

# nomad_acl_ready: Nomad's ACLs are bootstrapped with the cluster's
# management token (bootstrapping it if not yet).
nomad_acl_ready() {
  get "$(nomad_addr)/v1/acl/token/self" >/dev/null 2>&1 && return 0
  local url
  url="$(nomad_addr)/v1/acl/bootstrap"
  set_auth "$url"
  curl -fsS --max-time 3 ${auth[@]+"${auth[@]}"} -X POST \
    -d "{\"BootstrapSecret\": \"$(cat "$dir/acl/nomad-token")\"}" "$url" >/dev/null 2>&1 || true
  get "$(nomad_addr)/v1/acl/token/self" >/dev/null 2>&1
}

# client_ready NAME: node NAME is ready, eligible and has its GPUs, all healthy.
client_ready() {
  local id n
  id=$(get "$(nomad_addr)/v1/nodes" 2>/dev/null |
    jq -r --arg n "$1" '[.[] | select(.Name == $n and .Status == "ready" and .SchedulingEligibility == "eligible")][0].ID // empty') || return 1
  [ -n "$id" ] || return 1
  n=$(get "$(nomad_addr)/v1/node/$id" 2>/dev/null |
    jq '[.NodeResources.Devices // [] | .[] | select(.Vendor == "nomad" and .Type == "file" and .Name == "mock") | .Instances[] | select(.Healthy)] | length') || return 1
  [ "$n" = "$gpus" ]
}

# wait_for DESC AGENT CHECK...: poll CHECK until it succeeds; on timeout or
# when AGENT's process died, print the tail of AGENT's log and fail.
wait_for() {
  local desc=$1 agent=$2
  shift 2
  local deadline=$((start_time + ready_timeout))
  until "$@"; do
    if ! agent_alive "$agent"; then
      fail "$agent exited while waiting for $desc" "$agent"
    fi
    if [ $SECONDS -ge $deadline ]; then
      fail "timed out after ${ready_timeout}s waiting for $desc" "$agent"
    fi
    sleep 0.5
  done
}

fail() {
  local msg=$1 agent=$2 keep
  log "error: $msg"
  log "last lines of $dir/logs/$agent.log:"
  tail -n 40 "$dir/logs/$agent.log" >&2 2>/dev/null || true
  keep=$(mktemp -d "${TMPDIR:-/tmp}/pollux-cluster-logs.XXXXXX")
  cp -r "$dir/logs/." "$keep/" 2>/dev/null || true
  log "all agent logs copied to $keep; cleaning up"
  do_down >&2 || true
  exit 1
}

# --- configuration -----------------------------------------------------------

write_configs() {
  local i j join="" rpcs=""
  for j in $(seq 1 "$servers"); do
    join+="${join:+, }\"127.0.0.1:$(nomad_port "$j" 2)\""
    rpcs+="${rpcs:+, }\"127.0.0.1:$(nomad_port "$j" 1)\""
  done
  for i in $(seq 1 "$servers"); do
    local name=nomad-server
    [ "$i" = 1 ] || name=nomad-server-$i
    cat >"$dir/$name.hcl" <<EOF
disable_update_check = true
name      = "server-$i"
data_dir  = "$dir/$name"
bind_addr = "127.0.0.1"
log_level = "INFO"
advertise {
  http = "127.0.0.1"
  rpc  = "127.0.0.1"
  serf = "127.0.0.1"
}
ports {
  http = $(nomad_port "$i" 0)
  rpc  = $(nomad_port "$i" 1)
  serf = $(nomad_port "$i" 2)
}
server {
  enabled          = true
  bootstrap_expect = $servers
  # After a server (re)start Nomad gives every client this long to
  # heartbeat again before marking it down (default 5m); a test that kills
  # a client right after restarting the server should not wait that long.
  failover_heartbeat_ttl = "20s"
  server_join {
    retry_join     = [$join]
    retry_interval = "1s"
  }
}
# Every test process and agent talks from 127.0.0.1: allow more than the
# default 100 connections per client address.
limits {
  http_max_conns_per_client = 1000
}
consul {
  address          = "127.0.0.1:$consul_http"
  server_auto_join = false
  client_auto_join = false
}
EOF
  done
  local meta gtype denylist="docker,qemu,java,exec,podman" extra=""
  if [ "$docker" = 1 ]; then
    denylist="qemu,java,exec,podman"
    mkdir -p "$dir/checkpoints"
    extra='  host_volume "pollux-checkpoints" {
    path      = "'"$dir/checkpoints"'"
    read_only = false
  }'
  fi
  for i in $(seq 1 "$clients"); do
    meta=""
    if [ -n "$gpu_types" ]; then
      gtype=$(client_gpu_type "$i") || exit 1
      meta="  meta {
    gpu_type = \"$gtype\"
  }"
    fi
    cat >"$dir/client-$i.hcl" <<EOF
disable_update_check = true
name       = "client-$i"
data_dir   = "$dir/client-$i"
bind_addr  = "127.0.0.1"
log_level  = "INFO"
plugin_dir = "$bin/plugins"
advertise {
  http = "127.0.0.1"
  rpc  = "127.0.0.1"
  serf = "127.0.0.1"
}
ports {
  http = $(client_port "$i" 0)
  rpc  = $(client_port "$i" 1)
  serf = $(client_port "$i" 2)
}
client {
  enabled           = true
  servers           = [$rpcs]
  network_interface = "lo"
  options {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
    "driver.denylist"      = "$denylist"
  }
$meta
$extra
}
consul {
  address          = "127.0.0.1:$consul_http"
  server_auto_join = false
  client_auto_join = false
}
plugin "raw_exec" {
  config {
    enabled = true
  }
}
plugin "example-fs-device" {
  config {
    dir         = "$dir/gpus-$i"
    list_period = "1s"
  }
}
EOF
  done
}

# --- ACL and TLS (POLLUX_ACL, POLLUX_TLS) -------------------------------------

new_uuid() { cat /proc/sys/kernel/random/uuid; }

# make_certs: a CA and one certificate (with both server and client usage)
# for every agent, under $dir/tls.
make_certs() {
  command -v openssl >/dev/null || die "POLLUX_TLS=1 needs openssl (apt-get install openssl)"
  local t=$dir/tls
  mkdir -p "$t"
  cat >"$t/openssl.cnf" <<EOF
[req]
distinguished_name = dn
prompt             = no
x509_extensions    = ca
[dn]
CN = Pollux test cluster CA
[ca]
basicConstraints     = critical,CA:TRUE
keyUsage             = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[agent]
basicConstraints = critical,CA:FALSE
keyUsage         = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth,clientAuth
subjectAltName   = IP:127.0.0.1,DNS:localhost,DNS:server.global.nomad,DNS:client.global.nomad
EOF
  {
    openssl ecparam -name prime256v1 -genkey -noout -out "$t/ca-key.pem" &&
      openssl req -x509 -new -config "$t/openssl.cnf" -key "$t/ca-key.pem" -sha256 -days 30 -out "$t/ca.pem" &&
      openssl ecparam -name prime256v1 -genkey -noout -out "$t/agent-key.pem" &&
      openssl req -new -config "$t/openssl.cnf" -key "$t/agent-key.pem" -subj "/CN=server.global.nomad" -out "$t/agent.csr" &&
      openssl x509 -req -in "$t/agent.csr" -CA "$t/ca.pem" -CAkey "$t/ca-key.pem" -CAcreateserial -days 30 -sha256 \
        -extfile "$t/openssl.cnf" -extensions agent -out "$t/agent.pem"
  } >"$t/openssl.log" 2>&1 || { cat "$t/openssl.log" >&2; die "could not make the TLS certificates"; }
  chmod 600 "$t"/*-key.pem
}

# make_tokens: the management tokens of both servers, under $dir/acl.
make_tokens() {
  local a=$dir/acl
  mkdir -p "$a"
  new_uuid >"$a/consul-token"
  new_uuid >"$a/nomad-token"
  echo "X-Consul-Token: $(cat "$a/consul-token")" >"$a/consul.header"
  echo "X-Nomad-Token: $(cat "$a/nomad-token")" >"$a/nomad.header"
  chmod 600 "$a"/*
}

# write_secure_configs: Consul's config file and the one file every Nomad
# agent loads after its own (Nomad merges them block by block).
write_secure_configs() {
  local t=$dir/tls
  : >"$dir/consul.hcl"
  : >"$dir/nomad-secure.hcl"
  if [ "$acl" = 1 ]; then
    cat >>"$dir/consul.hcl" <<EOF
acl {
  enabled                  = true
  default_policy           = "deny"
  enable_token_persistence = true
  tokens {
    initial_management = "$(cat "$dir/acl/consul-token")"
    # A test cluster: the agent uses the management token too.
    agent = "$(cat "$dir/acl/consul-token")"
  }
}
EOF
    cat >>"$dir/nomad-secure.hcl" <<EOF
acl {
  enabled = true
}
EOF
  fi
  if [ "$tls" = 1 ]; then
    cat >>"$dir/consul.hcl" <<EOF
tls {
  https {
    ca_file         = "$t/ca.pem"
    cert_file       = "$t/agent.pem"
    key_file        = "$t/agent-key.pem"
    verify_incoming = false
  }
}
EOF
    cat >>"$dir/nomad-secure.hcl" <<EOF
tls {
  http                   = true
  rpc                    = true
  ca_file                = "$t/ca.pem"
  cert_file              = "$t/agent.pem"
  key_file               = "$t/agent-key.pem"
  verify_server_hostname = true
  verify_https_client    = false
}
EOF
  fi
  {
    echo "consul {"
    if [ "$tls" = 1 ]; then
      cat <<EOF
  ssl        = true
  verify_ssl = true
  ca_file    = "$t/ca.pem"
  cert_file  = "$t/agent.pem"
  key_file   = "$t/agent-key.pem"
EOF
    fi
    if [ "$acl" = 1 ]; then echo "  token      = \"$(cat "$dir/acl/consul-token")\""; fi
    echo "}"
  } >>"$dir/nomad-secure.hcl"
  chmod 600 "$dir/consul.hcl" "$dir/nomad-secure.hcl"
}

# --- commands ----------------------------------------------------------------

# secure_config: the extra -config option of a Nomad agent on a secure
# cluster (nothing on a default one).
secure_config() { if [ -f "$dir/nomad-secure.hcl" ]; then echo "-config $dir/nomad-secure.hcl"; fi; }

# launch AGENT: start one agent of the cluster with its configuration.
launch() {
  case "$1" in
    consul | consul-[0-9]*)
      local ci name=$1 mode=(-dev)
      ci=$(server_index "$1")
      if [ "$(cat "$dir/consul-dev" 2>/dev/null || echo 1)" = 0 ]; then
        mkdir -p "$dir/$name-data"
        mode=(-server -bootstrap-expect "$servers" -data-dir "$dir/$name-data" -ui=false)
        local j
        for j in $(seq 1 "$servers"); do
          [ "$j" = "$ci" ] || mode+=(-retry-join "127.0.0.1:$(consul_port "$j" 2)" -retry-interval 1s)
        done
      fi
      local ports="http = $(consul_port "$ci" 0)"
      if [ -f "$dir/consul.hcl" ]; then
        mode+=(-config-file "$dir/consul.hcl")
        # TLS: HTTPS only, on the port HTTP would have.
        if [ "$tls" = 1 ]; then ports="http = -1, https = $(consul_port "$ci" 0)"; fi
      fi
      local node=pollux-consul
      [ "$ci" = 1 ] || node=pollux-consul-$ci
      mkdir -p "$dir/$name"
      log "starting $name on $(scheme)://127.0.0.1:$(consul_port "$ci" 0) (${mode[*]})"
      start "$name" "$dir/$name" "$bin/consul" agent "${mode[@]}" -node "$node" \
        -bind 127.0.0.1 -client 127.0.0.1 \
        -hcl 'disable_update_check = true' \
        -hcl 'session_ttl_min = "1s"' \
        -hcl "ports { $ports, server = $(consul_port "$ci" 1), serf_lan = $(consul_port "$ci" 2), serf_wan = $(consul_port "$ci" 3), dns = -1, grpc = -1, grpc_tls = -1 }"
      ;;
    nomad-server | nomad-server-[0-9]*)
      mkdir -p "$dir/$1"
      log "starting $1 on $(scheme)://127.0.0.1:$(nomad_port "$(server_index "$1")" 0)"
      start "$1" "$dir/$1" "$bin/nomad" agent -config "$dir/$1.hcl" $(secure_config)
      ;;
    client-[0-9]*)
      local i=${1#client-}
      [ -f "$dir/$1.hcl" ] || die "no agent $1 in this cluster"
      log "starting nomad $1 (http 127.0.0.1:$(client_port "$i" 0), $gpus x $device in $dir/gpus-$i)"
      start "$1" "$dir/$1" "$bin/nomad" agent -config "$dir/$1.hcl" $(secure_config)
      ;;
    *) die "unknown agent $1 (consul[-<i>], nomad-server[-<i>] or client-<i>)" ;;
  esac
}

# wait_ready AGENT: wait until the agent serves (Consul: a leader; Nomad
# server: a leader; client: ready with all its GPUs healthy).
wait_ready() {
  start_time=${start_time:-$SECONDS}
  case "$1" in
    consul) wait_for "a consul leader" consul consul_ready ;;
    consul-*) wait_for "$1 to know a consul leader" "$1" server_leader "$1" ;;
    nomad-server) wait_for "a nomad leader" nomad-server nomad_leader ;;
    nomad-server-*) wait_for "$1 to know a nomad leader" "$1" server_leader "$1" ;;
    client-*) wait_for "$1 to be ready with $gpus healthy $device" "$1" client_ready "$1" ;;
  esac
}

# do_fault ACTION AGENT: stop, kill, start, pause or resume one agent.
do_fault() {
  local action=$1 name=${2:-}
  [ -n "$name" ] || die "usage: $0 $action AGENT"
  [ -f "$dir/env" ] || die "cluster not running ($dir/env missing)"
  local all
  all=" $(agents | tr '\n' ' ')"
  case "$all" in *" $name "*) ;; *) die "no agent $name in this cluster (have:$all)" ;; esac
  local pid
  pid=$(pid_of "$name")
  case "$action" in
    stop | kill)
      if ! agent_alive "$name"; then
        log "$name is not running"
        return 0
      fi
      if [ "$action" = kill ]; then
        kill -KILL "$pid"
        while alive "$pid"; do sleep 0.1; done
      else
        local sig=TERM
        case "$name" in client-*) sig=INT ;; esac
        kill -CONT "$pid" 2>/dev/null || true
        stop_pids "$sig" 20 "$pid"
      fi
      log "$name $([ "$action" = kill ] && echo killed || echo stopped) (pid $pid)"
      ;;
    start)
      if agent_alive "$name"; then
        log "$name is already running (pid $pid)"
        return 0
      fi
      # A killed agent's ports can stay busy for a few seconds.
      local deadline=$((SECONDS + 30)) p ports=()
      case "$name" in
        consul*) ports=("$(consul_port "$(server_index "$name")" 0)" "$(consul_port "$(server_index "$name")" 1)") ;;
        nomad-server*) ports=("$(nomad_port "$(server_index "$name")" 0)" "$(nomad_port "$(server_index "$name")" 1)") ;;
        client-*) ports=("$(client_port "${name#client-}" 0)" "$(client_port "${name#client-}" 1)") ;;
      esac
      for p in "${ports[@]}"; do
        while port_busy "$p" && [ $SECONDS -lt $deadline ]; do sleep 0.5; done
      done
      start_time=$SECONDS
      launch "$name"
      wait_ready "$name"
      log "$name started again (pid $(pid_of "$name")) in $((SECONDS - start_time))s"
      ;;
    pause)
      agent_alive "$name" || die "$name is not running"
      kill -STOP "$pid"
      log "$name paused (pid $pid)"
      ;;
    resume)
      agent_alive "$name" || die "$name is not running"
      kill -CONT "$pid"
      log "$name resumed (pid $pid)"
      ;;
  esac
}

do_status() {
  [ -f "$dir/env" ] || { echo "cluster: not running ($dir/env missing)"; return 1; }
  local a ok=0
  for a in $(agents); do
    if agent_alive "$a"; then echo "$a: running (pid $(pid_of "$a"))"; else echo "$a: NOT running"; ok=1; fi
  done
  if consul_leader; then echo "consul: leader elected ($(consul_addr))"; else echo "consul: no leader"; ok=1; fi
  if nomad_leader; then echo "nomad: leader elected ($(nomad_addr))"; else echo "nomad: no leader"; ok=1; fi
  for a in $(agents | grep '^client-'); do
    if client_ready "$a"; then echo "$a: ready with $gpus healthy $device"; else echo "$a: not ready"; ok=1; fi
  done
  return $ok
}

do_running() {
  [ -f "$dir/env" ] || die "cluster not running ($dir/env missing)"
  local a
  for a in $(agents); do
    if agent_alive "$a"; then echo "$a"; fi
  done
}

do_up() {
  if [ -d "$dir" ]; then
    if do_status >/dev/null 2>&1; then
      log "already running ($dir); NOMAD_ADDR=$(nomad_addr) CONSUL_HTTP_ADDR=127.0.0.1:$consul_http"
      if [ -f "$dir/ephemeral" ]; then
        # An explicit `up` keeps a cluster that with-cluster.sh started.
        rm -f "$dir/ephemeral"
        log "it stays up after the with-cluster.sh runs using it end"
      fi
      return 0
    fi
    log "stale cluster state in $dir; cleaning it up first"
    do_down
    secure_mode
  fi
  [ -x "$bin/consul" ] && [ -x "$bin/nomad" ] && [ -x "$bin/plugins/example-fs-device" ] ||
    die "server binaries missing in $bin: run scripts/install-servers.sh"
  command -v jq >/dev/null || die "jq is required"
  command -v curl >/dev/null || die "curl is required"
  local p i
  for i in $(seq 1 "$servers"); do
    for p in $(consul_port "$i" 0) $(consul_port "$i" 1) $(consul_port "$i" 2) $(consul_port "$i" 3) $(nomad_port "$i" 0) $(nomad_port "$i" 1) $(nomad_port "$i" 2); do
      port_busy "$p" && die "port $p on 127.0.0.1 is in use (set POLLUX_PORT_OFFSET to use other ports)"
    done
  done
  for i in $(seq 1 "$clients"); do
    for p in $(client_port "$i" 0) $(client_port "$i" 1) $(client_port "$i" 2); do
      port_busy "$p" && die "port $p on 127.0.0.1 is in use (set POLLUX_PORT_OFFSET to use other ports)"
    done
  done

  start_time=$SECONDS
  mkdir -p "$dir/logs" "$dir/pids"
  echo "$clients" >"$dir/clients"
  echo "$servers" >"$dir/servers"
  for i in $(seq 1 "$clients"); do
    mkdir -p "$dir/client-$i" "$dir/gpus-$i"
    for p in $(seq 0 $((gpus - 1))); do : >"$dir/gpus-$i/gpu-$i-$p"; done
  done
  if [ "$docker" = 1 ]; then
    docker info >/dev/null 2>&1 || die "POLLUX_DOCKER=1: dockerd does not answer (scripts/install-docker.sh starts it)"
    : >"$dir/docker"
  fi
  write_configs
  if [ "$acl" = 1 ] || [ "$tls" = 1 ]; then
    echo "$acl $tls" >"$dir/secure"
    if [ "$tls" = 1 ]; then make_certs; fi
    if [ "$acl" = 1 ]; then make_tokens; fi
    write_secure_configs
  fi

  echo "$consul_dev" >"$dir/consul-dev"
  launch consul
  for i in $(seq 2 "$servers"); do launch "consul-$i"; done
  wait_ready consul
  launch nomad-server
  for i in $(seq 2 "$servers"); do launch "nomad-server-$i"; done
  for i in $(seq 1 "$clients"); do launch "client-$i"; done
  wait_ready nomad-server
  if [ "$acl" = 1 ]; then wait_for "nomad acl bootstrap" nomad-server nomad_acl_ready; fi
  for i in $(seq 1 "$clients"); do wait_ready "client-$i"; done

  cat >"$dir/env" <<EOF
export NOMAD_ADDR=$(nomad_addr)
export CONSUL_HTTP_ADDR=127.0.0.1:$consul_http
export POLLUX_DEVICE=$device
export POLLUX_CLUSTER_DIR=$dir
EOF
  local caddrs="" naddrs=""
  for i in $(seq 1 "$servers"); do
    caddrs+="${caddrs:+,}127.0.0.1:$(consul_port "$i" 0)"
    naddrs+="${naddrs:+,}$(scheme)://127.0.0.1:$(nomad_port "$i" 0)"
  done
  cat >>"$dir/env" <<EOF
export POLLUX_CONSUL_ADDRS=$caddrs
export POLLUX_NOMAD_ADDRS=$naddrs
EOF
  if [ -n "$gpu_types" ]; then
    echo "export POLLUX_GPU_TYPES=$gpu_types" >>"$dir/env"
  fi
  if [ "$tls" = 1 ]; then
    cat >>"$dir/env" <<EOF
export NOMAD_CACERT=$dir/tls/ca.pem
export CONSUL_HTTP_SSL=true
export CONSUL_CACERT=$dir/tls/ca.pem
EOF
  fi
  if [ "$acl" = 1 ]; then
    cat >>"$dir/env" <<EOF
export NOMAD_TOKEN=$(cat "$dir/acl/nomad-token")
export CONSUL_HTTP_TOKEN=$(cat "$dir/acl/consul-token")
EOF
  fi
  log "ready in $((SECONDS - start_time))s: $servers consul + $servers nomad server(s) + $clients clients x $gpus GPUs; source $dir/env"
}

do_down() {
  if [ ! -d "$dir" ]; then
    log "not running (no $dir)"
    return 0
  fi
  local a pid
  # 0. A paused agent (cluster.sh pause) answers nothing: resume it first.
  for a in $(agents); do agent_alive "$a" && kill -CONT "$(pid_of "$a")" 2>/dev/null; done
  # 1. Stop and purge every job, then wait for the allocations to finish, so
  #    that the clients stop their tasks themselves.
  if nomad_leader; then
    local jobs n=0
    jobs=$(get "$(nomad_addr)/v1/jobs?namespace=*" | jq -r '.[] | "\(.Namespace) \(.ID)"' || true)
    while read -r ns id; do
      [ -n "$id" ] || continue
      set_auth "$(nomad_addr)"
      curl -fsS --max-time 5 ${auth[@]+"${auth[@]}"} -X DELETE "$(nomad_addr)/v1/job/$(jq -rn --arg s "$id" '$s|@uri')?purge=true&namespace=$ns" >/dev/null || true
      n=$((n + 1))
    done <<<"$jobs"
    if [ $n -gt 0 ]; then
      log "stopped and purged $n job(s); waiting for their allocations to stop"
      # Only clients still running can stop their allocations.
      local live_clients=() deadline=$((SECONDS + 30)) left
      for a in $(agents | grep '^client-'); do agent_alive "$a" && live_clients+=("$a"); done
      while :; do
        left=$(get "$(nomad_addr)/v1/allocations?namespace=*" 2>/dev/null |
          jq --arg live " ${live_clients[*]:-} " '[.[] | select((.ClientStatus == "pending" or .ClientStatus == "running")
            and (.NodeName as $n | $live | contains(" " + $n + " ")))] | length' || echo "?")
        [ "$left" = 0 ] && break
        if [ $SECONDS -ge $deadline ]; then
          log "$left allocation(s) still running after 30s; their processes will be killed"
          break
        fi
        sleep 0.5
      done
    fi
  fi
  # 1b. Containers of allocations the clients could not stop (a killed
  #     client leaves its tasks running, as in production).
  if [ -f "$dir/docker" ] && command -v docker >/dev/null; then
    local c ids
    ids=$(get "$(nomad_addr)/v1/allocations?namespace=*" 2>/dev/null | jq -r '.[].ID' || true)
    for c in $(docker ps -aq --filter label=com.hashicorp.nomad.alloc_id 2>/dev/null); do
      if grep -qx "$(docker inspect -f '{{index .Config.Labels "com.hashicorp.nomad.alloc_id"}}' "$c" 2>/dev/null)" <<<"$ids"; then
        docker rm -f "$c" >/dev/null 2>&1 || true
      fi
    done
  fi
  # 2. Remember everything the agents started (executors, logmons, tasks),
  #    then stop the agents by their recorded PIDs: clients, server, consul.
  local roots=() left_over
  for a in $(agents); do agent_alive "$a" && roots+=("$(pid_of "$a")"); done
  left_over=$(descendants "${roots[@]:-}")
  local cl=()
  for a in $(agents | grep '^client-'); do agent_alive "$a" && cl+=("$(pid_of "$a")"); done
  [ ${#cl[@]} -eq 0 ] || { log "stopping nomad clients (${cl[*]})"; stop_pids INT 20 "${cl[@]}"; }
  local sv=()
  for a in $(agents | grep '^nomad-server'); do agent_alive "$a" && sv+=("$(pid_of "$a")"); done
  [ ${#sv[@]} -eq 0 ] || { log "stopping nomad server(s) (${sv[*]})"; stop_pids TERM 20 "${sv[@]}"; }
  sv=()
  for a in $(agents | grep '^consul'); do agent_alive "$a" && sv+=("$(pid_of "$a")"); done
  [ ${#sv[@]} -eq 0 ] || { log "stopping consul (${sv[*]})"; stop_pids TERM 20 "${sv[@]}"; }
  # 3. Processes left behind: what the agents started, and anything whose
  #    working directory or command line is under $dir. Never by name.
  local stray sessions=()
  for a in $(agents); do
    pid=$(pid_of "$a")
    [ -n "$pid" ] && sessions+=("$pid")
  done
  stray=$( {
    for pid in $left_over; do if alive "$pid"; then echo "$pid"; fi; done
    in_sessions "${sessions[@]:-}"
    under_dir
  } | sort -un) || true
  # ... and whatever those started (a task that left its directory).
  # shellcheck disable=SC2086
  [ -z "$stray" ] || stray=$(echo $stray $(descendants $stray) | tr ' ' '\n' | sort -un)
  if [ -n "$stray" ]; then
    log "ending leftover processes: $(echo $stray)"
    for pid in $stray; do ps -o pid=,sid=,args= -p "$pid" >&2 || true; done
    # shellcheck disable=SC2086
    stop_pids TERM 5 $stray
  fi
  # 4. Unmount what the clients mounted under $dir (secrets/private tmpfs).
  local m
  for m in $(awk -v d="$dir/" 'index($2, d) == 1 {print $2}' /proc/mounts | awk '{print length, $0}' | sort -rn | cut -d' ' -f2-); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
  done
  # 5. Remove the state and check that nothing is left.
  rm -rf "$dir" || die "could not remove $dir"
  stray=$( {
    in_sessions "${sessions[@]:-}"
    under_dir
  } | sort -un) || true
  # ... and whatever those started (a task that left its directory).
  # shellcheck disable=SC2086
  [ -z "$stray" ] || stray=$(echo $stray $(descendants $stray) | tr ' ' '\n' | sort -un)
  if [ -n "$stray" ]; then
    for pid in $stray; do ps -o pid=,sid=,args= -p "$pid" >&2 || true; done
    die "processes still running under $dir: $(echo $stray)"
  fi
  log "down"
}

case "${1:-}" in
  up) with_lock do_up ;;
  down) with_lock do_down ;;
  status) do_status ;;
  running) do_running ;;
  stop | kill | start | pause | resume) with_lock do_fault "$1" "${2:-}" ;;
  *)
    echo "usage: $0 up|down|status|running|stop|kill|start|pause|resume [AGENT]" >&2
    exit 2
    ;;
esac
