"""Tests of pollux.report against real Consul agents.

Run from the repository root through scripts/with-cluster.sh (make test),
which sets CONSUL_HTTP_ADDR:

    python3 -m unittest discover -s worker/python -v

Tests that need Consul fail (they never skip) when CONSUL_HTTP_ADDR is not
set. The restart tests start Consul agents of their own, on free ports,
from $POLLUX_CACHE/bin/consul (default ~/.cache/pollux/bin/consul) or PATH.
"""

import json
import math
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from datetime import datetime, timezone
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pollux import report as pr  # noqa: E402

VECTORS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "reporter-vectors.json")


def load_vectors():
    with open(VECTORS) as f:
        return json.load(f)


def wait_ready(consul, timeout=10.0):
    """Wait until Consul answers KV reads (it has a leader)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            consul.get("pollux-test/ready", timeout=1.0)
            return
        except pr.ConsulError as e:
            if time.monotonic() > deadline:
                raise AssertionError("consul at %s not ready after %.0fs: %s" % (consul.base, timeout, e))
            time.sleep(0.05)


def eventually(check, timeout, what):
    """Call check every 20 ms until it returns a true value; fail after
    timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError("after %.1fs: %s" % (timeout, what))
        time.sleep(0.02)


# --------------------------------------------------------------------------
# Without Consul.


class FormatTest(unittest.TestCase):
    def test_format_float(self):
        cases = {
            "zero": (0.0, "0"),
            "integral": (1024.0, "1024"),
            "one tenth": (0.1, "0.1"),
            "0.1+0.2": (0.1 + 0.2, "0.30000000000000004"),
            "1e-6 plain": (1e-6, "0.000001"),
            "below 1e-6": (math.nextafter(1e-6, 0), "9.999999999999997e-7"),
            "1e-7": (1e-7, "1e-7"),
            "1.5e-7": (1.5e-7, "1.5e-7"),
            "1e-10": (1e-10, "1e-10"),
            "smallest": (5e-324, "5e-324"),
            "below 1e21": (math.nextafter(1e21, 0), "999999999999999900000"),
            "1e20": (1e20, "100000000000000000000"),
            "1e21": (1e21, "1e+21"),
            "1.5e21": (1.5e21, "1.5e+21"),
            "largest": (1.7976931348623157e308, "1.7976931348623157e+308"),
            "2^53": (2.0 ** 53, "9007199254740992"),
            "negative": (-12.5, "-12.5"),
            "negative tiny": (-1e-7, "-1e-7"),
            "int argument": (256, "256"),
        }
        for name, (x, want) in cases.items():
            with self.subTest(name):
                self.assertEqual(pr.format_float(x), want)
        for bad in (math.nan, math.inf, -math.inf):
            with self.assertRaises(ValueError):
                pr.format_float(bad)

    def test_format_timestamp(self):
        cases = {
            "whole seconds": (datetime(2026, 12, 2, 13, 0, 0, tzinfo=timezone.utc), "2026-12-02T13:00:00Z"),
            "quarter": (datetime(2026, 12, 2, 13, 0, 0, 250000, tzinfo=timezone.utc), "2026-12-02T13:00:00.25Z"),
            "microseconds": (datetime(2026, 12, 2, 13, 0, 0, 123456, tzinfo=timezone.utc), "2026-12-02T13:00:00.123456Z"),
            "naive is UTC": (datetime(2026, 1, 2, 3, 4, 5), "2026-01-02T03:04:05Z"),
        }
        for name, (t, want) in cases.items():
            with self.subTest(name):
                self.assertEqual(pr.format_timestamp(t), want)
                self.assertEqual(pr.parse_timestamp(want), t.replace(tzinfo=timezone.utc))
        self.assertEqual(pr.parse_timestamp("2026-12-02T14:30:00+01:30"), datetime(2026, 12, 2, 13, 0, tzinfo=timezone.utc))

    def test_vector_documents_are_canonical(self):
        for v in load_vectors():
            with self.subTest(v["name"]):
                self.assertEqual(pr.marshal(pr.parse(v["expected"])).decode(), v["expected"])

    def test_parse_rejects(self):
        good = json.loads(load_vectors()[0]["expected"])
        entry = good["profile"][0]

        def doc(**changes):
            d = dict(good, profile=[dict(entry)])
            for k, v in changes.items():
                if k.startswith("e_"):
                    d["profile"][0][k[2:]] = v
                else:
                    d[k] = v
            return json.dumps(d)

        cases = {
            "not json": ("{", "parse"),
            "NaN literal": (doc().replace('"progress": 0', '"progress": NaN'), "invalid number"),
            "wrong version": (doc(version=2), "version"),
            "no timestamp": (doc(timestamp=None), "timestamp"),
            "zero batch size": (doc(batch_size=0), "batch_size"),
            "negative progress": (doc(progress=-1), "progress"),
            "out of range": (doc().replace('"grad_sqr": 0', '"grad_sqr": 1e400'), "grad_sqr"),
            "empty profile": (doc(profile=[]), "profile"),
            "float count": (doc(e_count=1.0), "count"),
            "bool count": (doc(e_count=True), "count"),
            "zero compute time": (doc(e_compute_time=0), "compute_time"),
            "replicas below nodes": (doc(e_num_nodes=2, e_num_replicas=1), "num_replicas"),
            "duplicate": (doc(profile=[entry, entry]), "same num_nodes"),
        }
        for name, (data, want) in cases.items():
            with self.subTest(name):
                with self.assertRaises(ValueError) as cm:
                    pr.parse(data)
                self.assertIn(want, str(cm.exception))

    def test_parse_normalises(self):
        d = pr.parse(load_vectors()[0]["expected"].replace('"progress":0', '"progress":-0.0,"unknown":[1]'))
        self.assertEqual(math.copysign(1, d.progress), 1.0)


class ExampleTest(unittest.TestCase):
    def test_example_compiles(self):
        # Compiled, not imported: PyTorch is not needed to run the tests.
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy", "examples", "train_digits.py")
        with open(path) as f:
            compile(f.read(), path, "exec")


class AllocationTest(unittest.TestCase):
    def test_allocation(self):
        full = {
            "NOMAD_META_pollux_batch_size": "1024", "NOMAD_META_pollux_local_bsz": "128",
            "NOMAD_META_pollux_accum_steps": "1", "NOMAD_META_pollux_lr": "0.0125",
            "NOMAD_META_pollux_num_replicas": "4", "NOMAD_META_pollux_num_nodes": "2",
            "NOMAD_META_pollux_placement": "node-a:3,node-b:1", "NOMAD_META_pollux_round": "17",
        }
        cases = {
            "all keys": (full, pr.Decision(1024, 128, 1, 0.0125, 4, 2, "node-a:3,node-b:1", 17), None),
            "no keys": ({}, pr.Decision(), None),
            "some keys, spaces": ({"NOMAD_META_pollux_batch_size": " 64 ", "NOMAD_META_pollux_lr": "1e-3"},
                                  pr.Decision(batch_size=64, lr=0.001), None),
            "malformed": (dict(full, NOMAD_META_pollux_batch_size="lots", NOMAD_META_pollux_lr="nan"), None,
                          ["NOMAD_META_pollux_batch_size", "NOMAD_META_pollux_lr"]),
            "negative": ({"NOMAD_META_pollux_round": "-1"}, None, ["NOMAD_META_pollux_round"]),
        }
        for name, (env, want, errs) in cases.items():
            with self.subTest(name), mock.patch.dict(os.environ, env, clear=True):
                r = pr.Reporter(consul=pr.Consul("127.0.0.1:1"), job_id="alloc", start=False)
                if errs:
                    with self.assertRaises(ValueError) as cm:
                        r.allocation()
                    for e in errs:
                        self.assertIn(e, str(cm.exception))
                else:
                    self.assertEqual(r.allocation(), want)

    def test_reporter_defaults_from_env(self):
        env = {"NOMAD_NAMESPACE": "ml", "NOMAD_JOB_ID": "bert", "NOMAD_META_pollux_rank": "2",
               "NOMAD_META_pollux_init_batch_size": "96"}
        with mock.patch.dict(os.environ, env, clear=True):
            r = pr.Reporter(consul=pr.Consul("127.0.0.1:1"), start=False)
        self.assertEqual((r.key, r.rank, r.init_batch_size), ("pollux/jobs/ml/bert/metrics", 2, 96))
        with mock.patch.dict(os.environ, {}, clear=True):
            with self.assertRaises(ValueError) as cm:
                pr.Reporter(consul=pr.Consul("127.0.0.1:1"), start=False)
            self.assertIn("job_id", str(cm.exception))

    def test_gpu_type_from_env(self):
        """POLLUX_GPU_TYPE wins over the controller's pollux_gpu_type; steps
        observed without a type get it; a bad value is refused, named."""
        base = {"NOMAD_JOB_ID": "bert", "NOMAD_META_pollux_gpu_type": "a100"}
        with mock.patch.dict(os.environ, base, clear=True):
            self.assertEqual(pr.Reporter(consul=pr.Consul("127.0.0.1:1"), start=False).gpu_type, "a100")
            self.assertEqual(pr.allocation().gpu_type, "a100")
        with mock.patch.dict(os.environ, dict(base, POLLUX_GPU_TYPE="Tesla T4"), clear=True):
            r = pr.Reporter(consul=pr.Consul("127.0.0.1:1"), start=False)
        self.assertEqual(r.gpu_type, "Tesla T4")
        r.observe(pr.StepConfig(1, 1, 32, 0), 0.1, 0.2, 0.0)
        r.observe(pr.StepConfig(1, 1, 32, 0, "t4"), 0.1, 0.2, 0.0)
        self.assertEqual(sorted(k.gpu_type for k in r._mine), ["Tesla T4", "t4"])
        with mock.patch.dict(os.environ, dict(base, POLLUX_GPU_TYPE='bad"type'), clear=True):
            with self.assertRaises(ValueError) as cm:
                pr.Reporter(consul=pr.Consul("127.0.0.1:1"), start=False)
            self.assertIn("POLLUX_GPU_TYPE", str(cm.exception))


class RejectTest(unittest.TestCase):
    def test_rejects_bad_values(self):
        r = pr.Reporter(consul=pr.Consul("127.0.0.1:1"), job_id="reject", start=False)
        cfg = pr.StepConfig(1, 2, 32, 0)
        cases = {
            "NaN compute": (lambda: r.observe(cfg, math.nan, 0.2, 0.0), "compute_time"),
            "infinite step": (lambda: r.observe(cfg, 0.1, math.inf, 0.0), "step_time"),
            "negative sync": (lambda: r.observe(cfg, 0.1, 0.2, -0.01), "sync_time"),
            "-inf sync": (lambda: r.observe(cfg, 0.1, 0.2, -math.inf), "sync_time"),
            "zero compute": (lambda: r.observe(cfg, 0.0, 0.2, 0.0), "compute_time"),
            "string compute": (lambda: r.observe(cfg, "0.1", 0.2, 0.0), "compute_time"),
            "no nodes": (lambda: r.observe(pr.StepConfig(0, 1, 32, 0), 0.1, 0.2, 0.0), "num_nodes"),
            "replicas below nodes": (lambda: r.observe(pr.StepConfig(2, 1, 32, 0), 0.1, 0.2, 0.0), "num_replicas"),
            "float micro-batch": (lambda: r.observe(pr.StepConfig(1, 1, 32.5, 0), 0.1, 0.2, 0.0), "local_bsz"),
            "not a config": (lambda: r.observe(3, 0.1, 0.2, 0.0), "config"),
            "NaN grad_sqr": (lambda: r.observe_gradients(math.nan, 1.0), "grad_sqr"),
            "negative grad_var": (lambda: r.observe_gradients(1.0, -1e-9), "grad_var"),
            "infinite progress": (lambda: r.progress(math.inf, 128), "progress"),
            "zero batch size": (lambda: r.progress(1.0, 0), "batch_size"),
            "bool batch size": (lambda: r.progress(1.0, True), "batch_size"),
        }
        for name, (call, arg) in cases.items():
            with self.subTest(name):
                with self.assertRaises(ValueError) as cm:
                    call()
                self.assertIn(arg, str(cm.exception))
        self.assertEqual((r._mine, r._pending, r._grad, r._progress, r._dirty), ({}, {}, None, None, False))


# --------------------------------------------------------------------------
# Against the shared cluster's Consul.


class ConsulTestCase(unittest.TestCase):
    def setUp(self):
        if not os.environ.get("CONSUL_HTTP_ADDR"):
            self.fail("no cluster: run through scripts/with-cluster.sh or make test (CONSUL_HTTP_ADDR is not set)")
        self.consul = pr.Consul()
        wait_ready(self.consul)
        self.prefix = "pollux-test/py-%s-%s/" % (self._testMethodName, secrets.token_hex(4))
        self.addCleanup(self.consul.delete, self.prefix, True)

    def reporter(self, **kw):
        kw.setdefault("consul", self.consul)
        kw.setdefault("prefix", self.prefix)
        kw.setdefault("namespace", "default")
        kw.setdefault("job_id", "train")
        kw.setdefault("rank", 0)
        kw.setdefault("min_interval", 3600.0)
        r = pr.Reporter(**kw)
        self.addCleanup(r._halt)
        return r

    def stored(self, key):
        pair, _ = self.consul.get(key)
        self.assertIsNotNone(pair, "%s: no document" % key)
        return pr.parse(pair.value), pair.value.decode()


def replay(test, v):
    """Run a vector's observations through a Python Reporter; return the
    stored document."""
    ts = pr.parse_timestamp(v["timestamp"])
    prefix = "pollux-test/py-vectors-%s/" % secrets.token_hex(4)
    test.addCleanup(test.consul.delete, prefix, True)
    r = test.reporter(prefix=prefix, job_id="vectors", init_batch_size=v.get("init_batch_size", 0),
                      now=lambda: ts, start=False, gpu_type=v.get("gpu_type", ""))
    if v.get("existing"):
        test.consul.put(r.key, v["existing"].encode())
    for i, o in enumerate(v["observations"]):
        args = dict(o)
        op = args.pop("op")
        if op == "observe":
            r.observe(pr.StepConfig(args["num_nodes"], args["num_replicas"], args["local_bsz"], args["accum_steps"],
                                    args.get("gpu_type", "")),
                      args["compute_time"], args["step_time"], args["sync_time"])
        elif op == "gradients":
            r.observe_gradients(args["grad_sqr"], args["grad_var"])
        elif op == "progress":
            r.progress(args["progress"], args["batch_size"])
        elif op == "flush":
            r.flush()
        elif op == "restarted":
            r.restarted(args["restore_time"], pr.parse_timestamp(args["at"]))
        else:
            test.fail("observation %d: unknown op %r" % (i, op))
    r.flush()
    return test.stored(r.key)[1]


class VectorTest(ConsulTestCase):
    def test_vectors(self):
        vectors = load_vectors()
        self.assertGreater(len(vectors), 0)
        for v in vectors:
            with self.subTest(v["name"]):
                self.assertEqual(replay(self, v), v["expected"])


class RestartObjectTest(unittest.TestCase):
    """The optional restart object: canonical bytes, parse, and an invalid
    one dropped with its field named while the document is kept."""

    def base(self):
        return json.loads(load_vectors()[0]["expected"])

    def test_round_trip(self):
        raw = self.base()
        raw["restart"] = {"restore_time": 12.25, "at": "2026-12-04T11:59:00.5+01:00"}
        d = pr.parse(json.dumps(raw))
        self.assertEqual(d.restart[0], 12.25)
        self.assertIsNone(d.restart_error)
        self.assertTrue(pr.marshal(d).endswith(b',"restart":{"restore_time":12.25,"at":"2026-12-04T10:59:00.5Z"}}'))

    def test_invalid_dropped(self):
        cases = {
            "negative": ({"restore_time": -1, "at": "2026-12-04T10:00:00Z"}, "restart.restore_time"),
            "too long": ({"restore_time": 1e9, "at": "2026-12-04T10:00:00Z"}, "restart.restore_time"),
            "not a number": ({"restore_time": "3", "at": "2026-12-04T10:00:00Z"}, "restart.restore_time"),
            "no time": ({"restore_time": 3}, "restart.at"),
            "bad time": ({"restore_time": 3, "at": "yesterday"}, "restart.at"),
        }
        for name, (obj, field) in cases.items():
            with self.subTest(name):
                raw = self.base()
                raw["restart"] = obj
                d = pr.parse(json.dumps(raw))
                self.assertIsNone(d.restart)
                self.assertIn(field, d.restart_error)
                self.assertEqual(d.batch_size, raw["batch_size"])

    def test_reporter_rejects(self):
        r = pr.Reporter(consul=pr.Consul("127.0.0.1:1"), job_id="x", rank=1, start=False)
        for args, field in [((-1,), "restore_time"), ((float("nan"),), "restore_time"),
                            ((1e6,), "restart.restore_time"),
                            ((1, datetime(2026, 1, 1)), "at")]:
            with self.subTest(args):
                with self.assertRaises(ValueError) as cm:
                    r.restarted(*args)
                self.assertIn(field, str(cm.exception))


class ReporterTest(ConsulTestCase):
    def test_running_means(self):
        r = self.reporter(init_batch_size=128, start=False)
        cfg = pr.StepConfig(1, 2, 64, 1)
        samples = [(0.1 * (i + 1), 0.3 + 0.01 * i, 0.001 * i) for i in range(25)]
        for i, s in enumerate(samples):
            r.observe(cfg, *s)
            if i % 7 == 3:
                r.flush()
        r.flush()
        e = self.stored(r.key)[0].profile[cfg]
        self.assertEqual(e.count, 25)
        for got, want in zip(e[1:], (sum(c) / 25 for c in zip(*samples))):
            self.assertAlmostEqual(got, want, delta=1e-12 * want)

    def test_rejected_values_do_not_poison_means(self):
        r = self.reporter(init_batch_size=32, start=False)
        cfg = pr.StepConfig(1, 1, 32, 0)
        r.observe(cfg, 0.5, 0.75, 0.25)
        for bad in ((math.nan, 1.0, 0.0), (0.5, math.inf, 0.0), (0.5, 1.0, -1.0)):
            with self.assertRaises(ValueError):
                r.observe(cfg, *bad)
        with self.assertRaises(ValueError):
            r.observe_gradients(math.nan, 0.0)
        r.flush()
        d = self.stored(r.key)[0]
        self.assertEqual(d.profile[cfg], pr.Stats(1, 0.5, 0.75, 0.25))
        self.assertEqual((d.grad_sqr, d.grad_var), (0.0, 0.0))

    def test_not_ready(self):
        r = self.reporter(start=False)
        with self.assertRaises(pr.NotReady):
            r.flush()  # no profile entry
        r.observe(pr.StepConfig(1, 1, 8, 0), 0.1, 0.2, 0.0)
        with self.assertRaises(pr.NotReady):
            r.flush()  # no batch size
        r.progress(3.0, 8)
        r.flush()
        self.assertEqual(self.stored(r.key)[0].profile[pr.StepConfig(1, 1, 8, 0)].count, 1)

    def test_cas_conflict_with_concurrent_writer(self):
        """A writer that stores between this reporter's read and its
        check-and-set makes the first attempt fail; the retry keeps both."""
        other = self.reporter(init_batch_size=64, start=False)
        k_other, k_both, k_mine = pr.StepConfig(1, 1, 64, 0), pr.StepConfig(1, 2, 64, 0), pr.StepConfig(1, 4, 64, 0)
        other.observe(k_other, 0.1, 0.2, 0.0)
        other.observe(k_both, 0.3, 0.4, 0.05)
        other.flush()

        class Racing(pr.Consul):
            conflicts = 0

            def cas(self, key, value, index, timeout=None):
                if Racing.conflicts == 0:
                    other.observe(k_both, 0.5, 0.6, 0.07)
                    other.flush()
                ok = super().cas(key, value, index, timeout)
                Racing.conflicts += not ok
                return ok

        mine = self.reporter(consul=Racing(self.consul.base), init_batch_size=64, start=False)
        mine.observe(k_both, 0.7, 0.8, 0.09)
        mine.observe(k_mine, 0.2, 0.3, 0.01)
        mine.flush()
        self.assertEqual(Racing.conflicts, 1)
        other.observe(k_other, 0.3, 0.4, 0.0)
        other.flush()
        p = self.stored(mine.key)[0].profile
        self.assertEqual({k: s.count for k, s in p.items()}, {k_other: 2, k_both: 3, k_mine: 1})
        self.assertAlmostEqual(p[k_both].compute, (0.3 + 0.5 + 0.7) / 3, delta=1e-15)
        self.assertAlmostEqual(p[k_both].sync, (0.05 + 0.07 + 0.09) / 3, delta=1e-15)
        self.assertAlmostEqual(p[k_other].step, 0.3, delta=1e-15)

    def test_concurrent_writers_lose_nothing(self):
        a = self.reporter(init_batch_size=64, start=False)
        b = self.reporter(init_batch_size=64, start=False)
        ka, kab, kb = pr.StepConfig(1, 1, 64, 0), pr.StepConfig(1, 2, 64, 0), pr.StepConfig(2, 4, 64, 1)
        n = 60
        errors = []

        def run(r, keys, base):
            try:
                for i in range(n):
                    for k in keys:
                        r.observe(k, base + 0.001 * i, 2 * base + 0.001 * i, 0.0001 * i)
                    if i % 5 == 4:
                        r.flush()
                r.flush()
            except Exception as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=run, args=(a, (ka, kab), 0.1)),
                   threading.Thread(target=run, args=(b, (kab, kb), 0.2))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        p = self.stored(a.key)[0].profile
        self.assertEqual({k: s.count for k, s in p.items()}, {ka: n, kab: 2 * n, kb: n})
        mean = lambda base: sum(base + 0.001 * i for i in range(n)) / n  # noqa: E731
        self.assertAlmostEqual(p[kab].compute, (mean(0.1) + mean(0.2)) / 2, delta=1e-12)
        self.assertAlmostEqual(p[ka].compute, mean(0.1), delta=1e-12)

    def test_cas_lost_in_transit_is_not_counted_twice(self):
        class Lossy(pr.Consul):
            drop = True

            def cas(self, key, value, index, timeout=None):
                ok = super().cas(key, value, index, timeout)
                if Lossy.drop:  # applied, but the answer is lost
                    Lossy.drop = False
                    raise pr.ConsulError("connection reset")
                return ok

        r = self.reporter(consul=Lossy(self.consul.base), init_batch_size=16, start=False)
        cfg = pr.StepConfig(1, 1, 16, 0)
        r.observe(cfg, 0.1, 0.2, 0.0)
        with self.assertRaises(pr.ConsulError):
            r.flush()
        r.observe(cfg, 0.3, 0.4, 0.0)
        r.flush()
        e = self.stored(r.key)[0].profile[cfg]
        self.assertEqual(e.count, 2)
        self.assertAlmostEqual(e.compute, 0.2, delta=1e-15)

    def test_invalid_stored_document_is_replaced(self):
        r = self.reporter(init_batch_size=16, start=False)
        self.consul.put(r.key, b"not a document")
        r.observe(pr.StepConfig(1, 1, 16, 0), 0.1, 0.2, 0.0)
        r.flush()
        self.assertEqual(self.stored(r.key)[0].profile[pr.StepConfig(1, 1, 16, 0)].count, 1)

    def test_other_ranks_do_not_write(self):
        r = self.reporter(rank=1, init_batch_size=16)
        r.observe(pr.StepConfig(1, 1, 16, 0), 0.1, 0.2, 0.0)
        r.flush()
        r.close()
        self.assertIsNone(self.consul.get(r.key)[0])

    def test_background_writer_rate(self):
        r = self.reporter(init_batch_size=16, min_interval=0.3)
        indexes = set()
        observed = 0
        start = time.monotonic()
        while time.monotonic() - start < 1.5:
            r.observe(pr.StepConfig(1, 1, 16, 0), 0.1, 0.2, 0.0)
            observed += 1
            pair, _ = self.consul.get(r.key)
            if pair is not None:
                indexes.add(pair.modify_index)
            time.sleep(0.01)
        elapsed = time.monotonic() - start
        # The writer runs in the background (at least one write while the
        # loop ran) and never more often than every min_interval; how many
        # writes a loaded machine fits in is not this test's business.
        self.assertGreaterEqual(len(indexes), 1, "background writer never wrote while observing")
        self.assertLessEqual(len(indexes), int(elapsed / 0.3) + 1, "background writer wrote %d times in %.2fs at most every 0.3s" % (len(indexes), elapsed))
        r.close()
        self.assertEqual(self.stored(r.key)[0].profile[pr.StepConfig(1, 1, 16, 0)].count, observed)

    def test_decisions(self):
        r = self.reporter(rank=1, decision_wait=1.0)
        follower = r.follow_decisions()
        self.addCleanup(follower.stop)
        d1 = pr.Decision(1024, 128, 1, 0.05, 4, 2, "a:2,b:2", 7)
        d2 = pr.Decision(2048, 256, 1, 0.07, 4, 2, "a:2,b:2", 8)
        value = lambda d: json.dumps(d.__dict__).encode()  # noqa: E731
        time.sleep(0.2)  # let the first (non-blocking) read pass
        self.consul.put(r.decision_key, value(d1))
        # Within the blocking query's own wait (1 s): the write woke it.
        self.assertEqual(follower.get(timeout=1.0), d1)
        self.consul.put(r.decision_key, value(d1))  # unchanged: not delivered again
        self.consul.put(r.decision_key, b"{not json")  # invalid: skipped
        self.assertIsNone(follower.get(timeout=0.3))
        self.consul.put(r.decision_key, value(d2))
        self.assertEqual(follower.get(timeout=1.0), d2)

    def test_decision_from_go_json(self):
        data = b'{"batch_size":512,"local_bsz":64,"accum_steps":0,"lr":0.1,"num_replicas":8,"num_nodes":2,' \
               b'"placement":"n1:4,n2:4","round":3,"extra":true}'
        self.assertEqual(pr.Decision.from_json(data), pr.Decision(512, 64, 0, 0.1, 8, 2, "n1:4,n2:4", 3))
        with self.assertRaises(ValueError):
            pr.Decision.from_json(b'{"batch_size":1.5}')


# --------------------------------------------------------------------------
# Against Consul agents of the test's own, restarted.


def consul_binary():
    cache = os.environ.get("POLLUX_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "pollux")
    path = os.path.join(cache, "bin", "consul")
    if os.path.isfile(path):
        return path
    path = shutil.which("consul")
    if not path:
        raise AssertionError("no consul binary in %s/bin or on PATH: run make servers" % cache)
    return path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Agent:
    """A Consul agent of the test's own on free ports: -dev (its store is
    lost with every restart) or a persistent single server."""

    def __init__(self, persistent):
        self.dir = tempfile.mkdtemp(prefix="pollux-report-consul-")
        http = free_port()
        self.addr = "127.0.0.1:%d" % http
        self.args = [consul_binary(), "agent", "-bind", "127.0.0.1", "-client", "127.0.0.1",
                     "-hcl", "disable_update_check = true", "-log-level", "warn",
                     "-http-port", str(http), "-dns-port", "-1", "-grpc-port", "-1", "-grpc-tls-port", "-1",
                     "-serf-lan-port", str(free_port()), "-serf-wan-port", str(free_port()),
                     "-server-port", str(free_port()), "-data-dir", os.path.join(self.dir, "data")]
        self.args += ["-server", "-bootstrap-expect", "1", "-node", "pollux-report-test",
                      "-hcl", "performance { raft_multiplier = 1 }"] if persistent else ["-dev"]
        self.proc = None

    def start(self):
        with open(os.path.join(self.dir, "agent.log"), "ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=log)
        c = pr.Consul(self.addr, token="")
        deadline = time.monotonic() + 30
        while True:
            try:
                c.get("ready", timeout=1.0)
                return
            except pr.ConsulError:
                if self.proc.poll() is not None:
                    with open(os.path.join(self.dir, "agent.log")) as f:
                        raise AssertionError("consul agent exited at start-up:\n" + f.read())
                if time.monotonic() > deadline:
                    raise AssertionError("consul agent at %s not ready after 30s" % self.addr)
                time.sleep(0.05)

    def stop(self):
        if self.proc is not None:
            self.proc.kill()  # by its PID
            self.proc.wait(timeout=10)
            self.proc = None

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class RestartTest(unittest.TestCase):
    def check_restart(self, persistent):
        agent = Agent(persistent)
        self.addCleanup(agent.cleanup)
        agent.start()
        consul = pr.Consul(agent.addr, token="", timeout=2.0)
        r = pr.Reporter(consul=consul, namespace="default", job_id="restart", rank=0, init_batch_size=32,
                        min_interval=0.2)
        self.addCleanup(r._halt)
        k1, k2 = pr.StepConfig(1, 1, 32, 0), pr.StepConfig(1, 2, 32, 0)
        samples = {k1: [], k2: []}

        def observe(k, x):
            r.observe(k, x, 2 * x, x / 10)
            samples[k].append(x)

        for x in (0.1, 0.2, 0.3):
            observe(k1, x)
        r.flush()

        agent.stop()
        for x in (0.4, 0.5):
            observe(k1, x)
        observe(k2, 0.25)
        with self.assertRaises(pr.ConsulError):
            r.flush()
        time.sleep(0.5)  # the background writer fails and backs off too

        agent.start()
        observe(k2, 0.35)

        def complete():
            pair, _ = consul.get(r.key)
            if pair is None:
                return None
            d = pr.parse(pair.value)
            return d if {k: s.count for k, s in d.profile.items()} == {k: len(v) for k, v in samples.items()} else None

        d = eventually(complete, 15, "the document never held all %s samples" % {k: len(v) for k, v in samples.items()})
        for k, xs in samples.items():
            self.assertAlmostEqual(d.profile[k].compute, sum(xs) / len(xs), delta=1e-12)
            self.assertAlmostEqual(d.profile[k].step, 2 * sum(xs) / len(xs), delta=1e-12)
        r.close(timeout=5)
        # Nothing counted twice either, once everything settled.
        d = pr.parse(consul.get(r.key)[0].value)
        self.assertEqual({k: s.count for k, s in d.profile.items()}, {k1: 5, k2: 2})

    def test_restart_losing_data(self):
        self.check_restart(persistent=False)

    def test_restart_keeping_data(self):
        self.check_restart(persistent=True)


if __name__ == "__main__":
    unittest.main()
