"""What this replica is, from the environment the launcher and Nomad set.

The names are AdaptDL's (``adaptdl.env``). Values come from the variables
that ``python3 -m pollux.torch.launch`` gives each process (RANK,
WORLD_SIZE, LOCAL_RANK, POLLUX_NUM_NODES, POLLUX_NUM_RESTARTS) and from
the task's Nomad environment (NOMAD_JOB_ID, NOMAD_NAMESPACE) and job spec
(POLLUX_CHECKPOINT_DIR, POLLUX_SHARE_PATH, POLLUX_KV_PREFIX).
"""

import os
import re
from typing import Mapping, Optional

# The defaults of the Consul KV prefix and the Nomad namespace, for every
# module that builds a key (the reporter, the rendezvous).
DEFAULT_PREFIX = "pollux/"
DEFAULT_NAMESPACE = "default"
_NAMESPACE = re.compile(r"[A-Za-z0-9-]{1,128}\Z")  # Nomad's rule for namespace names

__all__ = [
    "checkpoint_path", "job_id", "namespace", "kv_prefix", "num_nodes", "num_replicas",
    "num_restarts", "replica_rank", "replica_local_rank", "share_path", "master_addr", "master_port",
]


def _int(name: str, default: int, low: int = 0) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        v = int(raw.strip())
    except ValueError:
        raise ValueError("%s: must be an integer, got %r" % (name, raw)) from None
    if v < low:
        raise ValueError("%s: must be at least %d, got %d" % (name, low, v))
    return v


def num_replicas() -> int:
    """Total number of replicas (processes, one per GPU) of the job: WORLD_SIZE, default 1."""
    return _int("WORLD_SIZE", 1, 1)


def replica_rank() -> int:
    """This replica's global rank: RANK, default 0."""
    return _int("RANK", 0)


def replica_local_rank() -> int:
    """This replica's rank on its node: LOCAL_RANK, default 0."""
    return _int("LOCAL_RANK", 0)


def num_nodes() -> int:
    """Number of nodes (task groups) the job runs on: POLLUX_NUM_NODES (set
    by the launcher), else NOMAD_META_pollux_num_nodes, else 1."""
    n = _int("POLLUX_NUM_NODES", 0)
    return n or _int("NOMAD_META_pollux_num_nodes", 0) or 1


def num_restarts() -> int:
    """How many times the job restarted from a checkpoint before this run:
    POLLUX_NUM_RESTARTS (the launcher reads it from the newest checkpoint),
    default 0."""
    return _int("POLLUX_NUM_RESTARTS", 0)


def checkpoint_path() -> Optional[str]:
    """The directory checkpoints are written to: POLLUX_CHECKPOINT_DIR, or
    None (then nothing is saved)."""
    return os.environ.get("POLLUX_CHECKPOINT_DIR") or None


def share_path() -> Optional[str]:
    """A directory shared by all replicas, if the job has one: POLLUX_SHARE_PATH."""
    return os.environ.get("POLLUX_SHARE_PATH") or None


def job_id() -> Optional[str]:
    """The Nomad job ID: NOMAD_JOB_ID, or None outside Nomad."""
    return os.environ.get("NOMAD_JOB_ID") or None


def prefix_problem(p) -> Optional[str]:
    """Why p is not a usable Consul KV prefix, or None."""
    if not isinstance(p, str) or not p.endswith("/") or p.startswith("/"):
        return "must end with \"/\" and not start with it, got %r" % (p,)
    return None


def namespace_problem(ns) -> Optional[str]:
    """Why ns is not a Nomad namespace name, or None."""
    if not isinstance(ns, str) or not _NAMESPACE.match(ns):
        return "must be 1-128 letters, digits or '-', got %r" % (ns,)
    return None


def namespace(environ: Optional[Mapping[str, str]] = None) -> str:
    """The Nomad namespace: NOMAD_NAMESPACE, default "default". Raises
    ValueError for a name Nomad would not accept."""
    environ = os.environ if environ is None else environ
    ns = environ.get("NOMAD_NAMESPACE") or DEFAULT_NAMESPACE
    why = namespace_problem(ns)
    if why:
        raise ValueError("NOMAD_NAMESPACE: " + why)
    return ns


def kv_prefix(environ: Optional[Mapping[str, str]] = None) -> str:
    """The Pollux Consul KV prefix: POLLUX_KV_PREFIX, default "pollux/".
    Raises ValueError for a prefix that does not end with "/" or starts
    with it."""
    environ = os.environ if environ is None else environ
    p = environ.get("POLLUX_KV_PREFIX") or DEFAULT_PREFIX
    why = prefix_problem(p)
    if why:
        raise ValueError("POLLUX_KV_PREFIX: " + why)
    return p


def job_key(name: str, environ: Optional[Mapping[str, str]] = None, job: Optional[str] = None) -> str:
    """The Consul KV key <prefix>jobs/<namespace>/<job>/<name> of this job
    (job default NOMAD_JOB_ID). Raises ValueError naming a bad variable."""
    environ = os.environ if environ is None else environ
    job = job or environ.get("NOMAD_JOB_ID")
    if not job:
        raise ValueError("NOMAD_JOB_ID: not set (the job's ID names its Consul keys)")
    return "%sjobs/%s/%s/%s" % (kv_prefix(environ), namespace(environ), job, name)


def gpu_type() -> Optional[str]:
    """The GPU type the worker runs on: POLLUX_GPU_TYPE (the job author's,
    for example "${meta.gpu_type}"), else NOMAD_META_pollux_gpu_type (the
    controller's), else None (GPU types off, or not placed by the
    controller yet). The reporter writes it into its profile entries."""
    return (os.environ.get("POLLUX_GPU_TYPE", "").strip()
            or os.environ.get("NOMAD_META_pollux_gpu_type", "").strip() or None)


def master_addr() -> str:
    """The address of replica 0's process-group store: MASTER_ADDR (set by
    the launcher), default "127.0.0.1"."""
    return os.environ.get("MASTER_ADDR") or "127.0.0.1"


def master_port() -> int:
    """The port of replica 0's process-group store: MASTER_PORT (set by the
    launcher), default 0 (none chosen yet)."""
    return _int("MASTER_PORT", 0)
