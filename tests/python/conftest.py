"""Fixtures of the Python package's tests (tests/python/). CTest runs each
test_*.py here as `Python.<file>` with the project's venv, after scripts/test.sh
installed the package from this checkout (pip install --no-build-isolation .).
RLID_BIN names the CLI the tests compare the package with."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

SOURCE_DIR = Path(os.environ.get("RLID_SOURCE_DIR", Path(__file__).resolve().parents[2]))

try:
    import rlid  # noqa: F401
except ImportError as e:
    pytest.exit(f"cannot import rlid ({e}): install it from this checkout with "
                f"'.venv/bin/pip install --no-build-isolation .' (scripts/test.sh does)", 2)


def rlid_binary() -> Path:
    path = Path(os.environ.get("RLID_BIN", SOURCE_DIR / "build" / "rlid"))
    if not path.exists():
        pytest.exit(f"no rlid binary at {path}: build it (scripts/build.sh) or set RLID_BIN", 2)
    return path


def run_cli(*args, timeout: float = 600) -> str:
    """`rlid ARGS` (one thread, warnings only); its stdout, or a failed test."""
    cmd = [str(rlid_binary()), "--threads", "1", "--log-level", "warn", *map(str, args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr}"
    return proc.stdout


def cli_json(*args):
    return json.loads(run_cli(*args))


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory) -> Path:
    """A two-iteration decision-PPO run on the bandit, trained by the CLI."""
    out = tmp_path_factory.mktemp("run") / "bandit"
    run_cli("train", SOURCE_DIR / "configs" / "bandit_ppo.toml", "--out", out,
            "--set", "trainer.iterations=2", "--set", "trainer.episodes_per_iteration=16",
            "--set", "trainer.num_envs=16", "--set", "trainer.eval_every=1",
            "--set", "trainer.eval_episodes=8")
    return out
