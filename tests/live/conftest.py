"""Shared fixtures of the live reference tests (tests/live/).

Each test computes the same numbers twice on fresh random inputs: once with the
public library researchers trust (transformers, PEFT, tokenizers, jinja2 through
transformers, TRL; pinned in requirements.txt) and once with the `rlid` binary.
CTest runs every test_*.py file here as `Live.<file>` (CMakeLists.txt), with
RLID_BIN naming the binary. A comparison records its worst difference through
the `report` fixture: printed as a `LIVE` line, and appended as JSON to the file
$RLID_LIVE_REPORT names (build/live_report.jsonl under CTest).
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

SOURCE_DIR = Path(os.environ.get("RLID_SOURCE_DIR", Path(__file__).resolve().parents[2]))


def _rlid_binary() -> Path:
    path = Path(os.environ.get("RLID_BIN", SOURCE_DIR / "build" / "rlid"))
    if not path.exists():
        pytest.exit(f"no rlid binary at {path}: build it (scripts/build.sh) or set RLID_BIN", 2)
    return path


class RlidError(RuntimeError):
    """`rlid` exited non-zero; carries its exit code and stderr."""

    def __init__(self, args, code, stderr):
        super().__init__(f"rlid {' '.join(map(str, args))} exited {code}:\n{stderr}")
        self.code = code
        self.stderr = stderr


def run_rlid(*args, input: bytes | None = None, timeout: float = 600) -> bytes:
    """Runs `rlid ARGS` (one intra-op thread, warnings only) and returns its stdout
    bytes; raises RlidError on a non-zero exit."""
    cmd = [str(_rlid_binary()), "--threads", "1", "--log-level", "warn", *map(str, args)]
    proc = subprocess.run(cmd, input=input, capture_output=True, timeout=timeout)
    if proc.returncode != 0:
        raise RlidError(args, proc.returncode, proc.stderr.decode("utf-8", "replace"))
    return proc.stdout


def run_rlid_json(*args, **kwargs):
    return json.loads(run_rlid(*args, **kwargs))


@pytest.fixture(scope="session")
def rlid():
    """The run_rlid function (a fixture so a missing binary fails every test clearly)."""
    _rlid_binary()
    return run_rlid


class Report:
    """Worst differences, one line per comparison: the evidence a live test leaves."""

    def __init__(self, path: str | None):
        self.path = path

    def __call__(self, name: str, worst: float, tolerance: float, count: int, **extra):
        line = {"name": name, "worst": float(worst), "tolerance": float(tolerance), "count": int(count), **extra}
        print(f"\nLIVE {name}: worst difference {worst:.3g} over {count} value(s) (tolerance {tolerance:.3g})"
              + "".join(f", {k} {v}" for k, v in extra.items()))
        if self.path:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(line) + "\n")
        assert worst <= tolerance, f"{name}: worst difference {worst} exceeds {tolerance}"


@pytest.fixture(scope="session")
def report():
    return Report(os.environ.get("RLID_LIVE_REPORT"))


@pytest.fixture(scope="session")
def qwen3_tokenizer_json() -> Path:
    """Qwen3's real tokenizer.json, unpacked by scripts/fetch_test_assets.sh."""
    path = SOURCE_DIR / "build" / "assets" / "qwen3" / "tokenizer.json"
    if not path.exists():
        subprocess.run(["bash", str(SOURCE_DIR / "scripts" / "fetch_test_assets.sh")], check=True)
    return path
