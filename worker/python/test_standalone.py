"""The job's own batch-size choice without a controller
(pollux.torch._standalone)."""

import os
import sys
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

from pollux.torch import _standalone as sa  # noqa: E402
from test_pollux_torch import LocalTestCase  # noqa: E402


class ChooseTest(unittest.TestCase):
    def profile(self, points, sync=0.0):
        p = sa.Profile()
        for m, t in points:
            p.observe(m, t, sync)
        return p

    def test_fit(self):
        p = self.profile([(8, 0.01 + 8e-4), (32, 0.01 + 32e-4), (32, 0.01 + 32e-4)])
        alpha, beta = p.fit()
        self.assertAlmostEqual(alpha, 0.01, places=9)
        self.assertAlmostEqual(beta, 1e-4, places=9)
        # One size only: half of its time is taken as fixed cost (AdaptDL's rule).
        alpha, beta = self.profile([(16, 0.1)]).fit()
        self.assertAlmostEqual(alpha, 0.05)
        self.assertAlmostEqual(beta * 16, 0.05)

    def test_noisy_gradients_favour_large_batches(self):
        p = self.profile([(8, 0.01 + 8e-4), (32, 0.01 + 32e-4)], sync=0.05)
        m, s, _ = sa.choose(p, (1.0, 1e4), 16, 1, (8, 256), 512, True)  # noise scale 160000 samples
        self.assertEqual((m, s), (256, 1))  # the largest batch, 256 x 2, accumulating to share the sync
        p = self.profile([(8, 0.01 + 8e-4), (32, 0.01 + 32e-4)])
        m, s, _ = sa.choose(p, (1.0, 1e4), 16, 1, (8, 256), 512, True)
        self.assertEqual((m, s), (256, 0))  # without sync time accumulating gains nothing
        m, s, _ = sa.choose(p, (1.0, 1e4), 16, 2, (8, 256), 512, False)
        self.assertEqual((m, s), (256, 0))  # 2 replicas: 512 without accumulation

    def test_clean_gradients_favour_small_batches(self):
        p = self.profile([(8, 0.01 + 8e-4), (32, 0.01 + 32e-4)])
        m, s, _ = sa.choose(p, (1.0, 1e-3), 16, 1, (8, 256), 512, True)  # noise scale 0.016 samples
        # 8 and 10 (the next size) are within NEAR_TIE of each other: the larger micro-batch.
        self.assertEqual((m, s), (10, 0))

    def test_near_ties_prefer_fewer_micro_steps(self):
        # No fixed cost per micro-batch in the fit (alpha 0) and a sync cost:
        # every split of a batch of 512 predicts the same goodput; one
        # micro-batch of 512 is taken rather than 8 x 64.
        p = self.profile([(8, 8e-4), (32, 32e-4)], sync=0.05)
        m, s, _ = sa.choose(p, (1.0, 1e4), 16, 1, (8, 512), 512, True)
        self.assertEqual((m, s), (512, 0))

    def test_goodput_is_the_product(self):
        p = self.profile([(8, 0.02), (16, 0.03)])  # alpha 0.01, beta 0.00125
        m, s, g = sa.choose(p, (2.0, 3.0), 16, 1, (16, 16), 16, False)
        self.assertEqual((m, s), (16, 0))
        self.assertAlmostEqual(g, 16 / 0.03 * 1.0)  # M = M0: efficiency 1
        phi = 16 * 3.0 / 2.0
        self.assertAlmostEqual(sa.efficiency(64, 16, (2.0, 3.0)), (phi + 16) / (phi + 64))

    def test_enabled(self):
        with mock.patch.dict(os.environ, {}, clear=True):
            self.assertTrue(sa.enabled(False))
            self.assertFalse(sa.enabled(True))
        with mock.patch.dict(os.environ, {"NOMAD_META_pollux_standalone": "true"}, clear=True):
            self.assertTrue(sa.enabled(True))  # the job's setting wins over the controller
        with mock.patch.dict(os.environ, {"POLLUX_STANDALONE": "off", "NOMAD_META_pollux_standalone": "true"}):
            self.assertFalse(sa.enabled(False))
        with mock.patch.dict(os.environ, {"POLLUX_STANDALONE": "maybe"}):
            with self.assertRaisesRegex(ValueError, "POLLUX_STANDALONE: want true or false, got 'maybe'"):
                sa.enabled(False)


class LoopTest(LocalTestCase):
    def train(self, standalone):
        """Two epochs with the measured times replaced by a fixed profile
        and noisy gradients (so that the choice does not depend on this
        machine's load): the job should move to the largest batch."""
        import pollux.torch as pt
        profile = sa.Profile()
        for m, t in ((8, 0.01 + 8e-4), (16, 0.01 + 16e-4)):
            profile.observe(m, t, 0.05)
        self.expected = sa.choose(profile, (1.0, 1e4), 8, 1, (4, 64), 128, True)[:2]
        profile.observe = lambda *a: None
        os.environ.update(POLLUX_STANDALONE=standalone, POLLUX_STANDALONE_INTERVAL="5")
        torch.manual_seed(0)
        x = torch.randn(512, 4)
        ds = torch.utils.data.TensorDataset(x, x @ torch.tensor([1.0, 2.0, -1.0, 0.5]) + torch.randn(512))
        loader = pt.AdaptiveDataLoader(ds, batch_size=8, shuffle=True)
        loader.autoscale_batch_size(128, local_bsz_bounds=(4, 64), gradient_accumulation=True)
        pt.init_process_group("gloo")
        m = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(m.parameters(), lr=0.01)
        net = pt.AdaptiveDataParallel(m, opt)
        net.noise.estimates = lambda: (1.0, 1e4)
        net.profile = profile
        sizes = []
        for epoch in pt.remaining_epochs_until(2):
            for xb, yb in loader:
                opt.zero_grad()
                torch.nn.functional.mse_loss(net(xb).squeeze(1), yb).backward()
                opt.step()
                if loader.is_sync_step:
                    sizes.append((loader.current_local_bsz, loader.accumulation_steps))
        return sizes, net

    def test_adapts_within_bounds(self):
        sizes, net = self.train("true")
        self.assertEqual(self.expected, (64, 1))
        # M0 until the first decision (after step 5), then the choice.
        self.assertEqual(sizes[:5], [(8, 0)] * 5)
        self.assertEqual(set(sizes[5:]), {self.expected})

    def test_off_keeps_the_initial_batch_size(self):
        sizes, _ = self.train("false")
        self.assertEqual(set(sizes), {(8, 0)})


if __name__ == "__main__":
    unittest.main()
