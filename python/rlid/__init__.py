"""rlid: reinforcement learning of language agents in the decision plane.

    import rlid
    env = rlid.make("maze", seed=3)                  # an env: menu(), step(), compile()
    policy = rlid.Policy.load("runs/x/checkpoints/final")
    policy.readout(env).p                            # p(a|s), a torch.Tensor
    result = rlid.train("configs/bandit_ppo.toml", out="runs/bandit")
    result.run.sql("SELECT * FROM episodes")         # the run's store, read-only

The C++ core is the one the ``rlid`` CLI runs; see docs/python.md."""

try:
    from . import _rlid
except ImportError as e:  # built with LibTorch: torch's libraries load first
    if "libtorch" not in str(e) and "libc10" not in str(e):
        raise
    import torch  # noqa: F401
    from . import _rlid

from .env import Env, envs, make
from .errors import (ConfigError, DistError, EnvError, Error, InternalError, Interrupted,
                     InvalidAction, IoError, NumericError)
from .policy import Policy, Readout
from .run import Run
from .train import Result, compare, train

__version__ = _rlid.__version__
#: The C++ build's version and git commit, as ``rlid --version`` prints it.
version_string = _rlid.version_string
#: Whether this build links LibTorch (Policy, train and compare need it).
with_torch = _rlid.with_torch

__all__ = ["Env", "Run", "Policy", "Readout", "Result", "envs", "make", "train", "compare",
           "Error", "ConfigError", "IoError", "InternalError", "NumericError", "EnvError",
           "DistError", "InvalidAction", "Interrupted", "__version__", "version_string",
           "with_torch"]
