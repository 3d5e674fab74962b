"""textworld: TextWorld text adventures, generated offline at fixed seeds, as an rlid environment.

[env]
name = "textworld"
family = "simple"            # "simple" | "cooking" | "custom" | "treasure_hunter" | "coin_collector"
step_limit = 50              # agent decisions before truncation (1..1000)
games = 0                    # 0: every seed its own game; N: the seeds of each split cycle
                             # through N games (seed 2i+p plays game 2(i mod N)+p)
cache_dir = ""               # generated games ("": $RLID_TEXTWORLD_CACHE, else
                             # $XDG_CACHE_HOME/rlid/textworld, else ~/.cache/rlid/textworld)
# family = "simple" (TextWorld's tw-simple challenge: a fixed six-room house, one food to put away)
rewards = "dense"            # "dense" | "balanced" | "sparse"
goal = "detailed"            # objective text: "detailed" | "brief" | "none"
# family = "cooking" (tw-cooking, the First TextWorld Problems games)
recipe = 1                   # ingredients in the recipe (1..5)
take = 1                     # of them, ingredients to find first (0..recipe)
go = 1                       # rooms: 1, 6, 9 or 12
open = 0                     # 1: containers and doors must be opened (true/false work too)
cook = 0                     # 1: ingredients must be cooked
cut = 0                      # 1: ingredients must be cut
drop = 0                     # 1: the inventory has limited capacity
# family = "custom" (textworld.make: a random world and quest)
world_size = 3               # rooms (1..20)
nb_objects = 5               # minimum objects in the world (0..50)
quest_length = 3             # actions the quest requires (1..10)
quest_breadth = 1            # sub-quests (1..5)
# family = "treasure_hunter" / "coin_collector"
level = 1                    # the challenge's difficulty level (1..30 / 1..300)

Each env seed s (with `games` = N: game 2 (i mod N) + p of seed 2 i + p) is one game:
TextWorld's own generator (the code behind `tw-make`) builds it at generation seed s (s itself
below 2**31, else a hash of s) on first use, compiles it with the Inform 7 compiler that the
textworld wheel ships (no download), and caches game.z8 + game.json under
cache_dir/textworld-<version>/<family>/<hash of the family's keys>/<s>/ (a lock file keeps
parallel workers from generating one game twice). Generation runs with PYTHONHASHSEED=0 (the
adapter re-executes itself with it, and generates in a child process when imported into
another Python), because TextWorld's generator iterates over sets: with hash randomization the
cooking games differ from run to run. Splits: even seeds are training games, odd seeds test
games; simple games of odd seeds come from the challenge's test distribution (--test), cooking
games from its "test" food split (even seeds: "train"); cooking's recipe seed is s too.

The game runs in jericho's Frotz interpreter. A state is a snapshot: the Z-machine's whole
state (jericho get_state: memory, stack, program counter, random generator, narrative) plus
TextWorld's logic state of the world (the facts from which it computes the admissible commands,
as textworld.start(...) does with EnvInfos(admissible_commands=True): same text, commands,
score, won and lost). Copying a state is copying that snapshot, and stepping one restores it
into the interpreter (set_state), sends the command and takes the new snapshot; so states are
clonable and steps deterministic, and each menu item's afterstate is the state its command
leads to (exact; shown, hashed, stored). State id: a hash of the game, the world's facts, the
quests completed, the score, the end and the observation.

Menu: TextWorld's admissible commands, in its (alphabetical) order; action id = the command's
index in that list. Over 26, commands are left out in tiers until at most 26 remain: (1) look
and inventory, (2) "examine X" for X the task does not name, (3) "put/insert X on/into Y"
unless the task names X and Y, (4) "drop X" unless the task names X (not in cooking games with
drop = 1, whose limited inventory makes dropping part of the play), (5) every other
"examine". A state still over 26 is refused (RuntimeError naming the counts; choose a smaller
game, or on_error = "drop_episode"). "go <direction>" also reads as "<direction>".
Observation: the game's own text for the last command (the opening text at reset) without the
TextWorld banner, the objective (that is the task), the prompt and status line, or the
interpreter's RESTART/RESTORE/QUIT question at the end. Task: the game's objective. Reward: the
change of the game's score; the episode ends when the game is won (success) or lost (terminal,
no success); the step limit truncates it. Oracle (action ids only; rlid plays it out for the
return): TextWorld's winning policy (GameProgression.winning_policy: the quests' gold path,
rerouted when the player strays), or, for games whose quests carry no actions (the larger
cooking games), the game's recorded walkthrough while the episode follows it. It names nothing
where the path is unknown, or where the game's parser would not take its command (TextWorld
can word a command ambiguously: "Which do you mean, the locker or the type 0 locker?").
"""

import collections
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, "..", "..", "python"))  # rlid_env, uninstalled
sys.path.append(os.path.join(HERE, ".."))  # _params, _pinned
from _params import integer  # noqa: E402
from _pinned import pinned_packages, require  # noqa: E402
from rlid_env import Action, Env, Step, run  # noqa: E402

REQUIRES = pinned_packages(HERE)  # adapter.toml
MAX_MENU = 26
MAX_STEP_LIMIT = 1000
ENGINES = 64            # games kept loaded per process (~3 MB each; loading a .json takes ~0.4 s)
TRANSITIONS = 1024      # cached (state, command) -> next state, so a step after its menu is free
QUEST_CACHE = 4096      # cached quest progressions (for the oracle)
WORLDS = 50000          # cached logic states of a game's world
DECORATION = "()[]{}<>*_`'\".,:! \t"
META = ("look", "inventory")
INFO = re.compile(r"look|inventory|examine .+")
PLACEMENT = re.compile(r"(put|insert) (.+) (?:on|into) (.+)")
END_QUESTION = "Would you like to RESTART, RESTORE a saved game, QUIT or UNDO the last command?"
BANNER_LINE = re.compile(r"[\s_|\\/$<>]*")
WON, LOST = "*** The End ***", "*** You lost! ***"

FAMILIES = {
    # family: {key: (default, allowed)}: allowed is a (low, high) range of ints, a tuple of
    # choices, or bool
    "simple": {"rewards": ("dense", ("dense", "balanced", "sparse")),
               "goal": ("detailed", ("detailed", "brief", "none"))},
    "cooking": {"recipe": (1, range(1, 6)), "take": (1, range(0, 6)), "go": (1, (1, 6, 9, 12)),
                "open": (False, bool), "cook": (False, bool), "cut": (False, bool),
                "drop": (False, bool)},
    "custom": {"world_size": (3, range(1, 21)), "nb_objects": (5, range(0, 51)),
               "quest_length": (3, range(1, 11)), "quest_breadth": (1, range(1, 6))},
    "treasure_hunter": {"level": (1, range(1, 31))},
    "coin_collector": {"level": (1, range(1, 301))},
}
CHALLENGE = {"simple": "tw-simple", "cooking": "tw-cooking", "treasure_hunter": "tw-treasure_hunter",
             "coin_collector": "tw-coin_collector"}
COMMON_KEYS = {"family", "step_limit", "cache_dir", "games"}


def family_settings(family, params):
    """The family's keys from params (defaults filled in), checked; ValueError names a bad one."""
    if family not in FAMILIES:
        raise ValueError(f"textworld: unknown family '{family}'; choose one of "
                         f"{', '.join(FAMILIES)}")
    known = set(FAMILIES[family]) | COMMON_KEYS
    others = sorted(k for k in params if k not in known and any(k in f for f in FAMILIES.values()))
    if others:
        raise ValueError(f"textworld: key(s) {', '.join(others)} do not apply to family '{family}' "
                         f"(its keys: {', '.join(FAMILIES[family]) or 'none'})")
    out = {}
    for key, (default, allowed) in FAMILIES[family].items():
        value = params.get(key, default)
        if allowed is bool:
            if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
                value = value.lower() in ("true", "1")
            elif not isinstance(value, bool) and isinstance(value, int) and value in (0, 1):
                value = bool(value)  # rlid's key table passes 0/1
            if not isinstance(value, bool):
                raise ValueError(f"textworld: {key} must be true or false (or 1 or 0), got {value!r}")
        elif isinstance(default, int):
            try:
                if isinstance(value, bool) or float(value) != int(float(value)):
                    raise ValueError
                value = int(float(value))
            except (TypeError, ValueError):
                raise ValueError(f"textworld: {key} must be an integer, got {value!r}") from None
            if value not in allowed:
                what = (f"{allowed.start}..{allowed.stop - 1}" if isinstance(allowed, range)
                        else "one of " + ", ".join(map(str, allowed)))
                raise ValueError(f"textworld: {key} must be {what}, got {value}")
        else:
            value = str(value)
            if value not in allowed:
                raise ValueError(f"textworld: {key} must be one of {', '.join(allowed)}, got '{value}'")
        out[key] = value
    if family == "cooking" and out["take"] > out["recipe"]:
        raise ValueError(f"textworld: take ({out['take']}) must be at most recipe ({out['recipe']})")
    return out


def generation_seed(seed):
    seed = int(seed)
    if 0 <= seed < 2 ** 31:
        return seed
    return int.from_bytes(hashlib.blake2b(str(seed).encode(), digest_size=4).digest(), "big") >> 1


def split_of(seed):
    return "train" if int(seed) % 2 == 0 else "test"


# ---- generation (TextWorld's own generator) ------------------------------------------

def _generate_here(job):
    """Generates one game into job['dir'] (game.z8, game.json); this process must have
    PYTHONHASHSEED=0 for the result to be a function of the job."""
    import textworld
    import textworld.challenges
    from textworld.generator import QuestGenerationError

    options = textworld.GameOptions()
    options.seeds = job["tw_seed"]
    options.path = os.path.join(job["dir"], "game.z8")
    options.file_ext = ".z8"
    options.force_recompile = True
    family, s = job["family"], job["settings"]
    if family == "custom":
        options.nb_rooms = s["world_size"]
        options.nb_objects = s["nb_objects"]
        options.chaining.min_length = options.chaining.max_length = s["quest_length"]
        options.chaining.max_depth = s["quest_length"]
        options.chaining.min_breadth = options.chaining.max_breadth = s["quest_breadth"]
        try:
            textworld.make(options)
        except QuestGenerationError as e:
            raise ValueError(f"textworld: no quest of length {s['quest_length']} and breadth "
                             f"{s['quest_breadth']} fits a world of {s['world_size']} rooms and "
                             f"{s['nb_objects']} objects (seed {job['tw_seed']}): {e}; relax "
                             "quest_length/quest_breadth or add rooms/objects") from None
    else:
        settings = dict(s)
        if family == "simple":
            settings["test"] = job["split"] == "test"
        elif family == "cooking":
            settings["split"] = job["split"]
            settings["recipe_seed"] = job["tw_seed"]
        _, make_game, _ = textworld.challenges.CHALLENGES[CHALLENGE[family]]
        game = make_game(settings=settings, options=options)
        textworld.generator.compile_game(game, options)
    ni = os.path.join(job["dir"], "game.ni")
    if os.path.exists(ni):
        os.remove(ni)


def _generate(job):
    if not sys.flags.hash_randomization:
        _generate_here(job)
        return
    env = dict(os.environ, PYTHONHASHSEED="0")
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--generate-one", json.dumps(job)],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"textworld: generating game {job} failed:\n{r.stdout[-2000:]}")


def default_cache_dir():
    if os.environ.get("RLID_TEXTWORLD_CACHE"):
        return os.environ["RLID_TEXTWORLD_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "rlid", "textworld")


def game_files(cache_dir, family, settings, seed):
    """The game of env seed `seed`: its (z8, json) paths, generated on first use."""
    import textworld

    key = json.dumps(settings, sort_keys=True)
    digest = hashlib.blake2b(key.encode(), digest_size=6).hexdigest()
    folder = os.path.join(cache_dir, f"textworld-{textworld.__version__}", family, digest, str(seed))
    z8, js = os.path.join(folder, "game.z8"), os.path.join(folder, "game.json")
    if os.path.isfile(z8) and os.path.isfile(js):
        return z8, js
    os.makedirs(os.path.dirname(folder), exist_ok=True)
    with open(os.path.join(os.path.dirname(folder), "settings.json"), "w") as f:
        f.write(key + "\n")
    with open(folder + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be generating this game
        if not (os.path.isfile(z8) and os.path.isfile(js)):
            tmp = tempfile.mkdtemp(prefix=f".{seed}.", dir=os.path.dirname(folder))
            try:
                _generate({"family": family, "settings": settings, "tw_seed": generation_seed(seed),
                           "split": split_of(seed), "dir": tmp})
                if not (os.path.isfile(os.path.join(tmp, "game.z8"))
                        and os.path.isfile(os.path.join(tmp, "game.json"))):
                    raise RuntimeError(f"textworld: the generator wrote no game.z8/game.json in {tmp}")
                if os.path.isdir(folder):
                    shutil.rmtree(folder)
                os.rename(tmp, folder)
            finally:
                if os.path.isdir(tmp):
                    shutil.rmtree(tmp, ignore_errors=True)
    return z8, js


# ---- playing: a Z-machine snapshot plus TextWorld's logic state ------------------------

class Snap:
    """One game state. Every field is treated as immutable (shared between copies)."""

    __slots__ = ("engine", "z", "world", "hist", "quests", "score", "text", "won", "lost", "over",
                 "sid", "hash", "walk")


class World:
    """A logic state of the game's world (TextWorld's facts) with its applicable actions; one
    object per distinct set of facts, so that its successors are computed once."""

    __slots__ = ("state", "valid", "digest", "next", "commands")

    def __init__(self, state, valid):
        self.state, self.valid, self.next, self.commands = state, valid, {}, None
        facts = "\n".join(sorted(map(str, state.facts)))
        self.digest = hashlib.blake2b(facts.encode("utf-8"), digest_size=16).hexdigest()


class Hist:
    """The logic actions applied since reset, as a chain (for the oracle's quest tracking)."""

    __slots__ = ("parent", "actions", "key")
    counter = 0

    def __init__(self, parent, actions):
        Hist.counter += 1
        self.parent, self.actions, self.key = parent, actions, Hist.counter


def clean(raw, objective, opening):
    """The game's text as the agent reads it."""
    lines = raw.replace("\r", "").split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    if lines and lines[-1].lstrip().startswith(">"):
        lines.pop()  # the prompt, with the status line (room, score/moves) after it
    lines = [ln for ln in lines if ln.strip() != END_QUESTION]
    if opening:
        while lines and BANNER_LINE.fullmatch(lines[0]):
            lines.pop(0)
    lines = [ln.strip() if len(ln) - len(ln.lstrip()) > 8 else ln.rstrip() for ln in lines]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    if opening and objective and text.startswith(objective):
        text = text[len(objective):].strip()
    return text


class Engine:
    """One generated game: its logic (Game, Inform7Game) and an interpreter to step snapshots in."""

    def __init__(self, key, z8, js, keep_drop=False):
        import jericho
        import textworld
        from textworld.envs.wrappers import tw_inform7
        from textworld.generator.inform7 import Inform7Game

        warnings.simplefilter("ignore", jericho.UnsupportedGameWarning)
        warnings.simplefilter("ignore", jericho.TruncatedInputActionWarning)
        self.tw = tw_inform7
        self.key = key
        self.keep_drop = keep_drop  # the inventory is limited: dropping things is play
        self.game = textworld.Game.load(js)
        self.i7 = Inform7Game(self.game)
        self.rules = list(self.game.kb.rules.values())
        self.constants = self.game.kb.types.constants_mapping
        self.objective = self.game.objective or ""
        self.max_score = self.game.max_score
        # quest i is done once a turn ends with one of its win conditions true (the game's
        # "Every turn: ... now the questN completed is true" rules)
        self.win_conditions = [[e.condition for e in q.win_events] for q in self.game.quests]
        self.frotz = jericho.FrotzEnv(z8, seed=1)
        self.transitions = collections.OrderedDict()
        self.worlds = {}
        self.quest_cache = collections.OrderedDict()
        self.initial = self._reset()
        # the oracle: TextWorld's winning policy; games whose quests carry no actions (the
        # larger cooking games) have none, and then their recorded walkthrough is the gold
        # path, followed from reset
        self.walkthrough = None
        if not self.progression(None).winning_policy:
            self.walkthrough = list(self.game.metadata.get("walkthrough") or []) or None
        self.initial.walk = 0 if self.walkthrough else None

    def _send(self, command):
        return self.frotz.step(command)[0]

    def _reset(self):
        from textworld.generator.game import GameProgression

        raw, _ = self.frotz.reset()
        # what TextWorld's TWInform7 wrapper sends at reset (extra infos, then action tracing)
        self._send("tw-extra-infos moves")
        extra, _ = self.tw._detect_extra_infos(self._send("tw-extra-infos score"), ["moves", "score"])
        self._send("tw-trace-actions")
        prog = GameProgression(self.game, track_quests=False)
        s = Snap()
        s.engine, s.z = self, self.frotz.get_state()
        s.world = self._world(prog.state, prog.valid_actions)
        s.hist = None
        s.quests = frozenset()
        s.score = self._score(extra["score"], 0)
        s.text = clean(raw, self.objective, True)
        s.won = s.lost = s.over = False
        s.walk = None
        self._finish(s)
        return s

    @staticmethod
    def _score(text, previous):
        if text is None:
            return previous
        return int(text.strip().split("\n")[0])

    def _finish(self, s):
        Hist.counter += 1
        s.sid = Hist.counter
        key = json.dumps([self.key, s.world.digest, sorted(s.quests), s.score, s.won, s.lost, s.over,
                          s.text])
        s.hash = hashlib.blake2b(key.encode("utf-8"), digest_size=8).hexdigest()

    def _world(self, state, valid=None):
        key = frozenset(state.facts)
        world = self.worlds.get(key)
        if world is None:
            if len(self.worlds) >= WORLDS:
                self.worlds.clear()  # only a cache: states keep their own World objects
            if valid is None:
                valid = list(state.all_applicable_actions(self.rules, self.constants))
            world = self.worlds[key] = World(state, valid)
        return world

    def _apply(self, world, action):
        """The World `action` leads to (as GameProgression.update computes it), cached."""
        nxt = world.next.get(action)
        if nxt is None:
            state = world.state.copy()
            state.apply(action)
            nxt = world.next[action] = self._world(state)
        return nxt

    def _quests_done(self, done, world):
        more = [i for i, conditions in enumerate(self.win_conditions)
                if i not in done and any(world.state.is_applicable(c) for c in conditions)]
        return done | frozenset(more) if more else done

    def commands(self, s):
        """TextWorld's admissible commands at `s` (sorted, as textworld.start gives them)."""
        w = s.world
        if w.commands is None:
            w.commands = sorted(set(self.i7.gen_commands_from_actions(w.valid)))
        return w.commands

    def step(self, s, command):
        """The snapshot `command` leads to from `s` (cached)."""
        key = (s.sid, command)
        hit = self.transitions.get(key)
        if hit is not None:
            self.transitions.move_to_end(key)
            return hit
        self.frotz.set_state(s.z)
        raw = self._send(command)
        extra, text = self.tw._detect_extra_infos(raw, ["moves", "score"])
        events, text = self.tw._detect_i7_events_debug_tags(text)
        n = Snap()
        n.engine = self
        n.z = self.frotz.get_state()
        world, applied = s.world, []
        for event in events:  # as TextWorld's StateTracking wrapper does
            action = self.i7.detect_action(event, world.valid)
            if action is not None:
                world = self._apply(world, action)
                applied.append(action)
        n.world = world
        n.hist = Hist(s.hist, tuple(applied)) if applied else s.hist
        k = self.next_walk(s)
        n.walk = k + 1 if k is not None and command == self.walkthrough[k] else None
        n.quests = self._quests_done(s.quests, world)
        n.score = self._score(extra["score"], s.score)
        n.won, n.lost = WON in text, LOST in text
        n.over = n.won or n.lost or END_QUESTION in text
        n.text = clean(text, self.objective, False)
        self._finish(n)
        self.transitions[key] = n
        if len(self.transitions) > TRANSITIONS:
            self.transitions.popitem(last=False)
        return n

    def next_walk(self, s):
        """The index of the walkthrough's next command at `s` (on its path), skipping the
        commands that are not admissible there: those change nothing (the walkthrough opens a
        door it opened before), or None."""
        if s.walk is None:
            return None
        commands = self.commands(s)
        try:
            on_menu = {c for _, c in menu_items(s)}
        except RuntimeError:
            on_menu = set()
        k = s.walk
        while k < len(self.walkthrough) and (
                self.walkthrough[k] not in commands
                or self.walkthrough[k] not in on_menu and INFO.fullmatch(self.walkthrough[k])):
            k += 1
        return k if k < len(self.walkthrough) else None

    def progression(self, hist):
        """TextWorld's GameProgression (quests tracked) after the logic actions of `hist`."""
        from textworld.generator.game import GameProgression

        chain = []
        node = hist
        while node is not None and node.key not in self.quest_cache:
            chain.append(node)
            node = node.parent
        if node is None:
            prog = self.quest_cache.get(0)
            if prog is None:
                prog = self.quest_cache[0] = GameProgression(self.game, track_quests=True)
        else:
            prog = self.quest_cache[node.key]
            self.quest_cache.move_to_end(node.key)
        for node in reversed(chain):
            prog = prog.copy()
            for action in node.actions:
                prog.update(action)
            self.quest_cache[node.key] = prog
        while len(self.quest_cache) > QUEST_CACHE:
            self.quest_cache.popitem(last=False)
        return prog


def shown(command):
    """The command as a menu realisation the free-text grammar reads back unchanged."""
    text = " ".join(command.split())
    return text.strip(DECORATION).rstrip("?").strip(DECORATION) or text


def menu_items(s):
    """(action id, command) pairs of the menu: TextWorld's admissible commands, thinned by
    the documented rule while more than MAX_MENU remain."""
    items = list(enumerate(s.engine.commands(s)))
    if len(items) <= MAX_MENU:
        return items
    task = s.engine.objective.lower()

    def named(*things):
        return all(t and t.lower() in task for t in things)

    def placement(command):  # put X on Y / insert X into Y: (X, Y), else None
        m = PLACEMENT.fullmatch(command)
        return (m.group(2), m.group(3)) if m else None

    tiers = [
        lambda c: c in META,
        lambda c: c.startswith("examine ") and not named(c[len("examine "):]),
        lambda c: placement(c) is not None and not named(*placement(c)),
        lambda c: (c.startswith("drop ") and not s.engine.keep_drop
                   and not named(c[len("drop "):])),
        lambda c: c.startswith("examine "),
    ]
    for leave_out in tiers:
        items = [(i, c) for i, c in items if not leave_out(c)]
        if len(items) <= MAX_MENU:
            return items
    raise RuntimeError(
        f"textworld: {len(s.engine.commands(s))} admissible commands here, {len(items)} after "
        f"leaving out look, inventory, examine and the put/insert/drop commands of things the "
        f"task does not name (the menu rule); rlid menus hold at most {MAX_MENU} (choose a "
        "smaller game: fewer ingredients, objects or rooms; or set on_error = \"drop_episode\")")


class State:
    """An rlid state: a pointer to an immutable snapshot (copies share it; step() moves it)."""

    __slots__ = ("snap",)


class TextWorld(Env):
    name = "textworld"
    packages = tuple(REQUIRES)  # their installed versions go into the metadata message
    summary = "TextWorld text adventures generated offline at fixed seeds, admissible commands as the menu"
    afterstates = False  # menu() sends the exact ones (stepping a copy of the snapshot)
    deterministic = True
    clonable = True

    def __init__(self, params):
        super().__init__(params)
        require("textworld", REQUIRES)
        import textworld  # noqa: F401  (after the version check: a clear error beats an ImportError)

        self.family = str(params.get("family", "simple"))
        self.settings = family_settings(self.family, params)
        self.step_limit = integer("textworld", params, "step_limit", 50, 1, MAX_STEP_LIMIT)
        games = params.get("games", 0)
        try:
            if isinstance(games, bool) or float(games) != int(float(games)):
                raise ValueError
            self.games = int(float(games))
        except (TypeError, ValueError):
            raise ValueError(f"textworld: games must be an integer, got {games!r}") from None
        if self.games < 0:
            raise ValueError(f"textworld: games must be >= 0 (0: a new game for every seed), got "
                             f"{self.games}")
        self.cache_dir = str(params.get("cache_dir", "") or default_cache_dir())
        try:
            os.makedirs(self.cache_dir, exist_ok=True)
        except OSError as e:
            raise ValueError(f"textworld: cache_dir '{self.cache_dir}' cannot be created ({e}); "
                             "set cache_dir (or $RLID_TEXTWORLD_CACHE) to a writable folder") from None
        self.engines = collections.OrderedDict()
        what = {"simple": "a simple house game (TextWorld's tw-simple)",
                "cooking": "a cooking game (TextWorld's tw-cooking)",
                "custom": "a TextWorld game",
                "treasure_hunter": "a treasure hunt (TextWorld's tw-treasure_hunter)",
                "coin_collector": "a coin hunt (TextWorld's tw-coin_collector)"}[self.family]
        self.instructions = (
            f"You play {what}, a text adventure. Each turn, choose one of the game's admissible "
            "commands. You win by completing the task; the game may also end in a loss, and after "
            f"{self.step_limit} commands the episode is cut off.")

    # ---- games ----------------------------------------------------------------------------
    def game_of(self, seed):
        """The game an env seed plays: the seed itself, or with `games` = N, game 2 (i mod N) + p
        of seed 2 i + p (N games per split, the parity kept)."""
        seed = int(seed)
        if self.games:
            return 2 * ((seed // 2) % self.games) + seed % 2
        return seed

    def _engine(self, seed):
        seed = self.game_of(seed)
        key = f"{self.family}:{json.dumps(self.settings, sort_keys=True)}:{seed}"
        engine = self.engines.get(key)
        if engine is not None:
            self.engines.move_to_end(key)
            return engine
        z8, js = game_files(self.cache_dir, self.family, self.settings, seed)
        engine = self.engines[key] = Engine(key, z8, js, keep_drop=bool(self.settings.get("drop")))
        while len(self.engines) > ENGINES:
            # forgotten, not closed: states of that game still step in its interpreter, which
            # is freed with the last of them
            self.engines.popitem(last=False)
        return engine

    def reset(self, seed, split):
        st = State()
        st.snap = self._engine(int(seed)).initial
        return st

    def clone(self, st):
        other = State()
        other.snap = st.snap
        return other

    def task(self, st):
        return st.snap.engine.objective

    def observation(self, st):
        return st.snap.text

    def state_hash(self, st):
        return st.snap.hash

    # ---- menu -----------------------------------------------------------------------------
    def menu(self, st):
        s = st.snap
        out, seen = [], set()
        for i, command in menu_items(s):
            realisation = shown(command)
            if realisation.lower() in seen:
                raise RuntimeError(f"textworld: two admissible commands read the same: '{realisation}'")
            seen.add(realisation.lower())
            alias = []
            if command.startswith("go ") and len(command) > 4:
                alias = [command[3:]]
            if not self.wants_afterstates:  # rlid will not read them: no step per command
                out.append(Action(i, realisation, alias))
                continue
            nxt = s.engine.step(s, command)
            after = State()
            after.snap = nxt
            out.append(Action(i, realisation, alias, afterstate=self.observation(after),
                              afterstate_hash=nxt.hash))
        # an alias may not be another item's realisation
        for a in out:
            a.realisations = [r for r in a.realisations if r.lower() not in seen]
        return out

    def step(self, st, action):
        s = st.snap
        if s.over:
            raise ValueError("textworld: the game is over")
        commands = s.engine.commands(s)
        if not isinstance(action, int) or not 0 <= action < len(commands):
            raise ValueError(f"textworld: action {action} is not an admissible command here")
        nxt = s.engine.step(s, commands[action])
        st.snap = nxt
        return Step(float(nxt.score - s.score), terminal=nxt.over, success=nxt.won)

    # ---- oracle ---------------------------------------------------------------------------
    def oracle(self, st):
        """The next command of the gold path (ids only: rlid plays it out for the return), or
        none where it is unknown (off the walkthrough) or the game would not take it."""
        s = st.snap
        e = s.engine
        if s.over:
            return []
        if e.walkthrough is not None:
            k = e.next_walk(s)
            if k is None:
                return []
            command = e.walkthrough[k]
        else:
            policy = e.progression(s.hist).winning_policy
            if not policy:
                return []
            command = e.i7.gen_commands_from_actions(policy[:1])[0]
            nxt = e.step(s, command) if command in e.commands(s) else None
            # TextWorld's command for an action can be ambiguous to the game's parser ("Which
            # do you mean, the locker or the type 0 locker?"): then it changes nothing
            if nxt is None or nxt.hist is s.hist or policy[0] not in nxt.hist.actions:
                return []
        return [i for i, c in menu_items(s) if c == command]


def _main():
    if sys.argv[1:2] == ["--generate-one"]:
        _generate_here(json.loads(sys.argv[2]))
        return
    if sys.argv[1:2] == ["--make"]:
        # python textworld_env.py --make family=cooking seeds=0-11 [key=value ...]: fills the cache
        params = dict(a.split("=", 1) for a in sys.argv[2:])
        lo, _, hi = params.pop("seeds", "0-3").partition("-")
        env = TextWorld(params)
        for seed in range(int(lo), int(hi or lo) + 1):
            z8, _ = game_files(env.cache_dir, env.family, env.settings, seed)
            print(z8, file=sys.stderr)
        return
    run(TextWorld)


if __name__ == "__main__":
    if os.environ.get("PYTHONHASHSEED") != "0":
        # TextWorld's generator iterates over sets: a fixed hash seed makes a game a function
        # of its seed. Re-execute once with it (stdin/stdout are inherited).
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__)] + sys.argv[1:],
                  dict(os.environ, PYTHONHASHSEED="0"))
    _main()
