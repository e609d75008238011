"""A complete Pollux training script: a small network on scikit-learn's
digits (bundled with scikit-learn, no download), written with AdaptDL's
names. Run by the job spec next to it (train.nomad.hcl) as

    python3 -m pollux.torch.launch train_digits.py --epochs 30

Everything Pollux-specific is in the lines marked "Pollux:"; the rest is a
plain PyTorch loop. To port an AdaptDL script, change its imports
(adaptdl.torch -> pollux.torch, adaptdl.checkpoint -> pollux.checkpoint,
adaptdl.env -> pollux.env).

With TRAIN_LOG=<file> every replica appends JSON lines about what it did
(the end-to-end test reads them): a "start" line per replica with the
all-reduce of the ranks, a "step" line per optimizer step on replica 0 with
the batch size and learning rate used, an "epoch" line with the validation
accuracy.
"""

import argparse
import json
import os
import time

PROCESS_START = time.time()  # before importing torch: the end-to-end test splits restart times

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

import pollux.checkpoint  # noqa: E402,F401 - (unused here; where an AdaptDL script's State subclasses come from)
import pollux.env  # noqa: E402
import pollux.torch  # noqa: E402


def meta(name, default, kind=float):
    """A Pollux meta key as the job author wrote it, else default."""
    raw = os.environ.get("NOMAD_META_pollux_" + name)
    return kind(raw) if raw else default


def log(event, **kw):
    path = os.environ.get("TRAIN_LOG")
    if not path:
        return
    kw.update(event=event, t=time.time(), rank=pollux.env.replica_rank(), pid=os.getpid())
    with open(path, "a") as f:  # one short line per write: appends do not interleave
        f.write(json.dumps(kw, sort_keys=True) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--step-delay", type=float, default=0.0,
                    help="extra seconds per step, to stand in for a bigger model in tests")
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)

    # Pollux: join the job's process group (the launcher set RANK, WORLD_SIZE, MASTER_*).
    imported = time.time()
    pollux.torch.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank, world = pollux.env.replica_rank(), pollux.env.num_replicas()
    probe = torch.tensor([float(rank)])
    if world > 1:
        dist.all_reduce(probe)
    pollux_round = meta("round", 0, int)
    log("start", world=world, rank_sum=probe.item(), round=pollux_round, process_start=PROCESS_START, imported=imported,
        launcher_start=float(os.environ.get("POLLUX_LAUNCHER_START", PROCESS_START)),
        finished_epochs=pollux.torch.finished_epochs(), restarts=pollux.env.num_restarts())

    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(1))
    train_idx, valid_idx = order[:1400], order[1400:]
    trainset = torch.utils.data.TensorDataset(x[train_idx], y[train_idx])
    validset = torch.utils.data.TensorDataset(x[valid_idx], y[valid_idx])

    # Pollux: the loader's batch size follows the controller's decisions.
    init_bsz = meta("init_batch_size", 64, int)
    trainloader = pollux.torch.AdaptiveDataLoader(trainset, batch_size=init_bsz, shuffle=True)
    trainloader.autoscale_batch_size(meta("max_batch_size", 512, int),
                                     local_bsz_bounds=(meta("local_bsz_min", 8, int), meta("local_bsz_max", 64, int)),
                                     gradient_accumulation=True)
    validloader = pollux.torch.AdaptiveDataLoader(validset, batch_size=128)

    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=meta("init_lr", 0.05), momentum=0.9)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[a.epochs * 3 // 4], gamma=0.1)
    # Pollux: gradients synchronised once per global batch, noise statistics, LR scaling, checkpoints.
    net = pollux.torch.AdaptiveDataParallel(model, optimizer, scheduler)
    loss_fn = nn.CrossEntropyLoss()

    def validate(stats):
        net.eval()
        with torch.no_grad():
            for inputs, targets in validloader:
                pred = net(inputs).argmax(dim=1)
                stats["correct"] += (pred == targets).sum().item()
                stats["valid"] += len(targets)

    # A restart after the last epoch (the checkpoint says all are done)
    # runs no epoch: the final accuracy is then measured here.
    acc = None
    # An epoch resumed from a checkpoint taken after its last batch runs no
    # batch at all, so the batch size printed below starts as "none".
    batch_size = None
    # Pollux: epochs continue from the checkpoint after a restart.
    for epoch in pollux.torch.remaining_epochs_until(a.epochs):
        net.train()
        stats = pollux.torch.Accumulator()
        for inputs, targets in trainloader:
            optimizer.zero_grad()
            loss = loss_fn(net(inputs), targets)
            loss.backward()
            optimizer.step()
            stats["loss_sum"] += loss.item() * len(targets)
            stats["total"] += len(targets)
            batch_size = trainloader.current_batch_size  # None outside the loop, as in AdaptDL
            if trainloader.is_sync_step:
                if rank == 0:
                    log("step", step=net.steps, epoch=epoch, world=world, round=pollux_round, batch_size=trainloader.step.size,
                        full_batch_size=trainloader.current_batch_size, local_bsz=trainloader.current_local_bsz,
                        accum_steps=trainloader.accumulation_steps, lr=net.last_lr[0], lr_factor=net.lr_factor,
                        base_lr=scheduler.get_last_lr()[0], grad_sqr=net.grad_sqr, grad_var=net.grad_var)
                if a.step_delay:
                    time.sleep(a.step_delay)
        scheduler.step()
        validate(stats)
        with stats.synchronized():
            acc = stats["correct"] / max(stats["valid"], 1)
            if rank == 0:
                log("epoch", epoch=epoch, step=net.steps, world=world, round=pollux_round, val_acc=acc,
                    train_loss=stats["loss_sum"] / max(stats["total"], 1), valid=stats["valid"])
                print("epoch %d: loss %.4f, validation accuracy %.4f (%d replicas, batch %s)" % (
                    epoch, stats["loss_sum"] / max(stats["total"], 1), acc, world, batch_size),
                    flush=True)
    if acc is None:
        stats = pollux.torch.Accumulator()
        validate(stats)
        with stats.synchronized():
            acc = stats["correct"] / max(stats["valid"], 1)
    if rank == 0:
        log("done", step=net.steps, val_acc=acc)


if __name__ == "__main__":
    main()
