"""Pollux's worker library: train PyTorch jobs that the Pollux controller
rescales on Nomad.

Modules (AdaptDL's names, so that an AdaptDL script ports by changing its
imports):

* ``pollux.torch``: ``init_process_group``, epochs, ``AdaptiveDataLoader``,
  ``AdaptiveDataParallel``, ``Accumulator``, ``ElasticSampler``;
  ``python3 -m pollux.torch.launch`` starts one process per GPU.
* ``pollux.checkpoint``: ``State`` objects saved atomically at the end of
  each epoch and on SIGTERM, restored at start.
* ``pollux.env``: what this replica is (rank, world size, checkpoint dir...).
* ``pollux.report``: the metrics reporter (standard library only).

Everything except ``pollux.torch`` needs only the standard library.
"""
