"""Where this task group sits in the job, and how the groups find each other.

The Pollux controller shapes a job into one task group per node, in rank
order (docs/operators.md, "How a placement is written into the job"): the worker group
``G`` has rank 0 and copies ``G-r1``, ``G-r2``, ... the higher ranks. It
writes the job meta ``pollux_placement`` (``node:gpus,...`` in rank order),
``pollux_num_replicas``, ``pollux_num_nodes`` and ``pollux_round``, and
each group's meta ``pollux_rank`` and ``pollux_node``; Nomad passes them to
the task as ``NOMAD_META_*``.

Rendezvous: the rank-0 group listens on the port labelled ``pollux`` in its
``network`` block (``NOMAD_IP_pollux``:``NOMAD_HOST_PORT_pollux``) and
publishes it, stamped with the round, at the Consul KV key
``<prefix>jobs/<namespace>/<job>/rendezvous``::

    {"addr": "10.0.0.5:25113", "round": 12, "alloc_id": "...",
     "world_size": 7, "placement": "n1:4,n2:2,n3:1"}

(``addr``, ``round`` and ``alloc_id`` are the contract's; ``world_size``
and ``placement`` are optional additions: a waiter with a placement skips
an entry of its round made for another placement.)

The other groups wait for an entry of their own round with blocking
queries. An entry of an earlier round is never used; one of a later round
means this allocation is outdated; no entry within the timeout is an error.
Standard library only.
"""

import json
import os
import re
import time
from typing import Dict, List, NamedTuple, Optional, Tuple

from pollux import env
from pollux.consul import Consul, ConsulError

__all__ = ["Group", "RendezvousError", "parse_placement", "group_from_env", "rendezvous_key",
           "publish", "wait", "gpu_count"]

META = "NOMAD_META_pollux_"
_GROUP_RANK = re.compile(r"^(.+)-r([1-9][0-9]*)\Z")


class RendezvousError(Exception):
    """The groups cannot form the job's process group; the message says why."""


class Group(NamedTuple):
    """One task group's place in the job."""
    rank: int            # the group's rank (node index in the placement)
    local_size: int      # processes (GPUs) in this group
    offset: int          # global rank of this group's first process
    world_size: int      # processes in the whole job
    num_groups: int      # groups (nodes) in the job
    round: int           # pollux_round, 0 if the job was never placed by Pollux
    placement: str       # pollux_placement as written, "" if absent


def parse_placement(s: str, where: str = META + "placement") -> List[Tuple[str, int]]:
    """Parse "node:gpus,node:gpus" (rank order); ValueError naming where."""
    out = []
    if not s.strip():
        return out
    for i, part in enumerate(s.split(",")):
        node, sep, gpus = part.strip().rpartition(":")
        if not sep or not node or not gpus.isdigit() or int(gpus) < 1:
            raise ValueError("%s: entry %d %r: want node-id:gpus with gpus >= 1" % (where, i, part))
        out.append((node, int(gpus)))
    return out


def _meta_int(environ, key, low=0) -> Optional[int]:
    raw = environ.get(META + key)
    if raw is None or raw.strip() == "":
        return None
    raw = raw.strip()
    if not re.match(r"[0-9]+\Z", raw) or int(raw) < low:
        raise ValueError("%s%s: must be an integer >= %d, got %r" % (META, key, low, environ[META + key]))
    return int(raw)


def gpu_count(environ=None) -> Optional[int]:
    """GPUs Nomad allocated to this task according to the device plugin's
    environment: NVIDIA_VISIBLE_DEVICES (the NVIDIA plugin's list of UUIDs).
    None when no plugin variable says (Nomad's example file device, used
    for fake GPUs, sets none)."""
    environ = os.environ if environ is None else environ
    v = environ.get("NVIDIA_VISIBLE_DEVICES")
    if v is None or v.strip().lower() in ("", "all", "none", "void"):
        return None
    return len([x for x in v.split(",") if x.strip()])


def group_from_env(environ=None, nproc: Optional[int] = None) -> Group:
    """Work out this group's rank, size and offset from the Nomad
    environment. nproc (the launcher's --nproc) overrides the GPU count."""
    environ = os.environ if environ is None else environ
    placement_raw = environ.get(META + "placement", "").strip()
    placement = parse_placement(placement_raw)
    rnd = _meta_int(environ, "round") or 0
    rank = _meta_int(environ, "rank")
    if rank is None:
        # No group rank in meta: derive it from the group's name.
        m = _GROUP_RANK.match(environ.get("NOMAD_GROUP_NAME", ""))
        rank = int(m.group(2)) if m and placement and int(m.group(2)) < len(placement) else 0
    allocated = gpu_count(environ)
    if placement:
        if rank >= len(placement):
            raise ValueError("%srank %d is outside %splacement %r (%d groups)" % (META, rank, META, placement_raw, len(placement)))
        planned = placement[rank][1]
        local = nproc or allocated or planned
        if local != planned:
            raise ValueError("this group runs %d processes (%s) but %splacement %r gives rank %d %d GPUs; "
                             "the job's device count was changed outside Pollux?" %
                             (local, "--nproc" if nproc else "GPUs Nomad allocated", META, placement_raw, rank, planned))
        world = sum(g for _, g in placement)
        declared = _meta_int(environ, "num_replicas")
        if declared is not None and declared != world:
            raise ValueError("%snum_replicas %d does not match %splacement %r (%d GPUs)" % (META, declared, META, placement_raw, world))
        offset = sum(g for _, g in placement[:rank])
        return Group(rank, local, offset, world, len(placement), rnd, placement_raw)
    # Not (yet) placed by Pollux: the job runs as submitted, one group.
    local = nproc or allocated or 1
    return Group(0, local, 0, local, 1, rnd, "")


def rendezvous_key(environ=None) -> str:
    environ = os.environ if environ is None else environ
    if not environ.get("NOMAD_JOB_ID"):
        raise RendezvousError("NOMAD_JOB_ID is not set: the rendezvous across task groups needs the Nomad job's ID")
    try:
        return env.job_key("rendezvous", environ)
    except ValueError as e:
        raise RendezvousError(str(e)) from None


def listen_address(environ=None) -> Tuple[str, int]:
    """The rank-0 group's address: NOMAD_IP_pollux and NOMAD_HOST_PORT_pollux."""
    environ = os.environ if environ is None else environ
    port = environ.get("NOMAD_HOST_PORT_pollux")
    ip = environ.get("NOMAD_IP_pollux")
    if not port or not ip:
        raise RendezvousError("the rank-0 group has no port labelled \"pollux\" (NOMAD_HOST_PORT_pollux / NOMAD_IP_pollux "
                              "are not set): add network { port \"pollux\" {} } to the worker group of the job spec")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise RendezvousError("NOMAD_HOST_PORT_pollux: not a port number: %r" % port)
    return ip, int(port)


def join_addr(host: str, port: int) -> str:
    """host:port, with brackets around an IPv6 host."""
    return "[%s]:%d" % (host, port) if ":" in host else "%s:%d" % (host, port)


def split_addr(addr: str) -> Tuple[str, int]:
    """Split host:port ([v6]:port); ValueError if it is not one."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("not host:port: %r" % addr)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def publish(consul: Consul, key: str, group: Group, addr: str, port: int, alloc_id: str = ""):
    entry = {"addr": join_addr(addr, port), "round": group.round, "alloc_id": alloc_id,
             "world_size": group.world_size, "placement": group.placement}
    try:
        consul.put(key, json.dumps(entry, sort_keys=True).encode())
    except ConsulError as e:
        raise RendezvousError("failed to publish the rendezvous address at %s: %s" % (key, e)) from None
    return entry


def wait(consul: Consul, key: str, group: Group, timeout: float, log=None) -> Dict:
    """Wait for the rank-0 group's entry of this group's round; return it
    (with "host" and "port" added from its addr).
    Raises RendezvousError on timeout (naming what was seen) or when a later
    round has published (this allocation is outdated)."""
    deadline = time.monotonic() + timeout
    index, seen, errors = 0, "nothing", 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RendezvousError("no rendezvous address for round %d at Consul key %s after %.0fs (saw %s): "
                                  "the rank-0 group did not start or cannot reach Consul" % (group.round, key, timeout, seen))
        try:
            pair, new_index = consul.get(key, index=index, wait=min(left, 30.0))
        except ConsulError as e:
            errors += 1
            seen = "Consul error: %s" % e
            time.sleep(min(1.0, max(left, 0)))
            index = 0
            continue
        if new_index < index:  # the index went backwards (Consul restarted): start over
            new_index = 0
        index = new_index
        if pair is None:
            seen = "no key"
            continue
        try:
            entry = json.loads(pair.value)
            rnd = int(entry["round"])
            host, port = split_addr(str(entry["addr"]))
        except (ValueError, KeyError, TypeError) as e:
            seen = "a malformed entry (%s)" % e
            continue
        if rnd < group.round:
            seen = "a stale entry of round %d" % rnd
            continue
        if rnd > group.round:
            raise RendezvousError("the rendezvous key %s holds round %d, newer than this allocation's round %d: "
                                  "this allocation is outdated" % (key, rnd, group.round))
        if group.placement and entry.get("placement") not in (None, "", group.placement):
            seen = "an entry of round %d for placement %r" % (rnd, entry.get("placement"))
            continue
        entry["host"], entry["port"] = host, port
        return entry
