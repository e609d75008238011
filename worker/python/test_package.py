"""The package installs with pip into a fresh virtual environment, offline,
and imports only what it needs."""

import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def _torch_importable():
    return subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0


class ImportTest(unittest.TestCase):
    def test_import_pulls_no_torch(self):
        """import pollux and its standard-library modules never import torch
        (the launcher runs before any training process)."""
        code = ("import sys; import pollux, pollux.env, pollux.checkpoint, pollux.consul, pollux.documents, "
                "pollux.report, pollux.rendezvous, pollux.torch, pollux.torch.launch; "
                "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
        out = subprocess.run([sys.executable, "-c", code], cwd=HERE, capture_output=True, text=True, check=True)
        self.assertEqual(out.stdout.strip(), "[]")

    def test_rendezvous_does_not_import_reporter(self):
        code = "import sys, pollux.rendezvous; print('pollux.report' in sys.modules)"
        out = subprocess.run([sys.executable, "-c", code], cwd=HERE, capture_output=True, text=True, check=True)
        self.assertEqual(out.stdout.strip(), "False")


class InstallTest(unittest.TestCase):
    def test_pip_install_into_venv(self):
        """python3 -m venv --system-site-packages; pip install ./worker/python
        (no index: the build backend is in the tree); then pollux.torch
        imports from the installed copy, with its version."""
        with open(os.path.join(HERE, "pollux", "__init__.py")) as f:
            version = re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M).group(1)
        with tempfile.TemporaryDirectory() as d:
            venv = os.path.join(d, "venv")
            subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
            py = os.path.join(venv, "bin", "python")
            env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
            env.pop("PYTHONPATH", None)
            r = subprocess.run([py, "-m", "pip", "install", HERE], cwd=d, env=env, capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            names = "AdaptiveDataLoader" if _torch_importable() else "__name__"
            code = ("import pollux, pollux.torch; from pollux.torch import %s; "
                    "print(pollux.__version__, pollux.__file__)" % names)
            r = subprocess.run([py, "-c", code], cwd=d, env=env, capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            got_version, path = r.stdout.split()
            self.assertEqual(got_version, version)
            self.assertTrue(path.startswith(venv), "pollux imported from %s, not the venv" % path)


if __name__ == "__main__":
    unittest.main()
