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
import copy
import pickle
import weakref

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
        pickle.dump({"synced": dict(o._synced), "history": o._history} if o is not None else {}, f)

    def load(self, f):
        o = self._owner()
        if o is not None:
            d = pickle.load(f)
            o._synced, o._history = dict(d.get("synced", {})), dict(d.get("history", {}))


class Accumulator(collections.abc.MutableMapping):
    """A dict of numbers summed across replicas (AdaptDL's Accumulator).

    Outside ``synchronized()`` (accumulation mode) every write is an
    addition local to this replica: ``acc[k] += v``, ``acc[k] -= v``,
    ``acc.update(k=v)`` and ``acc += {k: v}`` add v, ``acc.subtract(k=v)``
    and ``acc -= {k: v}`` subtract it; reads show the last synchronised
    value plus this replica's additions since. ``synchronized()`` sums
    every replica's additions (a collective); inside it the accumulator is
    an ordinary dict, the same on every replica (write the same on all).
    It may be created before init_process_group, and is checkpointed.
    """

    def __init__(self, *args, **kwargs):
        self._synced = dict(*args, **kwargs)
        self._local = {}
        self._in_sync = False
        self._history = {}  # epoch -> the results of its synchronisations outside loader loops
        self._sync_count = collections.Counter()
        # Named by epoch and order of creation within it, so that the
        # accumulator a restarted epoch creates finds the one it replaces.
        epoch = _core.epoch_state().current
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

    def _sync(self):
        local, self._local = self._local, {}
        if _core.world_size() > 1 and dist.is_available() and dist.is_initialized():
            box = [None] * dist.get_world_size()
            dist.all_gather_object(box, local)
        else:
            box = [local]
        for updates in box:  # in rank order: the same sums on every replica
            for k, v in updates.items():
                self._synced[k] = self._synced[k] + v if k in self._synced else v

    @contextlib.contextmanager
    def synchronized(self):
        """Collective: sum every replica's additions, then show the sums.

        Code outside data loader loops runs again after a restart (the
        epoch resumes from its start up to where the loader stopped), so
        the results of each synchronisation there are recorded per epoch
        and, when the same synchronisation comes again after a restart,
        the recorded result is shown instead of adding the replayed
        updates twice (AdaptDL's semantics)."""
        if self._in_sync:
            yield self
            return
        epoch = _core.epoch_state().current
        for e in [e for e in self._history if e is not None and (epoch is None or e < epoch)]:
            del self._history[e]  # finished epochs are never replayed
        count = self._sync_count[epoch]
        self._sync_count[epoch] += 1
        recorded = self._history.setdefault(epoch, [])
        if count < len(recorded):
            self._local = {}
            self._synced = copy.deepcopy(recorded[count])
        else:
            self._sync()
            if _core.ctx.loader is None:
                recorded.append(copy.deepcopy(self._synced))
        self._in_sync = True
        try:
            yield self
        finally:
            self._in_sync = False

    def update(self, *args, **kwargs):
        """Add each value to its key (unlike dict.update, which replaces)."""
        for k, v in dict(*args, **kwargs).items():
            self[k] = self._get(k) + v

    def subtract(self, *args, **kwargs):
        """Subtract each value from its key."""
        for k, v in dict(*args, **kwargs).items():
            self[k] = self._get(k) - v

    def __iadd__(self, other):
        self.update(other)
        return self

    def __isub__(self, other):
        self.subtract(other)
        return self

    def _get(self, key):
        if key in self._synced or key in self._local or not self._in_sync:
            return self[key]
        return 0

    def __getitem__(self, key):
        if self._in_sync:
            return self._synced[key]
        if key in self._local:
            return self._synced.get(key, 0) + self._local[key]
        return self._synced.get(key, 0)

    def __setitem__(self, key, value):
        if self._in_sync:
            self._synced[key] = value
        else:
            # Record the change as a local addition.
            self._local[key] = value - self._synced.get(key, 0)

    def __delitem__(self, key):
        if key not in self._synced and key not in self._local:
            raise KeyError(key)
        self._synced.pop(key, None)
        self._local.pop(key, None)

    def __contains__(self, key):
        return key in self._synced or key in self._local

    def __iter__(self):
        return iter(list(self._synced) + [k for k in self._local if k not in self._synced])

    def __len__(self):
        return len(set(self._synced) | set(self._local))

    def __repr__(self):
        return repr(dict(self.items()))
