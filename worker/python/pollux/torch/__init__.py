"""Elastic PyTorch training under Pollux, with AdaptDL's names
(``adaptdl.torch``): change ``import adaptdl.torch`` to ``import
pollux.torch`` and the script runs under the Pollux controller on Nomad.

    import pollux.torch
    pollux.torch.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    loader = pollux.torch.AdaptiveDataLoader(dataset, batch_size=128, shuffle=True)
    loader.autoscale_batch_size(4096, local_bsz_bounds=(32, 1024), gradient_accumulation=True)
    model = pollux.torch.AdaptiveDataParallel(model, optimizer, lr_scheduler)
    for epoch in pollux.torch.remaining_epochs_until(30):
        for x, y in loader:
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()

Run it with ``python3 -m pollux.torch.launch script.py`` (one process per
GPU). The names are imported lazily, so the launcher itself does not
import torch.
"""

import importlib

_NAMES = {
    "init_process_group": "_core",
    "current_epoch": "_core",
    "finished_epochs": "_core",
    "remaining_epochs_until": "_core",
    "current_dataloader": "data",
    "AdaptiveDataLoader": "data",
    "ElasticSampler": "data",
    "AdaptiveDataParallel": "parallel",
    "GradientNoise": "parallel",
    "Accumulator": "accumulator",
    "AdaptiveBPTTIterator": "iterator",
}
# Submodules reachable as attributes (pollux.torch.scaling_rules...), imported at first use.
_SUBMODULES = ("scaling_rules", "gradient_noise_scale", "iterator", "data", "parallel", "accumulator", "launch")

__all__ = sorted(_NAMES)


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module("pollux.torch." + name)
    mod = _NAMES.get(name)
    if mod is None:
        raise AttributeError("module 'pollux.torch' has no attribute %r" % name)
    value = getattr(importlib.import_module("pollux.torch." + mod), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + list(_NAMES) + list(_SUBMODULES))
