"""Learning-rate scaling rules (AdaptDL's ``adaptdl.torch.scaling_rules``).

When the batch size M grows past the M0 a script was tuned for, the
optimizer's learning rate is multiplied during each step by a factor of
the scale S = M / M0. Pass a rule object as ``AdaptiveDataParallel(...,
scaling_rule=...)``, or name one in the job's ``pollux_lr_scaling`` meta
key (``RULES``). Without either, Adam and AdamW get ``AdamScale`` and other
optimizers ``AdaScale``.

* AdaScale (Johnson, Agrawal, Gu and Guestrin, "AdaScale SGD: A
  User-Friendly Algorithm for Distributed Training", ICML 2020): the gain
  r = (var + sqr) / (var / S + sqr), with sqr and var the gradient's
  squared norm and variance at M0 (Pollux, OSDI '21, section 3.1).
* AdamScale: the square root of AdaScale's gain. Adaptive optimizers scale
  with the square root of the batch size (Malladi, Lyu, Panigrahi and
  Arora, "On the SDEs and Scaling Rules for Adaptive Gradient Algorithms",
  NeurIPS 2022; the square-root rule of Hoffer, Hubara and Soudry 2017),
  and the gain is the effective batch-size ratio AdaScale measures, so
  AdamScale is sqrt(r) (AdaptDL's AdamScale for Adam, AdamW, RMSprop).
* LinearScale: S (Goyal et al., "Accurate, Large Minibatch SGD", 2017).
* SqrtScale: sqrt(S) (Krizhevsky, "One weird trick", 2014).
* LEGWScale (You, Hseu, Ying, Demmel, Keutzer and Hsieh, "Large-Batch
  Training for LSTM and Beyond", SC '19): Linear-Epoch Gradual Warm-up,
  sqrt(S) after a warm-up that lasts S times base_warmup_epochs and rises
  linearly: sqrt(S) * min(1, progress / (S * base_warmup_epochs *
  data_size / M0)), progress counted in M0-sized steps (the job's
  statistical progress divided by M0).
"""

import math
from typing import Optional

__all__ = ["ScalingRuleBase", "AdaScale", "AdamScale", "LinearScale", "SqrtScale", "LEGWScale",
           "NoScale", "RULES", "rule_named"]


class ScalingRuleBase:
    """A learning-rate scaling rule: scale_lr(scale) is the factor at
    scale = M / M0. AdaptiveDataParallel calls initialize(adp, optimizer)
    and applies the factor in each optimizer step; step() and zero_grad()
    are the optimizer's (kept for scripts that call the rule's)."""

    name = ""

    def __init__(self):
        self.adp = None
        self._optimizer = None

    def initialize(self, adp, optimizer, patch_optimizer: bool = False):
        self.adp, self._optimizer = adp, optimizer

    def scale_lr(self, scale: float) -> float:
        raise NotImplementedError

    def step(self, *args, **kwargs):
        if self._optimizer is None:
            raise ValueError("%s: not attached to an AdaptiveDataParallel" % type(self).__name__)
        return self._optimizer.step(*args, **kwargs)

    def zero_grad(self, *args, **kwargs):
        if self._optimizer is None:
            raise ValueError("%s: not attached to an AdaptiveDataParallel" % type(self).__name__)
        return self._optimizer.zero_grad(*args, **kwargs)

    def _gain(self, scale: float) -> float:
        if self.adp is None:
            raise ValueError("%s: not attached to an AdaptiveDataParallel" % type(self).__name__)
        return self.adp.noise.gain(scale * self.adp.noise.m0)

    def __repr__(self):
        return "%s()" % type(self).__name__


class AdaScale(ScalingRuleBase):
    """AdaScale's gain (the default for SGD)."""
    name = "adascale"

    def scale_lr(self, scale: float) -> float:
        return self._gain(scale)


class AdamScale(AdaScale):
    """The square root of AdaScale's gain (the default for Adam and AdamW)."""
    name = "adamscale"

    def scale_lr(self, scale: float) -> float:
        return math.sqrt(self._gain(scale))


class LinearScale(ScalingRuleBase):
    name = "linear"

    def scale_lr(self, scale: float) -> float:
        return scale


class SqrtScale(ScalingRuleBase):
    name = "sqrt"

    def scale_lr(self, scale: float) -> float:
        return math.sqrt(scale)


class NoScale(ScalingRuleBase):
    """The learning rate as given, at any batch size."""
    name = "none"

    def scale_lr(self, scale: float) -> float:
        return 1.0


class LEGWScale(ScalingRuleBase):
    """Linear-Epoch Gradual Warm-up. base_warmup_epochs: the warm-up at M0;
    data_size: samples per epoch (default: the training loader's dataset)."""
    name = "legw"

    def __init__(self, base_warmup_epochs: float = 1.0, data_size: Optional[int] = None):
        super().__init__()
        if not base_warmup_epochs >= 0:
            raise ValueError("LEGWScale: base_warmup_epochs must be >= 0, got %r" % (base_warmup_epochs,))
        self._base_warmup_epochs = float(base_warmup_epochs)
        self._data_size = data_size

    def scale_lr(self, scale: float) -> float:
        if self.adp is None:
            raise ValueError("LEGWScale: not attached to an AdaptiveDataParallel")
        from pollux.torch import _core
        m0 = self.adp.noise.m0
        size = self._data_size
        if size is None:
            loader = _core.ctx.loader
            size = len(loader.dataset) if loader is not None else 0
        warmup_steps = self._base_warmup_epochs * scale * size / m0
        top = math.sqrt(scale)
        steps = self.adp.progress / m0  # progress in M0-sized steps
        if warmup_steps <= 0 or steps >= warmup_steps:
            return top
        return top * steps / warmup_steps

    def __repr__(self):
        return "LEGWScale(base_warmup_epochs=%g, data_size=%r)" % (self._base_warmup_epochs, self._data_size)


RULES = {c.name: c for c in (AdaScale, AdamScale, LinearScale, SqrtScale, LEGWScale, NoScale)}


def rule_named(name: str) -> ScalingRuleBase:
    """A new rule object for a pollux_lr_scaling value."""
    cls = RULES.get(name)
    if cls is None:
        raise ValueError("unknown learning-rate scaling rule %r: want one of %s" % (name, ", ".join(RULES)))
    return cls()
