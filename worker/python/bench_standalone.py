"""Standalone adaptivity, measured: the time a job takes to reach a target
validation accuracy with the batch size it was written for (fixed) and
with its own goodput-optimal batch size (POLLUX_STANDALONE), on CPU.

    python3 bench_standalone.py [--data synthetic|digits] [--target 0.8] [--nproc 1] [--repeats 3]

The job: an MLP (64-256-10) trained with SGD and momentum, M0 = 16,
AdaScale, batch size up to 1024, micro-batch 8 to 512, accumulation
allowed. "synthetic" is scikit-learn's make_classification (10 classes,
64 features of which 32 informative, 5% of the labels flipped, 140,000
samples: 120,000 to train, 20,000 to validate, standardised); "digits" is
scikit-learn's 8x8 digits (1,437 / 360), a job of about a second. The
job is evaluated every EVAL_SAMPLES training samples (default 8192, so
that both modes spend the same on evaluation) and stops at the target. The two modes alternate, so that load from other work on the
machine falls on both; the median wall time to the target of each mode is
reported with every run's."""

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
import pollux.torch, pollux.env

target, out, data = float(sys.argv[1]), sys.argv[2], sys.argv[3]
torch.manual_seed(0)
if data == "digits":
    from sklearn.datasets import load_digits
    d = load_digits()
    x, y, n = torch.tensor(d.data, dtype=torch.float32) / 16.0, torch.tensor(d.target), 1437
else:
    from sklearn.datasets import make_classification
    xs, ys = make_classification(n_samples=140000, n_features=64, n_informative=32, n_redundant=8, n_classes=10,
                                 n_clusters_per_class=2, flip_y=0.05, random_state=0)
    x, y, n = torch.tensor(xs, dtype=torch.float32), torch.tensor(ys), 120000
    x = (x - x[:n].mean(0)) / x[:n].std(0)
train = torch.utils.data.TensorDataset(x[:n], y[:n])
xv, yv = x[n:], y[n:]
loader = pollux.torch.AdaptiveDataLoader(train, batch_size=16, shuffle=True, drop_last=True)
loader.autoscale_batch_size(1024, local_bsz_bounds=(8, 512), gradient_accumulation=True)
pollux.torch.init_process_group("gloo")
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
net = pollux.torch.AdaptiveDataParallel(model, opt, lr_scaling="adascale")
t0, every, acc, batches, seen, evals = time.time(), int(os.environ.get("EVAL_SAMPLES", "8192")), 0.0, [], 0, 0
for epoch in pollux.torch.remaining_epochs_until(300):
    for xb, yb in loader:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(xb), yb).backward()
        opt.step()
        if loader.is_sync_step:
            batches.append(loader.current_batch_size)
            seen += loader.current_batch_size
            if seen >= every:
                seen, evals = seen - every, evals + 1
                with torch.no_grad():
                    acc = (model(xv).argmax(1) == yv).float().mean().item()
                if acc >= target:
                    break
    if acc >= target:
        break
if pollux.env.replica_rank() == 0:
    with open(out, "w") as f:
        json.dump({"seconds": time.time() - t0, "steps": net.steps, "accuracy": acc, "epochs": epoch + 1,
                   "evals": evals, "batch_first": batches[0], "batch_last": batches[-1], "batch_max": max(batches)}, f)
'''


def run(mode, target, nproc, d, data):
    script = os.path.join(d, "job.py")
    with open(script, "w") as f:
        f.write(JOB)
    out = os.path.join(d, "%s.json" % mode)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NOMAD_", "POLLUX_", "CONSUL_"))}
    env.update(PYTHONPATH=HERE, OMP_NUM_THREADS="1", POLLUX_STANDALONE="true" if mode == "adaptive" else "false",
               POLLUX_STANDALONE_INTERVAL="10")
    subprocess.run([sys.executable, "-m", "pollux.torch.launch", "--nproc", str(nproc), script, str(target), out, data],
                   env=env, check=True, capture_output=True)
    with open(out) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", choices=("synthetic", "digits"), default="synthetic")
    ap.add_argument("--target", type=float, default=0.8)
    ap.add_argument("--nproc", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    res = {"fixed": [], "adaptive": []}
    with tempfile.TemporaryDirectory() as d:
        for i in range(a.repeats):
            for mode in (("fixed", "adaptive") if i % 2 == 0 else ("adaptive", "fixed")):
                r = run(mode, a.target, a.nproc, d, a.data)
                res[mode].append(r)
                print(mode, json.dumps(r), flush=True)
    med = {m: statistics.median(r["seconds"] for r in rs) for m, rs in res.items()}
    print("median seconds to accuracy %.2f (%s) on %d process(es): fixed %.1f, adaptive %.1f (%.2fx)" % (
        a.target, a.data, a.nproc, med["fixed"], med["adaptive"], med["fixed"] / med["adaptive"]))


if __name__ == "__main__":
    main()
