"""Training scenarios the unit tests run under the launcher (not a test).

    python3 -m pollux.torch.launch --nproc K scenario.py MODE OUT_DIR

MODE "noise": one step on a tiny linear model with fixed data, writing
each replica's micro-batch gradients and the library's estimates to
OUT_DIR/noise-<rank>.json so the test can compute them by hand.

MODE "resume": trains on a dataset of indices 0..N-1, one epoch at a time,
logging to OUT_DIR/resume.jsonl every sample index each replica trained on
and the step counters; it pauses inside a step when OUT_DIR/pause exists
(it writes OUT_DIR/in-step-<rank> first), so the test can send SIGTERM
during a step.
"""

import json
import os
import sys
import time

import torch

import pollux.env
import pollux.torch

mode, out = sys.argv[1], sys.argv[2]
pollux.torch.init_process_group("gloo")
rank, world = pollux.env.replica_rank(), pollux.env.num_replicas()


def append(name, **kw):
    kw.update(rank=rank, world=world)
    with open(os.path.join(out, name), "a") as f:
        f.write(json.dumps(kw, sort_keys=True) + "\n")


if mode == "noise":
    # y = x . w_true + noise; model y = x . w, w starting at 0.
    g = torch.Generator().manual_seed(3)
    n = 48
    x = torch.randn(n, 3, generator=g, dtype=torch.float64)
    y = x @ torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) + 0.3 * torch.randn(n, generator=g, dtype=torch.float64)
    data = torch.utils.data.TensorDataset(torch.arange(n), x, y)
    loader = pollux.torch.AdaptiveDataLoader(data, batch_size=int(os.environ["M0"]), shuffle=False)
    loader.autoscale_batch_size(n, local_bsz_bounds=(1, n), gradient_accumulation=True)
    model = torch.nn.Linear(3, 1, bias=False).double()
    torch.nn.init.zeros_(model.weight)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    net = pollux.torch.AdaptiveDataParallel(model, opt)
    micro = []
    for epoch in pollux.torch.remaining_epochs_until(1):
        for idx, xb, yb in loader:
            opt.zero_grad()
            before = model.weight.grad.clone() if model.weight.grad is not None else torch.zeros_like(model.weight)
            loss = ((net(xb).squeeze(1) - yb) ** 2).mean()
            loss.backward()
            micro.append({"idx": idx.tolist(), "grad": (model.weight.grad - before).reshape(-1).tolist()})
            w_before = model.weight.detach().clone()
            opt.step()
            if loader.is_sync_step:
                append("noise-%d.json" % rank, micro=micro, grad_sqr=net.grad_sqr, grad_var=net.grad_var,
                       lr=net.last_lr[0], m0=int(os.environ["M0"]), batch=loader.step.size,
                       weight_before=w_before.reshape(-1).tolist(), weight_after=model.weight.detach().reshape(-1).tolist(),
                       synced_grad=model.weight.grad.reshape(-1).tolist())
                micro = []
                break
        break

elif mode == "resume":
    n = int(os.environ.get("N", "120"))
    data = torch.utils.data.TensorDataset(torch.arange(n), torch.randn(n, 4, generator=torch.Generator().manual_seed(0)))
    loader = pollux.torch.AdaptiveDataLoader(data, batch_size=12, shuffle=True)
    loader.autoscale_batch_size(48, local_bsz_bounds=(2, 12), gradient_accumulation=True)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    net = pollux.torch.AdaptiveDataParallel(model, opt)
    append("resume.jsonl", event="start", steps=net.steps, finished=pollux.torch.finished_epochs())
    for epoch in pollux.torch.remaining_epochs_until(int(os.environ.get("EPOCHS", "2"))):
        for idx, xb in loader:
            opt.zero_grad()
            net(xb).pow(2).mean().backward()
            if loader.is_sync_step and os.path.exists(os.path.join(out, "pause")):
                open(os.path.join(out, "in-step-%d" % rank), "w").close()
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and not pollux.torch._core.ctx.stop_requested:
                    time.sleep(0.02)  # SIGTERM arrives here, inside the step
            append("resume.jsonl", event="micro", idx=idx.tolist(), epoch=epoch, steps=net.steps,
                   sync=loader.is_sync_step, batch=loader.current_batch_size)
            opt.step()
    append("resume.jsonl", event="done", steps=net.steps)
