"""Standalone adaptivity, measured: the time a job takes to reach a target
validation accuracy with the batch size it was written for (fixed) and
with its own goodput-optimal batch size (POLLUX_STANDALONE), on CPU.

    python3 bench_standalone.py [--target 0.9] [--nproc 1] [--repeats 2]

The job: an MLP on scikit-learn's digits (1437 training, 360 validation
images), SGD with momentum, M0 = 16, AdaScale, batch size up to 512,
micro-batch 8 to 256, accumulation allowed; it is evaluated every
EVAL_EVERY steps and stops at the target. The two modes alternate, so
that load from other work on the machine falls on both; the median wall
time to the target of each mode is reported with every run's."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

JOB = r'''
import json, os, sys, time
import torch
from sklearn.datasets import load_digits
import pollux.torch, pollux.env

target, out = float(sys.argv[1]), sys.argv[2]
torch.manual_seed(0)
d = load_digits()
x = torch.tensor(d.data, dtype=torch.float32) / 16.0
y = torch.tensor(d.target)
train = torch.utils.data.TensorDataset(x[:1437], y[:1437])
xv, yv = x[1437:], y[1437:]
loader = pollux.torch.AdaptiveDataLoader(train, batch_size=16, shuffle=True, drop_last=True)
loader.autoscale_batch_size(512, local_bsz_bounds=(8, 256), gradient_accumulation=True)
pollux.torch.init_process_group("gloo")
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
net = pollux.torch.AdaptiveDataParallel(model, opt, lr_scaling="adascale")
t0, every, acc, batches = time.time(), int(os.environ.get("EVAL_EVERY", "10")), 0.0, []
for epoch in pollux.torch.remaining_epochs_until(300):
    for xb, yb in loader:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(xb), yb).backward()
        opt.step()
        if loader.is_sync_step:
            batches.append(loader.current_batch_size)
            if net.steps % every == 0:
                with torch.no_grad():
                    acc = (model(xv).argmax(1) == yv).float().mean().item()
                if acc >= target:
                    break
    if acc >= target:
        break
if pollux.env.replica_rank() == 0:
    with open(out, "w") as f:
        json.dump({"seconds": time.time() - t0, "steps": net.steps, "accuracy": acc, "epochs": epoch + 1,
                   "batch_first": batches[0], "batch_last": batches[-1], "batch_max": max(batches)}, f)
'''


def run(mode, target, nproc, d):
    script = os.path.join(d, "job.py")
    with open(script, "w") as f:
        f.write(JOB)
    out = os.path.join(d, "%s.json" % mode)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NOMAD_", "POLLUX_", "CONSUL_"))}
    env.update(PYTHONPATH=HERE, OMP_NUM_THREADS="1", POLLUX_STANDALONE="true" if mode == "adaptive" else "false",
               POLLUX_STANDALONE_INTERVAL="10")
    subprocess.run([sys.executable, "-m", "pollux.torch.launch", "--nproc", str(nproc), script, str(target), out],
                   env=env, check=True, capture_output=True)
    with open(out) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", type=float, default=0.9)
    ap.add_argument("--nproc", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    res = {"fixed": [], "adaptive": []}
    with tempfile.TemporaryDirectory() as d:
        for i in range(a.repeats):
            for mode in (("fixed", "adaptive") if i % 2 == 0 else ("adaptive", "fixed")):
                r = run(mode, a.target, a.nproc, d)
                res[mode].append(r)
                print(mode, json.dumps(r), flush=True)
    med = {m: statistics.median(r["seconds"] for r in rs) for m, rs in res.items()}
    print("median seconds to accuracy %.2f on %d process(es): fixed %.1f, adaptive %.1f (%.2fx)" % (
        a.target, a.nproc, med["fixed"], med["adaptive"], med["fixed"] / med["adaptive"]))


if __name__ == "__main__":
    main()
