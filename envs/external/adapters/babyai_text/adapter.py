"""babyai_text: BabyAI levels (minigrid) told in text, as GLAM's BabyAI-Text tells them.

[env]
name = "babyai_text"
level = "GoToLocal"          # a BabyAI level: any BabyAI-* id minigrid registers, with or without
                             # the "BabyAI-" prefix and "-vN" suffix (GoToLocal, PutNextLocal,
                             # OpenDoor, PickupLoc, BossLevel, ...), or "PickupLocal" (GLAM's level)
level_params = {}            # keyword arguments of the level's constructor (e.g. {room_size = 6,
                             # num_dists = 4} for GoToLocal; max_steps, 1..1000000, fixes the
                             # step limit)

Those are the only keys: any other (a step_limit, say: the limit is the
level's max_steps) is refused, naming it, rather than ignored.

The observation is the agent's 7x7 egocentric view said in the sentences of
GLAM's BabyAI-Text (Carta et al. 2023, flowersteam/Grounding_LLMs_with_online_RL,
babyai-text's gym_minigrid gen_graph): "You carry a blue key", the nearest wall
straight ahead, to the left and to the right ("You see a wall 3 steps forward"),
then every visible object, left to right and far to near ("You see a red ball
1 step left and 2 steps forward", "You see a locked purple door 2 steps right"),
joined with ", " as GLAM's prompts join them. The task is GLAM's goal line,
"Goal of the agent: <mission>", the mission being minigrid's own text. The menu
is the six primitive actions in minigrid's order, with GLAM's realisations (turn
left, turn right, go forward, pick up, drop, toggle) and synonyms; "done" is
left out, as GLAM leaves it out. Dynamics are minigrid's own step, which draws
nothing at random after reset, so afterstates are exact: each is a copy of the
level stepped with that action. Reward: minigrid's (1 - 0.9 * steps / max_steps
on success, else 0); terminal when minigrid terminates (the mission succeeded
or failed), truncated at the level's max_steps. The oracle is minigrid's BabyAI
bot (BabyAIBot), replayed along the episode's actions: action ids only, and
not shortest-path optimal (it explores what it has not seen), so no return is
claimed. Seeds: minigrid's reset(seed); BabyAI has no train/test split of its
own, so even seeds are training instances and odd ones test instances.
"""

import contextlib
import copy
import hashlib
import io
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, "..", "..", "python"))  # rlid_env, uninstalled
sys.path.append(os.path.join(HERE, ".."))  # _params, _pinned
from _params import RLID_MAX_STEP_LIMIT, integer  # noqa: E402
from _pinned import pinned_packages, require  # noqa: E402
from rlid_env import Action, Env, Step, run  # noqa: E402

REQUIRES = pinned_packages(HERE)  # adapter.toml
KEYS = ("level", "level_params")  # the adapter's keys; any other is refused

# minigrid's action ids 0..5 (Actions.left .. Actions.toggle); 6 (done) is not offered.
COMMANDS = [
    ("turn left", ["left", "rotate left", "turn to the left"]),
    ("turn right", ["right", "rotate right", "turn to the right"]),
    ("go forward", ["forward", "move forward", "step forward", "take one step forward"]),
    ("pick up", ["pickup", "pick it up", "pick up the object"]),
    ("drop", ["drop it", "put down", "drop the object"]),
    ("toggle", ["open", "toggle it", "toggle the object"]),
]
STATES = {0: "open", 1: "closed", 2: "locked"}  # a door's state in minigrid's encoding
MAX_NAVS = 8  # navigations a BabyAI instruction can need: seq of two "and"s of two putnexts


# minigrid's encoding tables, set by _load() once the pinned version is checked
WALL = WALL_IDX = DOOR_IDX = None
IDX_TO_COLOR = IDX_TO_OBJECT = {}


def _load():
    global WALL, WALL_IDX, DOOR_IDX, IDX_TO_COLOR, IDX_TO_OBJECT
    from minigrid.core.constants import COLOR_TO_IDX, OBJECT_TO_IDX
    from minigrid.core.world_object import Wall

    WALL, WALL_IDX, DOOR_IDX = Wall(), OBJECT_TO_IDX["wall"], OBJECT_TO_IDX["door"]
    IDX_TO_COLOR = {v: k for k, v in COLOR_TO_IDX.items()}
    IDX_TO_OBJECT = {v: k for k, v in OBJECT_TO_IDX.items()}


VIEW = 7  # the agent's view: VIEW x VIEW cells, the agent at the middle of the nearest row
DIRS = [(1, 0), (0, 1), (-1, 0), (0, -1)]  # minigrid's DIR_TO_VEC


def view(env):
    """The agent's view as minigrid's gen_obs_grid + Grid.encode(vis_mask) give it, computed
    directly: view[i][j] = (type, color, state) indices, i left to right, j far to near, the
    agent at (VIEW // 2, VIEW - 1); unseen cells (0, 0, 0), empty ones (1, 0, 0)."""
    px, py = (int(v) for v in env.agent_pos)
    dx, dy = DIRS[env.agent_dir]
    rx, ry = -dy, dx
    ax, ay = VIEW // 2, VIEW - 1
    grid, width, height = env.grid.grid, env.grid.width, env.grid.height
    cells = [[None] * VIEW for _ in range(VIEW)]
    for i in range(VIEW):
        for j in range(VIEW):
            f, r = ay - j, i - ax
            x, y = px + f * dx + r * rx, py + f * dy + r * ry
            cells[i][j] = grid[y * width + x] if 0 <= x < width and 0 <= y < height else WALL
    # Grid.process_vis: light spreads from the agent's cell, row by row away from it.
    mask = [[False] * VIEW for _ in range(VIEW)]
    mask[ax][ay] = True
    for j in range(VIEW - 1, -1, -1):
        for i in range(0, VIEW - 1):
            if not mask[i][j]:
                continue
            c = cells[i][j]
            if c is not None and not c.see_behind():
                continue
            mask[i + 1][j] = True
            if j > 0:
                mask[i + 1][j - 1] = True
                mask[i][j - 1] = True
        for i in range(VIEW - 1, 0, -1):
            if not mask[i][j]:
                continue
            c = cells[i][j]
            if c is not None and not c.see_behind():
                continue
            mask[i - 1][j] = True
            if j > 0:
                mask[i - 1][j - 1] = True
                mask[i][j - 1] = True
    cells[ax][ay] = env.carrying  # the agent sees what it carries (gen_obs_grid)
    out = [[(0, 0, 0)] * VIEW for _ in range(VIEW)]
    for i in range(VIEW):
        for j in range(VIEW):
            if mask[i][j]:
                c = cells[i][j]
                out[i][j] = (1, 0, 0) if c is None else tuple(int(v) for v in c.encode())
    return out


def _steps(n, direction):
    return f"{n} step{'s' if n > 1 else ''} {direction}"


def describe(env):
    """GLAM's BabyAI-Text sentences for the agent's current view (a list of strings)."""
    image = view(env)
    out = []
    if env.carrying is not None:
        out.append(f"You carry a {env.carrying.color} {env.carrying.type}")
    ax, ay = VIEW // 2, VIEW - 1

    # The nearest wall in a straight line ahead, left and right, when nothing stands before it
    # (unseen and empty cells are looked past, as GLAM does).
    def wall(cells, direction):
        for k, (i, j) in enumerate(cells, start=1):
            kind = image[i][j][0]
            if kind in (0, 1):
                continue
            if kind == WALL_IDX:
                out.append(f"You see a wall {_steps(k, direction)}")
            return

    wall([(ax, j) for j in range(ay - 1, -1, -1)], "forward")
    wall([(i, ay) for i in range(ax - 1, -1, -1)], "left")
    wall([(i, ay) for i in range(ax + 1, VIEW)], "right")

    for i in range(VIEW):
        for j in range(VIEW):
            kind, color, state = image[i][j]
            if kind in (0, 1, WALL_IDX) or (i == ax and j == ay):
                continue
            dx, dy = i - ax, ay - j
            if dx == 0:
                where = _steps(dy, "forward")
            else:
                side = _steps(abs(dx), "right" if dx > 0 else "left")
                where = side if dy == 0 else f"{side} and {_steps(dy, 'forward')}"
            name = f"{IDX_TO_COLOR[color]} {IDX_TO_OBJECT[kind]}"
            if kind == DOOR_IDX:
                adjective = STATES[state]
                article = "an" if adjective == "open" else "a"
                out.append(f"You see {article} {adjective} {name} {where}")
            else:
                out.append(f"You see a {name} {where}")
    return out


def _pickup_local_class():
    """GLAM's PickupLocal (babyai-text's iclr19_levels.Level_PickupLocal) on minigrid's LevelGen:
    one 8x8 room, 8 distractors, "pick up the <color> <type>", colours always named."""
    from minigrid.core.constants import COLOR_NAMES
    from minigrid.envs.babyai.core.levelgen import LevelGen
    from minigrid.envs.babyai.core.verifier import OBJ_TYPES, ObjDesc

    class PickupLocal(LevelGen):
        def __init__(self, room_size=8, num_dists=8, **kwargs):
            super().__init__(room_size=room_size, num_rows=1, num_cols=1, num_dists=num_dists,
                             locked_room_prob=0.0, locations=False, unblocking=False,
                             implicit_unlock=False, action_kinds=["pickup"],
                             instr_kinds=["action"], **kwargs)

        def rand_obj(self, types=OBJ_TYPES, colors=COLOR_NAMES, max_tries=100):
            for _ in range(max_tries + 1):  # GLAM's force_colors: a colour is always named
                desc = ObjDesc(self._rand_elem(types), self._rand_elem(list(colors)), None)
                objs, _ = desc.find_matching_objs(self)
                if objs:
                    return desc
            raise RecursionError("failed to find suitable object")

    return PickupLocal


class Episode:
    """One level in progress: the minigrid env, its seed and actions, the outcome once it
    ended, and the BabyAI bot (None: not asked yet, False: it gave up) with its next action."""

    __slots__ = ("env", "seed", "history", "walls", "done", "outcome", "bot", "hint")


def _no_image():
    return None


def _quiet(fn, *args, **kwargs):
    """Runs fn with its prints (minigrid's "Sampling rejected: ...") kept off the log."""
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args, **kwargs)


def copy_env(env, memo):
    """A copy of a minigrid env: the grid's objects, the carried one, the verifier and the
    random generator are copied; what minigrid's step never changes is shared: the walls (no
    action moves or opens one), the rooms (read-only after reset: the verifier only asks which
    room a cell is in) and the spaces. `memo` maps the originals to their copies (deepcopy's),
    so that a bot copied with it reads the copy."""
    new = copy.copy(env)
    memo[id(env)] = new
    memo[id(env.room_grid)] = env.room_grid
    grid = copy.copy(env.grid)
    cells = []
    for o in env.grid.grid:
        if o is not None:
            o = memo[id(o)] = o if o.type == "wall" else copy.deepcopy(o, memo)
        cells.append(o)
    grid.grid = cells
    memo[id(env.grid)] = new.grid = grid
    new.carrying = copy.deepcopy(env.carrying, memo)
    new.instrs = copy.deepcopy(env.instrs, memo)
    new._np_random = copy.deepcopy(env._np_random, memo)
    return new


def _progress(instr):
    """The verifier's progress through a sequence instruction (a_done / b_done flags)."""
    out = []
    stack = [instr]
    while stack:
        i = stack.pop()
        if hasattr(i, "instr_a"):
            out.append((getattr(i, "a_done", None), getattr(i, "b_done", None)))
            stack += [i.instr_a, i.instr_b]
    return tuple(out)


def _thing(obj):
    """An object's identity in the state id: its encoding and a box's hidden contents."""
    if obj is None:
        return None
    inner = getattr(obj, "contains", None)
    return (tuple(int(v) for v in obj.encode()), _thing(inner) if inner is not None else None)


class BabyAIText(Env):
    name = "babyai_text"
    packages = tuple(REQUIRES)  # their installed versions go into the metadata message
    summary = "BabyAI levels (minigrid) told in GLAM's BabyAI-Text sentences, six actions"
    afterstates = False  # menu() sends the exact ones (a copy of the level, stepped)
    deterministic = True  # minigrid's step draws nothing at random; reset(seed) fixes the level
    clonable = True

    def __init__(self, params):
        super().__init__(params)
        unknown = sorted(set(params) - set(KEYS))
        if unknown:
            raise ValueError(f"babyai_text: unknown key(s) {', '.join(unknown)}; the keys are "
                             f"{', '.join(KEYS)} (the step limit is the level's max_steps: "
                             "level_params = {max_steps = N})")
        require("babyai_text", REQUIRES)
        import gymnasium as gym  # after the version check: a clear error beats an ImportError
        import minigrid  # noqa: F401  (registers the BabyAI-* ids)
        from minigrid.envs.babyai.core.levelgen import LevelGen
        from minigrid.envs.babyai.core.roomgrid_level import RoomGridLevel

        _load()
        level = str(params.get("level", "GoToLocal")).strip()
        level_params = params.get("level_params") or {}
        if not isinstance(level_params, dict):
            raise ValueError("babyai_text: level_params must be a table of the level's "
                             f"constructor arguments, got {level_params!r}")
        if level_params.get("max_steps") is not None:  # the step limit: minigrid truncates there
            level_params = dict(level_params)
            level_params["max_steps"] = integer(
                "babyai_text", level_params, "max_steps", None, 1, RLID_MAX_STEP_LIMIT,
                name="level_params.max_steps")
        short = level[len("BabyAI-"):] if level.startswith("BabyAI-") else level
        short = re.sub(r"-v\d+$", "", short)
        registered = sorted(k for k in gym.registry if k.startswith("BabyAI-"))
        try:
            if short == "PickupLocal":
                env = _pickup_local_class()(**level_params)
                self.level_id = "PickupLocal"
            else:
                ids = [level] if level in registered else [
                    k for k in registered if re.sub(r"-v\d+$", "", k) == "BabyAI-" + short]
                if not ids:
                    names = sorted({re.sub(r"-v\d+$", "", k)[len("BabyAI-"):] for k in registered})
                    raise ValueError(f"babyai_text: unknown level '{level}'; minigrid registers "
                                     f"{', '.join(names)}; and GLAM's PickupLocal")
                self.level_id = ids[-1]  # the newest version
                env = gym.make(self.level_id, **level_params).unwrapped
        except (TypeError, AssertionError) as e:
            raise ValueError(f"babyai_text: level_params {level_params} do not fit level "
                             f"'{level}': {type(e).__name__}: {e}") from None
        if not isinstance(env, RoomGridLevel):
            raise ValueError(f"babyai_text: '{level}' is not a BabyAI level (RoomGridLevel)")
        if env.agent_view_size != VIEW:
            raise ValueError(f"babyai_text: GLAM's text describes a {VIEW}x{VIEW} view; "
                             f"agent_view_size must stay {VIEW}, got {env.agent_view_size}")
        # minigrid's step and reset end by rendering the agent's view as an image (gen_obs),
        # which this adapter never reads (view() computes the same cells): skipped. gen_obs
        # only reads the env, so the dynamics are unchanged.
        env.gen_obs = _no_image
        self.template = env  # never reset: each episode resets a copy of it

        # The step limit: the level's max_steps (minigrid truncates there itself). A level that
        # draws its instruction's kind (LevelGen) sets max_steps per instruction (navigations
        # needed x rooms x room area), so the limit is that product's bound for the kinds it
        # draws; other levels have one max_steps, read from a few instances.
        if env.fixed_max_steps:
            limit = env.max_steps
        elif isinstance(env, LevelGen):
            navs = 2 if "putnext" in env.action_kinds else 1
            navs *= 4 if "seq" in env.instr_kinds else 2 if "and" in env.instr_kinds else 1
            limit = min(MAX_NAVS, navs) * env.room_size ** 2 * env.num_rows * env.num_cols
        else:
            limit = max(self._new(seed).max_steps for seed in range(4))
        self.step_limit = max(1, int(limit))
        self.instructions = (
            f"You are an agent in a BabyAI grid world (level {short}). Each turn you are told "
            "what you carry and what you see in the 7x7 cells ahead of you, each thing so many "
            "steps forward and to your left or right. Reach the goal with the actions turn "
            "left, turn right, go forward, pick up (the object in front of you), drop (what you "
            "carry, in front of you) and toggle (open the door or box in front of you).")

    # ---- episodes -------------------------------------------------------------------
    def _new(self, seed):
        env = copy.deepcopy(self.template)
        _quiet(env.reset, seed=int(seed))
        return env

    def reset(self, seed, split):
        ep = Episode()
        ep.env = self._new(seed)
        ep.seed, ep.history, ep.done, ep.outcome = int(seed), [], False, None
        ep.bot = ep.hint = None
        g = ep.env.grid  # walls never change: hashed once per episode
        walls = [k for k, obj in enumerate(g.grid) if obj is not None and obj.type == "wall"]
        key = repr((g.width, g.height, walls)).encode()
        ep.walls = hashlib.blake2b(key, digest_size=8).hexdigest()
        return ep

    def _copy(self, ep, bot):
        """A copy of the episode; with bot, its bot too (reading the copy's env)."""
        other = Episode()
        memo = {}
        other.env = copy_env(ep.env, memo)
        other.seed, other.history, other.walls = ep.seed, list(ep.history), ep.walls
        other.done, other.outcome, other.hint = ep.done, ep.outcome, ep.hint
        other.bot = copy.deepcopy(ep.bot, memo) if bot and ep.bot else (ep.bot if bot else None)
        return other

    def clone(self, ep):
        return self._copy(ep, bot=True)

    def task(self, ep):
        return f"Goal of the agent: {ep.env.mission}"

    def observation(self, ep):
        parts = describe(ep.env)
        text = ", ".join(parts) if parts else "You see nothing but the floor"
        if ep.outcome == "success":
            text += ". You have completed the mission."
        elif ep.outcome == "failure":
            text += ". The mission has failed."
        return text

    def state_hash(self, ep):
        env = ep.env
        things = tuple((k, _thing(obj)) for k, obj in enumerate(env.grid.grid)
                       if obj is not None and obj.type != "wall")
        key = repr((env.mission, ep.walls, things, tuple(int(v) for v in env.agent_pos),
                    int(env.agent_dir), _thing(env.carrying), env.step_count, env.max_steps,
                    _progress(env.instrs), ep.outcome))
        return hashlib.blake2b(key.encode("utf-8"), digest_size=8).hexdigest()

    def _advance(self, ep, action, history=True):
        """Steps the episode's env (and its bot, when it has one)."""
        _, reward, terminated, truncated, _ = ep.env.step(action)
        if history:
            ep.history.append(action)
        if terminated:
            ep.outcome = "success" if reward > 0 else "failure"
        ep.done = bool(terminated or truncated)
        if ep.bot is not None and ep.bot is not False and not ep.done:
            ep.hint = self._replan(ep, action)
        return Step(float(reward), terminal=bool(terminated), success=ep.outcome == "success",
                    truncated=bool(truncated and not terminated))

    def step(self, ep, action):
        if ep.done:
            raise ValueError("babyai_text: the episode is over")
        if action not in range(len(COMMANDS)):
            raise ValueError(f"babyai_text: action {action} is not one of 0..{len(COMMANDS) - 1}")
        return self._advance(ep, action)

    def menu(self, ep):
        if not self.wants_afterstates:  # rlid will not read them: no copies stepped
            return [Action(a, command, realisations)
                    for a, (command, realisations) in enumerate(COMMANDS)]
        items = []
        for a, (command, realisations) in enumerate(COMMANDS):
            child = self._copy(ep, bot=False)  # thrown away: its bot need not follow
            self._advance(child, a, history=False)
            items.append(Action(a, command, realisations, afterstate=self.observation(child),
                                afterstate_hash=self.state_hash(child)))
        return items

    # ---- the oracle: minigrid's BabyAI bot ------------------------------------------
    def _replan(self, ep, action):
        try:
            hint = int(_quiet(ep.bot.replan, action))
        except Exception:  # the bot gives up (a box was opened: DisappearedBoxError)
            ep.bot = False  # the oracle names no action from here on
            return None
        return hint if hint in range(len(COMMANDS)) else None

    def oracle(self, ep):
        """The BabyAI bot's next action. The bot keeps a memory of what it has seen, so it is
        replayed from the episode's reset along its actions, on a fresh copy of the level that
        then becomes the episode's own env (the same state: minigrid's steps are deterministic);
        from then on it is stepped with the episode."""
        if ep.done or ep.bot is False:
            return []
        if ep.bot is None:
            from minigrid.utils.baby_ai_bot import BabyAIBot

            replay = self.reset(ep.seed, "")
            replay.bot = BabyAIBot(replay.env)
            replay.hint = self._replan(replay, None)
            for a in ep.history:
                if replay.bot is False:
                    break
                self._advance(replay, a)
            if replay.bot is False:
                ep.bot = False
                return []
            if self.state_hash(replay) != self.state_hash(ep):
                raise RuntimeError("babyai_text: replaying the episode did not reach its state")
            ep.env, ep.bot, ep.hint = replay.env, replay.bot, replay.hint
        return [] if ep.hint is None else [ep.hint]


if __name__ == "__main__":
    run(BabyAIText)
