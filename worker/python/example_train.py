"""Wiring pollux_report into a PyTorch training loop (an example to copy).

What Pollux needs from a training job, every optimizer step:

  * timings (pollux-reference.md section 1): the mean seconds of a
    micro-batch forward/backward without synchronisation (compute_time),
    the seconds of the synchronising step (step_time: the last micro-batch,
    the all-reduce and the update) and the seconds blocked in the
    all-reduce (sync_time);
  * the gradient-noise statistics (section 2), from the per-replica
    micro-batch gradients, as AdaScale computes them;
  * the statistical progress: examples at M0-equivalent, i.e. M0 x gain
    per optimizer step.

The worker starts with the allocation in NOMAD_META_pollux_* and adopts
the controller's later decisions (batch size, micro-batch, accumulation,
LR) between steps without a restart. Run one process per GPU; with
several, torch.distributed reads MASTER_ADDR, MASTER_PORT, RANK and
WORLD_SIZE from the environment, which the job spec sets.

    python3 example_train.py
"""

import os
import time

import torch
import torch.distributed as dist

import pollux_report


class GradientNoise:
    """AdaScale's gradient statistics (adaptdl/torch/adascale.py): an
    exponential moving average, bias-corrected, of the unbiased estimates
    of |g|^2 (grad_sqr) and of the variance of a gradient at the initial
    batch size M0 (grad_var)."""

    def __init__(self, init_batch_size):
        self.m0 = init_batch_size
        self.sqr = self.var = self.norm = 0.0
        self.previous = None  # the last step's gradient, for the c = 1 case

    def update(self, local_sqr, total_sqr, count, batch_size, gradient):
        """local_sqr: mean over the `count` micro-batch gradients of their
        squared norms; total_sqr: squared norm of their mean; batch_size:
        the total batch size M of the step."""
        scale = batch_size / self.m0
        if count == 1:
            # One micro-batch gradient: difference it with the last step's.
            if self.previous is None:
                self.previous = gradient.clone()
                return
            local_sqr = (self.previous.pow(2).sum().item() + local_sqr) / 2
            total_sqr = ((self.previous + gradient) / 2).pow(2).sum().item()
            self.previous = gradient.clone()
            count, scale = 2, 2 * scale
        grad_sqr = (count * total_sqr - local_sqr) / (count - 1)
        grad_var = (local_sqr - total_sqr) * scale / (count - 1)
        theta = 0.999 ** scale
        self.sqr = theta * self.sqr + (1 - theta) * grad_sqr
        self.var = theta * self.var + (1 - theta) * grad_var
        self.norm = theta * self.norm + (1 - theta)

    def estimates(self):
        if self.norm == 0:
            return None
        return max(self.sqr / self.norm, 0.0), max(self.var / self.norm, 1e-6)

    def gain(self, batch_size):
        """AdaScale's gain at M: (var + sqr) / (var / r + sqr), r = M / M0."""
        est = self.estimates()
        if est is None:
            return 1.0
        sqr, var = est
        r = batch_size / self.m0
        return (var + sqr) / (var / r + sqr) if var / r + sqr > 0 else 1.0


def flat_grad(params):
    return torch.cat([p.grad.reshape(-1) for p in params])


def main():
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    world = dist.get_world_size() if distributed else 1
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def sync():  # wait for queued GPU work, so that timings are real
        if device.type == "cuda":
            torch.cuda.synchronize()

    reporter = pollux_report.Reporter()  # rank 0 writes; CONSUL_HTTP_ADDR, NOMAD_JOB_ID, ...
    alloc = reporter.allocation()
    init_batch_size = reporter.init_batch_size or 128
    local_bsz = alloc.local_bsz or init_batch_size // world
    accum_steps = alloc.accum_steps
    lr = alloc.lr or 0.1
    config = pollux_report.StepConfig(alloc.num_nodes or 1, world, local_bsz, accum_steps)
    follower = reporter.follow_decisions()

    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    noise = GradientNoise(init_batch_size)
    progress = 0.0

    for step in range(1000):
        # Adopt a new decision for the same allocation between steps (a
        # new allocation restarts the job with new meta instead).
        decision = follower.poll()
        if decision is not None and decision.num_replicas == world and decision.local_bsz > 0:
            local_bsz, accum_steps = decision.local_bsz, decision.accum_steps
            for group in optimizer.param_groups:
                group["lr"] = decision.lr
            config = config._replace(local_bsz=local_bsz, accum_steps=accum_steps)
        micro_steps = accum_steps + 1
        batch_size = local_bsz * world * micro_steps

        # Forward/backward of each micro-batch, without synchronisation.
        optimizer.zero_grad(set_to_none=False)
        previous = torch.zeros(sum(p.numel() for p in params), device=device)
        local_sqr = 0.0
        compute = 0.0
        for _ in range(micro_steps):
            x = torch.randn(local_bsz, 32, device=device)
            y = torch.randint(0, 10, (local_bsz,), device=device)
            sync()
            start = time.perf_counter()
            (loss_fn(model(x), y) / micro_steps).backward()
            sync()
            compute += time.perf_counter() - start
            grad = flat_grad(params)
            local_sqr += ((grad - previous) * micro_steps).pow(2).sum().item()  # this micro-batch's gradient
            previous = grad.clone()
        last_micro = compute / micro_steps  # about what the last one took

        # Synchronise: average the gradients (and the squared norms) over replicas.
        start = time.perf_counter()
        grad = flat_grad(params)
        sums = torch.tensor([local_sqr], device=device)
        if distributed:
            dist.all_reduce(grad)
            dist.all_reduce(sums)
            grad /= world
        sync()
        sync_time = time.perf_counter() - start
        offset = 0
        for p in params:
            p.grad.copy_(grad[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        optimizer.step()
        sync()
        step_time = last_micro + (time.perf_counter() - start)

        # Gradient noise from the world * micro_steps micro-batch gradients.
        count = world * micro_steps
        noise.update(sums.item() / count, grad.pow(2).sum().item(), count, batch_size, grad)
        progress += init_batch_size * noise.gain(batch_size)

        reporter.observe(config, compute / micro_steps, step_time, sync_time)
        est = noise.estimates()
        if est is not None:
            reporter.observe_gradients(*est)
        reporter.progress(progress, batch_size)

    follower.stop()
    reporter.close()


if __name__ == "__main__":
    main()
