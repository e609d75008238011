"""The documents Pollux workers and the controller exchange
(docs/contracts.md): the metrics document (``Document``, its canonical
encoding ``marshal`` and its validating decoder ``parse``, the profile's
``StepConfig`` and ``Stats``) and the controller's decision (``Decision``,
from the decision key or the ``NOMAD_META_pollux_*`` variables a worker
starts with, ``allocation``). Standard library only; the same bytes as the
Go package ``contract``."""

import json
import math
import operator
import os
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Dict, NamedTuple, Optional, Tuple

__all__ = [
    "VERSION", "NotReady", "StepConfig", "Stats", "Document", "Decision", "format_float",
    "format_timestamp", "parse_timestamp", "marshal", "parse", "merge", "allocation", "gpu_type_problem",
]

# The only metrics document version this module reads and writes.
VERSION = 1
MAX_DOCUMENT_SIZE = 512 << 10
MAX_PROFILE_ENTRIES = 4096
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
