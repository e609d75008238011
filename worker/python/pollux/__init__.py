"""Pollux's worker library: train PyTorch jobs that the Pollux controller
rescales on Nomad.

Modules (AdaptDL's names, so that an AdaptDL script ports by changing its
imports):

* ``pollux.torch``: ``init_process_group``, epochs, ``AdaptiveDataLoader``,
  ``AdaptiveDataParallel``, ``Accumulator``, ``ElasticSampler``;
  ``python3 -m pollux.torch.launch`` starts one process per GPU.
* ``pollux.checkpoint``: ``State`` objects saved atomically at the end of
  each epoch and on SIGTERM, restored at start.
* ``pollux.env``: what this replica is (rank, world size, checkpoint dir...),
  and the Consul KV prefix and Nomad namespace with their defaults.
* ``pollux.report``: the metrics reporter; ``pollux.documents`` the metrics
  document and the controller's decision it writes and reads;
  ``pollux.consul`` the Consul KV client they use.
* ``pollux.rendezvous``: how the launcher connects a job's task groups.

Everything except ``pollux.torch``'s training modules needs only the
standard library, and ``import pollux.torch`` imports PyTorch only when a
name of it is first used.
"""

# The release, the same as `pollux version` of the Go binary (a Go test
# checks they agree); pyproject.toml reads it from here.
__version__ = "0.1.0"


def __getattr__(name):
    # pollux.env, pollux.checkpoint... after only `import pollux` (as AdaptDL
    # scripts use adaptdl.env), imported at first use.
    if name in ("env", "checkpoint", "collective", "consul", "documents", "report", "rendezvous", "torch"):
        import importlib
        return importlib.import_module("pollux." + name)
    raise AttributeError("module 'pollux' has no attribute %r" % name)
