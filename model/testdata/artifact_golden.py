#!/usr/bin/env python3
"""Regenerates artifact-golden.json, the reference outputs that
model/artifact_test.go compares the Go code with.

It re-implements, independently, what the Pollux artifact's
simulator/goodput.py does (petuum/adaptdl, branch osdi21-artifact), using
SciPy's L-BFGS-B exactly as the artifact calls it (x0, bounds, priors) but
with a hand-derived gradient in place of autograd:

- fits: for each application, 20 random profiles (subsets of the distinct
  (N, K, m) points of placements.csv, first row of each in file order), the
  offline fit on all rows, and the fit on the distinct points of the
  placements with at most 8 GPUs (these two without their points: the test
  reads placements.csv); the fitted parameters and the loss before the
  post-fit 1.1x rule.
- optimize: the batch-size search for each application's reference
  parameters (pollux-reference.md section 1) and the gradient statistics of
  the first epoch of validation-<M0>.csv, for a grid of (N, K), with and
  without accumulation.

Run from the repository root: python3 model/testdata/artifact_golden.py
(needs numpy and scipy; Debian: python3-scipy).
"""
import csv
import json
import math
import os

import numpy as np
import scipy.optimize

DATA = os.path.join("data", "traces")
APPS = ["bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"]
# M0, max M, min local, max local (pollux-reference.md section 2).
BOUNDS = {
    "bert": (12, 384, 4, 12),
    "cifar10": (128, 4096, 32, 1024),
    "deepspeech2": (20, 640, 10, 80),
    "imagenet": (200, 12800, 20, 200),
    "ncf": (256, 32768, 32, 32768),
    "yolov3": (8, 512, 4, 8),
}
# Offline fits listed in pollux-reference.md section 1.
REFERENCE = {
    "bert": [0.1692, 0.0586, 1.352, 0.01424, 0.2871, 0.0112, 1.90],
    "cifar10": [0.01733, 7.018e-4, 0.1211, 0.002393, 0.03161, 0.001012, 1.999],
    "ncf": [0.006924, 6.322e-7, 0.01817, 4.277e-4, 0.006192, 1.517e-4, 1.226],
    "imagenet": [0.06454, 0.004474, 0.299, 0.005553, 1.57e-4, 1e-8, 2.489],
    "deepspeech2": [0.3041, 0.02423, 0.3778, 0.0285, 0.08692, 0.001856, 1.432],
    "yolov3": [0.1827, 0.02595, 0.699, 0.02336, 0.139, 0.02148, 1.163],
}


def read_rows(app):
    rows = []
    with open(os.path.join(DATA, app, "placements.csv")) as f:
        for r in csv.DictReader(f):
            gpus = [int(c) for c in r["placement"] if c != "0"]
            step, sync = float(r["step_time"]), float(r["sync_time"])
            rows.append((len(gpus), sum(gpus), float(r["local_bsz"]), step - sync, step))
    return rows


def first_points(rows):
    seen, out = set(), []
    for r in rows:
        if r[:3] not in seen:
            seen.add(r[:3])
            out.append(r)
    return out


def network_time(p, n, k):
    a = np.where(n > 1, p[2], np.where(k > 1, p[4], 1e-8))
    b = np.where(n > 1, p[3], np.where(k > 1, p[5], 1e-8))
    return a + b * np.maximum(k - 2, 1e-8)


def loss_and_grad(p, n, k, m, ta, to):
    tg = p[0] + p[1] * m
    ts = network_time(p, n, k)
    g = p[6]
    lo = np.logaddexp(g * np.log(tg), g * np.log(ts)) / g
    r1, r2 = np.log(tg) - np.log(ta), lo - np.log(to)
    e1, e2 = np.sqrt(np.mean(r1 ** 2)), np.sqrt(np.mean(r2 ** 2))
    loss = e1 + e2 + 1e-3 * (g - 1) ** 2 + 1e-2 * ((p[3] / p[2]) ** 2 + (p[5] / p[4]) ** 2)
    cnt = len(m)
    d1 = r1 / (cnt * e1) if e1 > 0 else 0 * r1
    d2 = r2 / (cnt * e2) if e2 > 0 else 0 * r2
    wg = 1 / (1 + np.exp(g * (np.log(ts) - np.log(tg))))
    ws = 1 - wg
    dtg = d1 / tg + d2 * wg / tg
    dts = d2 * ws / ts
    q = np.maximum(k - 2, 1e-8)
    inter, intra = n > 1, (n == 1) & (k > 1)
    grad = np.array([
        dtg.sum(), (dtg * m).sum(),
        dts[inter].sum(), (dts * q)[inter].sum(),
        dts[intra].sum(), (dts * q)[intra].sum(),
        (d2 * ((wg * np.log(tg) + ws * np.log(ts)) / g - lo / g)).sum() + 2e-3 * (g - 1),
    ])
    grad[2] -= 2e-2 * p[3] ** 2 / p[2] ** 3
    grad[3] += 2e-2 * p[3] / p[2] ** 2
    grad[4] -= 2e-2 * p[5] ** 2 / p[4] ** 3
    grad[5] += 2e-2 * p[5] / p[4] ** 2
    return loss, grad


def fit(points):
    n, k, m, ta, to = (np.array(c, dtype=float) for c in zip(*points))
    x0 = [0.1, 0.01] * 3 + [1.001]
    lo = [1e-8, 1e-8] * 3 + [1.0]
    hi = [np.inf, np.inf] * 3 + [10.0]

    def pin(i, v):
        x0[i] = lo[i] = hi[i] = v

    if len(np.unique(m)) == 1:
        pin(0, np.mean(ta) / 2)
    if not np.any(n > 1):
        pin(2, 1e-8)
        pin(3, 1e-8)
    if not np.any((n == 1) & (k > 1)):
        pin(4, 1e-8)
        pin(5, 1e-8)
    if not np.any(k > 2):
        pin(3, 1e-8)
        pin(5, 1e-8)
    res = scipy.optimize.minimize(
        loss_and_grad, x0, args=(n, k, m, ta, to), jac=True,
        bounds=scipy.optimize.Bounds(lo, hi, keep_feasible=True))
    p = list(res.x)
    loss = float(res.fun)
    if not np.any(n > 1):
        p[2] = max(p[2], 1.1 * p[4])
        p[3] = max(p[3], 1.1 * p[5])
    return p, loss


def optimize(p, sqr, var, m0, n, k, max_batch, min_local, max_local, accumulation):
    """The batch-size search for one (N, K), candidate by candidate."""
    best = (0.0, 0, 0)
    ts = float(network_time(p, np.array(n), np.array(k)))
    for batch in np.geomspace(max(m0, min_local * k), max_batch):
        local = batch / k
        if accumulation:
            s = math.ceil(local / max_local - 1e-8) - 1
            if k == 1 and local > m0 + 1e-8:
                s = max(s, 1)
        else:
            s = 0
        atomic = math.ceil(local / (s + 1) - 1e-8)
        if not (min_local <= atomic <= max_local):
            continue
        tg = p[0] + p[1] * atomic
        topt = math.exp(np.logaddexp(p[6] * math.log(tg), p[6] * math.log(ts)) / p[6])
        total = k * atomic * (s + 1)
        scale = total / m0
        denom = var / scale + sqr
        gain = (var + sqr) / denom if denom > 0 else 1.0
        goodput = total / (s * tg + topt) * gain / scale
        if goodput > best[0]:
            best = (goodput, atomic, s)
    return best


def grad_stats(app, m0):
    with open(os.path.join(DATA, app, "validation-%d.csv" % m0)) as f:
        row = next(csv.DictReader(f))
    return float(row["grad_sqr"]), float(row["grad_var"])


def main():
    rs = np.random.RandomState(20210714)
    fits, searches = [], []
    for app in APPS:
        rows = read_rows(app)
        pts = first_points(rows)
        p, loss = fit(rows)
        fits.append({"app": app, "kind": "all-rows", "params": p, "loss": loss})
        p, loss = fit(first_points([r for r in rows if r[1] <= 8]))
        fits.append({"app": app, "kind": "at-most-8-gpus", "params": p, "loss": loss})
        for _ in range(20):
            max_k = [1, 2, 4, 8, 16][rs.randint(5)]
            cand = [q for q in pts if q[1] <= max_k]
            rs.shuffle(cand)
            sub = cand[:1 + rs.randint(min(25, len(cand)))]
            p, loss = fit(sub)
            fits.append({"app": app, "kind": "subset", "points": sub, "params": p, "loss": loss})
        m0, max_batch, min_local, max_local = BOUNDS[app]
        sqr, var = grad_stats(app, m0)
        for accumulation in (True, False):
            for k in (1, 2, 3, 4, 5, 8, 12, 16, 24, 32, 48, 64):
                for n in sorted({1, 2, (k + 3) // 4, min(k, 16)}):
                    if n > k or (n == 1 and k > 4 and k not in (8, 16)):
                        continue
                    g, atomic, s = optimize(REFERENCE[app], sqr, var, m0, n, k,
                                            max_batch, min_local, max_local, accumulation)
                    searches.append({
                        "app": app, "params": REFERENCE[app], "sqr": sqr, "var": var,
                        "m0": m0, "max_batch": max_batch, "min_local": min_local,
                        "max_local": max_local, "accumulation": accumulation,
                        "nodes": n, "replicas": k,
                        "goodput": g, "local_bsz": atomic, "accum_steps": s,
                    })
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "artifact-golden.json")
    with open(out, "w") as f:
        json.dump({"fits": fits, "searches": searches}, f, indent=None, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
