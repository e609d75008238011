#!/usr/bin/env python3
"""Record SciPy's Delaunay tessellation of each application's throughput
interpolation points, for exact replay by apps (package delaunay, ReadQhull).

The points are those the Pollux artifact (simulator/applications.py,
get_throughput) hands to scipy.interpolate.LinearNDInterpolator: the means of
placements.csv grouped by (num_nodes, num_replicas, local_bsz), sorted by
that key, followed by the rows of scalability.csv in file order.

Usage: python3 export.py TRACES_DIR OUT_DIR [SUFFIX=TYPE ...]
Writes OUT_DIR/<app>.txt.gz for every sub-directory of TRACES_DIR; with
SUFFIX=TYPE arguments (the Sia artifact's typed profiles, e.g. rtx=rtx2080ti)
reads placements-SUFFIX.csv and scalability-SUFFIX.csv instead and writes
OUT_DIR/<app>-<TYPE>.txt.gz, skipping applications without that type.
Recorded with Debian's python3-scipy 1.10.1 (Qhull 2019.1, as bundled by
SciPy >= 1.4, which includes the artifact's SciPy 1.5.2).
"""
import csv
import gzip
import os
import sys

import numpy as np
import scipy
from scipy.spatial import Delaunay


def interpolation_points(app_dir, suffix=""):
    groups = {}
    with open(os.path.join(app_dir, "placements%s.csv" % suffix)) as f:
        for row in csv.DictReader(f):
            p = row["placement"]
            key = (len(p), sum(int(c) for c in p), int(row["local_bsz"]))
            groups.setdefault(key, []).append(
                (float(row["step_time"]), float(row["sync_time"])))
    points = [key for key in sorted(groups)]
    with open(os.path.join(app_dir, "scalability%s.csv" % suffix)) as f:
        for row in csv.DictReader(f):
            points.append((int(row["num_nodes"]), int(row["num_replicas"]),
                           int(row["local_bsz"])))
    return np.array(points, dtype=np.float64)


def main(traces, out, types):
    for app in sorted(os.listdir(traces)):
        app_dir = os.path.join(traces, app)
        if not os.path.isdir(app_dir):
            continue
        for suffix, gpu_type in types or [("", "")]:
            export(app_dir, app, suffix, gpu_type, out)


def export(app_dir, app, suffix, gpu_type, out):
    if suffix:
        if not os.path.exists(os.path.join(app_dir, "placements-%s.csv" % suffix)):
            return
        points = interpolation_points(app_dir, "-" + suffix)
        name = "%s-%s" % (app, gpu_type)
    else:
        points = interpolation_points(app_dir)
        name = app
    if True:  # keeps the recording code's indentation
        try:
            tri = Delaunay(points)  # default options "Qbb Qc Qz Q12" + "Qt"
        except scipy.spatial.QhullError as e:
            print("%s: not triangulated: %s" % (name, str(e).splitlines()[0]))
            return
        if len(tri.coplanar) != 0:
            # Duplicated (N, K, m) points of the Sia profiles (a
            # scalability row repeating a placements one): Qhull keeps one
            # as a vertex, and the interpolant uses the simplices only.
            assert suffix, app
            print("%s: %d coplanar points, not vertices" % (name, len(tri.coplanar)))
        lines = [
            "# SciPy %s Delaunay of the %s throughput interpolation points"
            % (scipy.__version__, name),
            "points %d" % len(points),
        ]
        lines += ["%r %r %r" % tuple(map(float, p)) for p in points]
        lines.append("paraboloid %r %r" % (float(tri.paraboloid_scale),
                                           float(tri.paraboloid_shift)))
        lines.append("simplices %d" % len(tri.simplices))
        for s, n, e in zip(tri.simplices, tri.neighbors, tri.equations):
            lines.append(" ".join([*map(str, s), *map(str, n),
                                   *(repr(float(x)) for x in e)]))
        data = ("\n".join(lines) + "\n").encode()
        with open(os.path.join(out, name + ".txt.gz"), "wb") as f:
            # mtime=0 keeps the output byte-for-byte reproducible.
            f.write(gzip.compress(data, compresslevel=9, mtime=0))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], [a.split("=", 1) for a in sys.argv[3:]])
