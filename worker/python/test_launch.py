"""Tests of the launcher and the rendezvous (pollux.rendezvous,
pollux.torch.launch). The rendezvous tests use a real Consul
(CONSUL_HTTP_ADDR, as make test sets through scripts/with-cluster.sh);
they fail, never skip, without one. No torch needed."""

import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from pollux import rendezvous, report  # noqa: E402
from pollux.torch import launch  # noqa: E402

PY = sys.executable


def nomad_env(group, rank=None, placement="n1:4,n2:2,n3:1", rnd="7", **extra):
    e = {"NOMAD_JOB_ID": "train", "NOMAD_NAMESPACE": "default", "NOMAD_GROUP_NAME": group,
         "NOMAD_META_pollux_placement": placement, "NOMAD_META_pollux_round": rnd,
         "NOMAD_META_pollux_num_replicas": "7" if placement == "n1:4,n2:2,n3:1" else ""}
    if rank is not None:
        e["NOMAD_META_pollux_rank"] = str(rank)
    e.update(extra)
    return e


class RankArithmeticTest(unittest.TestCase):
    """An uneven placement, 4 + 2 + 1 GPUs on three nodes."""

    def test_uneven_placement(self):
        want = {  # group name, rank meta -> (rank, local, offset)
            "workers": (0, 4, 0), "workers-r1": (1, 2, 4), "workers-r2": (2, 1, 6)}
        for name, (r, local, offset) in want.items():
            for with_meta in (True, False):  # pollux_rank meta, or derived from the group's name
                with self.subTest(group=name, meta=with_meta):
                    g = rendezvous.group_from_env(nomad_env(name, r if with_meta else None))
                    self.assertEqual((g.rank, g.local_size, g.offset, g.world_size, g.num_groups, g.round),
                                     (r, local, offset, 7, 3, 7))
        # Every global rank exactly once, each with its local rank.
        ranks = []
        for name, (r, _, _) in want.items():
            g = rendezvous.group_from_env(nomad_env(name, r))
            for i in range(g.local_size):
                e = launch.child_env({}, g, "10.0.0.1", 2345, i, 0)
                self.assertEqual((e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"], e["LOCAL_RANK"], e["GROUP_RANK"],
                                  e["MASTER_ADDR"], e["MASTER_PORT"], e["POLLUX_NUM_NODES"]),
                                 ("7", str(g.local_size), str(i), str(r), "10.0.0.1", "2345", "3"))
                ranks.append(int(e["RANK"]))
        self.assertEqual(ranks, list(range(7)))

    def test_gpu_count_from_device_plugin(self):
        e = nomad_env("workers-r1", 1, NVIDIA_VISIBLE_DEVICES="GPU-aaa,GPU-bbb")
        g = rendezvous.group_from_env(e)
        self.assertEqual(g.local_size, 2)
        envs = [launch.child_env(e, g, "10.0.0.1", 1, i, 0) for i in range(2)]
        self.assertEqual([x["CUDA_VISIBLE_DEVICES"] for x in envs], ["GPU-aaa", "GPU-bbb"])
        self.assertNotIn("GLOO_SOCKET_IFNAME", envs[0])
        # Loopback master: gloo stays on lo.
        self.assertEqual(launch.child_env(e, g, "127.0.0.1", 1, 0, 0)["GLOO_SOCKET_IFNAME"], "lo")
        # --nproc overrides, and must agree with the placement.
        with self.assertRaisesRegex(ValueError, "runs 3 processes.*gives rank 1 2 GPUs"):
            rendezvous.group_from_env(e, nproc=3)
        with self.assertRaisesRegex(ValueError, "GPUs Nomad allocated.*gives rank 1 2 GPUs"):
            rendezvous.group_from_env(dict(e, NVIDIA_VISIBLE_DEVICES="GPU-aaa"))

    def test_not_placed_by_pollux(self):
        g = rendezvous.group_from_env({"NOMAD_GROUP_NAME": "workers", "NVIDIA_VISIBLE_DEVICES": "a,b,c"})
        self.assertEqual((g.rank, g.local_size, g.offset, g.world_size, g.num_groups), (0, 3, 0, 3, 1))
        g = rendezvous.group_from_env({}, nproc=2)
        self.assertEqual((g.local_size, g.world_size), (2, 2))

    def test_bad_input(self):
        cases = {
            "malformed placement": (nomad_env("workers", 0, placement="n1:4,n2"), "NOMAD_META_pollux_placement: entry 1 'n2'"),
            "zero gpus": (nomad_env("workers", 0, placement="n1:0"), "entry 0 'n1:0'"),
            "rank outside": (nomad_env("workers-r5", 5), "NOMAD_META_pollux_rank 5 is outside"),
            "bad rank": (nomad_env("workers", None, NOMAD_META_pollux_rank="one"), "NOMAD_META_pollux_rank: must be an integer"),
            "replicas mismatch": (dict(nomad_env("workers", 0), NOMAD_META_pollux_num_replicas="9"),
                                  "num_replicas 9 does not match"),
        }
        for name, (e, msg) in cases.items():
            with self.subTest(name):
                with self.assertRaises(ValueError) as cm:
                    rendezvous.group_from_env(e)
                self.assertIn(msg, str(cm.exception))

    def test_missing_pollux_port(self):
        with self.assertRaisesRegex(rendezvous.RendezvousError, 'no port labelled "pollux".*network'):
            launch.plan(nomad_env("workers", 0), consul=report.Consul("127.0.0.1:1"))
        with self.assertRaisesRegex(rendezvous.RendezvousError, "NOMAD_HOST_PORT_pollux: not a port"):
            launch.plan(nomad_env("workers", 0, NOMAD_HOST_PORT_pollux="http", NOMAD_IP_pollux="10.0.0.1"),
                        consul=report.Consul("127.0.0.1:1"))
        # The launcher says so and exits 3 (Nomad restarts the task).
        with tempfile.TemporaryDirectory() as d:
            script = os.path.join(d, "s.py")
            open(script, "w").close()
            env = dict(os.environ, **nomad_env("workers", 0), PYTHONPATH=HERE)
            env.pop("NOMAD_HOST_PORT_pollux", None)
            p = subprocess.run([PY, "-m", "pollux.torch.launch", script], env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, launch.EXIT_RENDEZVOUS, p.stderr)
            self.assertIn('no port labelled "pollux"', p.stderr)


CHILD = r"""
import json, os, signal, sys, time
out = sys.argv[1]
keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK"]
# Written whole, then renamed: the launcher may stop this child at any line.
tmp = os.path.join(out, ".env-%s" % os.environ["RANK"])
with open(tmp, "w") as f:
    json.dump({k: os.environ.get(k) for k in keys}, f)
os.rename(tmp, os.path.join(out, "env-%s" % os.environ["RANK"]))
mode = sys.argv[2]
if mode == "fail" and os.environ["RANK"] == "1":
    sys.exit(7)
if mode == "term":
    def on_term(sig, frame):
        open(os.path.join(out, "term-%s" % os.environ["RANK"]), "w").close()
        sys.exit(143)
    signal.signal(signal.SIGTERM, on_term)
    open(os.path.join(out, "ready-%s" % os.environ["RANK"]), "w").close()
time.sleep(0 if mode == "ok" else 60)
"""


class SuperviseTest(unittest.TestCase):
    def run_launcher(self, mode, nproc=3, signal_after_ready=False, preload="torch"):
        d = tempfile.mkdtemp(prefix="pollux-launch-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", d]))
        script = os.path.join(d, "child.py")
        with open(script, "w") as f:
            f.write(CHILD)
        env = dict(os.environ, PYTHONPATH=HERE)
        for k in list(env):
            if k.startswith("NOMAD_"):
                env.pop(k)
        p = subprocess.Popen([PY, "-m", "pollux.torch.launch", "--nproc", str(nproc), "--grace", "5",
                              "--preload", preload, script, d, mode],
                             env=env, stderr=subprocess.PIPE, text=True)
        if signal_after_ready:
            deadline = time.monotonic() + 120
            while sum(os.path.exists(os.path.join(d, "ready-%d" % i)) for i in range(nproc)) < nproc:
                self.assertLess(time.monotonic(), deadline, "children not ready")
                time.sleep(0.02)
            p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=120)  # the other children sleep 60 s unless stopped
        envs = {}
        for i in range(nproc):
            path = os.path.join(d, "env-%d" % i)
            if os.path.exists(path):
                with open(path) as f:
                    envs[i] = json.load(f)
        return p.returncode, err, envs, d

    def test_ranks_and_success(self):
        for preload in ("torch", "", "no_such_module"):  # forked from the launcher, or new interpreters
            with self.subTest(preload=preload):
                self.check_ranks(preload)

    def check_ranks(self, preload):
        code, err, envs, _ = self.run_launcher("ok", preload=preload)
        self.assertEqual(code, 0, err)
        self.assertEqual(sorted(envs), [0, 1, 2])
        for i, e in envs.items():
            self.assertEqual((e["LOCAL_RANK"], e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"], e["MASTER_ADDR"]),
                             (str(i), "3", "3", "127.0.0.1"))
        self.assertEqual(len({e["MASTER_PORT"] for e in envs.values()}), 1)

    def test_failure_stops_the_others(self):
        for preload in ("torch", ""):
            with self.subTest(preload=preload):
                code, err, _, _ = self.run_launcher("fail", preload=preload)
                self.assertEqual(code, 7, err)
                self.assertIn("exited with 7; stopping the others", err)

    def test_sigterm_forwarded(self):
        code, err, _, d = self.run_launcher("term", signal_after_ready=True)
        self.assertEqual(code, 143, err)
        self.assertEqual(sorted(f for f in os.listdir(d) if f.startswith("term-")), ["term-0", "term-1", "term-2"])


class RendezvousTest(unittest.TestCase):
    """Against a real Consul."""

    def setUp(self):
        if not os.environ.get("CONSUL_HTTP_ADDR"):
            self.fail("no cluster: run through scripts/with-cluster.sh or make test (CONSUL_HTTP_ADDR is not set)")
        self.consul = report.Consul()
        self.prefix = "pollux-test/rdv-%s-%s/" % (self._testMethodName, secrets.token_hex(4))
        self.addCleanup(self.consul.delete, self.prefix, True)

    def env(self, group, rank, rnd="7", **extra):
        return nomad_env(group, rank, rnd=rnd, POLLUX_KV_PREFIX=self.prefix, **extra)

    def test_rank0_publishes_others_wait(self):
        e0 = self.env("workers", 0, NOMAD_HOST_PORT_pollux="23456", NOMAD_IP_pollux="127.0.0.1", NOMAD_ALLOC_ID="a0")
        got = {}

        def worker():
            got["r1"] = launch.plan(self.env("workers-r1", 1), timeout=20)

        t = threading.Thread(target=worker)
        t.start()
        time.sleep(0.5)  # the waiter is blocked in a Consul blocking query
        g0, addr0, port0 = launch.plan(e0)
        t.join(30)
        self.assertEqual((g0.rank, addr0, port0), (0, "127.0.0.1", 23456))
        g1, addr1, port1 = got["r1"]
        self.assertEqual((g1.rank, g1.offset, addr1, port1), (1, 4, "127.0.0.1", 23456))
        pair, _ = self.consul.get(rendezvous.rendezvous_key(e0))
        entry = json.loads(pair.value)
        self.assertEqual((entry["addr"], entry["round"], entry["alloc_id"], entry["world_size"], entry["placement"]),
                         ("127.0.0.1:23456", 7, "a0", 7, "n1:4,n2:2,n3:1"))

    def test_stale_round_never_used(self):
        # Round 6's rank 0 published; round 7's group 1 must not use it.
        old = self.env("workers", 0, rnd="6", NOMAD_HOST_PORT_pollux="1111", NOMAD_IP_pollux="127.0.0.1")
        launch.plan(old)
        with self.assertRaises(rendezvous.RendezvousError) as cm:
            launch.plan(self.env("workers-r1", 1), timeout=2)
        self.assertIn("no rendezvous address for round 7", str(cm.exception))
        self.assertIn("stale entry of round 6", str(cm.exception))
        # Round 7 publishes while group 1 waits: it gets round 7's address.
        got = {}
        t = threading.Thread(target=lambda: got.update(r=launch.plan(self.env("workers-r2", 2), timeout=20)))
        t.start()
        time.sleep(0.5)
        launch.plan(self.env("workers", 0, NOMAD_HOST_PORT_pollux="2222", NOMAD_IP_pollux="127.0.0.1"))
        t.join(30)
        self.assertEqual(got["r"][1:], ("127.0.0.1", 2222))

    def test_newer_round_means_outdated(self):
        launch.plan(self.env("workers", 0, rnd="9", NOMAD_HOST_PORT_pollux="1111", NOMAD_IP_pollux="127.0.0.1"))
        with self.assertRaisesRegex(rendezvous.RendezvousError, "round 9, newer than this allocation's round 7"):
            launch.plan(self.env("workers-r1", 1), timeout=5)

    def test_missing_rank0_times_out_with_exit_3(self):
        with tempfile.TemporaryDirectory() as d:
            script = os.path.join(d, "s.py")
            open(script, "w").close()
            env = dict(os.environ, **self.env("workers-r1", 1), PYTHONPATH=HERE)
            start = time.monotonic()
            p = subprocess.run([PY, "-m", "pollux.torch.launch", "--rendezvous-timeout", "2", script],
                               env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, launch.EXIT_RENDEZVOUS, p.stderr)
            self.assertIn("no rendezvous address for round 7 at Consul key %sjobs/default/train/rendezvous after 2s" % self.prefix,
                          p.stderr)
            self.assertGreaterEqual(time.monotonic() - start, 2)

    def test_malformed_entry_ignored(self):
        key = self.prefix + "jobs/default/train/rendezvous"
        for bad in [b"{not json", b'{"round": 7, "addr": "10.0.0.1"}', b'{"round": 7, "addr": "10.0.0.1:99999"}',
                    b'{"addr": "10.0.0.1:80"}']:
            with self.subTest(bad):
                self.consul.put(key, bad)
                with self.assertRaisesRegex(rendezvous.RendezvousError, "malformed entry"):
                    launch.plan(self.env("workers-r1", 1), timeout=1.5)

    def test_addresses(self):
        self.assertEqual(rendezvous.join_addr("10.0.0.1", 80), "10.0.0.1:80")
        self.assertEqual(rendezvous.join_addr("fe80::1", 80), "[fe80::1]:80")
        self.assertEqual(rendezvous.split_addr("[fe80::1]:80"), ("fe80::1", 80))
        self.assertEqual(rendezvous.split_addr("node-3.dc:8080"), ("node-3.dc", 8080))


if __name__ == "__main__":
    unittest.main()
