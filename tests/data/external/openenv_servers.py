"""Tiny OpenEnv servers for the openenv adapter's tests (no network, no download).

Built from openenv-core's own server classes (Environment, Action, Observation,
MCPEnvironment, create_app); the adapter starts one of them itself with
`server = "<this file>:<app>"` (uvicorn on 127.0.0.1, a free port).

  grid_app    discrete: an Enum action field (`move`) and `legal_moves` in the
              observation; seeded reset; a server-side step limit reported as
              `truncated`
  nim_app     discrete: an int action field (`take`) whose values are only the
              observation's `legal_actions`; a seeded random opponent
  switch_app  discrete MCP: a tools list of argument-free tools and one Literal
              argument (the adapter expands it), seeded
  echo_app    free text (MCP echo_message(message: str), like OpenEnv's echo_env):
              the adapter must refuse it
  say_app     free text (a plain `message: str` action): refused as well
  unseeded_app  the grid with a reset that ignores the seed
"""

import random
from enum import Enum
from typing import Any, List, Literal, Optional

from fastmcp import FastMCP
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

# ---- grid: an enum action, legal moves in the observation ----------------------------


class Move(str, Enum):
    NORTH = "north"
    SOUTH = "south"
    EAST = "east"
    WEST = "west"


class GridAction(Action):
    move: Move = Field(..., description="the direction to walk")


class GridObservation(Observation):
    board: List[str] = Field(default_factory=list, description="the grid, one row a line")
    message: str = ""
    legal_moves: List[str] = Field(default_factory=list)
    truncated: bool = False


SIZE = 4
STEPS = 10
DELTA = {"north": (-1, 0), "south": (1, 0), "east": (0, 1), "west": (0, -1)}


class GridEnvironment(Environment):
    """Walk from S to the treasure T on a 4 x 4 grid with two walls (#)."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    SEEDED = True

    def __init__(self):
        super().__init__()
        self._state = State(step_count=0)
        self.walls, self.at, self.goal = set(), (0, 0), (3, 3)

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None,
              **kwargs: Any) -> GridObservation:
        rng = random.Random(seed if self.SEEDED else None)
        cells = [(r, c) for r in range(SIZE) for c in range(SIZE)]
        while True:  # a start with a way out
            picks = rng.sample(cells, 4)
            self.at, self.goal, self.walls = picks[0], picks[1], set(picks[2:])
            if self._legal():
                break
        self._state = State(episode_id=episode_id, step_count=0)
        return self._observe("Find the treasure.", 0.0, False)

    def _legal(self):
        out = []
        for name, (dr, dc) in DELTA.items():
            r, c = self.at[0] + dr, self.at[1] + dc
            if 0 <= r < SIZE and 0 <= c < SIZE and (r, c) not in self.walls:
                out.append(name)
        return out

    def _observe(self, message, reward, done, truncated=False):
        rows = []
        for r in range(SIZE):
            rows.append("".join("S" if (r, c) == self.at else "T" if (r, c) == self.goal
                                else "#" if (r, c) in self.walls else "." for c in range(SIZE)))
        return GridObservation(board=rows, message=message, legal_moves=[] if done else self._legal(),
                               truncated=truncated, reward=reward, done=done)

    def step(self, action: GridAction, timeout_s: Optional[float] = None, **kwargs: Any):
        move = action.move.value
        if move not in self._legal():
            return self._observe(f"You cannot go {move}.", 0.0, False)
        dr, dc = DELTA[move]
        self.at = (self.at[0] + dr, self.at[1] + dc)
        self._state.step_count += 1
        if self.at == self.goal:
            return self._observe("You found the treasure!", 1.0, True)
        if self._state.step_count >= STEPS:
            return self._observe("Time is up.", 0.0, True, truncated=True)
        return self._observe(f"You went {move}.", 0.0, False)

    @property
    def state(self) -> State:
        return self._state


class UnseededGridEnvironment(GridEnvironment):
    SEEDED = False


# ---- nim: an int action, legal actions in the observation ---------------------------


class NimAction(Action):
    take: int = Field(..., description="stones to take (one of legal_actions)")


class NimObservation(Observation):
    stones: int = 0
    message: str = ""
    legal_actions: List[int] = Field(default_factory=list)


class NimEnvironment(Environment):
    """Take 1-3 stones; whoever takes the last stone wins; a seeded random opponent."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self.stones, self.rng = 0, random.Random(0)
        self._state = State(step_count=0)

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None,
              **kwargs: Any) -> NimObservation:
        self.rng = random.Random(seed)
        self.stones = self.rng.randint(5, 12)
        self._state = State(episode_id=episode_id, step_count=0)
        return self._observe(f"There are {self.stones} stones.", 0.0, False)

    def _observe(self, message, reward, done):
        legal = [] if done else list(range(1, min(3, self.stones) + 1))
        return NimObservation(stones=self.stones, message=message, legal_actions=legal,
                              reward=reward, done=done)

    def step(self, action: NimAction, timeout_s: Optional[float] = None, **kwargs: Any):
        if not 1 <= action.take <= min(3, self.stones):
            raise ValueError(f"illegal take {action.take}")
        self._state.step_count += 1
        self.stones -= action.take
        if self.stones == 0:
            return self._observe("You took the last stone and win.", 1.0, True)
        reply = self.rng.randint(1, min(3, self.stones))
        self.stones -= reply
        if self.stones == 0:
            return self._observe(f"The opponent took {reply}, the last stone; you lose.", -1.0, True)
        return self._observe(f"The opponent took {reply}.", 0.0, False)

    @property
    def state(self) -> State:
        return self._state


# ---- switches: a discrete MCP tools list ---------------------------------------------


class SwitchEnvironment(MCPEnvironment):
    """Set the lamps to the target pattern. flip_red / flip_blue toggle one lamp;
    press(button) toggles two (left: red and green, right: blue and green)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        mcp = FastMCP("switches")
        env = self

        @mcp.tool
        def flip_red() -> str:
            """Toggle the red lamp."""
            return env._toggle("red")

        @mcp.tool
        def flip_blue() -> str:
            """Toggle the blue lamp."""
            return env._toggle("blue")

        @mcp.tool
        def press(button: Literal["left", "right"]) -> str:
            """Press a button: left toggles red and green, right toggles blue and green."""
            return env._toggle("red", "green") if button == "left" else env._toggle("blue", "green")

        super().__init__(mcp)
        self.lamps = {"red": False, "blue": False, "green": False}
        self.target = dict(self.lamps)
        self._state = State(step_count=0)

    @staticmethod
    def _show(lamps):
        return ", ".join(f"{k} {'on' if v else 'off'}" for k, v in lamps.items())

    def _toggle(self, *names):
        for n in names:
            self.lamps[n] = not self.lamps[n]
        return f"Lamps: {self._show(self.lamps)}. Target: {self._show(self.target)}."

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None,
              **kwargs: Any) -> Observation:
        rng = random.Random(seed)
        self.target = {k: rng.random() < 0.5 for k in ("red", "blue", "green")}
        while True:
            self.lamps = {k: rng.random() < 0.5 for k in ("red", "blue", "green")}
            if self.lamps != self.target:
                break
        self._state = State(episode_id=episode_id, step_count=0)
        return CallToolObservation(tool_name="reset", result=self._toggle(), reward=0.0, done=False)

    def step(self, action: Action, timeout_s: Optional[float] = None, **kwargs: Any):
        obs = super().step(action, timeout_s=timeout_s, **kwargs)
        if isinstance(action, CallToolAction):
            self._state.step_count += 1
            done = self.lamps == self.target
            obs.reward, obs.done = (1.0 if done else 0.0), done
        return obs

    def _step_impl(self, action: Action, timeout_s: Optional[float] = None, **kwargs: Any):
        return Observation(done=False, reward=0.0, metadata={"error": "use call_tool"})

    @property
    def state(self) -> State:
        return self._state


# ---- free text: refused ---------------------------------------------------------------


class EchoEnvironment(MCPEnvironment):
    """OpenEnv's echo_env, in miniature: one tool that takes free text."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        mcp = FastMCP("echo_env")

        @mcp.tool
        def echo_message(message: str) -> str:
            """Echo back the provided message."""
            return message

        super().__init__(mcp)
        self._state = State(step_count=0)

    def reset(self, seed=None, episode_id=None, **kwargs) -> Observation:
        return Observation(done=False, reward=0.0)

    def _step_impl(self, action, timeout_s=None, **kwargs):
        return Observation(done=False, reward=0.0)

    @property
    def state(self) -> State:
        return self._state


class SayAction(Action):
    message: str = Field(..., description="anything")


class SayObservation(Observation):
    echoed: str = ""


class SayEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self._state = State(step_count=0)

    def reset(self, seed=None, episode_id=None, **kwargs) -> SayObservation:
        return SayObservation()

    def step(self, action: SayAction, timeout_s=None, **kwargs) -> SayObservation:
        return SayObservation(echoed=action.message, reward=0.0, done=True)

    @property
    def state(self) -> State:
        return self._state


grid_app = create_app(GridEnvironment, GridAction, GridObservation, env_name="grid",
                      max_concurrent_envs=4)
unseeded_app = create_app(UnseededGridEnvironment, GridAction, GridObservation,
                          env_name="grid_unseeded", max_concurrent_envs=4)
nim_app = create_app(NimEnvironment, NimAction, NimObservation, env_name="nim", max_concurrent_envs=1)
switch_app = create_app(SwitchEnvironment, CallToolAction, CallToolObservation, env_name="switches",
                        max_concurrent_envs=4)
echo_app = create_app(EchoEnvironment, CallToolAction, CallToolObservation, env_name="echo_env",
                      max_concurrent_envs=4)
say_app = create_app(SayEnvironment, SayAction, SayObservation, env_name="say", max_concurrent_envs=4)
app = grid_app
