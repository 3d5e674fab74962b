"""Gymnasium views of rlid envs: ``MenuEnv`` is a ``gymnasium.Env`` whose action
space is ``Discrete(26)`` over the current menu (one index per label A..Z) and
whose observation is the state's text; ``info`` carries the menu and an
``action_mask`` of the indices that exist. Needs gymnasium and numpy
(``pip install rlid[gym]``)."""

import gymnasium
import numpy as np

from .env import Env
from .errors import ConfigError

#: One capital letter per item: no rlid menu has more actions.
MAX_MENU = 26


class TextSpace(gymnasium.spaces.Space):
    """Any Python str of at most ``max_length`` characters (gymnasium's Text
    space limits the charset; env observations are free-form Unicode)."""

    def __init__(self, max_length=1 << 20, seed=None):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.max_length = max_length

    def contains(self, x):
        return isinstance(x, str) and len(x) <= self.max_length

    def sample(self, mask=None, probability=None):
        n = int(self.np_random.integers(0, 16))
        return "".join(chr(int(c)) for c in self.np_random.integers(32, 127, size=n))

    def __repr__(self):
        return f"TextSpace(max_length={self.max_length})"

    def __eq__(self, other):
        return isinstance(other, TextSpace) and other.max_length == self.max_length


class MenuEnv(gymnasium.Env):
    """``rlid.gym.MenuEnv("maze", size=5)``: an rlid env as a gymnasium.Env.

    Actions are menu indices (``Discrete(26)``); text actions (a label or a
    command) are accepted too. An index past the menu or text that compiles to
    nothing is an *invalid* action, as under rlid's ``penalty_noop`` rule: the
    state stays, the reward is ``invalid_reward`` and the turn counts towards the
    env's step limit (``info["invalid"]`` is the reason). ``reset(seed=s)`` plays
    instance ``s`` (even = training split, odd = test); without a seed the next
    instance of ``split`` comes from the wrapper's generator."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, name, split="train", invalid_reward=-0.1, render_mode=None, **params):
        if split not in ("train", "test"):
            raise ConfigError(f"split must be 'train' or 'test', got {split!r}")
        if render_mode not in (None, "ansi"):
            raise ConfigError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.env = Env(name, 0 if split == "train" else 1, **params)
        self.split = split
        self.invalid_reward = float(invalid_reward)
        self.render_mode = render_mode
        self.step_limit = self.env.info["step_limit"]
        self.action_space = gymnasium.spaces.Discrete(MAX_MENU)
        self.observation_space = TextSpace()
        self._turns = 0

    def _info(self):
        menu = self.env.menu()
        mask = np.zeros(MAX_MENU, dtype=np.int8)
        mask[: len(menu)] = 1
        return {
            "menu": [(m.label, m.command) for m in menu],
            "afterstates": [m.afterstate for m in menu],
            "action_mask": mask,
            "seed": self.env.seed,
            "steps": self.env.steps,
        }

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is None:
            index = int(self.np_random.integers(0, 1 << 31))
            seed = 2 * index + (0 if self.split == "train" else 1)
        self._turns = 0
        return self.env.reset(seed), self._info()

    def step(self, action):
        if isinstance(action, np.integer):
            action = int(action)
        self._turns += 1
        menu = self.env.menu()
        if isinstance(action, str):
            compiled = self.env.compile(action)
            reason = None if compiled.valid else compiled.reason
            action = compiled.item
        elif isinstance(action, int) and 0 <= action < len(menu):
            reason = None
        else:
            reason = f"menu index {action!r} is not in 0..{len(menu) - 1}"
        if reason is not None:
            truncated = self._turns >= self.step_limit > 0
            info = self._info()
            info["invalid"] = reason
            return self.env.observation, self.invalid_reward, False, truncated, info
        t = self.env.step(action)
        truncated = t.truncated or (not t.terminal and self._turns >= self.step_limit > 0)
        info = self._info()
        info["success"] = t.success
        return t.observation, t.reward, t.terminal and not t.truncated, truncated, info

    def render(self):
        if self.render_mode == "ansi":
            lines = [self.env.observation] + [f"{m.label}) {m.command}" for m in self.env.menu()]
            return "\n".join(lines)
        return None
