"""Process group, epochs and the stop-on-SIGTERM protocol of pollux.torch."""

import datetime
import logging
import os
import pickle
import signal
import sys
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
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


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


def init_process_group(backend: str = "gloo", timeout: Optional[float] = None):
    """Join the job's process group (MASTER_ADDR, MASTER_PORT, RANK and
    WORLD_SIZE from the launcher), check that the checkpoint directory is
    writable and restore the epoch
    counter. timeout: seconds a collective may block (default
    POLLUX_COLLECTIVE_TIMEOUT, else 300)."""
    if ctx.initialized:
        return
    world = env.num_replicas()
    r = env.replica_rank()
    if r >= world:
        raise ValueError("RANK %d is not below WORLD_SIZE %d" % (r, world))
    if timeout is None:
        timeout = float(os.environ.get("POLLUX_COLLECTIVE_TIMEOUT", "300"))
    if world > 1 or os.environ.get("MASTER_ADDR"):
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        if not os.environ.get("MASTER_PORT"):
            raise ValueError("MASTER_PORT is not set: start the script with python3 -m pollux.torch.launch")
        dist.init_process_group(backend, init_method="env://", world_size=world, rank=r,
                                timeout=datetime.timedelta(seconds=timeout))
    if r == 0:
        checkpoint.check_writable()
    ctx.epoch_state = _EpochState()
    checkpoint.load_state(ctx.epoch_state)
    ctx.initialized = True
    _log.info("rank %d of %d joined (backend %s, restarts %d)", r, world, backend, env.num_restarts())


def _require():
    if not ctx.initialized:
        raise RuntimeError("call pollux.torch.init_process_group first")


def current_epoch() -> Optional[int]:
    """The epoch being trained (inside remaining_epochs_until), else None."""
    _require()
    return ctx.epoch_state.current


def finished_epochs() -> int:
    """How many epochs the job has finished, across restarts."""
    _require()
    return ctx.epoch_state.finished


def remaining_epochs_until(epochs: int) -> Iterator[int]:
    """Yield the epochs from the one the job is in (restored from the
    checkpoint) up to epochs - 1. After each one a checkpoint is saved. An
    epoch interrupted by a restart is yielded again and continues where it
    stopped (the data loader resumes at its position)."""
    _require()
    st = ctx.epoch_state
    while st.finished < epochs:
        st.current = st.finished
        yield st.current
        st.finished += 1
        st.current = None
        save_checkpoint(reason="end of epoch %d" % (st.finished - 1))
        if stop_agreed():
            exit_stopped()


def save_checkpoint(reason: str = ""):
    """Save every registered state (collective)."""
    path = checkpoint.save_all_states({"reason": reason})
    if path:
        _log.info("checkpoint %s (%s)", path, reason)


def stop_agreed() -> bool:
    """Collective: whether any replica was asked to stop."""
    if ctx.stop_agreed:
        return True
    if world_size() == 1:
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
    ctx.__init__()
    checkpoint._STATES.clear()
    checkpoint._loaded = None
    checkpoint._loaded_meta = None
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
