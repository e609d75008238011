"""The gradient noise statistics of a model (AdaptDL's
``adaptdl.torch.gradient_noise_scale``), read through
``AdaptiveDataParallel.gns``.

AdaptiveDataParallel measures them itself in each synchronising step (see
pollux.torch.parallel); this class gives AdaptDL's accessors over them:
sqr_avg() estimates |g|^2, the squared norm of the true gradient, var_avg()
the variance of an M0-sized batch's gradient, gain(scale) AdaScale's gain
at M = scale x M0, and get_progress() the statistical progress in M0-sized
steps (McCandlish, Kaplan, Amodei et al., "An Empirical Model of
Large-Batch Training", 2018: the gradient noise scale is var / sqr).
"""

__all__ = ["GradientNoiseScale"]


class GradientNoiseScale:
    """A view of adp's gradient noise statistics."""

    def __init__(self, adp, optimizer=None, mp_scaler=None, num_replicas=None, accum_scale=None):
        if mp_scaler is not None:
            raise ValueError("GradientNoiseScale: mp_scaler is not supported")
        self.adp = adp

    def sqr_avg(self) -> float:
        est = self.adp.noise.estimates()
        return est[0] if est else 0.0

    def var_avg(self) -> float:
        est = self.adp.noise.estimates()
        return est[1] if est else 0.0

    @property
    def raw_sqr_avg(self) -> float:
        return self.sqr_avg()

    @property
    def raw_var_avg(self) -> float:
        return self.var_avg()

    def noise_scale(self) -> float:
        """The simple gradient noise scale B = var / sqr (in samples, times M0)."""
        sqr = self.sqr_avg()
        return self.var_avg() / sqr if sqr > 0 else float("inf")

    def gain(self, scale: float) -> float:
        noise = self.adp.noise
        return noise.gain(scale * noise.m0)

    def get_progress(self) -> float:
        return self.adp.progress / self.adp.noise.m0

    @property
    def accum_scale(self) -> float:
        from pollux.torch import _core
        loader = _core.ctx.loader
        if loader is None:
            return 1.0
        return loader._local() * loader._replicas / loader.batch_size

    @property
    def accum_count(self) -> int:
        return self.adp._micros

    def __repr__(self):
        return "GradientNoiseScale(sqr=%g, var=%g)" % (self.sqr_avg(), self.var_avg())
