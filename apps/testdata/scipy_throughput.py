#!/usr/bin/env python3
"""Golden values of the artifact's 3-D throughput interpolant, for
apps/throughput_test.go: SciPy's LinearNDInterpolator over the same points
as apps/qhull/export.py, queried one point per call (as the artifact's
get_throughput does, so every search starts from simplex 0) on a grid of
(num_nodes, num_replicas, local_bsz): num_nodes 1..16, num_replicas
num_nodes..4*num_nodes, and 8 local batch sizes spread geometrically over
[min local_bsz, max local_bsz] (yolov3: max 8). NaN marks a query outside
the convex hull.

Usage: python3 scipy_throughput.py TRACES_DIR > scipy-throughput.csv
"""
import csv
import os
import sys

import numpy as np
from scipy.interpolate import LinearNDInterpolator

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "qhull"))
from export import interpolation_points  # noqa: E402

MAX_LOCAL = {"yolov3": 8}


def values(app_dir):
    groups = {}
    with open(os.path.join(app_dir, "placements.csv")) as f:
        for row in csv.DictReader(f):
            p = row["placement"]
            key = (len(p), sum(int(c) for c in p), int(row["local_bsz"]))
            groups.setdefault(key, []).append(
                (float(row["step_time"]), float(row["sync_time"])))
    out = []
    for key in sorted(groups):
        rows = groups[key]
        out.append((sum(r[0] for r in rows) / len(rows),
                    sum(r[1] for r in rows) / len(rows)))
    with open(os.path.join(app_dir, "scalability.csv")) as f:
        for row in csv.DictReader(f):
            out.append((float(row["step_time"]), float(row["sync_time"])))
    return np.array(out)


def main(traces):
    w = csv.writer(sys.stdout, lineterminator="\n")
    w.writerow(["app", "num_nodes", "num_replicas", "local_bsz",
                "step_time", "sync_time"])
    for app in sorted(os.listdir(traces)):
        app_dir = os.path.join(traces, app)
        if not os.path.isdir(app_dir):
            continue
        points = interpolation_points(app_dir)
        f = LinearNDInterpolator(points, values(app_dir))
        with open(os.path.join(app_dir, "placements.csv")) as fp:
            lbsz = [int(r["local_bsz"]) for r in csv.DictReader(fp)]
        lo, hi = min(lbsz), MAX_LOCAL.get(app, max(lbsz))
        ms = sorted(set(int(round(x)) for x in np.geomspace(lo, hi, 8)))
        for n in range(1, 17):
            for k in range(n, 4 * n + 1):
                for m in ms:
                    y = f([[n, k, m]])[0]
                    w.writerow([app, n, k, m, repr(float(y[0])),
                                repr(float(y[1]))])


if __name__ == "__main__":
    main(sys.argv[1])
