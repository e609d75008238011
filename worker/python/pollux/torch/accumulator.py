"""Sums of statistics across replicas (AdaptDL's Accumulator).

    stats = pollux.torch.Accumulator()
    for x, y in loader:
        ...
        stats["loss_sum"] += loss.item() * len(y)
        stats["total"] += len(y)
    with stats.synchronized():          # collective: every replica enters
        print(stats["loss_sum"] / stats["total"])

Outside ``synchronized`` each replica sees its own additions on top of the
last synchronised values; inside, every replica sees the sums over all
replicas. The values are checkpointed, so sums survive a restart.
"""

import collections
import collections.abc
import contextlib
import pickle
import weakref

import torch
import torch.distributed as dist

from pollux import checkpoint
from pollux.torch import _core

__all__ = ["Accumulator"]

_counts = collections.Counter()  # accumulators created per epoch
_names = {}  # epoch tag -> registered state names


class _AccumState(checkpoint.State):
    def __init__(self, name, owner):
        super().__init__(name)
        self._owner = weakref.ref(owner)  # the registry must not keep the accumulator alive

    def sync(self):
        o = self._owner()
        if o is not None:
            o._sync()

    def save(self, f):
        o = self._owner()
        pickle.dump(dict(o._synced) if o is not None else {}, f)

    def load(self, f):
        o = self._owner()
        if o is not None:
            o._synced = collections.defaultdict(float, pickle.load(f))


class Accumulator(collections.abc.MutableMapping):
    """A dict of numbers summed across replicas."""

    def __init__(self, *args, **kwargs):
        _core._require()
        self._synced = collections.defaultdict(float)
        self._local = collections.defaultdict(float)
        self._in_sync = False
        # Named by epoch and order of creation within it, so that the
        # accumulator a restarted epoch creates finds the one it replaces.
        epoch = _core.ctx.epoch_state.current
        tag = "none" if epoch is None else str(epoch)
        name = "pollux-accumulator-%s-%d" % (tag, _counts[tag])
        _counts[tag] += 1
        # Accumulators of earlier epochs are no longer saved (dropped the
        # same way on every replica, never by garbage collection, whose
        # timing differs between processes: every save is collective).
        for old in [t for t in _names if t != tag and t != "none"]:
            for n in _names.pop(old):
                checkpoint._unregister(n)
        _names.setdefault(tag, []).append(name)
        self._state = _AccumState(name, self)
        checkpoint.load_state(self._state)
        self.update(*args, **kwargs)

    def _sync(self):
        keys = sorted(self._local)
        if _core.world_size() > 1:
            box = [None] * _core.world_size()
            dist.all_gather_object(box, keys)
            keys = sorted(set(k for ks in box for k in ks))
            t = torch.tensor([self._local.get(k, 0.0) for k in keys], dtype=torch.float64)
            if keys:
                dist.all_reduce(t)
            values = t.tolist()
        else:
            values = [self._local[k] for k in keys]
        for k, v in zip(keys, values):
            self._synced[k] += v
        self._local.clear()

    @contextlib.contextmanager
    def synchronized(self):
        """Collective: sum every replica's additions, then show the sums."""
        self._sync()
        self._in_sync = True
        try:
            yield self
        finally:
            self._in_sync = False

    def __getitem__(self, key):
        if self._in_sync:
            return self._synced[key]
        return self._synced[key] + self._local[key]

    def __setitem__(self, key, value):
        if self._in_sync:
            self._synced[key] = value
        else:
            # Record the change as a local addition.
            self._local[key] = value - self._synced[key]

    def __delitem__(self, key):
        self._synced.pop(key, None)
        self._local.pop(key, None)

    def __iter__(self):
        return iter(set(self._synced) | set(self._local))

    def __len__(self):
        return len(set(self._synced) | set(self._local))
