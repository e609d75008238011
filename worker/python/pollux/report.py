"""Pollux metrics reporter for Python (PyTorch) training jobs.

Standard library only. A training job calls it every step; the rank-0
worker writes the job's metrics document (docs/contracts.md section 3) to Consul
KV at ``<prefix>jobs/<namespace>/<job-id>/metrics``, the key the Pollux
controller reads, and every worker can follow the controller's decision
key to adopt a new batch size, micro-batch, accumulation and learning rate
without a restart. It has the same semantics as the Go package
``github.com/pollux-nomad/pollux/worker/go/report`` and writes the same bytes
for the same observations (the canonical encoding of package ``metrics``:
see ``marshal``); the shared vectors in ``worker/testdata/reporter-vectors.json``
check it.

    from pollux import report as pollux_report

    reporter = pollux_report.Reporter()          # CONSUL_HTTP_ADDR, NOMAD_JOB_ID, ...
    alloc = reporter.allocation()                # from NOMAD_META_pollux_*
    follower = reporter.follow_decisions()       # later decisions, from Consul KV
    for step in ...:
        ... one optimizer step ...
        reporter.observe(pollux_report.StepConfig(num_nodes, num_replicas, local_bsz, accum_steps),
                         compute_time, step_time, sync_time)
        reporter.observe_gradients(grad_sqr, grad_var)
        reporter.progress(progress, batch_size)
        decision = follower.poll()               # None, or the newest decision
    reporter.close()                             # writes what is left

Writing. The reporter keeps, per configuration, the running means of the
step timings and their count, and the latest gradient statistics, progress
and batch size. Only rank 0 writes. A background thread (started by the
constructor unless ``start=False``) writes at most once per
``min_interval`` seconds, and only when something new was observed;
``flush()`` writes at once; ``close()`` stops the thread and writes the
rest. While Consul cannot be reached, observations accumulate in memory
and the thread retries with exponential backoff (from min(1 s,
min_interval) up to min_interval).

Check-and-set merging. Every write reads the stored document and its
ModifyIndex, merges, and writes with ``?cas=``, retrying on conflict:
profile entries this process never observed are kept; for a configuration
in both, the samples observed since this process's last successful write
are merged in by count, so nothing is counted twice; the top-level values
are this process's latest when it has them, else the stored ones
(batch_size falls back to ``init_batch_size``). If the stored document no
longer holds what this process last wrote (key gone or re-created, index
went backwards, an entry missing or with a smaller count, or it no longer
parses), as after a Consul server that lost its data restarts, the write
merges everything this process ever observed instead. Means are merged as
``(mean_a*count_a + mean_b*count_b) / (count_a + count_b)`` in this order
of float operations, exactly as the Go reporter does.

Limits (the same as the Go reporter's): if a Consul server that lost its
data re-creates the key with the same CreateIndex, a higher ModifyIndex and
counts at least as large as this process wrote, this process's earlier
samples of those configurations are lost; if a check-and-set request fails
in transit, it counts as applied only if the stored value is byte-identical
to the attempt.
"""

import base64
import json
import logging
import math
import operator
import os
import random
import re
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Dict, Iterator, NamedTuple, Optional, Tuple

__all__ = [
    "VERSION",
    "ConsulError",
    "NotReady",
    "StepConfig",
    "Stats",
    "Document",
    "Decision",
    "Consul",
    "Reporter",
    "DecisionFollower",
    "format_float",
    "format_timestamp",
    "marshal",
    "parse",
]

# The only metrics document version this module reads and writes.
VERSION = 1
DEFAULT_PREFIX = "pollux/"
DEFAULT_NAMESPACE = "default"
DEFAULT_MIN_INTERVAL = 30.0
DEFAULT_DECISION_WAIT = 60.0
MAX_DOCUMENT_SIZE = 512 << 10
MAX_PROFILE_ENTRIES = 4096
MAX_CAS_ATTEMPTS = 32
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1

# Nomad's environment.
ENV_NAMESPACE = "NOMAD_NAMESPACE"
ENV_JOB_ID = "NOMAD_JOB_ID"
ENV_RANK = "NOMAD_META_pollux_rank"
ENV_INIT_BATCH_SIZE = "NOMAD_META_pollux_init_batch_size"
# The GPU type a job author tells the worker (for example "${meta.gpu_type}"
# in the task's env block), else the controller's pollux_gpu_type meta key.
ENV_GPU_TYPE = "POLLUX_GPU_TYPE"
ENV_CONTROLLER_GPU_TYPE = "NOMAD_META_pollux_gpu_type"
MAX_GPU_TYPE_LEN = 64
_GPU_TYPE = re.compile(r"[A-Za-z0-9 ._+-]{1,%d}\Z" % MAX_GPU_TYPE_LEN)


def gpu_type_problem(t) -> Optional[str]:
    """Why t is not a valid GPU type name (contract.ValidGPUType), or None:
    1 to 64 ASCII letters, digits, spaces, '.', '_', '+' or '-'."""
    if not isinstance(t, str) or not _GPU_TYPE.match(t):
        return "must be 1 to %d letters, digits, spaces, '.', '_', '+' or '-', got %r" % (MAX_GPU_TYPE_LEN, t)
    return None

# Logs go to the "pollux.report" logger; like every library's, it has a
# NullHandler, so configure logging (logging.basicConfig) to see them.
_log = logging.getLogger("pollux.report")
_log.addHandler(logging.NullHandler())


class ConsulError(Exception):
    """Consul could not be reached or answered with an error."""


class NotReady(Exception):
    """There is nothing to write yet: no profile entry or no batch size."""


# --------------------------------------------------------------------------
# The canonical encoding (package metrics, doc.go).


def format_float(x: float) -> str:
    """Return x as Go's encoding/json writes a float64.

    The shortest decimal that reads back to x, in plain notation when
    1e-6 <= |x| < 1e21 (an integral value without a fraction: 1024) and in
    exponent notation otherwise, with the exponent's sign and no leading
    zeros (1e-7, 1.5e+21); zero as 0. Python's repr gives the same shortest
    digits, but spells them differently (1024.0, 1e-07).
    """
    x = float(x)
    if math.isnan(x) or math.isinf(x):
        raise ValueError("not a finite number: %r" % x)
    if x == 0:
        return "-0" if math.copysign(1, x) < 0 else "0"
    r = repr(x)
    sign = ""
    if r[0] == "-":
        sign, r = "-", r[1:]
    mantissa, _, exp = r.partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = whole + frac
    point = len(whole) + (int(exp) if exp else 0)  # the decimal point's position in digits
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    a = abs(x)
    if a < 1e-6 or a >= 1e21:
        e = point - 1
        m = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        if e < 0:
            return "%s%se-%d" % (sign, m, -e)
        return "%s%se+%02d" % (sign, m, e)
    if point <= 0:
        return sign + "0." + "0" * -point + digits
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return sign + digits[:point] + "." + digits[point:]


def format_timestamp(t: datetime) -> str:
    """Return t in UTC as RFC 3339 with "Z", with fractional seconds only
    when they are not zero and without trailing zeros (as Go writes a
    time.Time). A naive datetime is taken as UTC."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    t = t.astimezone(timezone.utc)
    s = "%04d-%02d-%02dT%02d:%02d:%02d" % (t.year, t.month, t.day, t.hour, t.minute, t.second)
    if t.microsecond:
        s += "." + ("%06d" % t.microsecond).rstrip("0")
    return s + "Z"


_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})\Z")


def parse_timestamp(s: str) -> datetime:
    """Parse an RFC 3339 timestamp into an aware UTC datetime (fractional
    seconds beyond microseconds are truncated)."""
    m = _RFC3339.match(s)
    if not m:
        raise ValueError("not an RFC 3339 timestamp: %r" % s)
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    micro = int((m.group(7) or "0")[:6].ljust(6, "0"))
    t = datetime(year, month, day, hour, minute, second, micro, tzinfo=timezone.utc)
    zone = m.group(8)
    if zone != "Z":
        offset = timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6]))
        t = t - offset if zone[0] == "+" else t + offset
    return t


class StepConfig(NamedTuple):
    """The configuration a step ran with: the key of a profile entry."""

    num_nodes: int
    num_replicas: int
    local_bsz: int
    accum_steps: int
    gpu_type: str = ""


class Stats(NamedTuple):
    """The running means of one configuration's step timings (seconds)
    and how many steps they cover."""

    count: int
    compute: float
    step: float
    sync: float


@dataclass
class Document:
    """The metrics document, version 1 (docs/contracts.md section 3)."""

    timestamp: datetime
    batch_size: float
    progress: float
    grad_sqr: float
    grad_var: float
    profile: Dict[StepConfig, Stats]
    version: int = VERSION
    # restart: (restore_time seconds, at) of the worker's last start, or
    # None (docs/contracts.md section 3, the optional restart object).
    restart: Optional[Tuple[float, datetime]] = None
    # restart_error: why parse dropped an invalid restart object, or None.
    restart_error: Optional[str] = None


MAX_RESTORE_TIME = 86400


def _restart_problems(restart) -> list:
    """Return the problems of a restart tuple, each naming its field."""
    errs = []
    t, at = restart
    if (isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t)
            or not 0 <= t <= MAX_RESTORE_TIME):
        errs.append("restart.restore_time: must be finite and in [0, %d] seconds, got %r" % (MAX_RESTORE_TIME, t))
    if not isinstance(at, datetime) or at.year < 1 or at.year > 9999 or at <= datetime(1, 1, 1, tzinfo=timezone.utc):
        errs.append("restart.at: must be set, in years 1 to 9999 UTC, got %r" % (at,))
    return errs


def _validate(d: Document):
    errs = []

    def finite(name, x, positive):
        ok = (isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
              and (x > 0 if positive else x >= 0))
        if not ok:
            errs.append("%s: must be finite and %s, got %r" % (name, "positive" if positive else "non-negative", x))

    if d.version != VERSION:
        errs.append("version: unsupported version %r, want %d" % (d.version, VERSION))
    if not isinstance(d.timestamp, datetime):
        errs.append("timestamp: must be set")
    finite("batch_size", d.batch_size, True)
    finite("progress", d.progress, False)
    finite("grad_sqr", d.grad_sqr, False)
    finite("grad_var", d.grad_var, False)
    if not d.profile:
        errs.append("profile: must have at least one entry")
    elif len(d.profile) > MAX_PROFILE_ENTRIES:
        errs.append("profile: %d entries, at most %d" % (len(d.profile), MAX_PROFILE_ENTRIES))
    for i, (k, s) in enumerate(sorted(d.profile.items())):
        if k.num_nodes < 1:
            errs.append("profile[%d].num_nodes: must be at least 1, got %d" % (i, k.num_nodes))
        if k.num_replicas < max(k.num_nodes, 1):
            errs.append("profile[%d].num_replicas: must be at least num_nodes and 1, got %d" % (i, k.num_replicas))
        if k.local_bsz < 1:
            errs.append("profile[%d].local_bsz: must be at least 1, got %d" % (i, k.local_bsz))
        if k.accum_steps < 0:
            errs.append("profile[%d].accum_steps: must be at least 0, got %d" % (i, k.accum_steps))
        if k.gpu_type and gpu_type_problem(k.gpu_type):
            errs.append("profile[%d].gpu_type: %s" % (i, gpu_type_problem(k.gpu_type)))
        finite("profile[%d].compute_time" % i, s.compute, True)
        finite("profile[%d].step_time" % i, s.step, True)
        finite("profile[%d].sync_time" % i, s.sync, False)
        if s.count < 1:
            errs.append("profile[%d].count: must be at least 1, got %d" % (i, s.count))
    if d.restart is not None:
        errs.extend(_restart_problems(d.restart))
    if errs:
        raise ValueError("invalid metrics document: " + "; ".join(errs))


def marshal(d: Document) -> bytes:
    """Return the canonical encoding of a valid document: the bytes Go's
    metrics.Marshal writes (no whitespace, fields in order, the profile
    sorted by configuration, numbers as format_float)."""
    _validate(d)
    f = format_float
    parts = [
        '{"version":%d,"timestamp":%s,"batch_size":%s,"progress":%s,"grad_sqr":%s,"grad_var":%s,"profile":['
        % (d.version, json.dumps(format_timestamp(d.timestamp)), f(d.batch_size), f(d.progress),
           f(d.grad_sqr), f(d.grad_var))
    ]
    for i, (k, s) in enumerate(sorted(d.profile.items())):
        parts.append(
            '%s{"num_nodes":%d,"num_replicas":%d,"local_bsz":%d,"accum_steps":%d,'
            '"compute_time":%s,"step_time":%s,"sync_time":%s,"count":%d%s}'
            % ("," if i else "", k.num_nodes, k.num_replicas, k.local_bsz, k.accum_steps,
               f(s.compute), f(s.step), f(s.sync), s.count,
               ',"gpu_type":"%s"' % k.gpu_type if k.gpu_type else ""))
    parts.append("]")
    if d.restart is not None:
        parts.append(',"restart":{"restore_time":%s,"at":%s}'
                     % (f(d.restart[0]), json.dumps(format_timestamp(d.restart[1]))))
    parts.append("}")
    return "".join(parts).encode()


def _reject_constant(name):
    raise ValueError("invalid number %s" % name)


def parse(data) -> Document:
    """Decode and validate a metrics document as Go's metrics.Parse does:
    unknown fields are ignored, missing ones are zero, integer fields must
    be JSON integers, negative zeros become zeros. Raises ValueError."""
    if isinstance(data, str):
        data = data.encode()
    if len(data) > MAX_DOCUMENT_SIZE:
        raise ValueError("document too large: %d bytes, at most %d" % (len(data), MAX_DOCUMENT_SIZE))
    try:
        raw = json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError("failed to parse metrics document: %s" % e) from None
    if not isinstance(raw, dict):
        raise ValueError("failed to parse metrics document: not a JSON object")

    def integer(obj, name, where):
        v = obj.get(name)
        if v is None:
            return 0
        if isinstance(v, bool) or not isinstance(v, int) or not _INT64_MIN <= v <= _INT64_MAX:
            raise ValueError("failed to parse metrics document: %s%s: not an integer: %r" % (where, name, v))
        return v

    def number(obj, name, where):
        v = obj.get(name)
        if v is None:
            return 0.0
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError("failed to parse metrics document: %s%s: not a number: %r" % (where, name, v))
        v = float(v)
        if math.isinf(v):
            raise ValueError("failed to parse metrics document: %s%s: out of range" % (where, name))
        return 0.0 if v == 0 else v

    ts = raw.get("timestamp")
    if not isinstance(ts, str):
        raise ValueError("failed to parse metrics document: timestamp: must be set")
    try:
        timestamp = parse_timestamp(ts)
    except ValueError as e:
        raise ValueError("failed to parse metrics document: timestamp: %s" % e) from None
    entries = raw.get("profile") or []
    if not isinstance(entries, list):
        raise ValueError("failed to parse metrics document: profile: not a list")
    profile = {}
    for i, e in enumerate(entries):
        where = "profile[%d]." % i
        if not isinstance(e, dict):
            raise ValueError("failed to parse metrics document: profile[%d]: not an object" % i)
        gpu_type = e.get("gpu_type") or ""
        if not isinstance(gpu_type, str):
            raise ValueError("failed to parse metrics document: %sgpu_type: not a string: %r" % (where, gpu_type))
        k = StepConfig(integer(e, "num_nodes", where), integer(e, "num_replicas", where),
                       integer(e, "local_bsz", where), integer(e, "accum_steps", where), gpu_type)
        if k in profile:
            raise ValueError("invalid metrics document: profile[%d]: same num_nodes, num_replicas, "
                             "local_bsz, accum_steps and gpu_type as an earlier entry" % i)
        profile[k] = Stats(integer(e, "count", where), number(e, "compute_time", where),
                           number(e, "step_time", where), number(e, "sync_time", where))
    d = Document(version=integer(raw, "version", ""), timestamp=timestamp,
                 batch_size=number(raw, "batch_size", ""), progress=number(raw, "progress", ""),
                 grad_sqr=number(raw, "grad_sqr", ""), grad_var=number(raw, "grad_var", ""),
                 profile=profile)
    r = raw.get("restart")
    if r is not None:
        # An invalid restart object is dropped, the document kept (as Go's
        # ParseMetrics does).
        problems = []
        if not isinstance(r, dict):
            problems.append("restart: not an object")
        else:
            t, at = r.get("restore_time", 0), r.get("at")
            if isinstance(at, str):
                try:
                    at = parse_timestamp(at)
                except ValueError as e:
                    problems.append("restart.at: %s" % e)
            if not problems:
                if isinstance(t, (int, float)) and not isinstance(t, bool):
                    t = 0.0 if t == 0 else float(t)
                problems = _restart_problems((t, at))
        if problems:
            d.restart_error = "; ".join(problems)
        else:
            d.restart = (t, at)
    _validate(d)
    return d


# --------------------------------------------------------------------------
# Running means.


def _weighted(x: float, nx: int, y: float, ny: int, n: int) -> float:
    # (x*nx + y*ny)/n in this order, as the Go reporter computes it.
    fx, fy, fn = float(nx), float(ny), float(n)
    m = (x * fx + y * fy) / fn
    if math.isinf(m):  # the products overflowed
        m = x + (y - x) * (fy / fn)
    return m


def merge(a: Optional[Stats], b: Optional[Stats]) -> Optional[Stats]:
    """Return the count-weighted means of a (the older) and b; an empty
    side returns the other unchanged."""
    if a is None or a.count == 0:
        return b
    if b is None or b.count == 0:
        return a
    n = a.count + b.count
    return Stats(n, _weighted(a.compute, a.count, b.compute, b.count, n),
                 _weighted(a.step, a.count, b.step, b.count, n),
                 _weighted(a.sync, a.count, b.sync, b.count, n))


def _merge_into(a: dict, b: dict):
    for k, s in b.items():
        a[k] = merge(a.get(k), s)


class _Snapshot(NamedTuple):
    delta: dict
    mine: dict
    grad: Optional[Tuple[float, float]]
    progress: Optional[float]
    batch_size: int
    restart: Optional[Tuple[float, datetime]] = None


class _LastWrite(NamedTuple):
    create_index: int  # 0: this write created the key
    cas_index: int
    counts: dict

    def survives(self, create_index, modify_index, stored):
        if stored is None:
            return False
        if self.create_index and create_index != self.create_index:
            return False
        if modify_index <= self.cas_index:
            return False
        return all(k in stored.profile and stored.profile[k].count >= n for k, n in self.counts.items())


class _Attempt(NamedTuple):
    value: bytes
    cas_index: int
    delta: dict
    counts: dict


def _build(stored: Optional[Document], add: dict, snap: _Snapshot, init_batch_size: int,
           now: datetime) -> Document:
    entries = dict(stored.profile) if stored else {}
    _merge_into(entries, add)
    if not entries:
        raise NotReady("nothing to write yet: no profile entry (call observe)")
    d = Document(timestamp=now, batch_size=stored.batch_size if stored else 0.0,
                 progress=stored.progress if stored else 0.0, grad_sqr=stored.grad_sqr if stored else 0.0,
                 grad_var=stored.grad_var if stored else 0.0, profile=entries)
    if snap.batch_size > 0:
        d.batch_size = float(snap.batch_size)
    elif d.batch_size > 0:
        pass
    elif init_batch_size > 0:
        d.batch_size = float(init_batch_size)
    else:
        raise NotReady("nothing to write yet: no batch size (call progress or set init_batch_size)")
    if snap.progress is not None:
        d.progress = snap.progress
    if snap.grad is not None:
        d.grad_sqr, d.grad_var = snap.grad
    d.restart = stored.restart if stored else None
    if snap.restart is not None:
        d.restart = snap.restart
    return d


# --------------------------------------------------------------------------
# Consul's HTTP API.


class KVPair(NamedTuple):
    key: str
    value: bytes
    create_index: int
    modify_index: int


class Consul:
    """A minimal client of Consul's KV HTTP API.

    addr is host:port or a URL (default CONSUL_HTTP_ADDR, else
    127.0.0.1:8500); token defaults to CONSUL_HTTP_TOKEN. For https,
    CONSUL_CACERT, CONSUL_CLIENT_CERT / CONSUL_CLIENT_KEY and
    CONSUL_HTTP_SSL_VERIFY are honoured.
    """

    def __init__(self, addr: Optional[str] = None, token: Optional[str] = None, timeout: float = 10.0):
        addr = addr or os.environ.get("CONSUL_HTTP_ADDR") or "127.0.0.1:8500"
        if "://" not in addr:
            ssl_on = os.environ.get("CONSUL_HTTP_SSL", "").lower() in ("1", "true")
            addr = ("https://" if ssl_on else "http://") + addr
        if not addr.startswith(("http://", "https://")):
            raise ValueError("unsupported Consul address %r: want http or https" % addr)
        self.base = addr.rstrip("/")
        self.token = token if token is not None else os.environ.get("CONSUL_HTTP_TOKEN", "")
        self.timeout = timeout
        self._ssl = None
        if self.base.startswith("https://"):
            ctx = ssl.create_default_context(cafile=os.environ.get("CONSUL_CACERT") or None)
            if os.environ.get("CONSUL_CLIENT_CERT"):
                ctx.load_cert_chain(os.environ["CONSUL_CLIENT_CERT"], os.environ.get("CONSUL_CLIENT_KEY") or None)
            if os.environ.get("CONSUL_HTTP_SSL_VERIFY", "").lower() in ("0", "false"):
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            self._ssl = ctx

    def _request(self, method, key, query=None, body=None, timeout=None):
        url = "%s/v1/kv/%s" % (self.base, urllib.parse.quote(key, safe="/"))
        if query:
            url += "?" + urllib.parse.urlencode(query)
        req = urllib.request.Request(url, data=body, method=method)
        if self.token:
            req.add_header("X-Consul-Token", self.token)
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout, context=self._ssl) as resp:
                return resp.status, resp.headers, resp.read()
        except urllib.error.HTTPError as e:
            data = e.read()
            if e.code == 404:
                return 404, e.headers, data
            raise ConsulError("consul %s %s: HTTP %d: %s" % (method, key, e.code, data.decode(errors="replace").strip())) from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise ConsulError("consul %s %s: %s" % (method, key, e)) from None

    def get(self, key: str, index: int = 0, wait: Optional[float] = None,
            timeout: Optional[float] = None) -> Tuple[Optional[KVPair], int]:
        """Read a key; with index > 0 a blocking query that returns when the
        key's index passes index or after wait seconds. Returns the pair
        (None if absent) and Consul's index (X-Consul-Index)."""
        query = {}
        if index:
            query["index"] = str(index)
            if wait:
                query["wait"] = "%dms" % int(wait * 1000)
                timeout = max(timeout or self.timeout, wait * 17 / 16 + 5)
        status, headers, data = self._request("GET", key, query, timeout=timeout)
        last = int(headers.get("X-Consul-Index") or 0)
        if status == 404:
            return None, last
        try:
            entry = json.loads(data)[0]
            value = base64.b64decode(entry["Value"]) if entry.get("Value") is not None else b""
            return KVPair(entry["Key"], value, int(entry["CreateIndex"]), int(entry["ModifyIndex"])), last
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise ConsulError("consul GET %s: unexpected answer: %s" % (key, e)) from None

    def cas(self, key: str, value: bytes, index: int, timeout: Optional[float] = None) -> bool:
        """Write a key only if its ModifyIndex is still index (0: only if
        it does not exist); False on conflict."""
        _, _, data = self._request("PUT", key, {"cas": str(index)}, value, timeout)
        return data.strip() == b"true"

    def put(self, key: str, value: bytes, timeout: Optional[float] = None):
        """Write a key unconditionally."""
        self._request("PUT", key, None, value, timeout)

    def delete(self, key: str, recurse: bool = False, timeout: Optional[float] = None):
        """Delete a key, or with recurse every key under it."""
        self._request("DELETE", key, {"recurse": "true"} if recurse else None, None, timeout)


# --------------------------------------------------------------------------
# Decisions and allocation.


@dataclass(frozen=True)
class Decision:
    """The controller's choice for the job (docs/contracts.md sections 1 and 2):
    the decision key's JSON, or the meta keys a worker was started with."""

    batch_size: int = 0
    local_bsz: int = 0
    accum_steps: int = 0
    lr: float = 0.0
    num_replicas: int = 0
    num_nodes: int = 0
    placement: str = ""
    round: int = 0
    gpu_type: str = ""

    @classmethod
    def from_json(cls, data) -> "Decision":
        """Decode the decision key's value as Go's json.Unmarshal does:
        unknown fields ignored, missing or null ones zero, integer fields
        must be integers. Raises ValueError."""
        raw = json.loads(data, parse_constant=_reject_constant)
        if not isinstance(raw, dict):
            raise ValueError("decision: not a JSON object")
        kw = {}
        for name in ("batch_size", "local_bsz", "accum_steps", "num_replicas", "num_nodes", "round"):
            v = raw.get(name)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int) or not _INT64_MIN <= v <= _INT64_MAX:
                raise ValueError("decision: %s: not an integer: %r" % (name, v))
            kw[name] = v
        v = raw.get("lr")
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isinf(float(v)):
                raise ValueError("decision: lr: not a number: %r" % (v,))
            kw["lr"] = float(v)
        v = raw.get("placement")
        if v is not None:
            if not isinstance(v, str):
                raise ValueError("decision: placement: not a string: %r" % (v,))
            kw["placement"] = v
        v = raw.get("gpu_type")
        if v is not None:
            if not isinstance(v, str):
                raise ValueError("decision: gpu_type: not a string: %r" % (v,))
            kw["gpu_type"] = v
        return cls(**kw)


_INT = re.compile(r"[+-]?[0-9]+\Z")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")


def allocation(environ=None) -> Decision:
    """Read the allocation a worker was started with from
    NOMAD_META_pollux_batch_size, _local_bsz, _accum_steps, _lr,
    _num_replicas, _num_nodes, _placement, _round and _gpu_type. Missing keys are zero;
    malformed ones raise ValueError naming every bad variable."""
    env = os.environ if environ is None else environ
    kw, errs = {}, []
    for name in ("batch_size", "local_bsz", "accum_steps", "num_replicas", "num_nodes", "round"):
        var = "NOMAD_META_pollux_" + name
        if var not in env:
            continue
        raw = env[var].strip()
        if not _INT.match(raw) or int(raw) < 0 or int(raw) > _INT64_MAX:
            errs.append("%s: must be a non-negative integer, got %r" % (var, env[var]))
        else:
            kw[name] = int(raw)
    var = "NOMAD_META_pollux_lr"
    if var in env:
        raw = env[var].strip()
        if not _FLOAT.match(raw) or not math.isfinite(float(raw)) or float(raw) < 0:
            errs.append("%s: must be a finite non-negative number, got %r" % (var, env[var]))
        else:
            kw["lr"] = float(raw)
    kw["placement"] = env.get("NOMAD_META_pollux_placement", "").strip()
    gpu_type = env.get(ENV_CONTROLLER_GPU_TYPE, "").strip()
    if gpu_type:
        if gpu_type_problem(gpu_type):
            errs.append("%s: %s" % (ENV_CONTROLLER_GPU_TYPE, gpu_type_problem(gpu_type)))
        else:
            kw["gpu_type"] = gpu_type
    if errs:
        raise ValueError("failed to read allocation: " + "; ".join(errs))
    return Decision(**kw)


# --------------------------------------------------------------------------
# The reporter.


def _number(name, x, positive):
    if isinstance(x, (bool, str, bytes)):
        raise ValueError("%s: must be a number, got %r" % (name, x))
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ValueError("%s: must be a number, got %r" % (name, x)) from None
    if not math.isfinite(v) or (v <= 0 if positive else v < 0):
        raise ValueError("%s: must be finite and %s, got %r" % (name, "positive" if positive else "at least 0", v))
    return 0.0 if v == 0 else v


def _integer(name, x, low):
    if isinstance(x, bool):
        raise ValueError("%s: must be an integer, got %r" % (name, x))
    try:
        v = operator.index(x)
    except TypeError:
        raise ValueError("%s: must be an integer, got %r" % (name, x)) from None
    if v < low or v > _INT64_MAX:
        raise ValueError("%s: must be at least %d, got %d" % (name, low, v))
    return v


class Reporter:
    """Accumulates one worker's observations and writes the job's metrics
    document; thread-safe.

    consul: a Consul client (default Consul(), from CONSUL_HTTP_ADDR).
    prefix: the KV prefix, default "pollux/".
    namespace: default NOMAD_NAMESPACE, else "default".
    job_id: default NOMAD_JOB_ID (required).
    rank: only rank 0 writes; default NOMAD_META_pollux_rank, else 0.
    init_batch_size: the batch size written until the first progress() call
        when the stored document has none either; default
        NOMAD_META_pollux_init_batch_size.
    min_interval: smallest seconds between two background writes (30).
    decision_wait: longest seconds one blocking query of decisions() waits (60).
    logger: a logging.Logger (default "pollux.report").
    now: returns the timestamp written (default: the current UTC time).
    start: start the background writer (rank 0 only).
    gpu_type: the GPU type written as the gpu_type of steps observed without
        one; default POLLUX_GPU_TYPE, else NOMAD_META_pollux_gpu_type, else
        none (the controller then counts them for the type of the nodes the
        job runs on).
    """

    def __init__(self, consul: Optional[Consul] = None, prefix: str = DEFAULT_PREFIX,
                 namespace: Optional[str] = None, job_id: Optional[str] = None, rank: Optional[int] = None,
                 init_batch_size: Optional[int] = None, min_interval: float = DEFAULT_MIN_INTERVAL,
                 decision_wait: float = DEFAULT_DECISION_WAIT, logger: Optional[logging.Logger] = None,
                 now=None, start: bool = True, gpu_type: Optional[str] = None):
        errs = []
        if gpu_type is None:
            name = ENV_GPU_TYPE
            gpu_type = os.environ.get(ENV_GPU_TYPE, "").strip()
            if not gpu_type:
                name, gpu_type = ENV_CONTROLLER_GPU_TYPE, os.environ.get(ENV_CONTROLLER_GPU_TYPE, "").strip()
            if gpu_type and gpu_type_problem(gpu_type):
                errs.append("%s: %s" % (name, gpu_type_problem(gpu_type)))
        elif gpu_type and gpu_type_problem(gpu_type):
            errs.append("gpu_type: %s" % gpu_type_problem(gpu_type))
        if not prefix.endswith("/") or prefix.startswith("/"):
            errs.append("prefix: must end with \"/\" and not start with it, got %r" % prefix)
        namespace = namespace or os.environ.get(ENV_NAMESPACE) or DEFAULT_NAMESPACE
        job_id = job_id or os.environ.get(ENV_JOB_ID)
        if not job_id:
            errs.append("job_id: required (pass it or set %s)" % ENV_JOB_ID)
        if rank is None:
            raw = os.environ.get(ENV_RANK, "0").strip()
            rank = int(raw) if _INT.match(raw) else -1
            if rank < 0:
                errs.append("%s: must be a non-negative integer, got %r" % (ENV_RANK, os.environ.get(ENV_RANK)))
        elif isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            errs.append("rank: must be a non-negative integer, got %r" % (rank,))
        if init_batch_size is None:
            raw = os.environ.get(ENV_INIT_BATCH_SIZE)
            init_batch_size = 0
            if raw is not None:
                raw = raw.strip()
                if _INT.match(raw) and int(raw) >= 1:
                    init_batch_size = int(raw)
                else:
                    errs.append("%s: must be a positive integer, got %r" % (ENV_INIT_BATCH_SIZE, os.environ[ENV_INIT_BATCH_SIZE]))
        elif isinstance(init_batch_size, bool) or not isinstance(init_batch_size, int) or init_batch_size < 0:
            errs.append("init_batch_size: must be a non-negative integer, got %r" % (init_batch_size,))
        if not (isinstance(min_interval, (int, float)) and min_interval > 0):
            errs.append("min_interval: must be positive, got %r" % (min_interval,))
        if not (isinstance(decision_wait, (int, float)) and decision_wait > 0):
            errs.append("decision_wait: must be positive, got %r" % (decision_wait,))
        if errs:
            raise ValueError("failed to create reporter: " + "; ".join(errs))

        self.consul = consul or Consul()
        self.prefix, self.namespace, self.job_id, self.rank = prefix, namespace, job_id, rank
        self.init_batch_size = init_batch_size
        self.gpu_type = gpu_type or ""
        self.min_interval, self.decision_wait = float(min_interval), float(decision_wait)
        self.key = "%sjobs/%s/%s/metrics" % (prefix, namespace, job_id)
        self.decision_key = "%sjobs/%s/%s/decision" % (prefix, namespace, job_id)
        self.log = logger or _log
        self._now = now or (lambda: datetime.now(timezone.utc))

        self._cond = threading.Condition()  # guards the accumulator
        self._mine: dict = {}
        self._pending: dict = {}
        self._grad: Optional[Tuple[float, float]] = None
        self._progress: Optional[float] = None
        self._batch_size = 0
        self._restart: Optional[Tuple[float, datetime]] = None
        self._dirty = False
        self._stopping = False

        self._write_lock = threading.Lock()  # serialises writes; guards _last and _unsure
        self._last: Optional[_LastWrite] = None
        self._unsure: Optional[_Attempt] = None

        self._stop = threading.Event()
        self._thread = None
        if rank == 0 and start:
            self._thread = threading.Thread(target=self._loop, name="pollux-report", daemon=True)
            self._thread.start()

    # -- observations ------------------------------------------------------

    def observe(self, config, compute_time, step_time, sync_time):
        """Record one optimizer step run with config (a StepConfig or a
        4-tuple num_nodes, num_replicas, local_bsz, accum_steps; without a
        gpu_type, the reporter's gpu_type is used): the mean
        seconds of a micro-batch forward and backward pass without
        synchronisation (compute_time, positive), of the synchronising
        optimizer step (step_time, positive) and blocked in all-reduce
        (sync_time, at least 0). Raises ValueError naming a bad argument;
        a rejected call changes nothing."""
        try:
            if isinstance(config, tuple) and len(config) == 5:
                nodes, replicas, local_bsz, accum, gpu_type = config
            else:
                nodes, replicas, local_bsz, accum = config
                gpu_type = ""
        except (TypeError, ValueError):
            raise ValueError("config: must be a StepConfig, got %r" % (config,)) from None
        gpu_type = gpu_type or self.gpu_type
        if gpu_type and gpu_type_problem(gpu_type):
            raise ValueError("gpu_type: %s" % gpu_type_problem(gpu_type))
        nodes = _integer("num_nodes", nodes, 1)
        k = StepConfig(nodes, _integer("num_replicas", replicas, max(nodes, 1)),
                       _integer("local_bsz", local_bsz, 1), _integer("accum_steps", accum, 0), gpu_type)
        s = Stats(1, _number("compute_time", compute_time, True), _number("step_time", step_time, True),
                  _number("sync_time", sync_time, False))
        with self._cond:
            self._pending[k] = merge(self._pending.get(k), s)
            self._mine[k] = merge(self._mine.get(k), s)
            self._dirty = True
            self._cond.notify_all()

    def observe_gradients(self, grad_sqr, grad_var):
        """Record the latest smoothed gradient statistics: grad_sqr
        estimates |g|^2, grad_var the variance of a batch gradient at the
        initial batch size M0 (both finite, at least 0)."""
        g = (_number("grad_sqr", grad_sqr, False), _number("grad_var", grad_var, False))
        with self._cond:
            self._grad = g
            self._dirty = True
            self._cond.notify_all()

    def progress(self, progress, batch_size):
        """Record the statistical progress so far (examples at
        M0-equivalent, finite, at least 0) and the total batch size the job
        now trains with (at least 1)."""
        p = _number("progress", progress, False)
        m = _integer("batch_size", batch_size, 1)
        with self._cond:
            self._progress, self._batch_size = p, m
            self._dirty = True
            self._cond.notify_all()

    def restarted(self, restore_time, at: Optional[datetime] = None):
        """Record how long this worker's start took: restore_time seconds
        from its process start to its first training step (start-up,
        rendezvous, checkpoint restore; finite, in [0, 86400]), that step
        beginning at at (default: now). It becomes the document's restart
        object, from which the controller measures the job's restart time;
        call it once, when the first step after a restore begins."""
        t = _number("restore_time", restore_time, False)
        if at is None:
            at = datetime.now(timezone.utc)
        if isinstance(at, datetime) and at.tzinfo is None:
            raise ValueError("at: must be timezone-aware, got %r" % (at,))
        problems = _restart_problems((t, at))
        if problems:
            raise ValueError("; ".join(problems))
        with self._cond:
            self._restart = (t, at)
            self._dirty = True
            self._cond.notify_all()

    # -- writing -----------------------------------------------------------

    def flush(self, timeout: Optional[float] = None):
        """Write the merged document now (rank 0 only; other ranks do
        nothing). Raises NotReady if there is nothing to write yet and
        ConsulError if Consul cannot be reached or the write keeps
        conflicting; the observations are then kept for the next write."""
        if self.rank != 0:
            return
        self._write(timeout)

    def close(self, timeout: Optional[float] = None):
        """Stop the background writer and write what is left (ConsulError
        if that fails). Later observations are kept for later flushes."""
        self._halt()
        if self._thread is not None:
            self._thread.join()
        with self._cond:
            dirty = self._dirty
        if dirty and self.rank == 0:
            try:
                self._write(timeout)
            except NotReady:
                pass

    def _halt(self):
        # Stop the background writer without waiting for it.
        self._stop.set()
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _restore(self, delta, dirty):
        with self._cond:
            if delta:
                _merge_into(delta, self._pending)
                self._pending = delta
            self._dirty = self._dirty or dirty

    def _write(self, timeout):
        with self._write_lock:
            with self._cond:
                snap = _Snapshot(self._pending, dict(self._mine), self._grad, self._progress, self._batch_size,
                                 self._restart)
                self._pending = {}
                self._dirty = False
            delta = snap.delta
            in_transit = False
            try:
                for attempt in range(1, MAX_CAS_ATTEMPTS + 1):
                    pair, _ = self.consul.get(self.key, timeout=timeout)
                    u = self._unsure
                    if u is not None:
                        self._unsure = None
                        if pair is not None and pair.modify_index != u.cas_index and pair.value == u.value:
                            self._last = _LastWrite(pair.create_index, u.cas_index, u.counts)
                        else:
                            d = dict(u.delta)
                            _merge_into(d, delta)
                            delta = d
                    stored, create_index, cas_index, survived = None, 0, 0, True
                    if pair is not None:
                        create_index, cas_index = pair.create_index, pair.modify_index
                        try:
                            stored = parse(pair.value)
                        except ValueError as e:
                            self.log.warning("stored metrics document %s is invalid, replacing it: %s", self.key, e)
                            survived = False
                    if self._last is not None and not self._last.survives(create_index, cas_index, stored):
                        self.log.info("stored metrics document %s lost earlier writes, writing all samples", self.key)
                        survived = False
                    doc = _build(stored, delta if survived else snap.mine, snap, self.init_batch_size, self._now())
                    value = marshal(doc)
                    counts = {k: s.count for k, s in doc.profile.items()}
                    try:
                        ok = self.consul.cas(self.key, value, cas_index, timeout=timeout)
                    except Exception as e:
                        # Consul may have applied it: the next write finds out.
                        self._unsure = _Attempt(value, cas_index, delta, counts)
                        in_transit = True
                        with self._cond:
                            self._dirty = True
                        raise ConsulError("failed to write metrics document %s: %s" % (self.key, e)) from None
                    if ok:
                        self._last = _LastWrite(create_index, cas_index, counts)
                        self.log.debug("wrote metrics %s (%d entries, %d attempts)", self.key, len(counts), attempt)
                        return
                    if attempt < MAX_CAS_ATTEMPTS:
                        time.sleep(random.uniform(0.005, 0.025))
                raise ConsulError("failed to write metrics document %s: still conflicting after %d "
                                  "check-and-set attempts" % (self.key, MAX_CAS_ATTEMPTS))
            except NotReady:
                self._restore(delta, False)
                raise
            except BaseException:
                if not in_transit:
                    self._restore(delta, True)
                raise

    def _loop(self):
        retry = min(1.0, self.min_interval)
        backoff = retry
        while True:
            if self._stop.wait(self.min_interval):
                return
            with self._cond:
                while not self._dirty:
                    if self._stopping:
                        return
                    self._cond.wait()
            while True:
                try:
                    self._write(None)
                    backoff = retry
                    break
                except NotReady as e:
                    self.log.debug("nothing to write yet: %s", e)
                    backoff = retry
                    break
                except Exception as e:  # keep the thread alive whatever happens
                    self.log.warning("failed to write metrics, retrying in %.1fs: %s", backoff, e)
                    if self._stop.wait(backoff):
                        return
                    backoff = min(2 * backoff, self.min_interval)

    # -- allocation and decisions -------------------------------------------

    def allocation(self) -> Decision:
        """The allocation this worker was started with (see allocation())."""
        return allocation()

    def decisions(self, stop: Optional[threading.Event] = None) -> Iterator[Decision]:
        """Follow the decision key with Consul blocking queries and yield
        every decision that differs from the one yielded before, starting
        with the current one if there is one. Stops when stop is set (checked
        whenever a blocking query returns, at least every decision_wait
        seconds). Invalid values are logged and skipped; while Consul cannot
        be reached it retries with backoff (up to 10 s)."""
        stop = stop or threading.Event()
        index, last, bad, backoff = 0, None, None, 0.1
        while not stop.is_set():
            try:
                pair, got = self.consul.get(self.decision_key, index=index, wait=self.decision_wait)
                if index and got < index:  # the index went backwards: start over
                    pair, got = self.consul.get(self.decision_key)
            except ConsulError as e:
                self.log.warning("failed to read decision, retrying in %.1fs: %s", backoff, e)
                if stop.wait(backoff):
                    return
                backoff = min(2 * backoff, 10.0)
                continue
            backoff = 0.1
            index = max(got, 1)
            if pair is None or pair.value == bad or stop.is_set():
                continue
            try:
                d = Decision.from_json(pair.value)
            except ValueError as e:
                self.log.warning("ignoring invalid decision: %s", e)
                bad = pair.value
                continue
            bad = None
            if d == last:
                continue
            last = d
            yield d

    def follow_decisions(self) -> "DecisionFollower":
        """Start a background thread that follows the decision key; poll
        it from the training loop."""
        return DecisionFollower(self)


class DecisionFollower:
    """Follows a job's decision key in a daemon thread and keeps the newest
    decision not yet taken."""

    def __init__(self, reporter: Reporter):
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self._latest: Optional[Decision] = None
        self._thread = threading.Thread(target=self._run, args=(reporter,), name="pollux-decisions", daemon=True)
        self._thread.start()

    def _run(self, reporter):
        for d in reporter.decisions(self._stop):
            with self._cond:
                self._latest = d
                self._cond.notify_all()

    def poll(self) -> Optional[Decision]:
        """Return the newest decision not taken yet, or None."""
        with self._cond:
            d, self._latest = self._latest, None
            return d

    def get(self, timeout: Optional[float] = None) -> Optional[Decision]:
        """Wait up to timeout seconds for a decision not taken yet."""
        with self._cond:
            self._cond.wait_for(lambda: self._latest is not None, timeout)
            d, self._latest = self._latest, None
            return d

    def stop(self):
        """Stop following (the thread ends when its blocking query returns)."""
        self._stop.set()
