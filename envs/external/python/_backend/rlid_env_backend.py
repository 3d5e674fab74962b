"""A PEP 517 build backend for the rlid_env helper, standard library only.

setuptools needs the `wheel` package to build a wheel (before setuptools 70.1),
and a machine without network often lacks it; this backend needs nothing, so
`pip install ./envs/external/python` (and `pip install -e`) work offline, with
or without build isolation. It packs the one module rlid_env.py with the
name, version, summary and Python requirement from pyproject.toml's [project].
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_MODULE = "rlid_env.py"


def _project():
    """name, version, description and requires-python from pyproject.toml."""
    with open(os.path.join(_ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    section = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S).group(1)
    fields = dict(re.findall(r'^([\w-]+)\s*=\s*"([^"]*)"\s*$', section, re.M))
    return {k: fields[k] for k in ("name", "version", "description", "requires-python")}


def _dist(p):
    return "%s-%s" % (re.sub(r"[-_.]+", "_", p["name"]).lower(), p["version"])


def _metadata(p):
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\nRequires-Python: %s\n"
            % (p["name"], p["version"], p["description"], p["requires-python"]))


def _wheel(wheel_directory, files):
    """Writes a py3-none-any wheel holding `files` ({path: bytes}); returns its name."""
    p = _project()
    info = _dist(p) + ".dist-info"
    files = dict(files)
    files[info + "/METADATA"] = _metadata(p).encode()
    files[info + "/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: rlid_env_backend\n"
                              b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (path, digest, len(data)))
    record.append(info + "/RECORD,,")
    files[info + "/RECORD"] = ("\n".join(record) + "\n").encode()
    name = _dist(p) + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            z.writestr(path, data)
    return name


def _read(name):
    with open(os.path.join(_ROOT, name), "rb") as f:
        return f.read()


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, {_MODULE: _read(_MODULE)})


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # A .pth file puts this directory on sys.path: edits to rlid_env.py take effect at once.
    return _wheel(wheel_directory, {"rlid_env_editable.pth": (_ROOT + "\n").encode()})


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    base = _dist(p)
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ("pyproject.toml", "README.md", _MODULE, "_backend/rlid_env_backend.py"):
            t.add(os.path.join(_ROOT, rel), arcname=base + "/" + rel)
        info = tarfile.TarInfo(base + "/PKG-INFO")
        data = _metadata(p).encode()
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return name
