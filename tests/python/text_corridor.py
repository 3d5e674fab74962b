"""A Gymnasium text env for the tests: a corridor of `length` cells, text
observations, Discrete(3) actions (left, right, wait) with an action mask in
info (no "left" at the left wall). Reaching the right end gives reward 1 and
terminates; every other step costs 0.05. The start cell depends on the seed."""
import gymnasium
import numpy as np


class Corridor(gymnasium.Env):
    metadata = {"render_modes": []}
    action_names = ["go left", "go right", "wait"]
    instructions = "Walk to the right end of the corridor."

    def __init__(self, length=5):
        self.length = int(length)
        self.observation_space = gymnasium.spaces.Text(max_length=200)
        self.action_space = gymnasium.spaces.Discrete(3)
        self.pos = 0

    def _obs(self):
        return f"You are in cell {self.pos} of {self.length}. " + \
            "".join("@" if i == self.pos else "." for i in range(self.length))

    def _info(self):
        return {"action_mask": np.array([self.pos > 0, True, True], dtype=np.int8)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = int(self.np_random.integers(0, self.length - 1))
        return self._obs(), self._info()

    def step(self, action):
        if action == 0 and self.pos == 0:
            raise ValueError("left at the left wall (masked)")
        self.pos += {0: -1, 1: 1, 2: 0}[int(action)]
        done = self.pos == self.length - 1
        return self._obs(), (1.0 if done else -0.05), done, False, self._info()
