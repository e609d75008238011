"""Tests of pollux.checkpoint: atomic saves (a process killed mid-save
leaves the previous checkpoint), restore, and bad checkpoint directories.
Standard library only."""

import os
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

from pollux import checkpoint  # noqa: E402


class Blob(checkpoint.State):
    def __init__(self, name, value=b""):
        super().__init__(name)
        self.value = value

    def save(self, f):
        f.write(self.value)

    def load(self, f):
        self.value = f.read()


SLOW_SAVER = r"""
import os, sys, time
sys.path.insert(0, sys.argv[2])
from pollux import checkpoint

class Slow(checkpoint.State):
    def save(self, f):
        f.write(b"half of the new state")
        f.flush()
        open(os.path.join(sys.argv[1], "saving"), "w").close()
        time.sleep(60)   # killed here
    def load(self, f):
        pass

Slow("model")
checkpoint.save_all_states()
"""


class CheckpointTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="pollux-ckpt-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        patcher = mock.patch.dict(os.environ, {"POLLUX_CHECKPOINT_DIR": os.path.join(self.dir, "ckpt"), "RANK": "0"})
        patcher.start()
        self.addCleanup(patcher.stop)
        self.addCleanup(self.forget)
        self.forget()

    def forget(self):
        checkpoint._reset()

    def test_save_and_restore(self):
        Blob("model", b"weights-1")
        first = checkpoint.save_all_states({"reason": "test"})
        Blob("extra", b"x")
        checkpoint._STATES["model"].value = b"weights-2"
        second = checkpoint.save_all_states()
        self.assertEqual(checkpoint.latest(), second)
        self.assertGreater(second, first)
        self.forget()
        m, missing = Blob("model"), Blob("not-saved")
        self.assertTrue(checkpoint.load_state(m))
        self.assertFalse(checkpoint.load_state(missing))
        self.assertEqual(m.value, b"weights-2")
        self.assertEqual(checkpoint.restored_meta()["states"], ["model", "extra"])

    def test_keeps_two_newest(self):
        Blob("model", b"v")
        for _ in range(4):
            checkpoint.save_all_states()
        self.assertEqual(sorted(os.listdir(os.path.join(self.dir, "ckpt"))), ["ckpt-00000003", "ckpt-00000004"])

    def test_kill_mid_save_leaves_previous(self):
        Blob("model", b"good weights")
        good = checkpoint.save_all_states()
        p = subprocess.Popen([sys.executable, "-c", SLOW_SAVER, self.dir, HERE], env=dict(os.environ))
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(self.dir, "saving")):
            self.assertLess(time.monotonic(), deadline, "the saver never started writing")
            self.assertIsNone(p.poll(), "the saver exited early")
            time.sleep(0.02)
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        names = os.listdir(os.path.join(self.dir, "ckpt"))
        self.assertTrue(any(n.startswith(".tmp-ckpt-00000002-") for n in names), names)  # the half-written one
        self.assertEqual(checkpoint.latest(), good)
        self.forget()
        m = Blob("model")
        self.assertTrue(checkpoint.load_state(m))
        self.assertEqual(m.value, b"good weights")
        # The next save goes on from there and removes the leftover.
        m.value = b"newer"
        newer = checkpoint.save_all_states()
        self.assertTrue(newer.endswith("ckpt-00000002"))
        self.assertFalse(any(n.startswith(".tmp") for n in os.listdir(os.path.join(self.dir, "ckpt"))))

    def test_failed_save_keeps_previous(self):
        b = Blob("model", b"good")
        good = checkpoint.save_all_states()

        class Broken(checkpoint.State):
            def save(self, f):
                raise OSError(28, "No space left on device")

            def load(self, f):
                pass

        Broken("optimizer")
        b.value = b"bad"
        with self.assertRaises(checkpoint.CheckpointError) as cm:
            checkpoint.save_all_states()
        msg = str(cm.exception)
        self.assertIn("POLLUX_CHECKPOINT_DIR=%s" % os.path.join(self.dir, "ckpt"), msg)
        self.assertIn("No space left on device", msg)
        self.assertIn("previous checkpoint (%s) is kept" % good, msg)
        self.assertEqual(checkpoint.latest(), good)
        self.assertEqual(os.listdir(os.path.join(self.dir, "ckpt")), ["ckpt-00000001"])

    def test_unwritable_directory(self):
        blocker = os.path.join(self.dir, "file")
        open(blocker, "w").close()
        bad = os.path.join(blocker, "ckpt")  # under a regular file: even root cannot create it
        with self.assertRaises(checkpoint.CheckpointError) as cm:
            checkpoint.check_writable(bad)
        self.assertIn("POLLUX_CHECKPOINT_DIR=%s is not writable" % bad, str(cm.exception))
        with mock.patch.dict(os.environ, {"POLLUX_CHECKPOINT_DIR": bad}):
            Blob("model", b"x")
            with self.assertRaisesRegex(checkpoint.CheckpointError, "failed to write checkpoint ckpt-00000001"):
                checkpoint.save_all_states()

    def test_bad_names(self):
        for name in ["", "../escape", "a/b", ".hidden", "x" * 200, 7]:
            with self.subTest(name=name):
                with self.assertRaisesRegex(ValueError, "checkpoint state name"):
                    Blob(name)
        Blob("twice")
        with self.assertRaisesRegex(ValueError, "already registered"):
            Blob("twice")

    def test_no_directory_saves_nothing(self):
        with mock.patch.dict(os.environ, {"POLLUX_CHECKPOINT_DIR": ""}):
            Blob("model", b"x")
            self.assertIsNone(checkpoint.save_all_states())
            self.assertFalse(checkpoint.load_state(Blob("other")))

    def test_only_rank0_writes(self):
        with mock.patch.dict(os.environ, {"RANK": "1"}):
            Blob("model", b"x")
            self.assertIsNone(checkpoint.save_all_states())
        self.assertFalse(os.path.exists(os.path.join(self.dir, "ckpt")))


if __name__ == "__main__":
    unittest.main()
