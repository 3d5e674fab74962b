"""The pinned-package check every field-env adapter makes before it builds its env.

An adapter's folder holds adapter.py and adapter.toml; the manifest names the
PyPI packages the adapter wraps with the exact versions of rlid's
requirements.txt (packages = ["open_spiel==2.0.2"]), and rlid's C++ reads the
same file for the env's summary and keys. pinned_packages() reads the pins;
require() raises a RuntimeError naming the package and the fix when one is
missing or differs, so that rlid reports it before a run starts.
tests/cli/field_envs_test.cc checks that every manifest's pins equal
requirements.txt.
"""

import importlib.metadata
import os
import sys
import tomllib

FIX = "run scripts/setup.sh from the rlid checkout (it installs requirements.txt into .venv)"


def pinned_packages(folder):
    """{package: version} of the adapter.toml in `folder`, in the manifest's order."""
    with open(os.path.join(folder, "adapter.toml"), "rb") as f:
        manifest = tomllib.load(f)
    pins = {}
    for spec in manifest.get("packages", []):
        package, sep, version = spec.partition("==")
        if not sep or not package or not version:
            raise RuntimeError(f"{folder}/adapter.toml: packages entry '{spec}' is not package==version")
        pins[package] = version
    return pins


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
