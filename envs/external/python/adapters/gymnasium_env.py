"""gymnasium: any Gymnasium env with text observations and a Discrete action space as an
rlid environment.

[env]
name = "gymnasium"
id = "MyTextEnv-v0"          # a registered id, or "package.module:Class" (imported, then
                             # gymnasium.make'd with env_params)
env_params = {}              # keyword arguments of gymnasium.make / the class
actions = {}                 # the command of each action, {"0" = "go left", "1" = ...}
                             # (default: the env's action_names / get_action_meanings(),
                             # else "action 0", "action 1", ...)
step_limit = 0               # decisions before truncation (0: the env's max_episode_steps, else 100)
copy = "deepcopy"            # how an episode is copied: deepcopy (menu afterstates by stepping
                             # copies) or replay (rlid replays its actions; no afterstates)
success_return = 0           # success = terminated with an episode return above this, unless
                             # the env's info says "success" or "is_success"

The menu at each turn is every action of the Discrete space, or the ones whose entry of
info["action_mask"] is nonzero when the env reports a mask (the convention of Gymnasium's
masked envs). The observation must be a string (a Text space); an env whose observations are
arrays but whose render_mode "ansi" returns text is read through render(). Episodes are seeded
by reset(seed=...), so an episode is a function of its seed and the agent's actions when the
env is deterministic given its seed.
"""

import copy
import importlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, ".."))  # rlid_env, uninstalled
sys.path.append(HERE)
from _pinned import require  # noqa: E402
from rlid_env import Action, Env, Step, run  # noqa: E402

REQUIRES = {"gymnasium": "1.4.0"}
MAX_MENU = 26


class Episode:
    __slots__ = ("env", "obs", "info", "ret", "done")


class Gymnasium(Env):
    name = "gymnasium"
    packages = tuple(REQUIRES)
    summary = "any Gymnasium env with text observations and a Discrete action space"

    def __init__(self, params):
        super().__init__(params)
        require("gymnasium", REQUIRES)
        import gymnasium

        self.gym = gymnasium
        self.id = str(params.get("id", ""))
        if not self.id:
            raise ValueError("gymnasium: [env] id is required: a registered env id or "
                             "'package.module:Class'")
        self.env_params = dict(params.get("env_params") or {})
        self.use_render = False
        probe = self._make()
        space = probe.action_space
        if not isinstance(space, gymnasium.spaces.Discrete):
            raise ValueError(f"gymnasium: {self.id} has action space {space}; rlid menus need "
                             "a Discrete one")
        if space.n > MAX_MENU and not params.get("actions"):
            raise ValueError(f"gymnasium: {self.id} has {space.n} actions; rlid menus hold at "
                             f"most {MAX_MENU} (masked menus may be larger: name the actions)")
        self.start = int(space.start)
        self.commands = self._commands(probe, space.n, params.get("actions"))
        obs, _ = probe.reset(seed=0)
        if not isinstance(obs, str):
            if getattr(probe, "render_mode", None) == "ansi":
                self.use_render = True
            else:
                raise ValueError(
                    f"gymnasium: {self.id} observes {type(obs).__name__}, not text; rlid envs "
                    "are read as text (a Text observation space, or render_mode='ansi' in "
                    "env_params)")
        spec = getattr(probe, "spec", None)
        default_limit = (spec.max_episode_steps if spec and spec.max_episode_steps else 100)
        self.step_limit = int(params.get("step_limit", 0)) or default_limit
        how = str(params.get("copy", "deepcopy"))
        if how not in ("deepcopy", "replay"):
            raise ValueError(f"gymnasium: copy must be 'deepcopy' or 'replay', got '{how}'")
        self.clonable = how == "deepcopy"
        self.afterstates = self.clonable
        self.success_return = float(params.get("success_return", 0.0))
        self.deterministic = True
        self.instructions = str(getattr(probe.unwrapped, "instructions", "") or
                                f"You act in the Gymnasium environment {self.id}. Each turn, "
                                "choose one of the actions.")
        probe.close()

    def _make(self):
        if ":" in self.id and self.id not in self.gym.registry:
            module, _, attr = self.id.partition(":")
            try:
                cls = getattr(importlib.import_module(module), attr)
            except (ImportError, AttributeError) as e:
                raise ValueError(f"gymnasium: cannot import {self.id}: {e}") from None
            return cls(**self.env_params)
        try:
            return self.gym.make(self.id, **self.env_params)
        except self.gym.error.Error as e:
            raise ValueError(f"gymnasium: cannot make {self.id}: {e}") from None

    @staticmethod
    def _commands(env, n, given):
        if given:
            try:
                by_index = {int(k): str(v) for k, v in dict(given).items()}
            except (TypeError, ValueError):
                raise ValueError('gymnasium: actions is a table {"0" = "command", ...}') from None
            missing = [i for i in range(n) if i not in by_index]
            if missing or len(by_index) != n:
                raise ValueError(f"gymnasium: actions must name each of the {n} actions "
                                 f"0..{n - 1} once (missing: {missing})")
            names = [by_index[i] for i in range(n)]
        else:
            u = env.unwrapped
            names = list(getattr(u, "action_names", None) or [])
            if not names and hasattr(u, "get_action_meanings"):
                names = list(u.get_action_meanings())
            names = names or [f"action {i}" for i in range(n)]
        if len(names) != n:
            raise ValueError(f"gymnasium: {len(names)} action names for {n} actions")
        if len({c.strip().lower() for c in names}) < n:
            raise ValueError(f"gymnasium: action names must differ: {names}")
        return names

    def _text(self, ep):
        return ep.env.render() if self.use_render else ep.obs

    def reset(self, seed, split):
        ep = Episode()
        ep.env = self._make()
        ep.obs, ep.info = ep.env.reset(seed=seed)
        ep.ret, ep.done = 0.0, False
        return ep

    def clone(self, ep):
        return copy.deepcopy(ep)

    def observation(self, ep):
        text = self._text(ep)
        if not isinstance(text, str):
            raise ValueError(f"gymnasium: {self.id} returned a {type(text).__name__} observation")
        return text

    def menu(self, ep):
        mask = ep.info.get("action_mask") if isinstance(ep.info, dict) else None
        legal = [i for i in range(len(self.commands)) if mask is None or mask[i]]
        if len(legal) > MAX_MENU:
            raise ValueError(f"gymnasium: {len(legal)} legal actions; rlid menus hold at most "
                             f"{MAX_MENU}")
        return [Action(i, self.commands[i]) for i in legal]

    def step(self, ep, action):
        ep.obs, reward, terminated, truncated, ep.info = ep.env.step(self.start + action)
        ep.ret += float(reward)
        info = ep.info if isinstance(ep.info, dict) else {}
        if "success" in info or "is_success" in info:
            success = bool(info.get("success", info.get("is_success")))
        else:
            success = bool(terminated) and ep.ret > self.success_return
        return Step(float(reward), terminal=bool(terminated or truncated), success=success,
                    truncated=bool(truncated and not terminated))


if __name__ == "__main__":
    run(Gymnasium)
