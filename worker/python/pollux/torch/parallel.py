"""Data parallelism with Pollux's gradient-noise statistics, LR scaling and
timings (AdaptDL's AdaptiveDataParallel).

Each optimizer step: every replica runs its micro-batches (the data loader
says how many), the gradients accumulate locally without communication,
then one all-reduce sums the replicas' gradients together with the sum of
the squared norms of every micro-batch gradient, the stop flag (SIGTERM)
and replica 0's pending decision. From them (Pollux, OSDI '21, §3.1;
AdaptDL adascale.py; McCandlish et al. 2018), with c = replicas x
micro-batches micro-batch gradients g_i of the step, G their mean:

    local_sqr = mean_i |g_i|^2,   total_sqr = |G|^2
    grad_sqr  = (c total_sqr - local_sqr) / (c - 1)          estimates |g|^2
    grad_var  = (local_sqr - total_sqr) scale / (c - 1)       variance of an M0-sized batch gradient
    scale     = M / M0

(c = 1: the previous step's gradient is the second sample, c := 2 and
scale := 2 M / M0), smoothed by an exponential moving average with factor
0.999^scale, bias-corrected, reported as max(sqr, 0) and max(var, 1e-6).
The learning rate of each parameter group is multiplied during the step by
the scaling rule's factor at r = M / M0 (pollux.torch.scaling_rules:
adascale the gain (var + sqr) / (var / r + sqr), adamscale its square
root, linear r, sqrt sqrt(r), legw sqrt(r) after a warm-up, none 1).
Progress grows by M0 x gain per step.

Timings per step (contracts.md §3): compute_time the mean forward/backward
seconds of a micro-batch, step_time the synchronising micro-batch's
forward/backward plus the all-reduce and the optimizer step, sync_time the
all-reduce; they go to pollux.report with the gradient statistics and
progress (replica 0 writes).
"""

import atexit
import logging
import math
import os
import time
from datetime import datetime, timedelta, timezone
from typing import List, Optional

import torch
import torch.distributed as dist

from pollux import checkpoint, env, report
from pollux.torch import _core, _standalone, _tensorboard, scaling_rules

__all__ = ["AdaptiveDataParallel", "GradientNoise", "scale_factor"]

_log = logging.getLogger("pollux.torch")

RULES = tuple(scaling_rules.RULES)


class GradientNoise:
    """Smoothed gradient-noise statistics (see the module documentation)."""

    def __init__(self, init_batch_size: int, smoothing: float = 0.999):
        self.m0 = float(init_batch_size)
        self.smoothing = smoothing
        self.sqr_avg = self.var_avg = self.norm = 0.0
        self.previous: Optional[torch.Tensor] = None
        self.previous_sqr = 0.0

    def update(self, local_sqr: float, total_sqr: float, count: int, batch_size: float,
               grad: Optional[torch.Tensor] = None):
        """local_sqr: mean over the count micro-batch gradients of their
        squared norms; total_sqr: squared norm of their mean; grad: that mean
        (needed when count is 1)."""
        scale = batch_size / self.m0
        if count == 1:
            if grad is None:
                return
            grad = grad.detach()
            if self.previous is None:
                self.previous = grad.clone()
                self.previous_sqr = total_sqr
                return
            prev, prev_sqr, cur_sqr = self.previous, self.previous_sqr, local_sqr
            cross = float(torch.dot(prev.reshape(-1), grad.reshape(-1)))
            local_sqr = (prev_sqr + cur_sqr) / 2
            total_sqr = (prev_sqr + 2 * cross + cur_sqr) / 4  # |(prev + grad) / 2|^2, no temporary
            prev.copy_(grad)
            self.previous_sqr = cur_sqr
            count, scale = 2, 2 * scale
        grad_sqr = (count * total_sqr - local_sqr) / (count - 1)
        grad_var = (local_sqr - total_sqr) * scale / (count - 1)
        theta = self.smoothing ** scale
        self.sqr_avg = theta * self.sqr_avg + (1 - theta) * grad_sqr
        self.var_avg = theta * self.var_avg + (1 - theta) * grad_var
        self.norm = theta * self.norm + (1 - theta)

    def estimates(self):
        """(grad_sqr, grad_var), or None before the first update."""
        if self.norm == 0:
            return None
        return max(self.sqr_avg / self.norm, 0.0), max(self.var_avg / self.norm, 1e-6)

    def gain(self, batch_size: float) -> float:
        est = self.estimates()
        if est is None:
            return 1.0
        sqr, var = est
        r = batch_size / self.m0
        denom = var / r + sqr
        return (var + sqr) / denom if denom > 0 else 1.0

    def state(self):
        return {"sqr": self.sqr_avg, "var": self.var_avg, "norm": self.norm,
                "previous": None if self.previous is None else self.previous.cpu(), "previous_sqr": self.previous_sqr}

    def restore(self, d):
        self.sqr_avg, self.var_avg, self.norm = d["sqr"], d["var"], d["norm"]
        self.previous = d["previous"]
        self.previous_sqr = d.get("previous_sqr", 0.0)


def scale_factor(rule: str, noise: GradientNoise, batch_size: float) -> float:
    """The learning-rate factor of the rule named rule at total batch size
    batch_size (for rules that need no more than the gradient noise)."""
    r = batch_size / noise.m0
    if rule in ("adascale", "adamscale"):
        g = noise.gain(batch_size)
        return g if rule == "adascale" else math.sqrt(g)
    if rule == "linear":
        return r
    if rule in ("sqrt", "legw"):
        return math.sqrt(r)
    if rule == "none":
        return 1.0
    raise ValueError("unknown learning-rate scaling rule %r: want one of %s" % (rule, ", ".join(RULES)))


def _positive_int_env(name: str) -> Optional[int]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    raw = raw.strip()
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError("%s: must be a positive integer, got %r" % (name, os.environ[name]))
    return int(raw)


class _ParallelState(checkpoint.State):
    def __init__(self, name, owner):
        super().__init__(name)
        self.owner = owner

    def save(self, f):
        o = self.owner
        torch.save({
            "model": o.module.state_dict(),
            "optimizer": o.optimizer.state_dict(),
            "lr_scheduler": o.lr_scheduler.state_dict() if o.lr_scheduler is not None else None,
            "noise": o.noise.state(),
            "steps": o.steps,
            "progress": o.progress,
            "profile": o.profile.state(),
        }, f)

    def load(self, f):
        o = self.owner
        d = torch.load(f, map_location="cpu")
        o.module.load_state_dict(d["model"])
        o.optimizer.load_state_dict(d["optimizer"])
        if o.lr_scheduler is not None and d["lr_scheduler"] is not None:
            o.lr_scheduler.load_state_dict(d["lr_scheduler"])
        o.noise.restore(d["noise"])
        o.steps, o.progress = d["steps"], d["progress"]
        o.profile.restore(d.get("profile"))


class AdaptiveDataParallel(torch.nn.Module):
    """Wraps model for data-parallel training under Pollux (AdaptDL's
    AdaptiveDataParallel): the optimizer's step() synchronises the
    gradients once per global batch (no-op on accumulation micro-batches,
    as is zero_grad() while gradients accumulate) at a learning rate
    scaled by the scaling rule, and the model, optimizer and scheduler are
    checkpointed and restored. Replica 0's parameters are copied to the
    others at the first forward pass, unless all restored them from a
    checkpoint: the constructor is not a collective.

    The arguments are AdaptDL's: mp_scaler must be None (mixed precision is
    not supported); scaling_rule a scaling_rules object (default: the
    job's pollux_lr_scaling meta key, else AdamScale for Adam and AdamW,
    else AdaScale); name the checkpoint state's. Keyword-only:
    init_batch_size M0 (default NOMAD_META_pollux_init_batch_size, else
    the training data loader's batch_size); lr_scaling a rule's name.
    Other keywords (DistributedDataParallel's) are accepted and ignored."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, lr_scheduler=None,
                 mp_scaler=None, scaling_rule: Optional[scaling_rules.ScalingRuleBase] = None,
                 name: str = "pollux-dataparallel", *, init_batch_size: Optional[int] = None,
                 lr_scaling: Optional[str] = None, **ddp_kwargs):
        super().__init__()
        _core._require()
        self.module = model
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self._replicas, self._rank = _core.world_size(), _core.rank()
        if mp_scaler is not None:
            raise ValueError("AdaptiveDataParallel: mp_scaler (mixed precision) is not supported; pass None")
        if ddp_kwargs:
            _log.info("AdaptiveDataParallel: ignoring DistributedDataParallel arguments %s", sorted(ddp_kwargs))
        if isinstance(scaling_rule, str) and lr_scaling is None:
            scaling_rule, lr_scaling = None, scaling_rule
        if scaling_rule is not None and not isinstance(scaling_rule, scaling_rules.ScalingRuleBase):
            raise ValueError("AdaptiveDataParallel: scaling_rule must be a pollux.torch.scaling_rules object, got %r"
                             % (scaling_rule,))
        if scaling_rule is None:
            meta = os.environ.get("NOMAD_META_pollux_lr_scaling", "").strip()
            name_ = lr_scaling or meta
            if not name_:
                name_ = "adamscale" if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)) else "adascale"
            try:
                scaling_rule = scaling_rules.rule_named(name_)
            except ValueError as e:
                where = "lr_scaling" if lr_scaling else "NOMAD_META_pollux_lr_scaling"
                raise ValueError("%s: %s" % (where, e)) from None
        self.scaling_rule = scaling_rule
        self.lr_scaling = scaling_rule.name or type(scaling_rule).__name__
        self._m0 = init_batch_size or _positive_int_env("NOMAD_META_pollux_init_batch_size")
        self.noise = GradientNoise(self._m0 or 1)
        self.profile = _standalone.Profile()
        self._last_step_end = None
        self._last_config = None
        self.steps = 0
        self.progress = 0.0
        self.last_lr: List[float] = [g["lr"] for g in optimizer.param_groups]
        self.lr_factor = 1.0
        self.last_timings = None
        self._params = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad]
        self._numel = sum(p.numel() for p in self._params)
        self._flat = None
        self._slots = []
        self._state = _ParallelState(name, self)
        # Restored from the checkpoint replica 0 sent: every replica has
        # the same parameters. Otherwise they are copied at the first forward.
        self._synced_params = checkpoint.load_state(self._state) or self._replicas == 1
        self._real_step = optimizer.step
        self._real_zero_grad = optimizer.zero_grad
        def step(closure=None):
            return self._step(closure)
        step._with_counter = True  # the scheduler's own wrapper is inside (_real_step): no warning
        optimizer.step = step
        optimizer.zero_grad = self._zero_grad
        scaling_rule.initialize(self, optimizer, patch_optimizer=True)
        self._reset_accumulation()
        self._reporter = None
        self._restart_reported = False
        self._follower = None
        self._warned_rounds = set()
        if self._rank == 0 and env.job_id() and os.environ.get("CONSUL_HTTP_ADDR"):
            try:
                self._reporter = report.Reporter(
                    rank=0, init_batch_size=self._m0 or None,
                    min_interval=float(os.environ.get("POLLUX_REPORT_INTERVAL", "30")))
                self._follower = self._reporter.follow_decisions()
            except ValueError as e:
                _log.warning("metrics are not reported: %s", e)
        # Without a controller the job picks its own batch size (replica 0
        # decides; the others adopt what it sends).
        has_controller = bool(env.job_id() and os.environ.get("CONSUL_HTTP_ADDR"))
        self._standalone = _standalone.enabled(has_controller)
        self._standalone_every = _standalone.interval()
        atexit.register(self._close_reporter)
        _core.ctx.model = self

    def _sync_params(self):
        """Copy replica 0's parameters and buffers to the others (collective)."""
        self._synced_params = True
        with torch.no_grad():
            for t in list(self.module.parameters()) + list(self.module.buffers()):
                dist.broadcast(t.data, 0)

    def zero_grad(self, set_to_none: bool = False):
        """The model's zero_grad: the optimizer's (kept while gradients accumulate)."""
        self._zero_grad(set_to_none)

    @property
    def gns(self) -> "gradient_noise_scale.GradientNoiseScale":
        """The gradient noise statistics, with AdaptDL's accessors."""
        from pollux.torch import gradient_noise_scale
        return gradient_noise_scale.GradientNoiseScale(self)

    def to_tensorboard(self, writer, global_step: int, tag_prefix: str = ""):
        """Write the gradient statistics, gain, learning-rate factor and
        progress to TensorBoard: writer is a SummaryWriter or a log directory."""
        w = _tensorboard.writer_for(writer)
        if w is None:
            return
        p = _tensorboard.prefix(tag_prefix)
        est = self.noise.estimates() or (0.0, 0.0)
        w.add_scalar(p + "Gradient_Norm_Sqr", est[0], global_step)
        w.add_scalar(p + "Gradient_Variance", est[1], global_step)
        w.add_scalar(p + "Gain", self.gain, global_step)
        w.add_scalar(p + "Learning_Rate_Factor", self.lr_factor, global_step)
        w.add_scalar(p + "Progress", self.progress, global_step)

    # ---- the wrapped module ----------------------------------------------

    def forward(self, *args, **kwargs):
        if not self._synced_params:
            self._sync_params()
        return self.module(*args, **kwargs)

    @property
    def gain(self) -> float:
        """AdaScale's gain at the current batch size."""
        loader = _core.ctx.loader
        m = loader._batch_size() if loader is not None else (self._m0 or 1)
        return self.noise.gain(m)

    @property
    def grad_sqr(self) -> Optional[float]:
        est = self.noise.estimates()
        return est[0] if est else None

    @property
    def grad_var(self) -> Optional[float]:
        est = self.noise.estimates()
        return est[1] if est else None

    # ---- the optimizer's step --------------------------------------------

    def _reset_accumulation(self):
        self._local_sqr = 0.0
        self._compute = 0.0
        self._micros = 0
        self._prev_flat = None

    def _views(self) -> torch.Tensor:
        """The gradients as one flat buffer (with 4 extra slots at the end):
        each parameter's .grad is a view into it, so that autograd
        accumulates into it in place and the all-reduce needs no copies.
        A .grad replaced by someone else (set to None, or a new tensor) is
        copied back in."""
        if self._flat is None:
            p0 = self._params[0] if self._params else None
            self._flat = torch.zeros(self._numel + 4, dtype=p0.dtype if p0 is not None else torch.float32,
                                     device=p0.device if p0 is not None else None)
            self._slots = []
            offset = 0
            for p in self._params:
                self._slots.append(self._flat[offset:offset + p.numel()].view_as(p))
                offset += p.numel()
        with torch.no_grad():
            for p, slot in zip(self._params, self._slots):
                g = p.grad
                if g is None:
                    slot.zero_()
                    p.grad = slot
                elif g.data_ptr() != slot.data_ptr():
                    slot.copy_(g)
                    p.grad = slot
        return self._flat

    def _zero_grad(self, set_to_none: bool = False):
        if self._micros > 0:
            return  # accumulating: keep the micro-batches' gradients until the synchronising step
        if self._flat is not None:
            self._views()
            self._flat.zero_()  # in place, whatever set_to_none says: .grad stays a view
        else:
            self._real_zero_grad(set_to_none=set_to_none)

    def _pending_decision(self, loader):
        """Replica 0: the newest usable decision (local_bsz, accum), or (0, 0):
        the controller's, or without one this job's own choice."""
        if loader is None or not loader.training:
            return 0, 0
        if self._standalone:
            return self._own_decision(loader)
        if self._follower is None:
            return 0, 0
        d = self._follower.poll()
        if d is None:
            return 0, 0
        if d.num_replicas != self._replicas:
            return 0, 0  # a decision for another allocation: a restart will bring it
        why = loader.check_decision(d)
        if why:
            if d.round not in self._warned_rounds:
                self._warned_rounds.add(d.round)
                _log.warning("ignoring the controller's decision of round %d: %s", d.round, why)
            return 0, 0
        return d.local_bsz, d.accum_steps

    def _own_decision(self, loader):
        """The goodput-optimal (local_bsz, accum) for this job's replicas
        (pollux.torch._standalone), every interval steps."""
        if not loader._autoscale or self.steps == 0 or self.steps % self._standalone_every:
            return 0, 0
        best = _standalone.choose(self.profile, self.noise.estimates(), self.noise.m0, self._replicas,
                                  loader._bounds, loader._max_batch_size, loader._accumulation)
        if best is None:
            return 0, 0
        m, s, goodput = best
        now = _standalone.goodput(self.profile, self.noise.estimates(), self.noise.m0, self._replicas,
                                  loader._local(), loader._accum)
        if now and goodput < now * _standalone.MIN_SPEEDUP:
            return 0, 0  # not worth a change (measurements are noisy)
        if (m, s) != (loader._local(), loader._accum):
            _log.info("standalone: micro-batch %d x %d replicas x %d (batch %d), predicted goodput %.1f samples/s",
                      m, self._replicas, s + 1, m * self._replicas * (s + 1), goodput)
        return m, s

    def _step(self, closure=None):
        now = time.perf_counter()
        _core.arm_signals()
        loader = _core.ctx.loader
        if loader is not None:
            loader._stepped = True
        if not self._synced_params:
            self._sync_params()
        if self._m0 is None:
            self._m0 = loader.batch_size if loader is not None else 1
            self.noise.m0 = float(self._m0)
        compute = now - (loader.t_yield if loader is not None else now)
        buf = self._views()
        flat = buf[:self._numel]
        with torch.no_grad():
            if self._prev_flat is None:
                self._local_sqr += float(torch.dot(flat, flat))
            else:
                micro = flat - self._prev_flat
                self._local_sqr += float(torch.dot(micro, micro))
        self._compute += compute
        self._micros += 1
        if loader is not None and not loader.is_sync_step:
            self._prev_flat = flat.clone()
            return None
        # Synchronise: gradients, squared norms, stop flag, decision.
        t0 = time.perf_counter()
        m, s = self._pending_decision(loader) if self._rank == 0 else (0, 0)
        buf[self._numel] = self._local_sqr
        buf[self._numel + 1] = 1.0 if _core.ctx.stop_requested else 0.0
        buf[self._numel + 2] = float(m)
        buf[self._numel + 3] = float(s)
        if self._replicas > 1:
            dist.all_reduce(buf)
        t_sync = time.perf_counter()
        count = self._replicas * self._micros if loader is None else len(loader.step.chunks)
        extra = buf[self._numel:].tolist()
        local_sqr = extra[0] / count
        stop = extra[1] > 0
        new_m, new_s = int(round(extra[2])), int(round(extra[3]))
        with torch.no_grad():
            flat.div_(count)  # the mean gradient, in every parameter's .grad
        grad = flat
        batch = loader.step.size if loader is not None else (self._m0 or 1) * self._replicas
        self.noise.update(local_sqr, float(torch.dot(grad, grad)), count, batch, grad)
        self.lr_factor = float(self.scaling_rule.scale_lr(batch / self.noise.m0))
        groups = self.optimizer.param_groups
        base = [g["lr"] for g in groups]
        for g in groups:
            g["lr"] = g["lr"] * self.lr_factor
        self.last_lr = [g["lr"] for g in groups]
        try:
            result = self._real_step(closure) if closure is not None else self._real_step()
        finally:
            for g, lr in zip(groups, base):
                g["lr"] = lr
        self.steps += 1
        self.progress += self.noise.m0 * self.noise.gain(batch)
        end = time.perf_counter()
        sync_time = t_sync - t0
        step_time = compute + (end - t0)
        compute_time = self._compute / self._micros
        self.last_timings = (compute_time, step_time, sync_time)
        micros = self._micros
        self._reset_accumulation()
        # For the job's own batch-size choice: the wall time of a
        # micro-batch (its data loading, forward, backward and the script's
        # code around them: everything but the synchronising part) and of
        # the synchronising part (all-reduce, optimizer), from the wall time
        # since the previous step ended.
        prev_end, self._last_step_end = self._last_step_end, end
        if loader is not None and loader.training and batch == loader._batch_size() and prev_end is not None \
                and self._last_config == (loader._local(), loader._accum):
            fixed = end - t0
            self.profile.observe(loader._local(), max(end - prev_end - fixed, 0.0) / micros, fixed)
        self._last_config = (loader._local(), loader._accum) if loader is not None else None
        if self._reporter is not None and loader is not None and loader.training \
                and batch == loader._batch_size():
            try:
                cfg = report.StepConfig(env.num_nodes(), self._replicas, loader._local(), micros - 1)
                self._reporter.observe(cfg, compute_time, step_time, max(sync_time, 0.0))
                est = self.noise.estimates()
                if est is not None:
                    self._reporter.observe_gradients(*est)
                self._reporter.progress(self.progress, batch)
                if not self._restart_reported:
                    # The first reported step of this process: report how
                    # long the start and the checkpoint restore took.
                    self._restart_reported = True
                    began = datetime.now(timezone.utc) - timedelta(seconds=step_time)
                    self._reporter.restarted(max(began.timestamp() - _process_start(), 0.0), began)
            except ValueError as e:
                _log.warning("metrics not recorded: %s", e)
        if new_m > 0 and loader is not None:
            loader._adopt(new_m, new_s)
        if stop:
            # Every replica knows now; the training loader saves and exits
            # before the next step, after the caller's own bookkeeping.
            _core.ctx.stop_agreed = True
        return result

    def _close_reporter(self):
        if self._follower is not None:
            self._follower.stop()
            self._follower = None
        if self._reporter is not None:
            try:
                self._reporter.close(timeout=10)
            except Exception as e:  # noqa: BLE001 - best effort at exit
                _log.warning("failed to write the last metrics: %s", e)
            self._reporter = None


_IMPORTED_AT = time.time()


def _process_start() -> float:
    """Return the wall-clock time (seconds since the epoch) this process
    started: from /proc on Linux, else when this module was imported."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        start = boot + ticks / os.sysconf("SC_CLK_TCK")
        if start <= time.time():
            return start
    except (OSError, ValueError, IndexError, StopIteration):
        pass
    return _IMPORTED_AT
