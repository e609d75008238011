"""A SIGTERM stops a job after the step it is in, for every data loader,
with a complete checkpoint and exit status 143; the restarted job goes on
from that step: no sample of an epoch is lost or trained on twice.

One job of 10 epochs x 30 steps is stopped 20 times, at random steps and
right after the last step of an epoch, alternating 1 and 2 replicas, and
restarted each time; then it runs to its end."""

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from pollux import checkpoint  # noqa: E402
from test_pollux_torch import clean_env  # noqa: E402

PY = sys.executable
SCRIPT = os.path.join(HERE, "testdata", "stop.py")
N, EPOCHS, STEPS = 240, 10, 30  # batch 8: 30 steps an epoch


class StopTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="pollux-stop-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.env = clean_env(POLLUX_CHECKPOINT_DIR=os.path.join(self.dir, "ckpt"), N=str(N), EPOCHS=str(EPOCHS))
        self.log = os.path.join(self.dir, "steps.jsonl")

    def lines(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log) as f:
            return [json.loads(l) for l in f if l.endswith("\n")]

    def start(self, nproc):
        return subprocess.Popen([PY, "-m", "pollux.torch.launch", "--nproc", str(nproc), "--grace", "30", SCRIPT,
                                 self.dir], env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def test_sigterm_at_random_steps_and_epoch_ends(self):
        rng = random.Random(int(os.environ.get("POLLUX_STOP_SEED", "30")))
        tries = 20
        for i in range(tries):
            nproc = 1 + i % 2
            done = [l for l in self.lines() if l["event"] == "step"]
            at_epoch_end = i % 4 == 3
            if at_epoch_end:
                target = None  # right after the next epoch's last step
            else:
                target = len(done) + rng.randint(1, 12)  # the step count to wait for
            p = self.start(nproc)
            deadline = time.monotonic() + 120
            while True:
                if p.poll() is not None:
                    self.fail("try %d: the job exited (%d) before the signal: %s" % (i, p.returncode, p.stderr.read()))
                self.assertLess(time.monotonic(), deadline, "try %d: no progress" % i)
                steps = [l for l in self.lines() if l["event"] == "step"]
                if at_epoch_end and len(steps) > len(done) and steps[-1]["last"]:
                    break
                if not at_epoch_end and len(steps) >= target:
                    break
                time.sleep(0.002)
            sent = time.time()
            p.send_signal(signal.SIGTERM)
            _, err = p.communicate(timeout=60)
            self.assertEqual(p.returncode, 143, "try %d: %s" % (i, err))
            steps = [l for l in self.lines() if l["event"] == "step"]
            after = [l for l in steps if l["t"] > sent]
            # The step in progress completes (and one that began as the
            # signal arrived, before its all-reduce carried the flag); no more.
            self.assertLessEqual(len(after), 2, "try %d: %d steps after SIGTERM" % (i, len(after)))
            if at_epoch_end:
                self.assertTrue(all(l["epoch"] == steps[-1]["epoch"] for l in after) or len(after) <= 1,
                                "try %d: ran into the next epoch: %s" % (i, after))
            # The checkpoint is complete and at the last logged step.
            ckpt = checkpoint.latest(os.path.join(self.dir, "ckpt"))
            self.assertIsNotNone(ckpt)
            self.assertFalse([n for n in os.listdir(os.path.join(self.dir, "ckpt")) if n.startswith(".tmp")])
        p = self.start(1)
        _, err = p.communicate(timeout=300)
        self.assertEqual(p.returncode, 0, err)
        lines = self.lines()
        starts = [l for l in lines if l["event"] == "start"]
        self.assertEqual(len(starts), tries + 1)
        steps = [l for l in lines if l["event"] == "step"]
        # Each restart resumes at the step after the last one logged.
        seen = 0
        for l in lines:
            if l["event"] == "start":
                self.assertEqual(l["steps"], seen)
            elif l["event"] == "step":
                seen = l["step"]
        self.assertEqual([l["step"] for l in steps], list(range(1, EPOCHS * STEPS + 1)))
        for epoch in range(EPOCHS):
            idx = [i for l in steps if l["epoch"] == epoch for i in l["idx"]]
            self.assertEqual(sorted(idx), list(range(N)), "epoch %d" % epoch)


if __name__ == "__main__":
    unittest.main()
