"""Collectives on small Python objects across the job's replicas (AdaptDL's
``adaptdl.collective``): ``allreduce``, ``allreduce_async`` and
``broadcast``.

Call them in the same order on every replica. They run on a process group
of their own (gloo, created by ``pollux.torch.init_process_group``), one at
a time in call order on a background thread, so that ``allreduce_async``
returns at once and never interleaves with the training's own collectives.
Values are pickled; use torch.distributed for tensors of any size.
"""

import concurrent.futures
import operator
import threading
from typing import Any, Callable, Optional

__all__ = ["allreduce", "allreduce_async", "broadcast"]

_lock = threading.Lock()
_group = None
_pool: Optional[concurrent.futures.ThreadPoolExecutor] = None


def _start(timeout: float):
    """Create the collectives' process group (collective: every replica,
    from init_process_group)."""
    global _group, _pool
    import datetime

    import torch.distributed as dist
    with _lock:
        if _pool is not None:
            return
        _group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout))
        _pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="pollux-collective")


def _stop():
    global _group, _pool
    with _lock:
        if _pool is not None:
            _pool.shutdown(wait=True)
        _group, _pool = None, None


def _submit(fn, *args) -> concurrent.futures.Future:
    with _lock:
        if _pool is None:
            raise RuntimeError("pollux.collective: call pollux.torch.init_process_group first")
        return _pool.submit(fn, *args)


def _gather(value):
    import torch.distributed as dist
    box = [None] * dist.get_world_size(_group)
    dist.all_gather_object(box, value, group=_group)
    return box


def _allreduce(value, reduce_fn):
    values = _gather(value)
    # Reduced in rank order on every replica: the same result everywhere,
    # whatever reduce_fn (it need not be commutative).
    result = values[0]
    for v in values[1:]:
        result = reduce_fn(result, v)
    return result


def _broadcast(value):
    import torch.distributed as dist
    box = [value]
    dist.broadcast_object_list(box, src=0, group=_group)
    return box[0]


def allreduce(value: Any, reduce_fn: Callable[[Any, Any], Any] = operator.add) -> Any:
    """Reduce value over all replicas with reduce_fn (default +, applied in
    rank order) and return the result on every replica. Blocks until every
    replica called it."""
    return allreduce_async(value, reduce_fn).result()


def allreduce_async(value: Any, reduce_fn: Callable[[Any, Any], Any] = operator.add) -> concurrent.futures.Future:
    """allreduce without waiting: returns a Future whose result() is the
    reduced value."""
    return _submit(_allreduce, value, reduce_fn)


def broadcast(value: Any) -> Any:
    """Return replica 0's value on every replica (value is ignored on the
    others). Blocks until every replica called it."""
    return _submit(_broadcast, value).result()
