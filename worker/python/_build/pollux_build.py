"""A PEP 517 build backend for the pollux package, standard library only.

pip builds a package in an isolated environment into which it installs the
backend named in pyproject.toml from a package index; build machines and
training images here reach no index, so the backend is this file
(backend-path) and needs nothing: ``pip install ./worker/python`` works
offline. It builds a pure-Python wheel of the pollux package (PEP 427), an
sdist (PEP 517) and an editable wheel (PEP 660, a .pth file naming the
source directory).
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "pollux"
_SUMMARY = "Pollux's worker library: PyTorch jobs that the Pollux controller rescales on Nomad (AdaptDL's API)"


def _version():
    with open(os.path.join(ROOT, NAME, "__init__.py")) as f:
        m = re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M)
    if not m:
        raise RuntimeError("%s/__init__.py: no line __version__ = \"...\"" % NAME)
    return m.group(1)


def _metadata():
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\nRequires-Python: >=3.9\n"
            "License: Apache-2.0\nProvides-Extra: torch\nRequires-Dist: torch>=1.13; extra == \"torch\"\n"
            "Description-Content-Type: text/markdown\n\n%s" % (NAME, _version(), _SUMMARY, readme))


def _sources():
    """(path in the archive, path on disk) of every module of the package."""
    out = []
    for d, dirs, files in os.walk(os.path.join(ROOT, NAME)):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                full = os.path.join(d, f)
                out.append((os.path.relpath(full, ROOT).replace(os.sep, "/"), full))
    return out


def _digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wheel(directory, files):
    """Write a py3-none-any wheel holding files ({archive path: bytes})."""
    ver = _version()
    info = "%s-%s.dist-info" % (NAME, ver)
    files = dict(files)
    files[info + "/METADATA"] = _metadata().encode()
    files[info + "/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: pollux_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[info + "/top_level.txt"] = (NAME + "\n").encode()
    record = "".join("%s,%s,%d\n" % (p, _digest(b), len(b)) for p, b in files.items())
    record += info + "/RECORD,,\n"
    name = "%s-%s-py3-none-any.whl" % (NAME, ver)
    with zipfile.ZipFile(os.path.join(directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for p, b in files.items():
            z.writestr(p, b)
        z.writestr(info + "/RECORD", record)
    return name


def _read(path):
    with open(path, "rb") as f:
        return f.read()


# ---- the PEP 517 / PEP 660 hooks ------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, {p: _read(full) for p, full in _sources()})


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, {"_pollux_editable.pth": (ROOT + "\n").encode()})


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, _version())
    name = base + ".tar.gz"
    extra = ["pyproject.toml", "README.md", "_build/pollux_build.py"]
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for p, full in [(e, os.path.join(ROOT, e)) for e in extra] + _sources():
            t.add(full, arcname=base + "/" + p)
        data = _metadata().encode()
        ti = tarfile.TarInfo(base + "/PKG-INFO")
        ti.size = len(data)
        t.addfile(ti, io.BytesIO(data))
    return name
