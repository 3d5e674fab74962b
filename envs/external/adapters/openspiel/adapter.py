"""openspiel: any sequential OpenSpiel game as an rlid environment.

[env]
name = "openspiel"
game = "tic_tac_toe"         # any pyspiel.registered_names() game with <= 26 legal actions per turn
opponent = "random"          # the other seats: "random" (seeded by the episode) or "first" (first legal)
player = 0                   # the agent's seat, or -1: seat (seed / 2) mod players
opening = -1                 # random plies (>= 0) before the agent's first turn, so seeds vary
                             # instances (-1: 0 if the game starts with a chance event, else 2)
step_limit = 0               # agent decisions before truncation, 1..1000 (0: the game's max
                             # length, at most 1000)
game_params = {}             # passed to pyspiel.load_game (e.g. {rows = 5} for catch)

The menu is the agent's legal actions at its turns, each said by
state.action_to_string with the free-text grammar's decoration characters
( ) [ ] { } < > * _ ` ' " . , : ! turned into spaces ("x(0,1)" -> "x 0 1"), so
that every command compiles back to its action. Chance nodes are sampled and
the other seats play from a random stream seeded by the episode seed, so an
episode is a function of its seed and the agent's actions. Afterstates are
exact or absent: an action's afterstate is shown when clone() + apply_action
reaches the agent's next turn (or the end) with no chance event or other seat
in between, so it is the state the action leads to; otherwise the menu shows
none (never the outcome of a future random draw). The observation is the
game's observation string for the agent's seat. Reward: the change of the
agent's return; success: the episode ended with a return >= success_return
(default: the game's maximum utility for one-player games, > 0, a win,
otherwise).

A key out of its range (player, opening, step_limit above; a success_return that
is not a finite number) is refused with a message naming the key, the value and
the range: never clamped, never read as the default.
"""

import hashlib
import os
import random
import sys

import re  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, "..", "..", "python"))  # rlid_env, uninstalled
sys.path.append(os.path.join(HERE, ".."))  # _params, _pinned
from _params import integer, number  # noqa: E402
from _pinned import pinned_packages, require  # noqa: E402
from rlid_env import Action, Env, Step, run  # noqa: E402

REQUIRES = pinned_packages(HERE)  # adapter.toml
MAX_MENU = 26
MAX_STEP_LIMIT = 1000  # agent decisions an episode may take (step_limit's bound)
DECORATION = re.compile(r"""[()\[\]{}<>*_`'".,:!\s]+""")


def command_of(text):
    """action_to_string as a realisation the free-text grammar reads back unchanged."""
    return DECORATION.sub(" ", text).strip() or text


class Episode:
    """One game in progress: the pyspiel state, the seat, the others' random stream."""

    __slots__ = ("state", "rng", "player", "ret")

    def clone(self):
        other = Episode()
        other.state = self.state.clone()
        other.rng = random.Random()
        other.rng.setstate(self.rng.getstate())
        other.player, other.ret = self.player, self.ret
        return other


class OpenSpiel(Env):
    name = "openspiel"
    packages = tuple(REQUIRES)  # their installed versions go into the metadata message
    summary = "any sequential OpenSpiel game (pyspiel), the legal actions as the menu"
    afterstates = False  # menu() sends the exact ones; the helper must not step copies for others

    def __init__(self, params):
        super().__init__(params)
        require("openspiel", REQUIRES)
        import pyspiel  # after the version check: a clear error beats an ImportError

        self.pyspiel = pyspiel
        game = str(params.get("game", "tic_tac_toe"))
        if game not in pyspiel.registered_names():
            raise ValueError(f"openspiel: unknown game '{game}'; pyspiel knows: "
                             f"{', '.join(sorted(pyspiel.registered_names()))}")
        self.game = pyspiel.load_game(game, dict(params.get("game_params") or {}))
        t = self.game.get_type()
        if t.dynamics != pyspiel.GameType.Dynamics.SEQUENTIAL:
            raise ValueError(f"openspiel: '{game}' is a simultaneous-move game; rlid plays "
                             "sequential games (try a turn-based variant)")
        if not t.provides_observation_string:
            raise ValueError(f"openspiel: '{game}' provides no observation string to show the agent")
        self.players = self.game.num_players()
        self.opponent = str(params.get("opponent", "random"))
        if self.opponent not in ("random", "first"):
            raise ValueError(f"openspiel: opponent must be 'random' or 'first', got '{self.opponent}'")
        self.seat = integer("openspiel", params, "player", 0, -1, self.players - 1,
                            f"-1 (seat (seed / 2) mod players) or a seat 0..{self.players - 1} "
                            f"of '{game}'")
        default_success = self.game.max_utility() if self.players == 1 else 1e-9
        self.success_return = number("openspiel", params, "success_return", default_success)
        opening = integer("openspiel", params, "opening", -1, -1, None,
                          "-1 (the default: 0 if the game starts with a chance event, else 2) "
                          "or a count of plies >= 0")
        starts_by_chance = self.game.new_initial_state().is_chance_node()
        self.opening = opening if opening >= 0 else (0 if starts_by_chance else 2)
        limit = integer("openspiel", params, "step_limit", 0, 0, MAX_STEP_LIMIT,
                        f"0 (the game's max length) or 1..{MAX_STEP_LIMIT}")
        # 0: the game's own bound, capped (a default, not a configured value, is what is cut).
        self.step_limit = limit or max(1, min(self.game.max_game_length(), MAX_STEP_LIMIT))
        self.name = "openspiel"
        self.deterministic = True  # given the seed: chance and the opponents draw from it
        long_name = t.long_name
        self.instructions = (
            f"You play the game {long_name} (OpenSpiel '{game}')"
            + (f" against {self.players - 1} {'random' if self.opponent == 'random' else 'fixed'} "
               f"opponent(s)" if self.players > 1 else "")
            + ". Each turn, choose one of the legal moves.")

    # ---- the game loop ------------------------------------------------------------
    def _advance(self, ep):
        """Plays chance nodes and the other seats until the agent's turn or the end."""
        s = ep.state
        while not s.is_terminal() and s.current_player() != ep.player:
            if s.is_chance_node():
                outcomes = s.chance_outcomes()
                actions = [a for a, _ in outcomes]
                a = ep.rng.choices(actions, weights=[p for _, p in outcomes])[0]
            else:
                legal = s.legal_actions()
                a = ep.rng.choice(legal) if self.opponent == "random" else legal[0]
            s.apply_action(a)

    def _open(self, ep):
        """Plays `opening` uniformly random plies (chance by its odds), never ending the game."""
        s = ep.state
        for _ in range(self.opening):
            if s.is_chance_node():
                outcomes = s.chance_outcomes()
                s.apply_action(ep.rng.choices([a for a, _ in outcomes],
                                              weights=[p for _, p in outcomes])[0])
                continue
            alive = []
            for a in s.legal_actions():
                child = s.clone()
                child.apply_action(a)
                if not child.is_terminal():
                    alive.append(a)
            if not alive:
                break
            s.apply_action(ep.rng.choice(alive))

    def reset(self, seed, split):
        ep = Episode()
        ep.rng = random.Random(seed)
        ep.player = self.seat if self.seat >= 0 else (seed // 2) % self.players
        ep.state = self.game.new_initial_state()
        ep.ret = 0.0
        self._open(ep)
        self._advance(ep)
        return ep

    def clone(self, ep):
        return ep.clone()

    def task(self, ep):
        if self.players == 1:
            return ""
        return f"You are player {ep.player} of {self.players}."

    def observation(self, ep):
        s = ep.state
        text = s.observation_string(ep.player)
        if s.is_terminal():
            text += f"\nThe game is over; your return is {s.returns()[ep.player]:g}."
        return text

    def state_hash(self, ep):
        key = f"{ep.player}\x1f{ep.state.history_str()}"
        return hashlib.blake2b(key.encode(), digest_size=8).hexdigest()

    def menu(self, ep):
        s = ep.state
        legal = s.legal_actions()
        if len(legal) > MAX_MENU:
            raise ValueError(f"openspiel: {len(legal)} legal actions at this state; rlid menus "
                             f"hold at most {MAX_MENU} (choose a smaller game or board)")
        commands = [command_of(s.action_to_string(ep.player, a)) for a in legal]
        if len({c.lower() for c in commands}) < len(commands):
            raise ValueError(f"openspiel: two legal actions read the same once decoration is "
                             f"removed: {commands}")
        if not self.wants_afterstates:  # rlid will not read them
            return [Action(a, c) for a, c in zip(legal, commands)]
        afters = []
        for a in legal:
            after = Episode()
            after.state, after.player, after.ret = s.clone(), ep.player, ep.ret
            after.state.apply_action(a)
            exact = after.state.is_terminal() or after.state.current_player() == ep.player
            afters.append(after if exact else None)
        if any(x is None for x in afters):  # the next state is not known yet: show none
            return [Action(a, c) for a, c in zip(legal, commands)]
        return [Action(a, c, afterstate=self.observation(x), afterstate_hash=self.state_hash(x))
                for a, c, x in zip(legal, commands, afters)]

    def step(self, ep, action):
        if action not in ep.state.legal_actions():
            raise ValueError(f"openspiel: action {action} is not legal here")
        ep.state.apply_action(action)
        self._advance(ep)
        ret = ep.state.returns()[ep.player]  # cumulative (0 before the end for terminal-reward games)
        reward = ret - ep.ret
        ep.ret = ret
        done = ep.state.is_terminal()
        return Step(reward, terminal=done, success=done and ret >= self.success_return)


if __name__ == "__main__":
    run(OpenSpiel)
