"""rlid.train and rlid.compare: the code of ``rlid train`` and ``rlid compare``
run in this process, writing the same run directories. Progress lines (with
ETA) and evaluations go to ``progress`` (default: sys.stderr, which a notebook
shows under the cell); Ctrl-C stops at a safe point, keeps what was recorded,
marks the run interrupted and raises rlid.Interrupted (a KeyboardInterrupt)."""

import os
import sys

from .config import config_file, overrides
from .errors import ConfigError
from .policy import _core
from .run import Run


def _writer(progress):
    if progress is True:
        return lambda line: (sys.stderr.write(line), sys.stderr.flush())
    if progress in (False, None):
        return None
    if callable(progress):
        return progress
    raise ConfigError(f"progress={progress!r} is not True, False or a callable taking a line")


def _call(what, config, call):
    """``call(core, config_path)`` with ``config`` as a file, its dict wrapped in a Result."""
    core = _core()
    if config is None:
        raise ConfigError(f"{what} needs a config (a TOML path or a dict of its sections)")
    with config_file(config) as path:
        return Result(call(core, path))


class Result(dict):
    """What the call returned (a dict), plus ``run``: the run directory as an rlid.Run."""

    @property
    def run(self):
        return Run(self["run_dir"])


def train(config, out=None, *, set=None, resume=False, metrics_only=False, progress=True,
          log_level="info"):
    """Trains as ``rlid train CONFIG [--out OUT] [--set ...]`` does, in this process.

    ``config``: a TOML path or a dict of its sections. Returns a Result: run_dir,
    algorithm, iterations, checkpoint, budget_reached, test_greedy and test_sampled
    (episodes, success, return, length, invalid_rate, p_optimal); ``.run`` opens the store."""
    return _call("train", config, lambda core, path: core.train(
        path, overrides(set), os.fspath(out) if out else "", bool(resume), bool(metrics_only),
        _writer(progress), log_level))


def compare(config, out=None, *, set=None, progress=True, log_level="info"):
    """Runs the arms of a [compare] section as ``rlid compare`` does, in this process.

    Returns a Result: run_dir, warm_start, report (HTML), table and verdict (the text
    the CLI prints), chance, and arms (per arm: success and its se over seeds, return,
    env_steps, flops, invalid_rate, wall_s)."""
    return _call("compare", config, lambda core, path: core.compare(
        path, overrides(set), os.fspath(out) if out else "", _writer(progress), log_level))
