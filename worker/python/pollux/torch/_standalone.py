"""Batch-size adaptation inside the job, without a controller.

When no Pollux controller decides for the job (no Consul connection, or the
job's ``pollux_standalone`` meta key / POLLUX_STANDALONE set to true), a
training loader that called ``autoscale_batch_size`` has its per-replica
micro-batch m and accumulation steps s chosen here, every
POLLUX_STANDALONE_INTERVAL optimizer steps (default 50), for the replicas
the job has, by the goodput of Pollux (Qiao et al., OSDI '21, section 3):

    goodput(m, s) = throughput(m, s) x efficiency(M),   M = m K (s + 1)
    throughput    = M / T(m, s),  T = (s + 1) (alpha + beta m) + c
    efficiency(M) = gain(M) / (M / M0) = (phi + M0) / (phi + M)

gain is AdaScale's, from the gradient statistics the model measures
(phi = M0 var / sqr, the gradient noise scale); alpha + beta m is the wall
time of one micro-batch (data loading, forward, backward, the script's
code), fitted by least squares to the mean times observed per micro-batch
size, and c the mean time of the synchronising part of a step (the
all-reduce and the optimizer).
A new configuration is adopted only if its predicted goodput beats the
current one's by MIN_SPEEDUP (AdaptDL's threshold, 5%).
Until two micro-batch sizes were observed, alpha is taken as half of the
observed time, as AdaptDL does (adaptdl/goodput.py, fit_perf_params: an
optimistic view of larger batches, so that the first decision tries one
and the fit then has a second size to learn from). The chosen configuration is adopted by every
replica at the same step (replica 0 sends it with the gradients); the
learning rate follows the model's scaling rule.
"""

import math
import os
from typing import Dict, Optional, Tuple

__all__ = ["enabled", "Profile", "choose", "goodput"]

MIN_SPEEDUP = 1.05
# Goodputs within 2% of the best count as equal when choosing (see choose).
NEAR_TIE = 0.02


def _flag(raw: str, name: str) -> Optional[bool]:
    raw = raw.strip().lower()
    if raw == "":
        return None
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ValueError("%s: want true or false, got %r" % (name, raw))


def enabled(has_controller: bool) -> bool:
    """Whether the job adapts its own batch size: POLLUX_STANDALONE, else
    NOMAD_META_pollux_standalone, else when no controller is connected."""
    for name in ("POLLUX_STANDALONE", "NOMAD_META_pollux_standalone"):
        v = _flag(os.environ.get(name, ""), name)
        if v is not None:
            return v
    return not has_controller


def interval() -> int:
    raw = os.environ.get("POLLUX_STANDALONE_INTERVAL", "").strip() or "50"
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError("POLLUX_STANDALONE_INTERVAL: want a positive integer, got %r" % raw)
    return int(raw)


class Profile:
    """Mean compute time per micro-batch, by micro-batch size, and the mean
    synchronisation time."""

    def __init__(self):
        self.compute: Dict[int, Tuple[int, float]] = {}  # m -> (count, mean seconds)
        self.sync = (0, 0.0)

    def observe(self, m: int, compute: float, sync: float):
        n, mean = self.compute.get(m, (0, 0.0))
        self.compute[m] = (n + 1, mean + (compute - mean) / (n + 1))
        n, mean = self.sync
        self.sync = (n + 1, mean + (sync - mean) / (n + 1))

    def fit(self) -> Optional[Tuple[float, float]]:
        """(alpha, beta) of compute(m) = alpha + beta m, or None before any observation."""
        pts = [(m, t) for m, (n, t) in self.compute.items() if n > 0]
        if not pts:
            return None
        if len(pts) == 1:
            m, t = pts[0]
            return 0.5 * t, 0.5 * t / m
        w = [self.compute[m][0] for m, _ in pts]
        sw = sum(w)
        mx = sum(wi * m for wi, (m, _) in zip(w, pts)) / sw
        my = sum(wi * t for wi, (_, t) in zip(w, pts)) / sw
        sxx = sum(wi * (m - mx) ** 2 for wi, (m, _) in zip(w, pts))
        sxy = sum(wi * (m - mx) * (t - my) for wi, (m, t) in zip(w, pts))
        beta = max(sxy / sxx, 1e-12) if sxx > 0 else my / mx
        alpha = max(my - beta * mx, 0.0)
        return alpha, beta

    def state(self):
        return {"compute": dict(self.compute), "sync": self.sync}

    def restore(self, d):
        if d:
            self.compute, self.sync = dict(d["compute"]), tuple(d["sync"])


def efficiency(m_total: float, m0: float, est) -> float:
    if est is None:
        return 1.0
    sqr, var = est
    if sqr <= 0:
        return m0 / m_total  # pure noise: no gain from a larger batch
    phi = m0 * var / sqr
    return (phi + m0) / (phi + m_total)


def goodput(profile: Profile, est, m0: float, replicas: int, m: int, s: int) -> Optional[float]:
    """The predicted goodput (samples/s, at M0's statistical efficiency) of (m, s)."""
    fit = profile.fit()
    if fit is None:
        return None
    alpha, beta = fit
    total = m * replicas * (s + 1)
    t = (s + 1) * (alpha + beta * m) + profile.sync[1]
    return total / t * efficiency(total, m0, est)


def choose(profile: Profile, est, m0: float, replicas: int, bounds: Tuple[int, int], max_batch: int,
           accumulation: bool) -> Optional[Tuple[int, int, float]]:
    """The (m, s, goodput) of the best configuration, or None without a
    profile. Among the configurations within NEAR_TIE of the best goodput
    it takes the fewest accumulation steps, then the largest micro-batch:
    each micro-step has costs the linear fit misses when it puts alpha near
    zero (the script's loop, the accumulation's bookkeeping), and a noisy
    fit should not trade a large micro-batch for many small ones."""
    fit = profile.fit()
    if fit is None:
        return None
    alpha, beta = fit
    sync = profile.sync[1]
    lo, hi = bounds
    sizes = sorted(set([lo, hi] + [int(round(lo * 2 ** (i / 4))) for i in range(64) if lo * 2 ** (i / 4) <= hi]))
    cands = []
    for m in sizes:
        for s in range(0, (64 if accumulation else 1)):
            total = m * replicas * (s + 1)
            if total > max_batch:
                break
            t = (s + 1) * (alpha + beta * m) + sync
            cands.append((m, s, total / t * efficiency(total, m0, est)))
    if not cands:
        return None
    top = max(g for _, _, g in cands)
    near = [c for c in cands if c[2] >= top * (1 - NEAR_TIE)]
    return min(near, key=lambda c: (c[1], -c[0]))
