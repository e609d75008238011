"""Data loading whose batch size follows the Pollux controller's decision.

Batch arithmetic (contracts.md §1): one optimizer step consumes a global
batch of M = m x K x (s + 1) samples, m the per-replica micro-batch, K the
replicas and s the accumulation steps. The global batch is the next M
samples of the epoch's permutation; micro-batch j of replica r is its chunk
number j*K + r. The loader's position (epoch, samples consumed) is a
checkpointed state, so a job restarted on another number of replicas goes
on with the same permutation where it stopped: each sample is seen once per
epoch whatever the world size. The last global batch of an epoch may be
short; it is split as evenly as possible, with fewer accumulation steps if
needed, so that every replica gets at least one sample (a training loader
skips a tail of fewer samples than replicas; drop_last skips any short
batch).
"""

import collections
import logging
import math
import pickle
import time
from typing import NamedTuple, Optional, Tuple

import torch
import torch.utils.data

from pollux import checkpoint, documents
from pollux.torch import _core, _tensorboard

__all__ = ["AdaptiveDataLoader", "ElasticSampler", "current_dataloader", "plan_step", "local_chunk"]

_log = logging.getLogger("pollux.torch")


def current_dataloader() -> Optional["AdaptiveDataLoader"]:
    """The AdaptiveDataLoader being iterated, or None."""
    return _core.ctx.loader


class Step(NamedTuple):
    """How one optimizer step's global batch is split."""
    size: int          # samples in the global batch
    micro_steps: int   # micro-batches per replica (accumulation steps + 1)
    chunks: Tuple[int, ...]  # chunk sizes, chunk j*K + r is micro-batch j of replica r


def plan_step(remaining: int, local_bsz: int, accum_steps: int, replicas: int, min_chunk: int = 1) -> Optional[Step]:
    """Plan the next step given the samples left in the epoch. None when
    no step fits (fewer samples than replicas x min_chunk)."""
    full = local_bsz * replicas * (accum_steps + 1)
    if remaining >= full:
        return Step(full, accum_steps + 1, (local_bsz,) * (replicas * (accum_steps + 1)))
    micro = min(accum_steps + 1, math.ceil(remaining / (replicas * local_bsz)))
    while micro > 0 and remaining < replicas * micro * min_chunk:
        micro -= 1
    if micro == 0:
        return None
    c = replicas * micro
    base, extra = divmod(remaining, c)
    return Step(remaining, micro, tuple(base + (1 if i < extra else 0) for i in range(c)))


def local_chunk(step: Step, replicas: int, rank: int, micro: int) -> Tuple[int, int]:
    """(start, stop) offsets in the global batch of replica rank's micro-batch."""
    i = micro * replicas + rank
    start = sum(step.chunks[:i])
    return start, start + step.chunks[i]


def _permutation(n: int, shuffle: bool, seed: int, epoch: int) -> torch.Tensor:
    if not shuffle:
        return torch.arange(n)
    g = torch.Generator()
    g.manual_seed(seed * 1000003 + epoch)
    return torch.randperm(n, generator=g)


class ElasticSampler(torch.utils.data.Sampler):
    """AdaptDL's ElasticSampler: this replica's share of the samples of an
    epoch not yet consumed, from position index of the epoch's permutation
    (the same on every replica for the same seed and epoch)."""

    def __init__(self, dataset, shuffle: bool = True, seed: int = 0):
        self.dataset, self.shuffle, self.seed = dataset, shuffle, seed
        self.num_replicas = _core.world_size()
        self.rank = _core.rank()
        self.epoch, self.index = 0, 0

    def set_epoch(self, epoch: int, index: int = 0):
        self.epoch, self.index = epoch, index

    def __iter__(self):
        perm = _permutation(len(self.dataset), self.shuffle, self.seed, self.epoch)[self.index:]
        return iter(perm[self.rank::self.num_replicas].tolist())

    def __len__(self):
        left = max(len(self.dataset) - self.index - self.rank, 0)
        return (left + self.num_replicas - 1) // self.num_replicas


class _LoaderState(checkpoint.State):
    def __init__(self, name):
        super().__init__(name)
        self.epoch, self.index, self.passes = None, 0, 0
        self.end = 0  # for loaders whose index is relative to a length that changes with the batch size

    def save(self, f):
        pickle.dump({"epoch": self.epoch, "index": self.index, "passes": self.passes, "end": self.end}, f)

    def load(self, f):
        d = pickle.load(f)
        self.epoch, self.index, self.passes = d["epoch"], d["index"], d["passes"]
        self.end = d.get("end", 0)


_count = 0


class AdaptiveDataLoader:
    """A data loader whose per-replica micro-batch and accumulation steps
    follow the Pollux controller (AdaptDL's AdaptiveDataLoader).

    batch_size: the total batch size M0 the job was tuned for. Without
    autoscale_batch_size the loader keeps it, split over the replicas
    (micro-batch ceil(M0 / K)). Other keyword arguments go to
    torch.utils.data.DataLoader (num_workers, collate_fn, pin_memory, ...).
    """

    def __init__(self, dataset, batch_size: int = 1, shuffle: bool = False, drop_last: bool = False,
                 seed: int = 0, **kwargs):
        global _count
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError("AdaptiveDataLoader: batch_size must be a positive integer, got %r" % (batch_size,))
        for bad in ("sampler", "batch_sampler"):
            if bad in kwargs:
                raise ValueError("AdaptiveDataLoader: %s is chosen by the loader; pass shuffle instead" % bad)
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle, self.drop_last, self.seed = shuffle, drop_last, seed
        self._kwargs = kwargs
        self._local_bsz = None  # None: batch_size over the replicas (known when the process group starts)
        self._accum = 0
        self._max_batch_size = None
        self._bounds = None
        self._accumulation = False
        self._autoscale = False  # autoscale_batch_size was called: the controller's decisions apply
        self._stepped = False    # an optimizer step ran while this loader was iterated
        self._state = _LoaderState("pollux-dataloader-%d" % _count)
        _count += 1
        checkpoint.load_state(self._state)
        # Per micro-batch as it reaches the user: is it the step's last, the step.
        self.accum_pos = 0
        self.micro_steps = 1
        self.step = None
        self.is_sync_step = True
        self.t_yield = time.perf_counter()

    # ---- the batch size --------------------------------------------------

    def autoscale_batch_size(self, max_batch_size: int, local_bsz_bounds: Optional[Tuple[int, int]] = None,
                             gradient_accumulation: bool = False):
        """Let Pollux choose the batch size, up to max_batch_size, with a
        per-replica micro-batch within local_bsz_bounds and, if
        gradient_accumulation, accumulation steps. Starts from the
        decision in NOMAD_META_pollux_* when it is for this world size and
        within these bounds; later decisions are adopted at step
        boundaries."""
        if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int) or max_batch_size < self.batch_size:
            raise ValueError("autoscale_batch_size: max_batch_size must be an integer >= batch_size %d, got %r"
                             % (self.batch_size, max_batch_size))
        if local_bsz_bounds is None:
            local_bsz_bounds = (1, max_batch_size)
        lo, hi = local_bsz_bounds
        if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi):
            raise ValueError("autoscale_batch_size: local_bsz_bounds must be integers 1 <= lo <= hi, got %r" % (local_bsz_bounds,))
        self._max_batch_size, self._bounds, self._accumulation = max_batch_size, (lo, hi), bool(gradient_accumulation)
        self._autoscale = True
        # Default: M0 over the replicas, accumulating if a micro-batch would be too large.
        local = math.ceil(self.batch_size / self._replicas)
        accum = 0
        if local > hi:
            if self._accumulation:
                accum = math.ceil(local / hi) - 1
                local = math.ceil(local / (accum + 1))
            else:
                local = hi
        self._local_bsz, self._accum = max(min(local, hi), lo), accum
        try:
            alloc = documents.allocation()
        except ValueError as e:
            _log.warning("ignoring the allocation's meta: %s", e)
            alloc = None
        if alloc is not None and alloc.local_bsz:
            why = self.check_decision(alloc)
            if why:
                _log.warning("ignoring the decision in NOMAD_META_pollux_* (round %d): %s", alloc.round, why)
            else:
                self._local_bsz, self._accum = alloc.local_bsz, alloc.accum_steps

    def check_decision(self, d) -> Optional[str]:
        """Why decision d cannot be used by this loader, or None."""
        k = self._replicas
        if d.num_replicas != k:
            return "num_replicas %d is not this job's %d replicas" % (d.num_replicas, k)
        lo, hi = self._bounds or (1, 1 << 62)
        if not lo <= d.local_bsz <= hi:
            return "local_bsz %d is outside local_bsz_bounds (%d, %d)" % (d.local_bsz, lo, hi)
        if d.accum_steps < 0 or d.accum_steps > (1 << 20):
            return "accum_steps %d is not in [0, 2^20]" % d.accum_steps
        if d.accum_steps > 0 and not self._accumulation:
            return "accum_steps %d but gradient_accumulation is off" % d.accum_steps
        m = d.local_bsz * k * (d.accum_steps + 1)
        if self._max_batch_size and m > self._max_batch_size:
            return "batch size %d (local_bsz %d x %d replicas x %d) exceeds max_batch_size %d" % (
                m, d.local_bsz, k, d.accum_steps + 1, self._max_batch_size)
        if d.batch_size and d.batch_size != m:
            return "batch_size %d is not local_bsz %d x %d replicas x (accum_steps %d + 1) = %d" % (
                d.batch_size, d.local_bsz, k, d.accum_steps, m)
        return None

    def _adopt(self, local_bsz: int, accum: int):
        if (local_bsz, accum) != (self._local_bsz, self._accum):
            _log.info("batch size %d -> %d (micro-batch %d, accumulation %d)", self._batch_size(),
                      local_bsz * self._replicas * (accum + 1), local_bsz, accum)
        self._local_bsz, self._accum = local_bsz, accum

    @property
    def _replicas(self) -> int:
        return _core.world_size()

    @property
    def _rank(self) -> int:
        return _core.rank()

    def _local(self) -> int:
        if self._local_bsz is None:
            self._local_bsz = math.ceil(self.batch_size / self._replicas)
        return self._local_bsz

    def _batch_size(self) -> int:
        return self._local() * self._replicas * (self._accum + 1)

    @property
    def training(self) -> bool:
        """Whether this loader trains: autoscale_batch_size was called, or
        an optimizer step ran while it was iterated."""
        return self._autoscale or self._stepped

    @property
    def max_batch_size(self) -> Optional[int]:
        """autoscale_batch_size's max_batch_size, or None."""
        return self._max_batch_size

    @property
    def local_bsz_bounds(self) -> Optional[Tuple[int, int]]:
        """autoscale_batch_size's local_bsz_bounds, or None."""
        return self._bounds

    @property
    def current_local_bsz(self) -> Optional[int]:
        """The per-replica micro-batch size while this loader is iterated, else None."""
        return self._local() if _core.ctx.loader is self else None

    @property
    def accumulation_steps(self) -> int:
        """Micro-batches accumulated before each synchronising step, minus one."""
        return self._accum

    @property
    def current_batch_size(self) -> Optional[int]:
        """The total batch size of one optimizer step (micro-batch x
        replicas x (accumulation + 1)) while this loader is iterated, else None."""
        return self._batch_size() if _core.ctx.loader is self else None

    def is_accum_step(self) -> bool:
        """Whether the micro-batch just yielded only accumulates gradients."""
        return not self.is_sync_step

    def is_optim_step(self) -> bool:
        """Whether the optimizer steps after the micro-batch just yielded."""
        return self.is_sync_step

    def to_tensorboard(self, writer, global_step: int, tag_prefix: str = ""):
        """Write the batch size, micro-batch and accumulation steps to
        TensorBoard: writer is a SummaryWriter or a log directory."""
        w = _tensorboard.writer_for(writer)
        if w is None:
            return
        p = _tensorboard.prefix(tag_prefix)
        w.add_scalar(p + "Total_Batch_Size", self._batch_size(), global_step)
        w.add_scalar(p + "Local_Batch_Size", self._local(), global_step)
        w.add_scalar(p + "Accumulation_Steps", self._accum, global_step)

    # ---- iteration ---------------------------------------------------------

    def _epoch(self) -> int:
        e = _core.epoch_state().current
        return self._state.passes if e is None else e

    def _batches(self, perm, meta):
        """Generate this replica's micro-batch index lists (lazily, so the
        current batch size is read when each global batch is planned)."""
        st = self._state
        n = len(perm)
        pos = st.index
        k, r = self._replicas, self._rank
        while pos < n:
            step = plan_step(n - pos, self._local(), self._accum, k, 1 if self.training else 0)
            if step is None or (step.size < self._batch_size() and self.drop_last):
                break
            for j in range(step.micro_steps):
                a, b = local_chunk(step, k, r, j)
                if a == b:
                    continue  # only for loaders that do not train
                meta.append((j, step, pos + step.size))
                yield perm[pos + a:pos + b].tolist()
            pos += step.size

    def _before_yield(self, j: int, step: "Step"):
        """At each micro-batch: stop if asked to (before a step begins),
        then record where the step is."""
        if j == 0 and self.training and _core.ctx.stop_agreed:
            # Asked to stop (SIGTERM, agreed by all replicas in the last
            # step): save at this step boundary and leave.
            _core.save_checkpoint(reason="stop requested (SIGTERM) after step %d" % (
                _core.ctx.model.steps if _core.ctx.model is not None else -1))
            _core.exit_stopped()
        self.accum_pos, self.step, self.micro_steps = j, step, step.micro_steps
        self.is_sync_step = j == step.micro_steps - 1
        if self.training:
            _core.arm_signals()

    def _after_loop(self):
        """At the end of a full pass: leave if the last step agreed to stop
        (not after the rest of the epoch, validation...)."""
        self._state.passes += 1
        if self.training and _core.ctx.stop_agreed:
            _core.save_checkpoint(reason="stop requested (SIGTERM) at the end of a training loop")
            _core.exit_stopped()

    def __iter__(self):
        st = self._state
        epoch = self._epoch()
        if st.epoch != epoch:
            st.epoch, st.index = epoch, 0
        perm = _permutation(len(self.dataset), self.shuffle, self.seed, epoch)
        meta = collections.deque()
        loader = torch.utils.data.DataLoader(self.dataset, batch_sampler=self._batches(perm, meta), **self._kwargs)
        _core.ctx.loader = self
        try:
            for batch in loader:
                j, step, after = meta.popleft()
                self._before_yield(j, step)
                if self.is_sync_step:
                    st.index = after  # a checkpoint taken at this step resumes after it
                self.t_yield = time.perf_counter()
                yield batch
            st.index = len(perm)
            self._after_loop()
        finally:
            if _core.ctx.loader is self:
                _core.ctx.loader = None

    def __len__(self):
        """Micro-batches this replica gets in a full epoch at the current batch size."""
        n = len(self.dataset)
        return math.ceil(n / self._batch_size()) * (self._accum + 1)
