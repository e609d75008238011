"""Where to_tensorboard writes: a SummaryWriter the script made, or one
made here for a log directory when torch.utils.tensorboard is importable
(it needs the tensorboard package); otherwise a warning, once."""

import logging
import threading

_log = logging.getLogger("pollux.torch")
_lock = threading.Lock()
_writers = {}
_warned = False


def writer_for(writer):
    """The object to call add_scalar on, or None (after a one-time warning)."""
    global _warned
    if hasattr(writer, "add_scalar"):
        return writer
    if not isinstance(writer, str):
        raise TypeError("to_tensorboard: want a SummaryWriter or a log directory, got %r" % (writer,))
    with _lock:
        if writer in _writers:
            return _writers[writer]
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            if not _warned:
                _warned = True
                _log.warning("to_tensorboard writes nothing: torch.utils.tensorboard is not importable (%s); "
                             "install the tensorboard package", e)
            return None
        _writers[writer] = SummaryWriter(writer)
        return _writers[writer]


def prefix(tag_prefix: str) -> str:
    if tag_prefix and not tag_prefix.endswith("/"):
        tag_prefix += "/"
    return tag_prefix
