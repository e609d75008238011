"""Benchmark (not a test): the per-step cost of pollux.torch against plain
PyTorch DistributedDataParallel on the same model, data and batch size.

    python3 -m pollux.torch.launch --nproc 2 worker/python/bench_overhead.py [--steps 300]

Each replica trains with micro-batch 64, in alternating blocks (median of
the blocks' mean step times): once with DDP and a
DistributedSampler, once with AdaptiveDataLoader + AdaptiveDataParallel
(one all-reduce of the flattened gradients with the noise statistics, the
gradient-noise update and the LR scaling; no checkpoint, no Consul). Rank 0
prints the mean seconds per step of each and the difference.
"""

import argparse
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import pollux.env
import pollux.torch


def models():
    yield "digits MLP (4.8k params)", lambda: nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)), 64
    yield "MLP 1.1M params", lambda: nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 768), nn.ReLU(),
                                                  nn.Linear(768, 10)), 256


def timed(loop, steps):
    dist.barrier()
    start = time.perf_counter()
    loop(steps)
    dist.barrier()
    return (time.perf_counter() - start) / steps


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--blocks", type=int, default=10)
    a = ap.parse_args()
    torch.set_num_threads(1)
    pollux.torch.init_process_group("gloo")
    k, rank = pollux.env.num_replicas(), pollux.env.replica_rank()
    m = 64
    results = []
    for name, build, width in models():
        n = m * k * (a.steps + a.warmup + a.blocks + 1)
        g = torch.Generator().manual_seed(0)
        data = torch.utils.data.TensorDataset(torch.randn(n, width, generator=g), torch.randint(0, 10, (n,), generator=g))
        loss_fn = nn.CrossEntropyLoss()

        # Plain DDP.
        torch.manual_seed(0)
        model = nn.parallel.DistributedDataParallel(build())
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        sampler = torch.utils.data.distributed.DistributedSampler(data, k, rank, shuffle=True)
        it = iter(torch.utils.data.DataLoader(data, batch_size=m, sampler=sampler))

        def ddp_loop(steps):
            for _ in range(steps):
                x, y = next(it)
                opt.zero_grad()
                loss_fn(model(x), y).backward()
                opt.step()

        ddp_loop(a.warmup)

        # pollux.torch.
        torch.manual_seed(0)
        loader = pollux.torch.AdaptiveDataLoader(data, batch_size=m * k, shuffle=True)
        net0 = build()
        opt2 = torch.optim.SGD(net0.parameters(), lr=0.01, momentum=0.9)
        net = pollux.torch.AdaptiveDataParallel(net0, opt2, name="bench-%d" % len(results), init_batch_size=m * k)
        it2 = iter(loader)

        def pollux_loop(steps):
            for _ in range(steps):
                x, y = next(it2)
                opt2.zero_grad()
                loss_fn(net(x), y).backward()
                opt2.step()

        pollux_loop(a.warmup)
        # Alternate blocks of the two, so that a busy machine slows both alike;
        # the medians of the blocks.
        ddps, pols = [], []
        for _ in range(a.blocks):
            ddps.append(timed(ddp_loop, a.steps // a.blocks))
            pols.append(timed(pollux_loop, a.steps // a.blocks))
        ddp, pol = median(ddps), median(pols)
        results.append((name, ddp, pol))
    if rank == 0:
        print("| model | replicas | micro-batch | DDP s/step | pollux.torch s/step | difference |")
        print("| --- | --- | --- | --- | --- | --- |")
        for name, ddp, pol in results:
            print("| %s | %d | %d | %.5f | %.5f | %+.1f%% (%+.2f ms) |" % (name, k, m, ddp, pol, 100 * (pol / ddp - 1), 1000 * (pol - ddp)))


if __name__ == "__main__":
    main()
