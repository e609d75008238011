"""A tiny training job for the stop tests (not a test): a linear model on
N samples, batch 8 whatever the number of replicas, a training loader
without autoscale_batch_size and a validation loader, EPOCHS epochs.
Replica 0 appends one line per optimizer step to OUT/steps.jsonl (epoch,
step, wall time, the step's sample indices of every replica) and one per
start; every step sleeps STEP_SLEEP seconds so that a signal lands inside
a step or between steps."""

import json
import os
import sys
import time

import torch
import torch.distributed as dist

import pollux.env
import pollux.torch

out = sys.argv[1]
n, epochs = int(os.environ.get("N", "240")), int(os.environ.get("EPOCHS", "20"))
sleep = float(os.environ.get("STEP_SLEEP", "0.01"))
torch.manual_seed(0)
x = torch.randn(n, 3)
data = torch.utils.data.TensorDataset(torch.arange(n), x, x @ torch.tensor([1.0, -1.0, 2.0]))
train = pollux.torch.AdaptiveDataLoader(data, batch_size=8, shuffle=True)
valid = pollux.torch.AdaptiveDataLoader(data, batch_size=32)
pollux.torch.init_process_group("gloo")
rank = pollux.env.replica_rank()
model = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
net = pollux.torch.AdaptiveDataParallel(model, opt, lr_scaling="none")


def log(**kw):
    if rank == 0:
        with open(os.path.join(out, "steps.jsonl"), "a") as f:
            f.write(json.dumps(kw) + "\n")


log(event="start", steps=net.steps, finished=pollux.torch.finished_epochs(), world=pollux.env.num_replicas(),
    pid=os.getpid())
for epoch in pollux.torch.remaining_epochs_until(epochs):
    for idx, xb, yb in train:
        opt.zero_grad()
        ((net(xb).squeeze(1) - yb) ** 2).mean().backward()
        time.sleep(sleep)
        opt.step()
        box = [None] * dist.get_world_size()
        dist.all_gather_object(box, idx.tolist())
        log(event="step", epoch=epoch, step=net.steps, t=time.time(), idx=[i for b in box for i in b],
            last=train._state.index >= n)
    with torch.no_grad():
        for idx, xb, yb in valid:
            net(xb)
log(event="done", steps=net.steps)
