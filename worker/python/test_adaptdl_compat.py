"""AdaptDL's public API under pollux (docs/adaptdl-compat.md): an
AdaptDL-style script using every provided name runs with its imports
renamed, with 1 and 2 processes and across a restart; and the semantics
that differ easily (Accumulator, scaling rules, zero_grad while
accumulating, current_batch_size, State's default save/load,
to_tensorboard without tensorboard) one by one."""

import io
import json
import logging
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

from pollux import checkpoint  # noqa: E402
from pollux.torch import _core, _tensorboard  # noqa: E402
from test_pollux_torch import LocalTestCase, clean_env, launch  # noqa: E402

PY = sys.executable


def port(src: str) -> str:
    """The script with adaptdl renamed to pollux, and nothing else."""
    return re.sub(r"\badaptdl\b", "pollux", src)


class ScriptTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="pollux-compat-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        with open(os.path.join(HERE, "testdata", "adaptdl_api.py")) as f:
            self.script = os.path.join(self.dir, "api.py")
            with open(self.script, "w") as g:
                g.write(port(f.read()))

    def run_script(self, nproc, run, epochs, rule, ckpt):
        env = clean_env(POLLUX_CHECKPOINT_DIR=ckpt, NOMAD_JOB_ID="compat")
        p = launch(nproc, [self.script, "--out", self.dir, "--run", str(run), "--epochs", str(epochs),
                           "--rule", rule], env, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        out = []
        for r in range(nproc):
            with open(os.path.join(self.dir, "rank-%d-run-%d.json" % (r, run))) as f:
                out.append(json.load(f))
        return out

    def check_run(self, seen, world, run, first_epoch, epochs, acc_world=None):
        for r, s in enumerate(seen):
            self.assertEqual(s["env"]["rank"], r)
            self.assertEqual(s["env"]["world"], world)
            self.assertEqual(s["env"]["job"], "compat")
            self.assertGreater(s["env"]["master_port"], 0)
            self.assertEqual(s["collective"][0], world * (world + 1) // 2)
            self.assertEqual(s["collective"][1], {"r%d" % i: 1 for i in range(world)})
            self.assertEqual(s["collective"][2], "from-0")
            self.assertEqual(s["collective"][3], list(range(world)))
            # 1 + 2, then update adds 10, subtract 4: on every replica.
            # After a restart the synchronisation outside loops shows the
            # recorded result, not the replayed additions on top of it.
            a, k = s["accumulator"], acc_world or world
            self.assertEqual((a["x"], a["y"], a["base"], a["len"]), (9 * k, 3 * k, 1, 3))
            self.assertEqual(a["repr"], repr({"base": 1, "x": 9 * k, "y": 3 * k}))
            self.assertEqual(s.get("epochs", []), list(range(first_epoch, epochs)))
            if first_epoch < epochs:
                bsz, local, accum, training, current = s["in_loop"]
                self.assertEqual(bsz, local * world * (accum + 1))
                self.assertTrue(training and current)
                self.assertEqual(s["train_n"], 96 // bsz * bsz)
                self.assertLess(s["valid_loss"], 15.0)
                self.assertEqual(s["tensorboard"], [
                    "Data/Accumulation_Steps", "Data/Local_Batch_Size", "Data/Total_Batch_Size", "Model/Gain",
                    "Model/Gradient_Norm_Sqr", "Model/Gradient_Variance", "Model/Learning_Rate_Factor",
                    "Model/Progress"])
                self.assertEqual(s["gns"], [True, True, True, True])
            self.assertEqual(s["after_loop"], [None, epochs, None])
            self.assertEqual(s["notes"], list(range(run + 1)))
            self.assertFalse(s["load_state_unknown"])
            self.assertEqual(s["sampler"], list(range(96)))
            # 1000 tokens in 4 columns of 250 rows on every replica; each
            # replica takes as many windows of 5 rows as the last one can.
            rows = 1000 // 4
            steps = math.ceil((rows - 1 - 5 * (world - 1)) / (5 * world))
            self.assertEqual(s["bptt"], sorted(i * 5 * world + 5 * q for i in range(steps) for q in range(world)))
        self.assertIn("notes", seen[0]["save_state"])

    def test_one_process(self):
        ckpt = os.path.join(self.dir, "ckpt")
        seen = self.run_script(1, 0, 2, "legw", ckpt)
        self.assertEqual(seen[0]["before_init"], [None, 0, None, None])
        self.check_run(seen, 1, 0, 0, 2)

    def test_two_processes_then_restart_on_one(self):
        ckpt = os.path.join(self.dir, "ckpt")
        seen = self.run_script(2, 0, 2, "half", ckpt)
        self.check_run(seen, 2, 0, 0, 2)
        # Restart from the checkpoint on another number of replicas: the
        # epochs, the user's state and the loader go on.
        seen = self.run_script(1, 1, 3, "sqrt", ckpt)
        self.assertEqual(seen[0]["before_init"], [None, 2, None, None])
        self.check_run(seen, 1, 1, 2, 3, acc_world=2)


class AccumulatorTest(LocalTestCase):
    def test_adaptdl_semantics(self):
        import pollux.torch as pt
        acc = pt.Accumulator()
        acc["x"] += 1
        acc["x"] += 2
        acc.update(x=10)
        self.assertEqual(acc["x"], 13)  # update adds, as in AdaptDL
        acc.subtract({"x": 3})
        acc += {"y": 2.5}
        acc -= {"y": 0.5}
        self.assertEqual(repr(acc), repr({"x": 10, "y": 2.0}))
        pt.init_process_group("gloo")
        with acc.synchronized():
            self.assertEqual(dict(acc), {"x": 10, "y": 2.0})
            acc["z"] = 1
            with self.assertRaises(KeyError):
                acc["missing"]
        self.assertIsInstance(acc["x"], int)


class ScalingRuleTest(LocalTestCase):
    def model(self, rule, opt="sgd"):
        import pollux.torch as pt
        pt.init_process_group("gloo")
        m = torch.nn.Linear(3, 1)
        o = torch.optim.Adam(m.parameters(), lr=0.1) if opt == "adam" else torch.optim.SGD(m.parameters(), lr=0.1)
        adp = pt.AdaptiveDataParallel(m, o, None, None, rule, init_batch_size=100)
        adp.noise.sqr_avg, adp.noise.var_avg, adp.noise.norm = 1.0, 3.0, 1.0  # sqr 1, var 3
        return adp

    def test_formulas(self):
        from pollux.torch import scaling_rules as sr
        gain = 4 / 1.75  # (var + sqr) / (var / 4 + sqr)
        cases = [(sr.AdaScale(), gain), (sr.AdamScale(), math.sqrt(gain)), (sr.LinearScale(), 4.0),
                 (sr.SqrtScale(), 2.0)]
        for rule, want in cases:
            with self.subTest(type(rule).__name__):
                _core._reset_for_tests()
                self.model(rule)
                self.assertAlmostEqual(rule.scale_lr(4.0), want, places=12)
        # LEGW: sqrt(S) * progress / (S * warm-up epochs * data size / M0), capped at sqrt(S).
        _core._reset_for_tests()
        rule = sr.LEGWScale(base_warmup_epochs=2, data_size=1000)
        adp = self.model(rule)
        adp.progress = 100.0 * 40  # 40 steps of M0
        self.assertAlmostEqual(rule.scale_lr(4.0), 2.0 * 40 / (4 * 2 * 1000 / 100), places=12)
        adp.progress = 100.0 * 1000
        self.assertAlmostEqual(rule.scale_lr(4.0), 2.0, places=12)

    def test_defaults(self):
        adp = self.model(None, "adam")
        self.assertEqual(adp.lr_scaling, "adamscale")
        _core._reset_for_tests()
        adp = self.model(None)
        self.assertEqual(adp.lr_scaling, "adascale")
        _core._reset_for_tests()
        with mock.patch.dict(os.environ, {"NOMAD_META_pollux_lr_scaling": "legw"}):
            self.assertEqual(self.model(None, "adam").lr_scaling, "legw")


class LoopTest(LocalTestCase):
    def test_zero_grad_and_batch_size_under_accumulation(self):
        import pollux.torch as pt
        ds = torch.utils.data.TensorDataset(torch.randn(24, 3), torch.randn(24))
        loader = pt.AdaptiveDataLoader(ds, batch_size=4)
        loader.autoscale_batch_size(64, local_bsz_bounds=(2, 2), gradient_accumulation=True)
        pt.init_process_group("gloo")
        m = torch.nn.Linear(3, 1)
        opt = torch.optim.SGD(m.parameters(), lr=0.0)
        adp = pt.AdaptiveDataParallel(m, opt)
        self.assertIsNone(loader.current_batch_size)
        grads = []
        for epoch in pt.remaining_epochs_until(1):
            for xb, yb in loader:
                self.assertEqual((loader.current_batch_size, loader.current_local_bsz), (4, 2))
                adp(xb).sum().backward()
                grads.append(m.weight.grad.clone())
                opt.step()
                opt.zero_grad()  # after step(): must keep an accumulating micro-batch's gradient
                m.zero_grad()
        self.assertIsNone(loader.current_batch_size)
        # Micro-batch 2 of each step saw micro-batch 1's gradient still there.
        for a, b in zip(grads[0::2], grads[1::2]):
            self.assertFalse(torch.allclose(a, b - a * 0), "gradient was cleared between micro-batches")
            self.assertGreater(float((b - a).abs().sum()), 0)
        self.assertEqual(adp.steps, 6)


class StateTest(LocalTestCase):
    def test_default_save_load_pickles_attributes(self):
        class Mine(checkpoint.State):
            def __init__(self):
                super().__init__("mine")
                self.values = [1, 2]
                self.best = 0.5

        s = Mine()
        s.values.append(3)
        checkpoint.save_all_states()
        checkpoint._reset()
        t = Mine()
        self.assertTrue(checkpoint.load_state(t))
        self.assertEqual((t.values, t.best, t.name), ([1, 2, 3], 0.5, "mine"))


class TensorboardTest(LocalTestCase):
    def test_missing_tensorboard_warns_once(self):
        import pollux.torch as pt
        ds = torch.utils.data.TensorDataset(torch.randn(8, 3), torch.randn(8))
        loader = pt.AdaptiveDataLoader(ds, batch_size=4)
        self.addCleanup(setattr, _tensorboard, "_warned", False)
        _tensorboard._warned = False
        with mock.patch.dict(sys.modules, {"torch.utils.tensorboard": None}), \
                self.assertLogs("pollux.torch", logging.WARNING) as logs:
            loader.to_tensorboard("/nonexistent/runs", 0)
            loader.to_tensorboard("/nonexistent/runs", 1)
            logging.getLogger("pollux.torch").warning("end")
        warned = [m for m in logs.output if "tensorboard" in m]
        self.assertEqual(len(warned), 1, logs.output)
        self.assertIn("install the tensorboard package", warned[0])


if __name__ == "__main__":
    unittest.main()
