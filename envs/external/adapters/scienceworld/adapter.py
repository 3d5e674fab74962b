"""scienceworld: a ScienceWorld task (the text-based science simulator) as an rlid environment.

[env]
name = "scienceworld"
task = "lifespan-longest-lived"  # a ScienceWorld task name or id ("7-1", "boil", "find-living-thing")
simplification = "auto"          # ScienceWorld's simplifications, comma-separated ("easy", "" for
                                 # none); auto: openDoors,openContainers,selfWateringFlowerPots,
                                 # noElectricalAction (less noElectricalAction on electrical tasks)
step_limit = 50                  # agent decisions before truncation (1..10000)
test_split = "test"              # ScienceWorld's variations for rlid's test seeds: test, dev or
                                 # dev+test (test first)
menu_size = 26                   # the menu's cap (2..26)
engines = 4                      # JVMs in this process's pool (1..64): episodes in flight
                                 # beyond it share one by reloading and replaying

Instances: ScienceWorld splits each task's variations into train, dev and test
(get_variations_train/dev/test; about 50/25/25 %). Even (train) seed s plays
train variation number (s / 2) mod n_train, odd (test) seed s plays test_split
variation number (s / 2) mod n_test, so rlid's train and test instances are
disjoint.

The menu: the simulator's valid actions (get_valid_action_object_combinations)
number 100 to 3000 per state; a menu holds at most menu_size (26). The adapter
keeps a fixed, deterministic, documented subset -- never chosen with the gold
path -- and appends "(menu: K of N valid actions)" to the observation:
  0. "go to R" for the rooms R the agent can walk to, then "look around", "wait1";
  then the actions on the objects in reach -- held (in the inventory), on the
  room's floor, or directly inside one of those -- sorted by class, then
  held < floor < inside, then the simulator's own order:
  1. actions naming an object the task description names (e.g. "red box"):
     focus on it, pick it up, (de)activate it, move a held object into it,
     pour a liquid into it, use a held tool on it;
  2. focus on a held or floor object, put down a held object;
  3. pick up a floor object, (de)activate a floor device;
  4. focus on / pick up an object inside another, (de)activate a device inside
     another, move a held object into a container on the floor or in the
     inventory, pour a container that holds a liquid, use a held tool, mix a
     non-empty container, read, open;
  5. look at, connect.
  The simulator's object properties filter what is listed: pick up only what
  it calls movable, activate only a device that is off (deactivate one that is
  on), use only a held object it calls usable.
  Never listed: rooms, doors, the agent, air and the inventory as objects,
  teleport, close, look in, flush, dunk, eat, inventory, task, reset task, wait.
  When the simulator asks which of several objects an action meant
  ("Ambiguous request"), the menu is the numbered answers it lists.
Commands are the simulator's action text with the free-text grammar's
decoration characters turned into spaces; the adapter steps the original text.

Observation: the simulator's reply to the action, then its free "look around"
and inventory text (no time passes for those), then the menu line. Task: the
simulator's task description. Reward: the change of the simulator's score
(0..100, -100 on a failed task) divided by 100. terminal: the task is completed
(success, score 100) or failed (score < 0); rlid truncates at step_limit.

Dynamics: the simulator is deterministic given the variation and the actions:
loading a variation seeds its random generator (bees fly, animals wander), the
JVM runs with -XX:hashCode=2 (else the order of objects in its text depends on
how many worlds the JVM built before), and the adapter restores the generator
after listing the valid actions (which draws from it), so the world evolves as
if nobody asked. Afterstates: none. ScienceWorld cannot copy a state (no clone
or save/load in its API), so clonable = False: rlid copies a state by
replaying its actions, and the menu does not show where actions lead. The
adapter runs a pool of up to `engines` JVMs (512 MB heap each, started as
needed): each state is served by the engine already on its path, so episodes
in flight up to the pool's size never reload; beyond it, the least recently
used engine reloads the variation and replays the episode's actions. rlid's
`workers` runs more adapter processes, each with its own pool.

Oracle: ScienceWorld's gold action sequence, walked through this adapter's
menus: each gold action is matched to the menu item that names the same
template and objects (the gold path names objects with other referents);
"open" actions that fail only because the simplification opened every door
and container are dropped, or, where the walk then fails (tasks that time
their waits, as such a failure takes a turn), become "wait1"; numbered answers
to ambiguous gold actions are skipped (the menu's action names one object). Where
the whole walk stays on the menus and completes the task, the oracle names the
next gold item on states along it, with the exact remaining return; elsewhere
(off the path, or a variation whose gold path leaves the menu) it names none.
"""

import collections
import copy
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, "..", "..", "python"))  # rlid_env, uninstalled
sys.path.append(os.path.join(HERE, ".."))  # _params, _pinned
from _params import integer  # noqa: E402
from _pinned import pinned_packages, require  # noqa: E402
from rlid_env import Action, Env, Step, run  # noqa: E402

REQUIRES = pinned_packages(HERE)  # adapter.toml
MAX_MENU = 26
DEFAULT_TASK = "lifespan-longest-lived"
DEFAULT_ENGINES = 4
DEFAULT_SIMPLIFICATIONS = "openDoors,openContainers,selfWateringFlowerPots,noElectricalAction"
# Identity hash codes are a constant: object sets iterate in insertion order, so
# a world reloaded in a JVM that built others before reads the same as in a fresh one.
# --add-opens lets the adapter read the simulator's random generator (see Engine.valid).
# A 512 MB heap and the serial collector: about 0.5 GB and one busy core per JVM.
JAVA_OPTS = ["-XX:+UnlockExperimentalVMOptions", "-XX:hashCode=2",
             "--add-opens", "java.base/java.util=ALL-UNNAMED", "-Xmx512m", "-XX:+UseSerialGC"]
JAVA_FIX = ("install a Java runtime (11 or newer), e.g. on Debian/Ubuntu: "
            "apt-get install default-jre-headless, and make sure `java` is on PATH (or JAVA_HOME "
            "is set)")
DECORATION = re.compile(r"""[()\[\]{}<>*_`'".,:!?\s]+""")
NON_ITEMS = {"Room", "Outside", "Universe", "Door", "Agent", "InventoryContainer", "Air"}
ROOMS = {"Room", "Outside"}
# ScienceWorld's action templates (template_id -> pattern); 100+ are the answers to ambiguity.
TEMPLATES = {0: "open OBJ", 1: "close OBJ", 2: "go to OBJ", 3: "look around", 4: "look at OBJ",
             5: "look in OBJ", 6: "activate OBJ", 7: "deactivate OBJ", 8: "eat OBJ",
             9: "move OBJ to OBJ", 10: "pour OBJ into OBJ", 11: "focus on OBJ", 12: "reset task",
             13: "use OBJ on OBJ", 14: "read OBJ", 15: "flush OBJ", 16: "connect OBJ to OBJ",
             17: "disconnect OBJ", 18: "wait1", 19: "wait", 20: "inventory", 21: "pick up OBJ",
             22: "put down OBJ", 23: "mix OBJ", 24: "task", 26: "dunk OBJ into OBJ"}
GOLD_ALIASES = {10: ["pour OBJ in OBJ"], 4: ["examine OBJ"]}


def command_of(text):
    """The simulator's action text as a realisation the free-text grammar reads back unchanged."""
    return DECORATION.sub(" ", text).strip() or text


def _kind(type_name):
    return (type_name or "").rsplit(".", 1)[-1]


class Item:
    """One menu entry: the command shown and the simulator text stepped."""

    __slots__ = ("command", "text", "template", "objs")

    def __init__(self, command, text, template, objs):
        self.command, self.text, self.template, self.objs = command, text, template, objs


class State:
    """An episode: its variation, the actions taken, and what the simulator showed."""

    __slots__ = ("variation", "history", "reply", "look", "inventory", "score", "done",
                 "success", "menu", "valid_count")

    def text_key(self):
        return (self.variation, self.history)


_JAVA = []


def _java():
    """The checked Java executable (the package versions, then `java -version`), once a process."""
    if _JAVA:
        return _JAVA[0]
    require("scienceworld", REQUIRES)
    java = shutil.which("java")
    home = os.environ.get("JAVA_HOME")
    if home and os.path.exists(os.path.join(home, "bin", "java")):
        java = os.path.join(home, "bin", "java")
    if not java:
        raise RuntimeError("scienceworld: no Java runtime found: ScienceWorld's simulator is a "
                           "JVM program (scienceworld.jar, started through py4j); " + JAVA_FIX)
    try:
        probe = subprocess.run([java, *JAVA_OPTS, "-version"], capture_output=True, text=True,
                               timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"scienceworld: the Java runtime {java} does not run ({e}); "
                           + JAVA_FIX) from None
    if probe.returncode != 0:
        raise RuntimeError(f"scienceworld: {java} {' '.join(JAVA_OPTS)} -version failed: "
                           f"{(probe.stderr or probe.stdout).strip()[-400:]}; " + JAVA_FIX)
    _JAVA.append(java)
    return java


class Engine:
    """One ScienceWorld JVM, and which episode state it holds now."""

    def __init__(self):
        java = _java()
        import scienceworld.scienceworld as swmod  # after the version check (_java)

        launch = swmod.launch_gateway
        if not getattr(launch, "_rlid", False):
            def patched(*args, **kwargs):
                kwargs["javaopts"] = list(kwargs.get("javaopts") or []) + JAVA_OPTS
                if java != "java":
                    kwargs.setdefault("java_path", java)
                return launch(*args, **kwargs)
            patched._rlid = True
            swmod.launch_gateway = patched

        class _Env(swmod.ScienceWorldEnv):
            _closed = False

            def close(self):  # idempotent: __del__ closes again
                if self._closed or not hasattr(self, "_gateway"):
                    return
                self._closed = True
                try:
                    super().close()
                except Exception:
                    pass

        try:
            self.env = _Env("", envStepLimit=10 ** 9)
        except Exception as e:
            raise RuntimeError(f"scienceworld: the simulator's JVM did not start ({type(e).__name__}: "
                               f"{e}); check `{java} -version`; " + JAVA_FIX) from None
        self.server = self.env.server
        jvm = self.env._gateway.jvm
        cls = jvm.java.lang.Class.forName("java.util.Random")
        self.random = (jvm.java.lang.Class.forName("scala.util.Random$").getField("MODULE$")
                       .get(None).self())
        self.random_fields = []
        for name in ("seed", "nextNextGaussian", "haveNextNextGaussian"):
            f = cls.getDeclaredField(name)
            f.setAccessible(True)
            self.random_fields.append(f)
        self.types = {v: k for k, v in self.env.get_object_types().items()}
        self.key = None       # (task, variation, simplifications) loaded
        self.history = None   # the actions since reset, or None (unknown)
        self.fresh = False    # loaded, not stepped yet
        self.last_use = 0     # the pool's clock when it last served a state

    def close(self):
        self.env.close()

    def load(self, key, gold=False):
        task, variation, simplification = key
        self.env.load(task, variation, simplification, generateGoldPath=gold)
        self.key, self.history = key, None
        self.fresh = not gold  # a world just built; reset() would only build it again

    def reset(self):
        if not self.fresh:
            self.server.reset()  # loads the variation again (seeds its random generator)
        self.fresh = False
        self.server.step("look around")  # what ScienceWorldEnv.reset() does
        self.history = ()

    def goto(self, key, history):
        """Brings the JVM to the state after `history` in variation `key`."""
        if (self.key != key or self.history is None or len(self.history) > len(history)
                or history[:len(self.history)] != self.history):
            if self.key != key or not self.fresh:
                self.load(key)  # as cheap as server.reset(), which loads again
            self.reset()
        for text in history[len(self.history):]:
            self.server.step(text)
        self.history = tuple(history)

    def step(self, text):
        reply = self.server.step(text)
        self.history = self.history + (text,)
        return reply

    def score(self):
        return int(round(100 * self.server.getScore()))

    def valid(self):
        """The valid actions with templates. The simulator draws from its global random generator
        (seeded by load) while it lists them; the adapter restores the generator afterwards, so
        that the world evolves as if nobody asked, and replaying the actions alone reaches the
        same state."""
        seed, gauss, have = (f.get(self.random) for f in self.random_fields)
        text = self.server.getValidActionObjectCombinationsJSON()
        self.random.setSeed(seed ^ 0x5DEECE66D)  # setSeed scrambles: this restores `seed` exactly
        self.random_fields[1].setDouble(self.random, float(gauss))
        self.random_fields[2].setBoolean(self.random, bool(have))
        return json.loads(text)["validActions"]

    def objects(self):
        """uuid -> {name, parent, kind, container, liquid}, and the valid actions with templates."""
        valid = self.valid()
        tree = self.env.getObjectTree()
        objs = {}
        stack = [(tree, None)]
        while stack:
            node, parent = stack.pop()
            uid = str(node["uuid"])
            objs[uid] = {"name": node["name"], "parent": parent, "kind": "",
                         "container": node.get("propContainer") is not None,
                         "som": (node.get("propMaterial") or {}).get("stateOfMatter"),
                         "children": [str(c["uuid"]) for c in (node.get("contents") or {}).values()],
                         **_affordances(node)}
            for child in (node.get("contents") or {}).values():
                stack.append((child, uid))
        for v in valid:
            for uid, tid in zip(v["obj_ids"], v.get("type_ids") or []):
                o = objs.setdefault(str(uid), {"name": None, "parent": None, "container": False,
                                               "som": None, "children": [], **_affordances({})})
                o["kind"] = _kind(self.types.get(tid, ""))
        for o in objs.values():
            if not o["kind"] and o["name"] in ("agent", "inventory"):
                o["kind"] = "Agent" if o["name"] == "agent" else "InventoryContainer"
            o["liquid"] = any(objs.get(c, {}).get("som") == "liquid" for c in o["children"])
        return valid, objs


class Pool:
    """Up to `size` JVMs. A state (variation, actions) is served by the engine that reaches it
    with the fewest steps replayed -- one already on its path -- else by a new engine while
    the pool has room, else by the least recently used one, reloaded."""

    def __init__(self, size):
        self.size = size
        self.engines = [Engine()]
        self.clock = 0

    def _use(self, eng):
        self.clock += 1
        eng.last_use = self.clock
        return eng

    def spare(self):
        """An engine to load another variation into."""
        if len(self.engines) < self.size:
            self.engines.append(Engine())
            return self._use(self.engines[-1])
        return self._use(min(self.engines, key=lambda e: e.last_use))

    def at(self, key, history):
        """An engine holding the state after `history` in variation `key`."""
        best = None
        for e in self.engines:
            h = e.history
            if (e.key == key and h is not None and len(h) <= len(history)
                    and history[:len(h)] == h and (best is None or len(h) > len(best.history))):
                best = e
        eng = best or self.spare()
        eng.goto(key, history)
        return self._use(eng)

    def close(self):
        for e in self.engines:
            e.close()


def _affordances(node):
    """What the simulator's own object properties say can be done with an object."""
    device = node.get("propDevice") or {}
    return {"movable": bool((node.get("propMoveable") or {}).get("isMovable")),
            "activable": bool(device.get("isActivable")),
            "activated": bool(device.get("isActivated")),
            "usable": bool(device.get("isUsable"))}


def build_menu(valid, objs, task_text, reply, cap):
    """The documented menu rule (module docstring): a list of Item, and the valid count."""
    if reply.startswith("Ambiguous request"):
        shown = set(re.findall(r"^\s*(\d+):", reply, flags=re.M))
        items = [Item(v["action"], v["action"], v["template_id"], [])
                 for v in valid if v["template_id"] >= 100 and v["action"] in shown]
        if items:
            return items[:cap], len(valid)
    agent = next((u for u, o in objs.items() if o["kind"] == "Agent"), None)
    room = objs[agent]["parent"] if agent else None
    inv = next((u for u, o in objs.items() if o["kind"] == "InventoryContainer"), None)

    def is_item(u):
        o = objs.get(u)
        return o is not None and o["kind"] not in NON_ITEMS and o["kind"] != ""

    def where(u):
        p = objs.get(u, {}).get("parent")
        if p is not None and p == inv:
            return 0  # held
        if p is not None and p == room:
            return 1  # on the floor
        pp = objs.get(p, {}).get("parent") if p else None
        if pp is not None and (pp == room or pp == inv) and is_item(p):
            return 2  # directly inside a held or floor object
        return None

    names = {}
    for v in valid:
        if v["template_id"] == 11 and len(v["obj_ids"]) == 1:
            names.setdefault(str(v["obj_ids"][0]), v["action"][len("focus on "):])
    task_lower = task_text.lower()
    mentioned_cache = {}

    def named(u):
        if u not in mentioned_cache:
            n = names.get(u)
            mentioned_cache[u] = bool(n) and re.search(
                r"\b" + re.escape(n.lower()) + r"\b", task_lower) is not None
        return mentioned_cache[u]

    first = {}
    for i, v in enumerate(valid):
        for u in v["obj_ids"]:
            first.setdefault(str(u), i)
    nav, fixed, ranked = [], [], []
    for i, v in enumerate(valid):
        t = v["template_id"]
        ids = [str(u) for u in v["obj_ids"]]
        text = v["action"]
        if t == 2:
            if (len(ids) == 1 and objs.get(ids[0], {}).get("kind") in ROOMS
                    and text.startswith("go to ") and ids[0] != room):
                nav.append(v)
            continue
        if t in (3, 18):
            fixed.append(v)
            continue
        if not ids or not all(is_item(u) for u in ids):
            continue
        w = [where(u) for u in ids]
        if None in w:
            continue
        x, wx = ids[0], w[0]
        cls = None
        if t == 11:  # focus on
            cls = 1 if named(x) else (2 if wx < 2 else 4)
        elif t == 21:  # pick up what the simulator says can be moved
            if wx != 0 and objs[x]["movable"]:
                cls = 1 if named(x) else (3 if wx == 1 else 4)
        elif t == 22:  # put down
            cls = 2
        elif t in (6, 7):  # switch a device on when it is off, off when it is on
            if objs[x]["activable"] and objs[x]["activated"] == (t == 7):
                cls = 1 if named(x) else (3 if wx < 2 else 4)
        elif t == 23:  # mix
            if objs[x]["container"] and objs[x]["children"]:
                cls = 4
        elif t in (0, 14):  # open, read
            cls = 4
        elif t in (4, 16):  # look at, connect
            cls = 5
        elif t in (9, 10, 13):
            y, wy = ids[1], w[1]
            if x != y:
                if t == 9:  # move a held object into a container here
                    if wx == 0 and objs[y]["container"] and (wy < 2 or named(y)):
                        cls = 1 if named(y) else 4
                elif t == 10:  # pour a container that holds a liquid
                    if wx < 2 and objs[x]["liquid"] and objs[y]["container"]:
                        cls = 1 if named(y) else 4
                elif wx == 0 and objs[x]["usable"]:  # use a held tool
                    cls = 1 if named(y) else 4
        if cls is not None:
            ranked.append((cls, wx, first[x], i, v))
    ranked.sort(key=lambda r: r[:4])
    chosen = nav + fixed + [r[-1] for r in ranked]
    items, seen = [], set()
    for v in chosen:
        command = command_of(v["action"])
        if command.lower() in seen:
            continue
        seen.add(command.lower())
        items.append(Item(command, v["action"], v["template_id"], [str(u) for u in v["obj_ids"]]))
        if len(items) == cap:
            break
    return items, len(valid)


def _gold_names(u, objs, refs):
    """The ways the gold path may name object u: a referent, or '<referent> in <its container>'."""
    own = set(refs.get(u, {}).get("referents") or []) | {objs.get(u, {}).get("name")}
    own.discard(None)
    out = set(own)
    p = objs.get(u, {}).get("parent")
    if p is not None:
        around = set(refs.get(p, {}).get("referents") or []) | {objs.get(p, {}).get("name")}
        around.discard(None)
        if objs.get(p, {}).get("kind") == "InventoryContainer":
            around.add("inventory")
        for r in own:
            for a in around:
                out.add(f"{r} in {a}")
                out.add(f"{r} on {a}")
    return out


def _gold_matches(gold, item, objs, refs):
    if gold == item.text:
        return True
    pattern = TEMPLATES.get(item.template)
    if pattern is None or pattern.count("OBJ") != len(item.objs) or not item.objs:
        return False
    for p in [pattern] + GOLD_ALIASES.get(item.template, []):
        head, *seps = p.split("OBJ")
        if not gold.startswith(head):
            continue
        rest = gold[len(head):]
        if len(item.objs) == 1:
            if seps[0] == "" and rest in _gold_names(item.objs[0], objs, refs):
                return True
            continue
        sep = seps[0]
        at = rest.find(sep)
        while at >= 0:
            a, b = rest[:at], rest[at + len(sep):]
            if (a in _gold_names(item.objs[0], objs, refs)
                    and b in _gold_names(item.objs[1], objs, refs)):
                return True
            at = rest.find(sep, at + 1)
    return False


class ScienceWorld(Env):
    name = "scienceworld"
    summary = "a ScienceWorld task (text science simulator, JVM): a capped menu of its valid actions"
    deterministic = True   # given the variation and the actions (the JVM runs with hashCode=2)
    clonable = False       # no state copy in ScienceWorld's API: rlid replays actions
    afterstates = False    # and so no afterstates
    packages = tuple(REQUIRES)  # their installed versions go into the metadata message

    def __init__(self, params):
        super().__init__(params)
        known = {"task", "simplification", "step_limit", "test_split", "menu_size", "engines"}
        unknown = sorted(set(params) - known)
        if unknown:
            raise ValueError(f"scienceworld: unknown key(s) {', '.join(unknown)}; the keys are "
                             f"{', '.join(sorted(known))}")
        # The numeric keys first: a bad one is refused before a JVM starts.
        engines = integer("scienceworld", params, "engines", DEFAULT_ENGINES, 1, 64)
        self.step_limit = integer("scienceworld", params, "step_limit", 50, 1, 10000)
        self.menu_size = integer("scienceworld", params, "menu_size", MAX_MENU, 2, MAX_MENU)
        self.pool = Pool(engines)
        import atexit
        atexit.register(self.pool.close)
        from scienceworld.constants import ID2TASK
        from scienceworld.utils import infer_task

        first = self.pool.engines[0]
        env = first.env
        names = env.get_task_names()
        asked = str(params.get("task", DEFAULT_TASK))
        task = infer_task(asked)
        if task not in names:
            ids = ", ".join(f"{k} {v}" for k, v in ID2TASK.items())
            raise ValueError(f"scienceworld: unknown task '{asked}'; ScienceWorld's tasks are: {ids}")
        self.task_name = task
        electrical = "power-component" in task or "conductivity" in task
        simp = str(params.get("simplification", "auto")).replace(" ", "")
        if simp == "auto":
            simp = DEFAULT_SIMPLIFICATIONS
            if electrical:
                simp = simp.replace(",noElectricalAction", "")
        possible = ["easy"] + env.get_possible_simplifications()
        for s in filter(None, simp.split(",")):
            if s not in possible:
                raise ValueError(f"scienceworld: unknown simplification '{s}'; ScienceWorld's are: "
                                 f"{', '.join(possible)} (comma-separated, or auto)")
        if electrical and ({"noElectricalAction", "easy"} & set(simp.split(","))):
            raise ValueError(f"scienceworld: task '{task}' needs the electrical actions (connect), "
                             "which noElectricalAction and easy remove; use simplification = \"auto\" "
                             "or list the others (teleportAction,openDoors,openContainers,"
                             "selfWateringFlowerPots)")
        self.simplification = simp
        split = str(params.get("test_split", "test"))
        if split not in ("test", "dev", "dev+test"):
            raise ValueError(f"scienceworld: test_split must be test, dev or dev+test, got '{split}'")
        env.load(task, 0, simp)
        self.train_variations = list(env.get_variations_train())
        self.test_variations = ((list(env.get_variations_test()) if "test" in split else [])
                                + (list(env.get_variations_dev()) if "dev" in split else []))
        first.key, first.history = (task, 0, simp), None
        self.instructions = (
            f"You are an agent in ScienceWorld, a text-based simulation of a house and its "
            f"surroundings (task '{task}'). Each turn, choose one action from the menu; it lists at "
            f"most {self.menu_size} of the simulator's valid actions (the line '(menu: K of N valid "
            f"actions)' says how many were left out). Focusing on the wrong object can fail the task.")
        self.initial = collections.OrderedDict()  # variation -> its reset State
        self.task_text = {}                       # variation -> task description
        self.gold = {}                            # variation -> {history: (text, return)} or None

    # ---- the simulator ----------------------------------------------------------------
    def _key(self, variation):
        return (self.task_name, variation, self.simplification)

    def _observe(self, st, reply, eng):
        """Fills st from the simulator engine `eng`, which holds st's state now."""
        st.reply = reply
        st.look = eng.env.look()
        st.inventory = eng.env.inventory()
        if st.done:
            st.menu, st.valid_count = [], 0
            return
        valid, objs = eng.objects()
        st.menu, st.valid_count = build_menu(valid, objs, self.task_text[st.variation], reply,
                                             self.menu_size)
        if not st.menu:
            raise RuntimeError(f"scienceworld: no valid action left at this state of variation "
                               f"{st.variation} ({st.valid_count} valid)")

    def reset(self, seed, split):
        pool = self.train_variations if seed % 2 == 0 else self.test_variations
        variation = pool[(seed // 2) % len(pool)]
        if variation not in self.initial:
            eng = self.pool.spare()
            eng.load(self._key(variation))
            eng.reset()
            self.task_text[variation] = eng.env.get_task_description()
            st = State()
            st.variation, st.history = variation, ()
            st.score, st.done, st.success = eng.score(), False, False
            self._observe(st, "", eng)
            self.initial[variation] = st
            if len(self.initial) > 512:
                self.initial.popitem(last=False)
        return copy.copy(self.initial[variation])

    def clone(self, st):
        return copy.copy(st)  # fields are immutable or replaced, never changed in place

    def step(self, st, action):
        if not isinstance(action, int) or not 0 <= action < len(st.menu):
            raise ValueError(f"scienceworld: action {action!r} is not on the menu "
                             f"(0..{len(st.menu) - 1})")
        item = st.menu[action]
        eng = self.pool.at(self._key(st.variation), st.history)
        reply = eng.step(item.text)
        score = eng.score()
        completed = bool(eng.server.getCompleted())
        reward = (score - st.score) / 100.0
        st.history = st.history + (item.text,)
        st.score = score
        st.done = completed or score < 0
        st.success = completed and score >= 100
        self._observe(st, reply, eng)
        return Step(reward, terminal=st.done, success=st.success)

    # ---- what the agent sees ------------------------------------------------------------
    def task(self, st):
        return self.task_text[st.variation]

    def observation(self, st):
        parts = []
        reply = st.reply.strip()
        if reply and reply != st.look.strip():
            parts.append(reply)
        parts.append(st.look.strip())
        parts.append(st.inventory.strip())
        if st.done:
            parts.append("The task is complete." if st.success else
                         f"The task is over (score {st.score}).")
        else:
            parts.append(f"(menu: {len(st.menu)} of {st.valid_count} valid actions)")
        return "\n\n".join(p for p in parts if p)

    def state_hash(self, st):
        key = f"{self.task_name}\x1f{st.variation}\x1f{st.score}\x1f{self.observation(st)}"
        return hashlib.blake2b(key.encode("utf-8"), digest_size=8).hexdigest()

    def menu(self, st):
        return [Action(i, it.command) for i, it in enumerate(st.menu)]

    # ---- the oracle: the gold path, where it stays on the menus --------------------------
    def _walk_gold(self, variation):
        """{history: (gold item text, remaining return)} along the gold path, or None."""
        eng = self.pool.spare()
        key = self._key(variation)
        eng.load(key, gold=True)  # generating it plays the world: walk a fresh load instead
        gold = [g.strip() for g in eng.env.get_gold_action_sequence()]
        eng.load(key)
        if variation not in self.initial:
            self.reset(self._seed_of(variation), "train")
        # A gold "open" of what the simplification opened fails and takes a turn (wait1 takes
        # two, look around none): drop those first; if the walk then fails (a task that times its
        # waits), pass them with wait1 instead.
        for opened in ("drop", "wait1"):
            path = self._walk(variation, gold, opened)
            if path is not None:
                return path
        return None

    def _walk(self, variation, gold, opened):
        st = self.clone(self.initial[variation])
        histories, texts, scores = [], [], []
        for g in gold:
            if st.done:
                break
            hit = [it for it in st.menu if it.text == g]
            if not hit:  # the gold path names objects its own way: compare templates and objects
                eng = self.pool.at(self._key(variation), st.history)
                _, objs = eng.objects()
                refs = json.loads(eng.server.getAllObjectIdsTypesReferentsLUTJSON())
                hit = [it for it in st.menu if _gold_matches(g, it, objs, refs)]
            if not hit and g.startswith("open "):
                if opened == "drop":
                    continue
                hit = [it for it in st.menu if it.text == "wait1"]
            if not hit:
                if g.isdigit():
                    continue  # an answer to the gold path's own ambiguity (ours named one object)
                return None
            histories.append(st.history)
            texts.append(hit[0].text)
            scores.append(st.score)
            self.step(st, st.menu.index(hit[0]))
        if not st.success:
            return None
        return {h: (t, (st.score - s) / 100.0) for h, t, s in zip(histories, texts, scores)}

    def _seed_of(self, variation):
        if variation in self.train_variations:
            return 2 * self.train_variations.index(variation)
        return 2 * self.test_variations.index(variation) + 1

    def oracle(self, st):
        if st.done:
            return []
        if st.variation not in self.gold:
            self.gold[st.variation] = self._walk_gold(st.variation)
        path = self.gold[st.variation]
        if not path or st.history not in path:
            return []
        text, ret = path[st.history]
        ids = [i for i, it in enumerate(st.menu) if it.text == text]
        return (ids, ret) if ids else []


if __name__ == "__main__":
    run(ScienceWorld)
