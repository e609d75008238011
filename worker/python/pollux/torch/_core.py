"""Process group, epochs and the stop-on-SIGTERM protocol of pollux.torch."""

import atexit
import datetime
import logging
import os
import pickle
import shutil
import signal
import sys
import tempfile
import urllib.parse
from typing import Iterator, Optional

import torch
import torch.distributed as dist

from pollux import checkpoint, env

__all__ = ["init_process_group", "current_epoch", "finished_epochs", "remaining_epochs_until"]

_log = logging.getLogger("pollux.torch")

# Exit status after a checkpoint on SIGTERM (128 + SIGTERM, as a shell reports it).
EXIT_STOPPED = 143


class _Context:
    """What the library's pieces share within one process."""

    def __init__(self):
        self.stop_requested = False   # a SIGTERM/SIGINT arrived here
        self.stop_agreed = False      # every replica knows one arrived somewhere
        self.initialized = False
        self.armed = False            # the stop handlers are installed
        self.loader = None            # the AdaptiveDataLoader being iterated
        self.model = None             # the AdaptiveDataParallel
        self.epoch_state = None
        self.epoch_loop = False       # inside remaining_epochs_until
        self.store_dir = None         # a one-process group's store


ctx = _Context()


def _on_signal(sig, _frame):
    # Only a flag: the replicas agree on it at the next synchronising step
    # (it travels in the gradient all-reduce), then save and exit together.
    ctx.stop_requested = True


def arm_signals():
    """From the first training step on, SIGTERM and SIGINT only raise the
    stop flag (the replicas then stop together at a step boundary, after a
    checkpoint). Before it they keep their default action: a process that
    has not trained since it restored the checkpoint has nothing to save,
    and one blocked in start-up collectives (a peer gone) must not wait for
    Nomad's kill_timeout."""
    if not ctx.armed:
        ctx.armed = True
        signal.signal(signal.SIGTERM, _on_signal)
        signal.signal(signal.SIGINT, _on_signal)


def world_size() -> int:
    """The replicas of the job: the process group's size, or before it
    starts what the launcher said (WORLD_SIZE)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else env.num_replicas()


def rank() -> int:
    """This replica's rank: in the process group, or before it starts RANK."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else env.replica_rank()


class _EpochState(checkpoint.State):
    def __init__(self):
        super().__init__("pollux-epoch")
        self.current: Optional[int] = None
        self.finished = 0

    def save(self, f):
        pickle.dump({"current": self.current, "finished": self.finished}, f)

    def load(self, f):
        d = pickle.load(f)
        self.current, self.finished = d["current"], d["finished"]


def epoch_state() -> _EpochState:
    """The epoch counter, created and restored at first use (before or
    after init_process_group: AdaptDL allows either order)."""
    if ctx.epoch_state is None:
        ctx.epoch_state = _EpochState()
        checkpoint.load_state(ctx.epoch_state)
    return ctx.epoch_state


def _split_tcp(init_method: str):
    """(host, port) of a tcp://host:port init_method."""
    u = urllib.parse.urlsplit(init_method)
    if u.scheme != "tcp" or not u.hostname or not u.port:
        raise ValueError("init_method %r: want tcp://host:port" % init_method)
    return u.hostname, u.port


def init_process_group(backend: str = "gloo", init_method: Optional[str] = None, world_size: Optional[int] = None,
                       rank: Optional[int] = None, timeout: Optional[float] = None):
    """Join the job's process group and agree on the checkpoint to restore.

    With no arguments (the usual case, under ``python3 -m
    pollux.torch.launch``) the group is MASTER_ADDR:MASTER_PORT with RANK
    and WORLD_SIZE from the launcher. init_method (``tcp://host:port``),
    world_size and rank override them (AdaptDL's keywords). A single
    process without a launcher gets a real one-member process group, so
    that torch.distributed calls (``dist.barrier()``...) work as in a
    larger job. timeout: seconds a collective may block (default
    POLLUX_COLLECTIVE_TIMEOUT, else 300). Also checks that the checkpoint
    directory is writable and starts pollux.collective."""
    if ctx.initialized:
        return
    world = env.num_replicas() if world_size is None else world_size
    r = env.replica_rank() if rank is None else rank
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        raise ValueError("init_process_group: world_size must be a positive integer, got %r" % (world,))
    if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < world:
        raise ValueError("init_process_group: rank %r is not in [0, world_size %d)" % (r, world))
    if timeout is None:
        timeout = float(os.environ.get("POLLUX_COLLECTIVE_TIMEOUT", "300"))
    td = datetime.timedelta(seconds=timeout)
    if init_method is not None:
        host, port = _split_tcp(init_method)
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = host, str(port)
        os.environ["RANK"], os.environ["WORLD_SIZE"] = str(r), str(world)
    if not (dist.is_available() and dist.is_initialized()):
        if world > 1 or os.environ.get("MASTER_PORT"):
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            if not os.environ.get("MASTER_PORT"):
                raise ValueError("MASTER_PORT is not set: start the script with python3 -m pollux.torch.launch "
                                 "(or pass init_method)")
            dist.init_process_group(backend, init_method="env://", world_size=world, rank=r, timeout=td)
        else:
            # One process: a one-member group on a store in a private file.
            ctx.store_dir = tempfile.mkdtemp(prefix="pollux-pg-")
            atexit.register(shutil.rmtree, ctx.store_dir, True)  # the store's directory goes with the process
            dist.init_process_group(backend, init_method="file://" + os.path.join(ctx.store_dir, "store"),
                                    world_size=1, rank=0, timeout=td)
    if r == 0:
        checkpoint.check_writable()
    checkpoint.share_restore()
    from pollux import collective
    collective._start(timeout)
    ctx.initialized = True
    _log.info("rank %d of %d joined (backend %s, restarts %d)", r, world, backend, env.num_restarts())


def _require():
    if not ctx.initialized:
        raise RuntimeError("call pollux.torch.init_process_group first")


def current_epoch() -> Optional[int]:
    """The epoch being trained (inside remaining_epochs_until), else None."""
    return epoch_state().current


def finished_epochs() -> int:
    """How many epochs the job has finished, across restarts."""
    return epoch_state().finished


def remaining_epochs_until(epochs: int) -> Iterator[int]:
    """Yield the epochs from the one the job is in (restored from the
    checkpoint) up to epochs - 1. After each one a checkpoint is saved. An
    epoch interrupted by a restart is yielded again and continues where it
    stopped (the data loader resumes at its position)."""
    st = epoch_state()
    if st.current is not None and ctx.epoch_loop:
        raise RuntimeError("remaining_epochs_until: overlapping epoch loops")
    ctx.epoch_loop = True
    try:
        while st.finished < epochs:
            st.current = st.finished
            yield st.current
            st.finished += 1
            st.current = None
            save_checkpoint(reason="end of epoch %d" % (st.finished - 1))
            if stop_agreed():
                exit_stopped()
    finally:
        ctx.epoch_loop = False


def save_checkpoint(reason: str = ""):
    """Save every registered state (collective)."""
    path = checkpoint.save_all_states({"reason": reason})
    if path:
        _log.info("checkpoint %s (%s)", path, reason)


def stop_agreed() -> bool:
    """Collective: whether any replica was asked to stop."""
    if ctx.stop_agreed:
        return True
    if world_size() == 1 or not (dist.is_available() and dist.is_initialized()):
        return ctx.stop_requested
    t = torch.tensor([1.0 if ctx.stop_requested else 0.0])
    dist.all_reduce(t)
    return t.item() > 0


def exit_stopped():
    """Leave after a checkpoint because the job was asked to stop."""
    if ctx.model is not None:
        ctx.model._close_reporter()
    _log.info("stopping after the checkpoint (SIGTERM)")
    sys.exit(EXIT_STOPPED)


def _reset_for_tests():
    """Forget this process's library state (unit tests run several
    single-replica set-ups in one process)."""
    global ctx
    if ctx.initialized and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    from pollux import collective
    collective._stop()
    ctx.__init__()
    checkpoint._reset()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
