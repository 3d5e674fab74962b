"""textarena: TextArena's single-player games, and two-player ones against a seeded opponent.

[env]
name = "textarena"
game = "TowerOfHanoi-v0"     # a TextArena env id (textarena.envs.registration.ENV_REGISTRY) of a
                             # supported game (below); "-raw"/"-train" suffixes are accepted
game_params = {}             # overrides of the id's constructor arguments (e.g. {num_disks = 4})
opponent = "random"          # two-player games: the other seat plays "random" (a stream seeded by
                             # the episode seed) or "first" (the first valid move)
player = 0                   # two-player games: the agent's seat, or -1: a seeded draw per episode
opening = -1                 # at most this many seeded random valid moves (a seeded number from
                             # 1..opening, of either seat, never ending the game) before the
                             # agent's first decision, so that games whose reset ignores the seed
                             # vary; they count toward the game's turn limit. -1: the game's
                             # default (0 where reset(seed) varies the instance; TowerOfHanoi
                             # min(8, max_turns + 1 - (2^disks - 1)), TicTacToe 2, ConnectFour 4,
                             # Nim 2)
view = ""                    # observation: "turn" (what the game said since the agent's last
                             # decision, then the current board) or "log" (everything it said,
                             # then the board); "": "log" for GuessTheNumber and KuhnPoker, whose
                             # past hints and cards are not on a board, else "turn"
step_limit = 0               # agent decisions before truncation, 1..1000000 (0: the game's own
                             # bound: max_turns + 1 moves where it counts turns, 5 for TicTacToe,
                             # ...; 1000 for 2048, which has none)

Supported games (every registered variant of each): TowerOfHanoi, FrozenLake,
LightsOut, GuessTheNumber and 2048 (one player); TicTacToe, ConnectFour, Nim
and KuhnPoker (two players). For each, the menu is the game's own set of valid
moves at the state, enumerated exactly from its game state by the game's own
rules (the moves its step() accepts without an "invalid move"), said as the
text inside the game's brackets ("[A C]" is "A C", "[col 3]" is "col 3", with
the game's other accepted forms as realisations: "3" for "[col 3]"); the adapter
sends the bracketed string the game parses. A state with more than 26 valid
moves is refused (a menu's limit). Games that download word lists at run time
(nltk: Hangman, Wordle, WordLadder, ...), that need an LLM or a jury, or whose
moves are free text are refused with a message that says why.

The observation and the task are the game's own text: the task is the game's
prompt for the agent's seat; the observation is the messages the game sent to
the agent (its moves described, hints, the opponent's moves) and its latest
board, and once the game is over its reason and the agent's reward. TextArena
seeds Python's global random module in reset(); the adapter keeps each
episode's own copy of that generator's state and swaps it in around every call
into the game, so an episode is a function of its seed and the agent's moves
even with many episodes interleaved in one process (deterministic, checked).

Afterstates are exact or absent: a menu carries them when every move's result
is known without a random draw, hidden information or another seat's move (the
game is stepped on a deep copy and the global generator's state compared before
and after); otherwise (2048's new tile, GuessTheNumber's hint, an opponent's
reply, Kuhn Poker's cards) the menu shows none. Reward: the game's reward for
the agent (rewards[agent] when the game ends, 0 before; single-player games pay
their partial-completion score on a loss or a timeout). Success: the game's own
win (the puzzle solved, the goal reached; in two-player games a reward above
the opponent's). A game that ends by its own turn limit without a win or a loss
is truncated (rlid bootstraps it; the menu at the cut is the position's
valid moves, without afterstates); a win, a loss or a two-player end is
terminal. Splits: TextArena has none of its own (its "-train" ids are
observation wrappers, not instances), so seed parity: even seeds train, odd
test; reset(seed) seeds the game with the whole seed. Oracles, where the game's state makes optimal play exact:
TowerOfHanoi (breadth-first distances), FrozenLake (shortest path around the
holes) and LightsOut (the least presses, solved over GF(2)).

A key out of its range (player -1..players-1, opening -1 or >= 0, step_limit
0..1000000) is refused with a message naming the key, the value and the range:
never clamped, never read as the default.
"""

import copy
import hashlib
import os
import pickle
import random
import re
import sys
from collections import deque

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, "..", "..", "python"))  # rlid_env, uninstalled
sys.path.append(os.path.join(HERE, ".."))  # _params, _pinned
from _params import RLID_MAX_STEP_LIMIT, integer  # noqa: E402
from _pinned import pinned_packages, require  # noqa: E402
from rlid_env import Action, Env, Step, run  # noqa: E402

REQUIRES = pinned_packages(HERE)  # adapter.toml
MAX_MENU = 26
RESET_TRIES = 20        # seeded openings tried before a game that ends before the agent's turn fails
NO_LIMIT_STEPS = 1000    # agent decisions allowed in a game without its own bound (2048)
DECORATION = re.compile(r"""[()\[\]{}<>*_`'".,:!\s]+""")


def plain(text):
    """A move's bracketed text as a realisation the free-text grammar reads back unchanged."""
    return DECORATION.sub(" ", text).strip()


# ---- the supported games ------------------------------------------------------------
# Each game: players, how its valid moves are enumerated from the env's game state (a list
# of (action id, bracketed action string, other accepted realisations)), its win (and, for
# one-player games, its real losses: any other end is the game's turn limit), whether its
# reset already depends on the seed, whether stepping reveals hidden information, and
# which observation messages form the current board.

class Game:
    players = 1
    opening = 0          # default `opening`: 0 where reset(seed) alone varies the instance
    hidden = False       # a move's outcome depends on something the agent does not see
    view = "turn"        # the default observation view
    says_moves = True    # the game describes each move itself (else the log quotes the move)
    chance = False       # a move is followed by a random draw (its result is not known before)

    def moves(self, env, pid):
        raise NotImplementedError

    def won(self, env, pid):
        st = env.state
        if self.players == 1:
            raise NotImplementedError
        r = st.rewards or {}
        return r.get(pid, 0) > r.get(1 - pid, 0)

    def lost(self, env, pid):
        return self.players > 1  # two-player games have no turn limit: every end is real

    def bound(self, env):
        """Agent decisions an episode can take at most, or None if the game has no bound."""
        st = env.state
        return st.max_turns + 1 if getattr(st, "max_turns", None) else None

    def check(self, env):
        """Refuses a configuration whose menus could exceed the limit (ValueError)."""

    def opening_for(self, env):
        """The default `opening` for this configuration of the game."""
        return self.opening

    oracle = None


class TowerOfHanoi(Game):
    PAIRS = [(s, t) for s in "ABC" for t in "ABC" if s != t]

    def opening_for(self, env):
        # at most 8, and never more than the turns the game accepts beyond the 2^n - 1 moves a
        # solution can need (the opening's moves count toward the game's turn limit)
        return max(0, min(8, env.max_turns + 1 - (2 ** env.num_disks - 1)))

    def moves(self, env, pid):
        towers = env.state.game_state["towers"]
        out = []
        for i, (s, t) in enumerate(self.PAIRS):
            if towers[s] and (not towers[t] or towers[t][-1] > towers[s][-1]):
                out.append((i, f"[{s} {t}]", ()))
        return out

    def won(self, env, pid):
        return env.state.game_state["towers"]["C"] == list(range(env.num_disks, 0, -1))

    def lost(self, env, pid):
        return False

    def _key(self, towers, n):
        where = [None] * (n + 1)
        for name, disks in towers.items():
            for d in disks:
                where[d] = name
        return tuple(where[1:])

    def _distances(self, n):
        """Moves from every position of n disks to all disks on C (BFS from the goal)."""
        cache = getattr(self, "_dist", {})
        self._dist = cache
        if n in cache:
            return cache[n]
        goal = ("C",) * n
        dist = {goal: 0}
        queue = deque([goal])
        while queue:
            key = queue.popleft()
            for nxt in self._neighbours(key):
                if nxt not in dist:
                    dist[nxt] = dist[key] + 1
                    queue.append(nxt)
        cache[n] = dist
        return dist

    @staticmethod
    def _neighbours(key):
        tops = {}
        for d in range(len(key), 0, -1):  # smallest disk last: it is the top
            tops[key[d - 1]] = d
        for s, t in TowerOfHanoi.PAIRS:
            if s in tops and (t not in tops or tops[t] > tops[s]):
                k = list(key)
                k[tops[s] - 1] = t
                yield tuple(k)

    def oracle(self, env, pid):
        n = env.num_disks
        dist = self._distances(n)
        here = dist[self._key(env.state.game_state["towers"], n)]
        left = env.state.max_turns + 1 - env.state.turn  # moves the game still accepts
        best = []
        for i, src, _ in self.moves(env, pid):
            towers = copy.deepcopy(env.state.game_state["towers"])
            s, t = self.PAIRS[i]
            towers[t].append(towers[s].pop())
            if dist[self._key(towers, n)] == here - 1:
                best.append(i)
        return best, (1.0 if here <= left else None)


class FrozenLake(Game):
    DIRS = [("up", (-1, 0)), ("down", (1, 0)), ("left", (0, -1)), ("right", (0, 1))]

    def moves(self, env, pid):
        r, c = env.state.game_state["player_pos"]
        n = env.size
        return [(i, f"[{name}]", ()) for i, (name, (dr, dc)) in enumerate(self.DIRS)
                if 0 <= r + dr < n and 0 <= c + dc < n]

    def won(self, env, pid):
        return tuple(env.state.game_state["player_pos"]) == tuple(env.state.game_state["goal_pos"])

    def lost(self, env, pid):
        r, c = env.state.game_state["player_pos"]
        return env.state.game_state["grid"][r][c] == "H"

    def oracle(self, env, pid):
        gs = env.state.game_state
        grid, goal, n = gs["grid"], tuple(gs["goal_pos"]), env.size
        dist = {goal: 0}
        queue = deque([goal])
        while queue:
            r, c = queue.popleft()
            for _, (dr, dc) in self.DIRS:
                nr, nc = r + dr, c + dc
                if 0 <= nr < n and 0 <= nc < n and (nr, nc) not in dist and grid[nr][nc] != "H":
                    dist[(nr, nc)] = dist[(r, c)] + 1
                    queue.append((nr, nc))
        r, c = gs["player_pos"]
        here = dist.get((r, c))
        if here is None:
            return [], None
        best = [i for i, _, _ in self.moves(env, pid)
                if dist.get((r + self.DIRS[i][1][0], c + self.DIRS[i][1][1])) == here - 1]
        left = env.state.max_turns + 1 - env.state.turn
        return best, (1.0 if here <= left else None)


class LightsOut(Game):
    def check(self, env):
        if env.size * env.size > MAX_MENU:
            raise ValueError(f"textarena: LightsOut of size {env.size} has {env.size ** 2} valid "
                             f"moves; rlid menus hold at most {MAX_MENU} (size <= 5)")

    def moves(self, env, pid):
        n = env.size
        return [(r * n + c, f"[{r} {c}]", ()) for r in range(n) for c in range(n)]

    def won(self, env, pid):
        return not any(any(row) for row in env.state.game_state["grid"])

    def lost(self, env, pid):
        return False

    def bound(self, env):
        return env.max_turns

    @staticmethod
    def _press_sets(n):
        """For each cell, the bit mask of the lights pressing it toggles."""
        masks = []
        for r in range(n):
            for c in range(n):
                m = 0
                for dr, dc in ((0, 0), (-1, 0), (1, 0), (0, -1), (0, 1)):
                    rr, cc = r + dr, c + dc
                    if 0 <= rr < n and 0 <= cc < n:
                        m |= 1 << (rr * n + cc)
                masks.append(m)
        return masks

    def _solutions(self, grid):
        """Every set of presses (bit masks) that turns all lights off, over GF(2)."""
        n = len(grid)
        cells = n * n
        masks = self._press_sets(n)
        target = 0
        for r in range(n):
            for c in range(n):
                if grid[r][c]:
                    target |= 1 << (r * n + c)
        # rows: equation for light j: sum_i A[j][i] x_i = b_j; A[j][i] = bit j of masks[i]
        rows = []
        for j in range(cells):
            coeff = 0
            for i in range(cells):
                if masks[i] >> j & 1:
                    coeff |= 1 << i
            rows.append([coeff, target >> j & 1])
        pivots = []
        rank = 0
        for col in range(cells):
            p = next((k for k in range(rank, cells) if rows[k][0] >> col & 1), None)
            if p is None:
                continue
            rows[rank], rows[p] = rows[p], rows[rank]
            for k in range(cells):
                if k != rank and rows[k][0] >> col & 1:
                    rows[k][0] ^= rows[rank][0]
                    rows[k][1] ^= rows[rank][1]
            pivots.append(col)
            rank += 1
        if any(rows[k][0] == 0 and rows[k][1] for k in range(rank, cells)):
            return []
        free = [c for c in range(cells) if c not in pivots]
        sols = []
        for assign in range(1 << len(free)):
            x = 0
            for b, f in enumerate(free):
                if assign >> b & 1:
                    x |= 1 << f
            for k, col in enumerate(pivots):
                bit = rows[k][1]
                rest = rows[k][0] & ~(1 << col)
                bit ^= bin(rest & x).count("1") & 1
                if bit:
                    x |= 1 << col
            sols.append(x)
        return sols

    def oracle(self, env, pid):
        sols = self._solutions(env.state.game_state["grid"])
        if not sols:
            return [], None
        best = min(bin(x).count("1") for x in sols)
        ids = sorted({i for x in sols if bin(x).count("1") == best
                      for i in range(env.size ** 2) if x >> i & 1})
        left = env.max_turns - env.state.game_state["moves_made"]
        return ids, (1.0 if best <= left else None)


class GuessTheNumber(Game):
    hidden = True
    view = "log"
    says_moves = False  # it answers "higher"/"lower" without repeating the guess

    def check(self, env):
        count = env.max_number - env.min_number + 1
        if count > MAX_MENU:
            raise ValueError(f"textarena: GuessTheNumber over {env.min_number}..{env.max_number} has "
                             f"{count} valid guesses; rlid menus hold at most {MAX_MENU}")

    def moves(self, env, pid):
        return [(n - env.min_number, f"[{n}]", ()) for n in range(env.min_number, env.max_number + 1)
                if n not in env.guessed_numbers]

    def won(self, env, pid):
        return env.state.game_state["game_number"] in env.guessed_numbers

    def lost(self, env, pid):
        return False


class Game2048(Game):
    DIRS = ["Up", "Down", "Left", "Right"]
    chance = True  # a new tile at a random empty cell after every move

    def moves(self, env, pid):
        board = env.state.game_state["board"]
        out = []
        for d, name in enumerate(self.DIRS):
            saved = [row[:] for row in board]
            moved, _ = env._apply_move(d)  # the game's own slide (no random draw)
            for row, old in zip(board, saved):
                row[:] = old
            if moved:  # the game refuses a move that changes nothing
                out.append((d, f"[{name}]", ()))
        return out

    def won(self, env, pid):
        return env._max_tile() >= env.target_tile

    def lost(self, env, pid):
        return True  # no valid move left (2048 has no turn limit)

    def bound(self, env):
        return None


class TicTacToe(Game):
    players = 2
    opening = 2

    def moves(self, env, pid):
        board = env.state.game_state["board"]
        return [(r * 3 + c, f"[{r * 3 + c}]", ()) for r in range(3) for c in range(3)
                if board[r][c] == ""]

    def bound(self, env):
        return 5


class ConnectFour(Game):
    players = 2
    opening = 4

    def check(self, env):
        if env.num_cols > MAX_MENU:
            raise ValueError(f"textarena: ConnectFour with {env.num_cols} columns; rlid menus hold "
                             f"at most {MAX_MENU}")

    def moves(self, env, pid):
        board = env.state.game_state["board"]
        return [(c, f"[col {c}]", (str(c),)) for c in range(env.num_cols) if board[0][c] == "."]

    def bound(self, env):
        return env.num_rows * env.num_cols // 2 + 1


class Nim(Game):
    players = 2
    opening = 2

    def check(self, env):
        if sum(env.initial_piles) > MAX_MENU:
            raise ValueError(f"textarena: Nim with piles {env.initial_piles} has "
                             f"{sum(env.initial_piles)} valid moves at the start; rlid menus hold "
                             f"at most {MAX_MENU} (Nim-v0 and Nim-v0-medium fit)")

    def moves(self, env, pid):
        piles = env.state.game_state["piles"]
        return [(p * 64 + q - 1, f"[{p} {q}]", ()) for p, amount in enumerate(piles)
                for q in range(1, amount + 1)]

    def bound(self, env):
        return sum(env.initial_piles)


class KuhnPoker(Game):
    players = 2
    hidden = True
    chance = True  # the cards of each round
    view = "log"
    NAMES = ["check", "bet", "call", "fold"]

    def moves(self, env, pid):
        tree = env.state.game_state["current_legal_action_tree"]
        if not isinstance(tree, dict):
            return []
        return [(self.NAMES.index(k), f"[{k}]", ()) for k in tree if k in self.NAMES]

    def bound(self, env):
        return 2 * env.max_rounds


GAMES = {"TowerOfHanoi": TowerOfHanoi, "FrozenLake": FrozenLake, "LightsOut": LightsOut,
         "GuessTheNumber": GuessTheNumber, "Game2048": Game2048, "TicTacToe": TicTacToe,
         "ConnectFour": ConnectFour, "Nim": Nim, "KuhnPoker": KuhnPoker}

# Why some well-known games are refused (the rest: their moves are not enumerated exactly here).
REFUSED = {
    "Hangman": "it downloads nltk's word list at run time (no network at env run time), and a "
               "guess may be any word",
    "Wordle": "it downloads nltk word lists at run time, and a guess is any five-letter word",
    "WordLadder": "it downloads nltk word lists at run time", "WordChains": "it needs nltk",
    "SpellingBee": "it needs nltk word lists", "Crosswords": "its words and clues need nltk",
    "WordSearch": "it needs nltk word lists", "Codenames": "it needs nltk word lists",
    "DontSayIt": "it needs nltk word lists", "LetterAuction": "it needs nltk word lists",
    "TwentyQuestions": "its answers come from an LLM", "GuessWho": "its answers come from an LLM",
    "Debate": "it is judged by an LLM jury",
    "Sudoku": "a cell and a digit make up to 729 moves, past a menu's 26",
    "Minesweeper": "revealing and flagging every cell make more than 26 moves",
    "FifteenPuzzle": "its shuffle makes unsolvable boards and its win calls a method "
                     "SinglePlayerState lacks (textarena 0.7.4)",
}


def family_of(spec):
    """The game's class name ("TowerOfHanoiEnv" -> "TowerOfHanoi", 2048 -> "Game2048")."""
    ep = spec.entry_point
    name = ep.split(":")[-1] if isinstance(ep, str) else ep.__name__
    return name[:-3] if name.endswith("Env") else name


# ---- episodes -----------------------------------------------------------------------

class Episode:
    """One game in progress: the TextArena env, its generator state, the seats, the text."""

    __slots__ = ("env", "rstate", "rng", "player", "prompt", "board", "turn_msgs", "log", "ret",
                 "over", "cut", "reason")


class TextArena(Env):
    name = "textarena"
    packages = tuple(REQUIRES)  # their installed versions go into the metadata message
    summary = "TextArena games (one player, or two against a seeded opponent), valid moves as the menu"
    afterstates = False  # menu() sends the exact ones (or none); the helper must not step copies
    deterministic = True  # given the seed: the game's generator and the opponent draw from it
    clonable = True

    def __init__(self, params):
        super().__init__(params)
        require("textarena", REQUIRES)
        import textarena  # after the version check: a clear error beats an ImportError
        from textarena.envs.registration import ENV_REGISTRY

        self.ta = textarena
        game = str(params.get("game", "TowerOfHanoi-v0"))
        base = re.sub(r"-(raw|train)$", "", game)
        if base not in ENV_REGISTRY:
            raise ValueError(f"textarena: unknown game '{game}' (not in TextArena 0.7.4's "
                             f"registry); supported: {', '.join(self._examples(ENV_REGISTRY))}")
        spec = ENV_REGISTRY[base]
        family = family_of(spec)
        if family not in GAMES:
            why = REFUSED.get(family, "its valid moves are not enumerated exactly by this adapter")
            raise ValueError(f"textarena: '{game}' ({family}) is not supported: {why}. Supported: "
                             f"{', '.join(self._examples(ENV_REGISTRY))}")
        self.game = GAMES[family]()
        self.family = family
        self.game_id = base
        if isinstance(spec.entry_point, str):
            import importlib
            module, cls = spec.entry_point.split(":")
            self.env_class = getattr(importlib.import_module(module), cls)
        else:
            self.env_class = spec.entry_point
        self.kwargs = {**spec.kwargs, **dict(params.get("game_params") or {})}
        self.opponent = str(params.get("opponent", "random"))
        if self.opponent not in ("random", "first"):
            raise ValueError(f"textarena: opponent must be 'random' or 'first', got '{self.opponent}'")
        self.seat = integer("textarena", params, "player", 0, -1, self.game.players - 1,
                            f"-1 (drawn per episode) or a seat 0..{self.game.players - 1} of '{game}'")
        opening = integer("textarena", params, "opening", -1, -1, None,
                          "-1 (the game's default) or a count of moves >= 0")
        asked_limit = integer("textarena", params, "step_limit", 0, 0, RLID_MAX_STEP_LIMIT,
                              f"0 (the game's own bound) or 1..{RLID_MAX_STEP_LIMIT}")
        self.opening = opening if opening >= 0 else None  # None: the game's default, below
        self.view = str(params.get("view") or self.game.view)
        if self.view not in ("turn", "log"):
            raise ValueError(f"textarena: view must be 'turn' or 'log', got '{self.view}'")
        try:
            probe = self.env_class(**self.kwargs)
        except TypeError as e:
            raise ValueError(f"textarena: game_params do not fit '{base}': {e}") from None
        self.game.check(probe)
        if self.opening is None:
            self.opening = self.game.opening_for(probe)
        ep = self.reset(0, "train")
        # 0: the game's own bound (a derived default, kept >= 1; a configured value is in range)
        self.step_limit = asked_limit or max(1, self.game.bound(ep.env) or NO_LIMIT_STEPS)
        if self.game.oracle is None:
            self.oracle = None  # the instance attribute hides the method: no "oracle" capability
        rival = ""
        if self.game.players > 1:
            rival = f" against a {'random' if self.opponent == 'random' else 'fixed'} opponent"
        g = self.game
        if g.hidden or g.chance:
            note = (" The menu shows no afterstates: a move's result depends on "
                    + ("what you cannot see." if g.hidden else "a random draw made after it."))
        elif g.players > 1:
            note = (" The menu shows what the moves lead to only when every move ends the game: "
                    "otherwise the opponent's reply is not known yet.")
        else:
            note = " Each move on the menu shows the position it leads to."
        self.instructions = (
            f"You play the TextArena game {base}{rival}. Each turn, choose one of the valid moves; "
            "a move is the text the game writes in square brackets, without the brackets." + note)

    @staticmethod
    def _examples(registry):
        """The supported games' base ids, each with the count of its other registered variants."""
        out = []
        for k in sorted(k for k, s in registry.items() if family_of(s) in GAMES and k.endswith("-v0")):
            n = sum(1 for v in registry if v.startswith(k + "-") and not v.endswith(("-raw", "-train")))
            out.append(f"{k} (+{n} variant{'s' if n > 1 else ''})" if n else k)
        return out

    # ---- calls into the game under the episode's own generator -------------------------
    def _call(self, ep, fn, *args, **kwargs):
        """fn() with the global generator in the episode's state (in this process only the
        games draw from it, so its state between calls needs no keeping)."""
        if ep.rstate is not None:
            random.setstate(ep.rstate)
        try:
            return fn(*args, **kwargs)
        finally:
            ep.rstate = random.getstate()

    def _collect(self, ep, fresh):
        """Moves the game's new messages for the agent into the episode's text."""
        st = ep.env.state
        T = self.ta.ObservationType
        if fresh:
            ep.turn_msgs = []
        for sender, msg, kind in st.observations.get(ep.player, []):
            if kind == T.PROMPT:
                ep.prompt.append(msg)
            elif kind == T.GAME_BOARD:
                ep.board = msg
            elif kind == T.PLAYER_ACTION:
                if self.game.says_moves:
                    continue
                role = st.role_mapping.get(sender, f"Player {sender}")
                ep.log.append(f"[{role}] {msg}")
            elif kind != T.GAME_ADMIN:
                ep.turn_msgs.append(msg)
                ep.log.append(msg)
        for pid in list(st.observations):
            st.observations[pid] = []
        st.logs = []  # TextArena's transcript, read by nothing in a game: copies stay small

    def _play_others(self, ep):
        """The opponent's moves (seeded stream or first valid) until the agent's turn or the end."""
        st = ep.env.state
        while not st.done and st.current_player_id != ep.player:
            moves = self.game.moves(ep.env, st.current_player_id)
            if not moves:
                raise RuntimeError(f"textarena: {self.game_id}: player {st.current_player_id} has "
                                   "no valid move in a game that is not over")
            pick = ep.rng.choice(moves) if self.opponent == "random" else moves[0]
            self._call(ep, ep.env.step, action=pick[1])
            self._collect(ep, False)

    def _open(self, ep):
        """1..`opening` (a seeded draw) seeded random valid moves of any seat, never ending the game."""
        plies = ep.rng.randint(1, self.opening) if self.opening > 0 else 0
        for _ in range(plies):
            st = ep.env.state
            alive = []
            for m in self.game.moves(ep.env, st.current_player_id):
                child = self._copy(ep)
                self._call(child, child.env.step, action=m[1])
                if not child.env.state.done:
                    alive.append(m)
            if not alive:
                break
            self._call(ep, ep.env.step, action=ep.rng.choice(alive)[1])
            self._collect(ep, False)
        if plies:
            ep.turn_msgs = []  # the opening's messages are shown as the board they left
            ep.log = []

    def _copy(self, ep):
        other = Episode()
        try:  # pickling copies a game three times faster than deepcopy, with the same result
            other.env = pickle.loads(pickle.dumps(ep.env, pickle.HIGHEST_PROTOCOL))
        except (pickle.PicklingError, TypeError, AttributeError):
            other.env = copy.deepcopy(ep.env)
        other.rstate = ep.rstate  # an immutable tuple
        other.rng = random.Random()
        other.rng.setstate(ep.rng.getstate())
        other.player, other.ret, other.over, other.reason = ep.player, ep.ret, ep.over, ep.reason
        other.cut = ep.cut
        other.prompt, other.board = list(ep.prompt), ep.board
        other.turn_msgs, other.log = list(ep.turn_msgs), list(ep.log)
        return other

    # ---- the rlid Env interface ------------------------------------------------------
    def reset(self, seed, split):
        rng = random.Random(f"textarena/{seed}")  # the seat's, the opening's and the opponent's stream
        seat = self.seat if self.seat >= 0 else rng.randrange(self.game.players)
        for _ in range(RESET_TRIES):
            ep = Episode()
            ep.env = self.env_class(**self.kwargs)
            ep.rstate = None
            ep.rng = rng
            ep.player = seat
            ep.prompt, ep.board, ep.turn_msgs, ep.log = [], "", [], []
            ep.ret, ep.over, ep.cut, ep.reason = 0.0, False, False, ""
            self._call(ep, ep.env.reset, num_players=self.game.players, seed=seed)
            self._collect(ep, True)
            self._open(ep)
            self._play_others(ep)
            if not ep.env.state.done:  # else the opening and the opponent ended it: draw again
                return ep
        raise RuntimeError(f"textarena: {self.game_id} ended before the agent's first move in "
                           f"{RESET_TRIES} seeded openings (seed {seed}); lower `opening`")

    def clone(self, ep):
        return self._copy(ep)

    def task(self, ep):
        return "\n\n".join(ep.prompt)

    def observation(self, ep):
        parts = list(ep.log if self.view == "log" else ep.turn_msgs)
        if ep.board:
            parts.append(ep.board)
        if ep.over:
            parts.append(f"The game is over: {ep.reason} Your reward: {ep.ret:g}.")
        return "\n\n".join(p.strip() for p in parts if p and p.strip())

    def state_hash(self, ep):
        st = ep.env.state
        key = repr((canon(st.game_state), st.turn, st.current_player_id, bool(st.done),
                    canon(st.rewards), ep.player, self.task(ep), self.observation(ep)))
        return hashlib.blake2b(key.encode("utf-8"), digest_size=8).hexdigest()

    def _menu_moves(self, ep):
        moves = self.game.moves(ep.env, ep.player)
        if len(moves) > MAX_MENU:
            raise ValueError(f"textarena: {len(moves)} valid moves at this state of {self.game_id}; "
                             f"rlid menus hold at most {MAX_MENU}")
        return moves

    def menu(self, ep):
        if ep.over:
            if not ep.cut:
                return []
            # The menu at the cut (the game's turn limit ended it): the moves the position still
            # offers, which a critic reads to bootstrap; no afterstates past the game's end.
            return [Action(aid, plain(move), [w for w in others if w != plain(move)])
                    for aid, move, others in self._menu_moves(ep)]
        items = []
        for aid, move, others in self._menu_moves(ep):
            words = [plain(move)] + [w for w in others if w != plain(move)]
            items.append((aid, words))
        afters = (None if self.game.hidden or self.game.chance or not self.wants_afterstates
                  else self._afterstates(ep, items))
        if afters is None:
            return [Action(aid, words[0], words[1:]) for aid, words in items]
        return [Action(aid, words[0], words[1:], afterstate=self.observation(x),
                       afterstate_hash=self.state_hash(x))
                for (aid, words), x in zip(items, afters)]

    def _afterstates(self, ep, items):
        """The stepped copies, or None if any move's result needs a random draw or another seat."""
        out = []
        for aid, _ in items:
            child = self._copy(ep)
            before = child.rstate
            self._advance(child, aid, others=False)
            st = child.env.state
            if child.rstate != before:  # the game drew from its generator: the result is not known yet
                return None
            if not st.done and st.current_player_id != ep.player:  # another seat moves next
                return None
            out.append(child)
        return out

    def _advance(self, ep, action, others=True):
        move = next((m for m in self.game.moves(ep.env, ep.player) if m[0] == action), None)
        if move is None:
            raise ValueError(f"textarena: action {action} is not a valid move here")
        self._call(ep, ep.env.step, action=move[1])
        self._collect(ep, True)
        if others:
            self._play_others(ep)
        return self._settle(ep)

    def _settle(self, ep):
        st = ep.env.state
        if not st.done:
            return Step(0.0)
        rewards = st.rewards or {}
        reward = float(rewards.get(ep.player, 0.0))
        ep.over, ep.ret = True, reward
        info = st.game_info.get(ep.player, {}) if isinstance(st.game_info, dict) else {}
        ep.reason = str(info.get("reason") or "")
        won = self.game.won(ep.env, ep.player)
        real = won or self.game.lost(ep.env, ep.player)
        ep.cut = not real
        return Step(reward, terminal=real, success=won, truncated=not real)

    def step(self, ep, action):
        if ep.over:
            raise ValueError("textarena: the game is over")
        return self._advance(ep, action, others=self.game.players > 1)

    def oracle(self, ep):
        best, ret = self.game.oracle(ep.env, ep.player)
        return best if ret is None else (best, ret)


def canon(x):
    """A process-independent rendering of a game state (sets sorted, dicts by key)."""
    if isinstance(x, dict):
        return "{" + ",".join(f"{canon(k)}:{canon(v)}" for k, v in
                              sorted(x.items(), key=lambda kv: repr(kv[0]))) + "}"
    if isinstance(x, (list, tuple)):
        return "[" + ",".join(canon(v) for v in x) + "]"
    if isinstance(x, (set, frozenset)):
        return "{" + ",".join(sorted(canon(v) for v in x)) + "}"
    return repr(x)


if __name__ == "__main__":
    run(TextArena)
