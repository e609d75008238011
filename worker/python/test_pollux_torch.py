"""Tests of pollux.torch with real PyTorch (the CPU build, gloo backend):
batch arithmetic, decisions, gradient-noise statistics computed by hand,
checkpoint-restart at the exact step across a change of world size,
SIGTERM during a step, bad input, and the port of an AdaptDL script.

Multi-replica cases run under the launcher in subprocesses
(testdata/scenario.py). Run with the Python that has torch and
scikit-learn (Debian's /usr/bin/python3)."""

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import pollux.torch  # noqa: E402
from pollux import checkpoint, report  # noqa: E402
from pollux.torch import _core, data, parallel  # noqa: E402

PY = sys.executable
SCENARIO = os.path.join(HERE, "testdata", "scenario.py")


def clean_env(**extra):
    """This process's environment without Nomad/launcher variables."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NOMAD_", "POLLUX_")) and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env["PYTHONPATH"] = HERE
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


class LocalTestCase(unittest.TestCase):
    """One replica in this process, with a fresh library state."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="pollux-torch-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        env = clean_env(POLLUX_CHECKPOINT_DIR=os.path.join(self.dir, "ckpt"))
        patcher = mock.patch.dict(os.environ, env, clear=True)
        patcher.start()
        self.addCleanup(patcher.stop)
        _core._reset_for_tests()
        self.addCleanup(_core._reset_for_tests)


class BatchArithmeticTest(unittest.TestCase):
    def test_full_steps(self):
        for m, s, k in [(32, 0, 1), (32, 0, 4), (16, 3, 2), (7, 1, 5)]:
            with self.subTest(m=m, s=s, k=k):
                step = data.plan_step(10_000, m, s, k)
                self.assertEqual(step.size, m * k * (s + 1))  # batch = micro-batch x replicas x (accumulation + 1)
                self.assertEqual(step.micro_steps, s + 1)
                self.assertEqual(len(step.chunks), k * (s + 1))
                spans = [data.local_chunk(step, k, r, j) for j in range(s + 1) for r in range(k)]
                self.assertEqual(spans, [(i * m, (i + 1) * m) for i in range(k * (s + 1))])

    def test_short_last_batch(self):
        # 50 samples left, micro-batch 8, 3 replicas, 2 accumulation steps (full batch 72):
        # ceil(50 / 24) = 3 micro-steps, 9 chunks of 5 or 6.
        step = data.plan_step(50, 8, 2, 3)
        self.assertEqual((step.size, step.micro_steps), (50, 3))
        self.assertEqual(step.chunks, (6, 6, 6, 6, 6, 5, 5, 5, 5))
        # 10 left: fewer accumulation steps, every replica at least one sample.
        step = data.plan_step(10, 8, 2, 3)
        self.assertEqual((step.size, step.micro_steps), (10, 1))
        self.assertEqual(sum(step.chunks), 10)
        # Fewer samples than replicas: no training step (min_chunk 1); an evaluation loader takes them.
        self.assertIsNone(data.plan_step(2, 8, 0, 3))
        self.assertEqual(data.plan_step(2, 8, 0, 3, min_chunk=0).chunks, (1, 1, 0))

    def test_each_sample_once_per_epoch(self):
        n = 101
        for m, s, k in [(8, 0, 1), (8, 0, 2), (5, 1, 3), (4, 2, 5), (64, 0, 7)]:
            with self.subTest(m=m, s=s, k=k):
                seen, pos = [], 0
                while pos < n:
                    step = data.plan_step(n - pos, m, s, k)
                    if step is None:
                        break
                    for j in range(step.micro_steps):
                        for r in range(k):
                            a, b = data.local_chunk(step, k, r, j)
                            self.assertGreater(b, a, "an empty micro-batch in a training step")
                            seen += range(pos + a, pos + b)
                    pos += step.size
                self.assertEqual(len(seen), len(set(seen)), "a sample seen twice")
                self.assertGreater(len(seen), n - k, "more than a tail smaller than the replicas was skipped")


class LoaderTest(LocalTestCase):
    def loader(self, n=1000, batch_size=128, **env):
        os.environ.update(env)
        pollux.torch.init_process_group("gloo")
        ds = torch.utils.data.TensorDataset(torch.arange(n))
        return pollux.torch.AdaptiveDataLoader(ds, batch_size=batch_size, shuffle=True)

    def test_defaults_and_decision_from_meta(self):
        loader = self.loader(NOMAD_META_pollux_local_bsz="96", NOMAD_META_pollux_accum_steps="2",
                             NOMAD_META_pollux_num_replicas="1", NOMAD_META_pollux_batch_size="288")
        self.assertEqual((loader._local(), loader.accumulation_steps, loader._batch_size()), (128, 0, 128))
        loader.autoscale_batch_size(1024, local_bsz_bounds=(32, 128), gradient_accumulation=True)
        self.assertEqual((loader._local(), loader.accumulation_steps, loader._batch_size()), (96, 2, 288))
        sizes = [len(b[0]) for b in loader]
        self.assertEqual(sizes[:6], [96] * 6)
        self.assertEqual(sum(sizes), 1000)

    def test_current_dataloader(self):
        loader = self.loader(n=10, batch_size=4)
        self.assertIsNone(pollux.torch.current_dataloader())
        for _ in loader:
            self.assertIs(pollux.torch.current_dataloader(), loader)
        self.assertIsNone(pollux.torch.current_dataloader())

    def test_elastic_sampler(self):
        pollux.torch.init_process_group("gloo")
        ds = torch.utils.data.TensorDataset(torch.arange(23))
        seen = []
        for rank in range(3):  # three replicas' views of the rest of epoch 2 from position 5
            s = pollux.torch.ElasticSampler(ds, shuffle=True, seed=7)
            s.num_replicas, s.rank = 3, rank
            s.set_epoch(2, index=5)
            got = list(s)
            self.assertEqual(len(got), len(s))
            seen += got
        whole = pollux.torch.ElasticSampler(ds, shuffle=True, seed=7)
        whole.set_epoch(2)
        order = list(whole)
        self.assertEqual(sorted(seen), sorted(order[5:]))  # the samples not yet consumed, each once
        other = pollux.torch.ElasticSampler(ds, shuffle=True, seed=7)
        other.set_epoch(3)
        self.assertNotEqual(order, list(other))  # another permutation each epoch

    def test_default_split_accumulates_over_bound(self):
        loader = self.loader(batch_size=300)
        loader.autoscale_batch_size(1024, local_bsz_bounds=(32, 128), gradient_accumulation=True)
        self.assertEqual((loader._local(), loader.accumulation_steps), (100, 2))

    def test_absurd_decisions_rejected(self):
        loader = self.loader()
        loader.autoscale_batch_size(1024, local_bsz_bounds=(32, 256), gradient_accumulation=False)
        D = report.Decision
        cases = {
            "huge micro-batch": (D(batch_size=10**9, local_bsz=10**9, num_replicas=1), "local_bsz 1000000000 is outside local_bsz_bounds (32, 256)"),
            "zero micro-batch": (D(local_bsz=0, num_replicas=1), "local_bsz 0 is outside"),
            "negative accumulation": (D(local_bsz=64, accum_steps=-3, num_replicas=1), "accum_steps -3 is not in"),
            "accumulation off": (D(local_bsz=64, accum_steps=1, num_replicas=1), "gradient_accumulation is off"),
            "over max": (D(local_bsz=256, accum_steps=0, num_replicas=1, batch_size=256), None),
            "inconsistent": (D(local_bsz=64, num_replicas=1, batch_size=100), "batch_size 100 is not local_bsz 64 x 1 replicas"),
            "other allocation": (D(local_bsz=64, num_replicas=4), "num_replicas 4 is not this job's 1 replicas"),
        }
        for name, (d, want) in cases.items():
            with self.subTest(name):
                got = loader.check_decision(d)
                if want is None:
                    self.assertIsNone(got)
                else:
                    self.assertIn(want, got or "")
        # Absurd meta at start: the default split stays, with a warning naming the value.
        _core._reset_for_tests()
        with self.assertLogs("pollux.torch", "WARNING") as logs:
            l3 = self.loader(NOMAD_META_pollux_local_bsz="100000", NOMAD_META_pollux_num_replicas="1")
            l3.autoscale_batch_size(1024, local_bsz_bounds=(32, 256))
        self.assertIn("local_bsz 100000 is outside local_bsz_bounds (32, 256)", "\n".join(logs.output))
        self.assertEqual(l3._local(), 128)
        _core._reset_for_tests()
        with self.assertLogs("pollux.torch", "WARNING") as logs:
            l4 = self.loader(NOMAD_META_pollux_local_bsz="lots")
            l4.autoscale_batch_size(1024)
        self.assertIn("NOMAD_META_pollux_local_bsz: must be a non-negative integer, got 'lots'", "\n".join(logs.output))

    def test_bad_arguments(self):
        pollux.torch.init_process_group("gloo")
        ds = torch.utils.data.TensorDataset(torch.arange(10))
        with self.assertRaisesRegex(ValueError, "batch_size must be a positive integer"):
            pollux.torch.AdaptiveDataLoader(ds, batch_size=0)
        loader = pollux.torch.AdaptiveDataLoader(ds, batch_size=4)
        with self.assertRaisesRegex(ValueError, "max_batch_size must be an integer >= batch_size 4"):
            loader.autoscale_batch_size(2)
        with self.assertRaisesRegex(ValueError, "local_bsz_bounds"):
            loader.autoscale_batch_size(8, local_bsz_bounds=(9, 3))


class NoiseTest(unittest.TestCase):
    """The estimator against the formulas, computed by hand."""

    def test_several_micro_batches(self):
        g = [torch.tensor([1.0, 2.0]), torch.tensor([3.0, 0.0]), torch.tensor([-1.0, 1.0])]
        G = sum(g) / 3  # (1, 1)
        local = sum(float(x.pow(2).sum()) for x in g) / 3  # (5 + 9 + 2) / 3
        total = float(G.pow(2).sum())  # 2
        n = parallel.GradientNoise(init_batch_size=4)
        n.update(local, total, 3, batch_size=6)  # c = 3 micro-batches of 2, M = 6, M0 = 4
        sqr, var = n.estimates()
        self.assertAlmostEqual(sqr, (3 * 2 - 16 / 3) / 2, places=12)           # (c total - local) / (c - 1)
        self.assertAlmostEqual(var, (16 / 3 - 2) * 1.5 / 2, places=12)         # (local - total) M/M0 / (c - 1)
        # A second step: exponential average with factor 0.999^(M/M0), bias-corrected.
        n.update(4.0, 3.0, 3, batch_size=6)
        th = 0.999 ** 1.5
        s1, s2 = (6 - 16 / 3) / 2, (9 - 4) / 2
        v1, v2 = (16 / 3 - 2) * 0.75, (4 - 3) * 0.75
        norm = th * (1 - th) + (1 - th)
        sqr, var = n.estimates()
        self.assertAlmostEqual(sqr, (th * (1 - th) * s1 + (1 - th) * s2) / norm, places=12)
        self.assertAlmostEqual(var, (th * (1 - th) * v1 + (1 - th) * v2) / norm, places=12)
        # Gain (AdaScale) and the LR rules at M = 8.
        r = 8 / 4
        self.assertAlmostEqual(n.gain(8), (var + sqr) / (var / r + sqr), places=12)
        self.assertAlmostEqual(parallel.scale_factor("adascale", n, 8), n.gain(8), places=12)
        self.assertEqual(parallel.scale_factor("linear", n, 8), 2.0)
        self.assertAlmostEqual(parallel.scale_factor("sqrt", n, 8), math.sqrt(2), places=12)
        self.assertEqual(parallel.scale_factor("none", n, 8), 1.0)
        with self.assertRaisesRegex(ValueError, "unknown learning-rate scaling rule 'cubic'"):
            parallel.scale_factor("cubic", n, 8)

    def test_one_micro_batch_differences_steps(self):
        n = parallel.GradientNoise(init_batch_size=8)
        a, b = torch.tensor([2.0, 0.0]), torch.tensor([0.0, 2.0])
        n.update(4.0, 4.0, 1, 8, a)
        self.assertIsNone(n.estimates())  # needs a second gradient
        n.update(4.0, 4.0, 1, 8, b)
        # c := 2, scale := 2 M/M0 = 2: local = (4 + 4)/2 = 4, total = |(a+b)/2|^2 = 2.
        sqr, var = n.estimates()
        self.assertAlmostEqual(sqr, (2 * 2 - 4) / 1, places=12)
        self.assertAlmostEqual(var, (4 - 2) * 2 / 1, places=12)


class BadInputTest(LocalTestCase):
    def test_unwritable_checkpoint_dir(self):
        blocker = os.path.join(self.dir, "file")
        open(blocker, "w").close()
        os.environ["POLLUX_CHECKPOINT_DIR"] = os.path.join(blocker, "ckpt")
        with self.assertRaises(checkpoint.CheckpointError) as cm:
            pollux.torch.init_process_group("gloo")
        self.assertIn("POLLUX_CHECKPOINT_DIR=%s is not writable" % os.path.join(blocker, "ckpt"), str(cm.exception))

    def test_unknown_lr_rule(self):
        os.environ["NOMAD_META_pollux_lr_scaling"] = "cubic"
        pollux.torch.init_process_group("gloo")
        model = torch.nn.Linear(2, 1)
        with self.assertRaisesRegex(ValueError, "NOMAD_META_pollux_lr_scaling: unknown learning-rate scaling rule 'cubic'"):
            pollux.torch.AdaptiveDataParallel(model, torch.optim.SGD(model.parameters(), lr=0.1))

    def test_rank_outside_world(self):
        os.environ.update(RANK="3", WORLD_SIZE="2")
        with self.assertRaisesRegex(ValueError, "rank 3 is not in \\[0, world_size 2\\)"):
            pollux.torch.init_process_group("gloo")


def launch(nproc, args, env, timeout=120):
    return subprocess.run([PY, "-m", "pollux.torch.launch", "--nproc", str(nproc), "--grace", "20"] + args,
                          env=env, capture_output=True, text=True, timeout=timeout)


class DistributedNoiseTest(unittest.TestCase):
    def test_two_replicas_with_accumulation(self):
        d = tempfile.mkdtemp(prefix="pollux-noise-")
        self.addCleanup(shutil.rmtree, d, True)
        # 2 replicas x micro-batch 3 x (1 + 1) = 12 samples per step; M0 = 8.
        env = clean_env(M0="8", NOMAD_META_pollux_local_bsz="3", NOMAD_META_pollux_accum_steps="1",
                        NOMAD_META_pollux_num_replicas="2", NOMAD_META_pollux_batch_size="12")
        p = launch(2, [SCENARIO, "noise", d], env)
        self.assertEqual(p.returncode, 0, p.stderr)
        out = {}
        for r in (0, 1):
            with open(os.path.join(d, "noise-%d.json" % r)) as f:
                out[r] = json.loads(f.readline())
        # The same data by hand: w = 0, so each micro-batch's gradient of
        # mean((x.w - y)^2) is -2/m sum_i y_i x_i.
        g = torch.Generator().manual_seed(3)
        x = torch.randn(48, 3, generator=g, dtype=torch.float64)
        y = x @ torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) + 0.3 * torch.randn(48, generator=g, dtype=torch.float64)
        m, k, c = 3, 2, 4
        chunks = [list(range(i * m, (i + 1) * m)) for i in range(c)]  # chunk j*K + r: micro j of replica r
        grads = [[-2.0 / m * sum(float(y[i] * x[i, t]) for i in ch) for t in range(3)] for ch in chunks]
        for r in (0, 1):
            self.assertEqual([mb["idx"] for mb in out[r]["micro"]], [chunks[0 * k + r], chunks[1 * k + r]])
            for j, mb in enumerate(out[r]["micro"]):
                for a, b in zip(mb["grad"], grads[j * k + r]):
                    self.assertAlmostEqual(a, b, places=9)
        G = [sum(gr[t] for gr in grads) / c for t in range(3)]
        local = sum(sum(v * v for v in gr) for gr in grads) / c
        total = sum(v * v for v in G)
        sqr = (c * total - local) / (c - 1)
        var = (local - total) * (12 / 8) / (c - 1)
        gain = (var + sqr) / (var / (12 / 8) + sqr)
        for r in (0, 1):
            o = out[r]
            self.assertEqual(o["batch"], 12)
            self.assertAlmostEqual(o["grad_sqr"], max(sqr, 0.0), places=9)
            self.assertAlmostEqual(o["grad_var"], max(var, 1e-6), places=9)
            self.assertAlmostEqual(o["lr"], 0.1 * gain, places=9)  # AdaScale: lr0 x gain
            for a, b in zip(o["synced_grad"], G):
                self.assertAlmostEqual(a, b, places=9)
            for a, b in zip(o["weight_after"], G):
                self.assertAlmostEqual(a, -0.1 * gain * b, places=9)  # one SGD step from 0


class ResumeTest(unittest.TestCase):
    """SIGTERM during a step on 2 replicas, restart on 3: the job resumes
    at the step it stopped, and every sample is trained on once per epoch."""

    def test_sigterm_during_step_then_resume_on_more_replicas(self):
        d = tempfile.mkdtemp(prefix="pollux-resume-")
        self.addCleanup(shutil.rmtree, d, True)
        env = clean_env(POLLUX_CHECKPOINT_DIR=os.path.join(d, "ckpt"), N="120", EPOCHS="2")
        open(os.path.join(d, "pause"), "w").close()
        p = subprocess.Popen([PY, "-m", "pollux.torch.launch", "--nproc", "2", "--grace", "20", SCENARIO, "resume", d],
                             env=env, stderr=subprocess.PIPE, text=True)
        # Let it train 3 steps, then pause inside the 4th.
        deadline = time.monotonic() + 120
        while not all(os.path.exists(os.path.join(d, "in-step-%d" % r)) for r in (0, 1)):
            self.assertLess(time.monotonic(), deadline, "the scenario never reached the pause")
            self.assertIsNone(p.poll(), "the scenario exited early")
            time.sleep(0.02)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 143, err)
        self.assertIsNotNone(checkpoint.latest(os.path.join(d, "ckpt")))
        lines1 = self.read(d)
        steps1 = max(l["steps"] for l in lines1 if l["event"] == "micro") + 1  # the interrupted step completed
        self.assertTrue(all(l["world"] == 2 for l in lines1))
        os.remove(os.path.join(d, "pause"))
        os.rename(os.path.join(d, "resume.jsonl"), os.path.join(d, "run1.jsonl"))
        q = launch(3, [SCENARIO, "resume", d], env)
        self.assertEqual(q.returncode, 0, q.stderr)
        lines2 = self.read(d)
        starts = [l for l in lines2 if l["event"] == "start"]
        self.assertEqual(len(starts), 3)
        for s in starts:
            self.assertEqual((s["steps"], s["finished"], s["world"]), (steps1, 0, 3))  # resumed at the exact step
        micro2 = [l for l in lines2 if l["event"] == "micro"]
        self.assertEqual(min(l["steps"] for l in micro2), steps1)
        done = [l for l in lines2 if l["event"] == "done"]
        self.assertEqual(len(done), 3)
        # Samples: epoch 0 across both runs, and epoch 1, each exactly once.
        for epoch in (0, 1):
            idx = [i for l in lines1 + micro2 if l["event"] == "micro" and l["epoch"] == epoch for i in l["idx"]]
            self.assertEqual(sorted(idx), list(range(120)), "epoch %d" % epoch)
        # 120 samples / 12 per step = 10 steps an epoch, whatever the world size.
        self.assertEqual(done[0]["steps"], 20)

    def read(self, d):
        with open(os.path.join(d, "resume.jsonl")) as f:
            return [json.loads(l) for l in f]


class PortTest(unittest.TestCase):
    """An AdaptDL script runs once its imports name pollux instead."""

    def test_adaptdl_script(self):
        with open(os.path.join(HERE, "testdata", "adaptdl_digits.py")) as f:
            original = f.read()
        ported = re.sub(r"\badaptdl\.(torch|checkpoint|env)\b", r"pollux.\1", original)
        # The only change is the module name, on import lines and where the script names the modules.
        changed = [(a, b) for a, b in zip(original.splitlines(), ported.splitlines()) if a != b]
        self.assertTrue(changed)
        for a, b in changed:
            self.assertEqual(a.replace("adaptdl.", "pollux."), b)
        self.assertNotIn("adaptdl.", "\n".join(l for l in ported.splitlines() if not l.lstrip().startswith(("#", '"'))))
        d = tempfile.mkdtemp(prefix="pollux-port-")
        self.addCleanup(shutil.rmtree, d, True)
        script = os.path.join(d, "train.py")
        with open(script, "w") as f:
            f.write(ported)
        p = launch(2, [script, "--epochs", "3"], clean_env(POLLUX_CHECKPOINT_DIR=os.path.join(d, "ckpt")), timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("epoch 2 of 2 replicas", p.stdout)
        best = float(re.search(r"best accuracy ([0-9.]+)", p.stdout).group(1))
        self.assertGreaterEqual(best, 0.85, p.stdout)


if __name__ == "__main__":
    unittest.main()


class OneProcessGroupTest(unittest.TestCase):
    def test_store_directory_removed_at_exit(self):
        """A single process gets a one-member group on a file store in a
        private directory; the directory is gone when the process ends."""
        with tempfile.TemporaryDirectory() as tmp:
            script = os.path.join(tmp, "job.py")
            with open(script, "w") as f:
                f.write("import glob, os, tempfile\n"
                        "import torch.distributed as dist\n"
                        "import pollux.torch\n"
                        "pollux.torch.init_process_group('gloo')\n"
                        "dist.barrier()\n"
                        "print(len(glob.glob(os.path.join(tempfile.gettempdir(), 'pollux-pg-*'))))\n")
            env = {k: v for k, v in os.environ.items() if not k.startswith(("NOMAD_", "POLLUX_", "CONSUL_", "MASTER_"))}
            env.update(PYTHONPATH=HERE, TMPDIR=tmp, POLLUX_CHECKPOINT_DIR=os.path.join(tmp, "ckpt"))
            p = subprocess.run([PY, script], env=env, capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(p.stdout.strip(), "1")  # the store's directory while running
            left = [n for n in os.listdir(tmp) if n.startswith("pollux-pg-")]
            self.assertEqual(left, [])
