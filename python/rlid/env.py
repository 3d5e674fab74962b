"""rlid.make: an rlid environment driven from Python. Each state compiles into a
menu of executable actions (label, command, realisations, afterstate); free text
compiles into one of them or is invalid, exactly as the trainers see it."""

from . import _rlid
from .config import toml_value
from .errors import ConfigError, InvalidAction


def envs():
    """{name: summary} of every registered env (external ones run through ``external``)."""
    return dict(_rlid.env_names())


class Env:
    """One environment and the episode being played on it.

    ``menu()`` lists the actions of the current state; ``step(action)`` takes a
    menu index, a label ("B") or free text ("go north"), which compiles through
    the same grammar the token-plane trainers use (docs/free_text.md). Seeds are
    split by parity: even seeds are training instances, odd seeds test ones."""

    def __init__(self, name, seed=0, **params):
        if not isinstance(seed, int) or seed < 0:
            raise ConfigError(f"seed must be a non-negative int, got {seed!r}")
        args = [f"{k}={toml_value(k, v)}" for k, v in params.items()]
        self._env = _rlid.Env(name, args, seed)
        self.name = name
        self.params = dict(params)

    def __repr__(self):
        return f"rlid.Env({self.name!r}, seed={self.seed}, steps={self.steps})"

    @property
    def info(self):
        """name, summary, step_limit, deterministic, concurrency, metadata."""
        return self._env.info()

    @property
    def instructions(self):
        """The rules of the game, shown at the top of every prompt."""
        return self._env.instructions()

    def reset(self, seed=None):
        """Starts an episode on instance ``seed`` (default: the current one); returns the observation."""
        if seed is not None and (not isinstance(seed, int) or seed < 0):
            raise ConfigError(f"seed must be a non-negative int, got {seed!r}")
        self._env.reset(self._env.seed if seed is None else seed)
        return self._env.observation

    seed = property(lambda self: self._env.seed, doc="the instance seed of this episode")
    observation = property(lambda self: self._env.observation, doc="what the agent reads now")
    terminal = property(lambda self: self._env.terminal, doc="the episode is over")
    steps = property(lambda self: self._env.steps, doc="decisions taken in this episode")
    state_hash = property(lambda self: self._env.state_hash, doc="canonical id of the state")

    def menu(self):
        """The executable actions of the current state, labelled A, B, ... (empty when over)."""
        return self._env.menu()

    def compile(self, text):
        """Free text -> a ``Compiled`` (``.valid``, ``.item``, ``.matched``, ``.reason``)."""
        return self._env.compile(text)

    def step(self, action):
        """Takes a menu index, a label or free text; returns a ``Transition``.

        Text that compiles to no action raises ``rlid.InvalidAction`` (a
        ValueError) and leaves the state as it was."""
        if isinstance(action, bool) or not isinstance(action, (int, str)):
            raise ConfigError(
                f"an action is a menu index or text, got {type(action).__name__}",
                "pass an int from range(len(env.menu())), a label such as 'A', or a command",
            )
        if isinstance(action, str):
            compiled = self._env.compile(action)
            if not compiled.valid:
                raise InvalidAction(action, compiled.reason)
            action = compiled.item
        return self._env.step_item(action)

    def oracle(self):
        """Menu indices of the optimal actions, or None when the env has no oracle."""
        return self._env.oracle()


def make(name, seed=0, **params):
    """``rlid.make("maze", seed=3, size=5)``: an ``Env`` with its [env] parameters.

    ``rlid.make("external", command=["python3", "my_env.py"], params={"rooms": 5})``
    runs a Python env through the external-env protocol (docs/external_env.md)."""
    return Env(name, seed, **params)
