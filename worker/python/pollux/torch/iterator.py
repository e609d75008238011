"""Language-model batches for truncated backpropagation through time
(AdaptDL's ``adaptdl.torch.iterator.AdaptiveBPTTIterator``).

AdaptDL's iterator extends torchtext's legacy BPTTIterator; this one takes
the corpus as a 1-D tensor (or sequence) of token ids instead, so it needs
no torchtext. The corpus is laid out as the per-replica batch size B
columns of consecutive text (the last tokens that do not fill a column are
dropped); each step, replica r reads rows [i + r x bptt_len, ... +
bptt_len) of the columns and predicts the next row, the replicas striding
together by K x bptt_len rows. The position is checkpointed as a fraction
of the column length, so a job that restarts with another batch size or
number of replicas goes on from the same place in the text.
"""

import math
from typing import Optional, Tuple

import torch

from pollux.torch import _core
from pollux.torch.data import AdaptiveDataLoader, Step

__all__ = ["AdaptiveBPTTIterator"]


class AdaptiveBPTTIterator(AdaptiveDataLoader):
    """Yields (text, target) pairs of shape (seq_len, B), target being text
    shifted by one token. batch_size: the total number of columns over all
    replicas (B = batch_size / K); bptt_len: rows per step.
    max_batch_size and local_bsz_bounds, if both given, call
    autoscale_batch_size."""

    def __init__(self, dataset, batch_size: int, bptt_len: int, max_batch_size: Optional[int] = None,
                 local_bsz_bounds: Optional[Tuple[int, int]] = None, **kwargs):
        tokens = torch.as_tensor(dataset, dtype=torch.long).reshape(-1)
        if isinstance(bptt_len, bool) or not isinstance(bptt_len, int) or bptt_len < 1:
            raise ValueError("AdaptiveBPTTIterator: bptt_len must be a positive integer, got %r" % (bptt_len,))
        super().__init__(tokens, batch_size=batch_size)
        self.bptt_len = bptt_len
        self.iterations = 0
        if max_batch_size and local_bsz_bounds:
            self.autoscale_batch_size(max_batch_size, local_bsz_bounds)

    def _layout(self) -> torch.Tensor:
        b = self._local()
        rows = len(self.dataset) // b
        return self.dataset[:rows * b].view(b, rows).t()  # (rows, b): column c is a stretch of text

    def __iter__(self):
        st = self._state
        epoch = self._epoch()
        if st.epoch != epoch:
            st.epoch, st.index, st.end = epoch, 0, 0
        data = self._layout()
        rows = data.size(0)
        # The same place in the text under another layout.
        start = st.index if not st.end else math.ceil(st.index * rows / st.end)
        st.index, st.end = start, rows
        k, r, bptt = self._replicas, self._rank, self.bptt_len
        stride = bptt * k
        # Steps every replica can take (the last replica's window must hold
        # one row and its target), so that all take the same number.
        highest = start + bptt * (k - 1)
        steps = max(math.ceil((rows - 1 - highest) / stride), 0)
        b = data.size(1)
        step = Step(b * k, 1, (b,) * k)
        _core.ctx.loader = self
        try:
            self.iterations = 0
            for i in range(steps):
                row = start + i * stride + bptt * r
                seq_len = min(bptt, rows - 1 - row)
                self._before_yield(0, step)
                st.index = start + (i + 1) * stride
                self.iterations += 1
                self.t_yield = _now()
                yield data[row:row + seq_len], data[row + 1:row + 1 + seq_len]
            st.index = rows
            self._after_loop()
        finally:
            if _core.ctx.loader is self:
                _core.ctx.loader = None

    def __len__(self):
        """Steps in a full pass at the current batch size."""
        rows = len(self.dataset) // self._local()
        return max(math.ceil((rows - 1 - self.bptt_len * (self._replicas - 1)) / (self.bptt_len * self._replicas)), 0)


def _now() -> float:
    import time
    return time.perf_counter()
