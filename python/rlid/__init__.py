"""rlid: reinforcement learning of language agents in the decision plane.

    import rlid
    env = rlid.make("maze", seed=3)          # an env: menu(), step(), compile()
    run = rlid.Run("runs/quickstart")       # a run's store: sql(), metrics()

The C++ core is the one the ``rlid`` CLI runs; see docs/python.md."""

from . import _rlid
from .env import Env, envs, make
from .errors import (ConfigError, DistError, EnvError, Error, InternalError, InvalidAction,
                     IoError, NumericError)
from .run import Run

__version__ = _rlid.__version__
#: The C++ build's version and git commit, as ``rlid --version`` prints it.
version_string = _rlid.version_string

__all__ = ["Env", "Run", "envs", "make", "Error", "ConfigError", "IoError", "InternalError",
           "NumericError", "EnvError", "DistError", "InvalidAction", "__version__",
           "version_string"]
