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

import logging
import os
import random
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Iterator, NamedTuple, Optional, Tuple

from pollux.consul import Consul, ConsulError, KVPair  # noqa: F401 - re-exported
from pollux.documents import (  # noqa: F401 - re-exported
    ENV_CONTROLLER_GPU_TYPE, ENV_GPU_TYPE, ENV_INIT_BATCH_SIZE,
    ENV_JOB_ID, ENV_NAMESPACE, ENV_RANK, MAX_DOCUMENT_SIZE, MAX_GPU_TYPE_LEN,
    MAX_PROFILE_ENTRIES, VERSION, Decision, Document, NotReady, StepConfig, Stats, _INT, _integer, _merge_into, _restart_problems,
    _number, allocation, format_float, format_timestamp, gpu_type_problem, marshal, merge, parse,
    parse_timestamp)
from pollux import env
from pollux.env import DEFAULT_NAMESPACE, DEFAULT_PREFIX  # noqa: F401 - re-exported

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

# Logs go to the "pollux.report" logger; like every library's, it has a
# NullHandler, so configure logging (logging.basicConfig) to see them.
_log = logging.getLogger("pollux.report")
_log.addHandler(logging.NullHandler())

DEFAULT_MIN_INTERVAL = 30.0
DEFAULT_DECISION_WAIT = 60.0
MAX_CAS_ATTEMPTS = 32


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


class Reporter:
    """Accumulates one worker's observations and writes the job's metrics
    document; thread-safe.

    consul: a Consul client (default Consul(), from CONSUL_HTTP_ADDR).
    prefix: the KV prefix, default POLLUX_KV_PREFIX, else "pollux/".
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

    def __init__(self, consul: Optional[Consul] = None, prefix: Optional[str] = None,
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
        for what, given, default in (("prefix", prefix, env.kv_prefix), ("namespace", namespace, env.namespace)):
            try:
                value = default() if given is None else given
            except ValueError as e:
                errs.append(str(e))
                continue
            why = (env.prefix_problem if what == "prefix" else env.namespace_problem)(value)
            if why:
                errs.append("%s: %s" % (what, why))
            if what == "prefix":
                prefix = value
            else:
                namespace = value
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
