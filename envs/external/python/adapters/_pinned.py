"""The pinned-package check every field-env adapter makes before it builds its env.

An adapter names the PyPI packages it wraps with the exact versions of rlid's
requirements.txt (REQUIRES = {"open_spiel": "2.0.2"}); require() raises a
RuntimeError naming the package and the fix when one is missing or differs,
so that rlid reports it before a run starts. tests/envs/field_adapters_test.py
checks that every adapter's pins equal requirements.txt.
"""

import importlib.metadata
import sys

FIX = "run scripts/setup.sh from the rlid checkout (it installs requirements.txt into .venv)"


def require(adapter, packages):
    """Raises RuntimeError unless every {package: version} is installed at that version."""
    for package, version in packages.items():
        try:
            found = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            raise RuntimeError(
                f"{adapter}: the Python package {package}=={version} is not installed for "
                f"{sys.executable}; {FIX}, or: {sys.executable} -m pip install {package}=={version}"
            ) from None
        if found != version:
            raise RuntimeError(
                f"{adapter}: {package} {found} is installed for {sys.executable}, but rlid's adapter "
                f"is pinned to {version}; {FIX}, or: {sys.executable} -m pip install "
                f"{package}=={version}")
