"""Checkpoints of a training job's state (AdaptDL's ``adaptdl.checkpoint``).

A ``State`` is a named piece of the job's state (the model and optimizer,
the data loader's position, the epoch counter, the user's own objects).
``pollux.torch`` saves every registered state at the end of each epoch and
when the job is told to stop (SIGTERM, as Nomad does before a
reallocation), and each state is restored at start with ``load_state``.

On disk, in POLLUX_CHECKPOINT_DIR (a Nomad host volume on one node, or a
shared file system when the job spans nodes)::

    ckpt-00000007/           the newest complete checkpoint
        meta.json            {"seq": 7, "restarts": 2, "states": [...]}
        <state name>         one file per state, written by State.save
    .tmp-ckpt-00000008-<pid> a save in progress (ignored; removed by the next save)

A save writes a new directory under a temporary name, fsyncs its files,
renames it into place and fsyncs the parent: a process killed mid-save
leaves the previous checkpoint as the newest complete one. The two newest
checkpoints are kept.

Only replica 0 writes. Every replica calls ``sync`` on every state first
(a collective step, so that replicas agree). When the process group
starts, replica 0 reads the newest checkpoint and sends its files to all
replicas (``share_restore``), so the directory need not be shared between
nodes as long as replica 0 sees it, and loading a state is never a
collective.
"""

import io
import json
import logging
import os
import pickle
import re
import shutil
from typing import Dict, List, Optional

from pollux import env

__all__ = ["State", "CheckpointError", "save_all_states", "save_state", "load_state", "latest", "check_writable"]

_log = logging.getLogger("pollux.checkpoint")

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
_DIR = re.compile(r"ckpt-([0-9]{8})\Z")
KEEP = 2

_STATES: Dict[str, "State"] = {}
_loaded: Optional[str] = None  # the checkpoint directory this process restored from ("" = none)
_loaded_meta: Optional[dict] = None


class CheckpointError(Exception):
    """A checkpoint could not be written or read; the message names the path."""


class State:
    """A named piece of state that is checkpointed. Subclasses may override
    ``save(fileobj)`` and ``load(fileobj)`` (binary file objects; by default
    the object's attributes are pickled) and ``sync()``, called on every
    replica before a save so that replica 0 holds the state to write."""

    def __init__(self, name: str):
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError("checkpoint state name %r: want 1-128 characters of A-Z a-z 0-9 . _ -, "
                             "starting with a letter or digit" % (name,))
        if name in _STATES:
            raise ValueError("checkpoint state %r is already registered" % name)
        self.name = name
        _STATES[name] = self

    def save(self, fileobj):
        """Write the state; by default the object's attributes (except
        name), pickled."""
        pickle.dump({k: v for k, v in vars(self).items() if k != "name"}, fileobj)

    def load(self, fileobj):
        """Read what save wrote; by default restores the pickled attributes."""
        self.__dict__.update(pickle.load(fileobj))

    def sync(self):
        """Called on every replica before a save (collective if it needs
        to be); by default nothing."""


def _unregister(name: str):
    """Forget a state (for tests)."""
    _STATES.pop(name, None)


def _dist():
    """torch.distributed if it is initialised with more than one process."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None


def _rank() -> int:
    d = _dist()
    return d.get_rank() if d else env.replica_rank()


def _directory() -> Optional[str]:
    return env.checkpoint_path()


def latest(directory: Optional[str] = None) -> Optional[str]:
    """The newest complete checkpoint directory in directory (default
    POLLUX_CHECKPOINT_DIR), or None."""
    directory = directory or _directory()
    if not directory or not os.path.isdir(directory):
        return None
    best = None
    for name in os.listdir(directory):
        m = _DIR.match(name)
        if m and os.path.isfile(os.path.join(directory, name, "meta.json")):
            if best is None or name > best:
                best = name
    return os.path.join(directory, best) if best else None


def read_meta(path: str) -> dict:
    with open(os.path.join(path, "meta.json")) as f:
        return json.load(f)


def check_writable(directory: Optional[str] = None):
    """Raise CheckpointError unless the checkpoint directory can be created
    and written (a probe file is written and removed)."""
    directory = directory or _directory()
    if not directory:
        return
    probe = os.path.join(directory, ".probe-%d" % os.getpid())
    try:
        os.makedirs(directory, exist_ok=True)
        with open(probe, "wb") as f:
            f.write(b"ok")
        os.remove(probe)
    except OSError as e:
        raise CheckpointError("POLLUX_CHECKPOINT_DIR=%s is not writable: %s" % (directory, e)) from None


def _fsync_dir(path: str):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_all_states(extra_meta: Optional[dict] = None) -> Optional[str]:
    """Sync every registered state (on every replica: call it on all of
    them), then write them on replica 0 as a new checkpoint. Returns the
    new checkpoint's path on replica 0, None elsewhere or without
    POLLUX_CHECKPOINT_DIR. Raises CheckpointError on a write failure; the
    previous checkpoint is then still the newest."""
    states: List[State] = list(_STATES.values())
    for s in states:
        s.sync()
    return _write(states, [], extra_meta)


def save_state(state: State, checkpoint_dir: Optional[str] = None, sync: bool = True) -> Optional[str]:
    """Save one state (AdaptDL's save_state): sync it on every replica if
    sync (then call it on all of them), and write on replica 0 a new
    checkpoint holding it and, carried over from the newest checkpoint,
    every other state that one holds. checkpoint_dir defaults to
    POLLUX_CHECKPOINT_DIR. Returns the new checkpoint's path on replica 0."""
    if state.name not in _STATES:
        raise ValueError("checkpoint state %r is not registered" % state.name)
    if sync:
        state.sync()
    directory = checkpoint_dir or _directory()
    prev = latest(directory) if directory else None
    carried = []
    if prev:
        try:
            names = read_meta(prev).get("states", [])
        except (OSError, ValueError) as e:
            raise CheckpointError("failed to read %s/meta.json: %s" % (prev, e)) from None
        carried = [n for n in names if n != state.name and _NAME.match(n)]
    return _write([state], [(n, prev) for n in carried], {"reason": "save_state %s" % state.name}, directory)


def _write(states: List[State], carried, extra_meta: Optional[dict], directory: Optional[str] = None) -> Optional[str]:
    """On replica 0: a new checkpoint of states (written now) and carried
    ((name, checkpoint path) whose file is copied)."""
    where = "%s" % directory if directory else "POLLUX_CHECKPOINT_DIR=%s" % _directory()
    directory = directory or _directory()
    if not directory or _rank() != 0:
        return None
    prev = latest(directory)
    seq = 1
    if prev:
        seq = int(_DIR.match(os.path.basename(prev)).group(1)) + 1
    final = os.path.join(directory, "ckpt-%08d" % seq)
    tmp = os.path.join(directory, ".tmp-ckpt-%08d-%d" % (seq, os.getpid()))
    try:
        os.makedirs(directory, exist_ok=True)
        for name in os.listdir(directory):  # earlier interrupted saves
            if name.startswith(".tmp-ckpt-"):
                shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
        os.mkdir(tmp)
        for s in states:
            with open(os.path.join(tmp, s.name), "wb") as f:
                s.save(f)
                f.flush()
                os.fsync(f.fileno())
        for name, src in carried:
            shutil.copyfile(os.path.join(src, name), os.path.join(tmp, name))
            with open(os.path.join(tmp, name), "rb") as f:
                os.fsync(f.fileno())
        meta = {"seq": seq, "restarts": env.num_restarts(), "states": [s.name for s in states] + [n for n, _ in carried]}
        meta.update(extra_meta or {})
        with open(os.path.join(tmp, "meta.json"), "w") as f:
            json.dump(meta, f)
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(tmp)
        os.rename(tmp, final)
        _fsync_dir(directory)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError("failed to write checkpoint %s into %s: %s; "
                              "the previous checkpoint (%s) is kept" % (os.path.basename(final), where, e, prev)) from None
    # Keep the KEEP newest.
    done = sorted(n for n in os.listdir(directory) if _DIR.match(n))
    for name in done[:-KEEP]:
        shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
    _log.info("saved checkpoint %s", final)
    return final


def _chosen() -> Optional[str]:
    """The checkpoint this process restores from, chosen once (this
    process's view of the checkpoint directory)."""
    global _loaded, _loaded_meta
    if _loaded is None:
        path = latest()
        _loaded = path or ""
        if path:
            try:
                _loaded_meta = read_meta(path)
            except (OSError, ValueError) as e:
                raise CheckpointError("failed to read %s/meta.json: %s" % (path, e)) from None
    return _loaded or None


def _read_state(path: str, name: str) -> Optional[bytes]:
    f = os.path.join(path, name)
    try:
        with open(f, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise CheckpointError("failed to read checkpoint state %s: %s" % (f, e)) from None


# What the replicas restore, once they agreed on it (share_restore): None
# before that; then replica 0's checkpoint as {"path": ..., "meta": ...,
# "files": {state name: bytes}} ("path" None when there is none).
_shared: Optional[dict] = None
# States loaded before the replicas agreed, with the checkpoint each was
# loaded from here; share_restore loads them again where replica 0 chose
# another one.
_early: List[tuple] = []


def share_restore():
    """Collective, once, when the process group starts: replica 0 reads its
    newest checkpoint and sends every state file in it to all replicas, so
    that from then on every load_state is local (no collective: a loader
    or an accumulator may be built on some replicas only) and all replicas
    restore the same bytes, even on nodes that do not see the checkpoint
    directory. States loaded earlier from another checkpoint than replica
    0's are loaded again."""
    global _shared, _loaded, _loaded_meta
    data = None
    if _rank() == 0:
        path = _chosen()
        files = {}
        if path:
            for name in sorted(os.listdir(path)):
                if name != "meta.json" and _NAME.match(name):
                    b = _read_state(path, name)
                    if b is not None:
                        files[name] = b
        data = {"path": path, "meta": _loaded_meta, "files": files}
    d = _dist()
    if d:
        box = [data]
        d.broadcast_object_list(box, src=0)
        data = box[0]
    _shared = data
    mine = _loaded
    _loaded, _loaded_meta = data["path"] or "", data["meta"]
    early, _early[:] = list(_early), []
    for state, used in early:
        if (used or "") != (data["path"] or "") and state.name in _STATES:
            b = data["files"].get(state.name)
            if b is not None:
                state.load(io.BytesIO(b))
    if (mine or "") != (data["path"] or "") and _rank() != 0:
        _log.info("restoring replica 0's checkpoint %s (this replica saw %s)", data["path"], mine or "none")


def load_state(state: State) -> bool:
    """Restore state from the newest checkpoint, if it has this state.
    Never collective. After the process group started (share_restore), the
    bytes are those replica 0 sent; before it, this process reads the
    checkpoint directory it sees, and the state is loaded again when the
    process group starts if replica 0 restores another checkpoint. Returns
    whether the state was restored."""
    if _shared is not None:
        data = _shared["files"].get(state.name)
    else:
        path = _chosen()
        _early.append((state, path))
        data = _read_state(path, state.name) if path else None
    if data is None:
        return False
    state.load(io.BytesIO(data))
    return True


def _reset():
    """Forget every state and what was restored (tests run several set-ups
    in one process)."""
    global _loaded, _loaded_meta, _shared
    _STATES.clear()
    _loaded = _loaded_meta = _shared = None
    _early[:] = []


def restored_meta() -> Optional[dict]:
    """meta.json of the checkpoint this process restored from (replica 0), or None."""
    _chosen()
    return _loaded_meta
