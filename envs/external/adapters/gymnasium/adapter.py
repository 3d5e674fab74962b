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
step_limit = 0               # decisions before truncation, 1..1000000 (0: the env's
                             # max_episode_steps, else 100)
copy = "deepcopy"            # how an episode is copied: deepcopy (menu afterstates by stepping
                             # copies) or replay (rlid replays its actions; no afterstates)
success_return = 0           # success = terminated with an episode return above this (a finite
                             # number), unless the env's info says "success" or "is_success"

The menu at each turn is every action of the Discrete space, or the ones whose entry of
info["action_mask"] is nonzero when the env reports a mask (the convention of Gymnasium's
masked envs). The observation must be a string (a Text space); an env whose observations are
arrays but whose render_mode "ansi" returns text is read through render(). Episodes are seeded
by reset(seed=...), so an episode is a function of its seed and the agent's actions when the
env is deterministic given its seed.

What the env reports is checked, never read by its truthiness: a mask must have one entry
per action, each 0 or 1 (True or False), and allow one action at least; info["success"] /
info["is_success"] must be a bool (or the number 0 or 1). Anything else is an error naming
the key and the value, and so is a key above out of its range.
"""

import copy
import importlib
import numbers
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, "..", "..", "python"))  # rlid_env, uninstalled
sys.path.append(os.path.join(HERE, ".."))  # _params, _pinned
from _params import RLID_MAX_STEP_LIMIT, integer, number  # noqa: E402
from _pinned import pinned_packages, require  # noqa: E402
from rlid_env import Action, Env, Step, run  # noqa: E402

REQUIRES = pinned_packages(HERE)  # adapter.toml
MAX_MENU = 26


def flag(value):
    """True / False for a bool or a number equal to 1 / 0 (numpy's included), else None."""
    kind = type(value)
    numpy_bool = kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_")
    if isinstance(value, bool) or numpy_bool:
        return bool(value)
    if isinstance(value, numbers.Real) and value in (0, 1):  # NaN is neither
        return bool(value == 1)
    return None


def mask_entries(mask, n):
    """The entries of an action mask as n bools, or None unless it is a list, tuple or 1-d
    array of n entries, each 0/1 or True/False (text is not a mask)."""
    if isinstance(mask, (str, bytes, dict, set, frozenset)) or getattr(mask, "ndim", 1) != 1:
        return None
    try:
        entries = [flag(x) for x in mask]
    except TypeError:  # not iterable
        return None
    return entries if len(entries) == n and None not in entries else None


def _short(value):
    """repr(value), cut to 200 characters for a message."""
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


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
        self.step_limit = integer("gymnasium", params, "step_limit", 0, 0, RLID_MAX_STEP_LIMIT,
                                  f"0 (the env's max_episode_steps, else 100) or "
                                  f"1..{RLID_MAX_STEP_LIMIT}") or default_limit
        how = str(params.get("copy", "deepcopy"))
        if how not in ("deepcopy", "replay"):
            raise ValueError(f"gymnasium: copy must be 'deepcopy' or 'replay', got '{how}'")
        self.clonable = how == "deepcopy"
        self.afterstates = self.clonable
        self.success_return = number("gymnasium", params, "success_return", 0.0)
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

    def _legal(self, ep):
        """The actions info["action_mask"] allows (all without a mask); a malformed mask, or
        one that allows nothing at a state that is not over, is a ValueError naming it."""
        n = len(self.commands)
        mask = ep.info.get("action_mask") if isinstance(ep.info, dict) else None
        if mask is None:
            return list(range(n))
        entries = mask_entries(mask, n)
        if entries is None:
            raise ValueError(f"gymnasium: {self.id} reported info['action_mask'] = {_short(mask)}; "
                             f"a mask must have one entry per action ({n}), each 0 or 1 (True or "
                             "False)")
        if not any(entries):
            raise ValueError(f"gymnasium: {self.id} reported info['action_mask'] = {_short(mask)}, "
                             "which allows no action at a state that is not over")
        return [i for i in range(n) if entries[i]]

    def menu(self, ep):
        legal = self._legal(ep)
        if len(legal) > MAX_MENU:
            raise ValueError(f"gymnasium: {len(legal)} legal actions; rlid menus hold at most "
                             f"{MAX_MENU}")
        return [Action(i, self.commands[i]) for i in legal]

    def step(self, ep, action):
        ep.obs, reward, terminated, truncated, ep.info = ep.env.step(self.start + action)
        ep.ret += float(reward)
        info = ep.info if isinstance(ep.info, dict) else {}
        if "success" in info or "is_success" in info:
            key = "success" if "success" in info else "is_success"
            success = flag(info[key])
            if success is None:
                raise ValueError(f"gymnasium: {self.id} reported info['{key}'] = "
                                 f"{_short(info[key])}; it must be a bool (True or False) or the "
                                 "number 0 or 1")
        else:
            success = bool(terminated) and ep.ret > self.success_return
        return Step(float(reward), terminal=bool(terminated or truncated), success=success,
                    truncated=bool(truncated and not terminated))


if __name__ == "__main__":
    run(Gymnasium)
