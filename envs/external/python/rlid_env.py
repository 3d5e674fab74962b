"""rlid_env: write an rlid environment in Python (standard library only).

Subclass Env, implement reset / observation / menu / step (optionally task,
oracle, compile_text, facts, state_hash), and end your script with run(MyEnv).
rlid starts the script as a child process and speaks its env protocol
(newline-delimited JSON on stdin/stdout, docs/external_env.md) with it; this
module is that protocol's message loop, so your code never sees JSON.

    from rlid_env import Env, Action, Step, run

    class Coin(Env):
        name = "coin"
        step_limit = 1
        def reset(self, seed, split):
            return {"side": ["heads", "tails"][seed % 2], "said": None}
        def observation(self, s):
            return f"The coin shows {s['side']}." if s["said"] is None else f"You said {s['said']}."
        def menu(self, s):
            return [Action(0, "say heads", ["heads"]), Action(1, "say tails", ["tails"])]
        def step(self, s, action):
            s["said"] = ["heads", "tails"][action]
            ok = s["said"] == s["side"]
            return Step(1.0 if ok else 0.0, terminal=True, success=ok)

    if __name__ == "__main__":
        run(Coin)

Contract (what rlid checks with `rlid env check --command "python3 my_env.py"`):
- reset(seed, split) returns a new state object that depends only on the
  seed (even seeds are training instances, odd ones test instances; `split` is
  "train" or "test" accordingly).
- step(state, action_id) changes `state` in place and returns a Step. Action
  ids are the ids of the menu's Actions (integers >= 0, unique in a menu).
- States are copied with copy.deepcopy (override clone() if that is wrong or
  slow). Afterstates (what each action leads to) are computed here, in this
  process, by stepping a copy, unless an Action carries its own.
- Print your own messages with print(): stdout is redirected to stderr while
  your code runs, and rlid logs stderr. Only this module writes to the real
  stdout.
"""

import copy
import hashlib
import importlib.metadata
import json
import math
import sys
import traceback

PROTOCOL = 2            # the newest version this helper speaks
PROTOCOLS = (1, 2)      # every version it speaks (docs/external_env.md)

__all__ = ["Env", "Action", "Step", "Invalid", "Capacity", "run", "PROTOCOL"]


class Action:
    """One menu item: an action id, its canonical command, other accepted
    realisations, and optionally its afterstate text (and that state's id)."""

    __slots__ = ("id", "command", "realisations", "afterstate", "afterstate_hash")

    def __init__(self, id, command, realisations=(), afterstate=None, afterstate_hash=None):
        self.id = id
        self.command = command
        self.realisations = list(realisations)
        self.afterstate = afterstate
        self.afterstate_hash = afterstate_hash


class Step:
    """What step() returns: the reward, and whether the episode ended (and how)."""

    __slots__ = ("reward", "terminal", "success", "truncated")

    def __init__(self, reward, terminal=False, success=False, truncated=False):
        self.reward = reward
        self.terminal = terminal
        self.success = success
        self.truncated = truncated


class Invalid(Exception):
    """Raised by compile_text() for text that names no action; the message is the reason."""


class Capacity(Exception):
    """Raise it from reset() when the env has no room for another episode now
    (a remote server's sessions are all busy): rlid asks again after a wait,
    within its timeout, instead of failing."""


class _Refused(Exception):
    """A request this helper refuses; `code` is its protocol-2 error code."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class Env:
    """Base class of a Python env. Override the class attributes and methods."""

    name = "python_env"    # letters, digits, '_', '-', '.'
    summary = ""           # one line for `rlid env list`-like output
    instructions = ""      # the rules, shown at the top of every prompt
    step_limit = 50        # rlid ends (truncates) an episode after this many decisions
    deterministic = True   # step() depends only on (state, action)
    clonable = True        # states can be copied with clone(); if not, rlid replays actions
    afterstates = True     # compute menu afterstates by stepping a copy (needs clonable)
    wants_afterstates = True  # set from hello: False when rlid will not read them ([env]
                              # afterstates = "none" or "clone"): menu() may skip them
    version = ""           # this env's own version, for the metadata message
    packages = ()          # PyPI packages it wraps: metadata reports their installed versions

    def __init__(self, params):
        # [env.params] of rlid's config, as a dict.
        self.params = params

    # ---- required ----------------------------------------------------------------
    def reset(self, seed, split):
        raise NotImplementedError("reset(seed, split) must return a new state")

    def observation(self, state):
        raise NotImplementedError("observation(state) must return a string")

    def menu(self, state):
        raise NotImplementedError("menu(state) must return a list of Action")

    def step(self, state, action):
        raise NotImplementedError("step(state, action) must return a Step")

    # ---- optional ----------------------------------------------------------------
    def task(self, state):
        """The goal, shown before the observation ("" for none)."""
        return ""

    def facts(self, state):
        """Facts the state makes observable, for rlid's memory (strings)."""
        return []

    def clone(self, state):
        return copy.deepcopy(state)

    def state_hash(self, state):
        """A canonical id of the state (string). Default: a hash of task + observation."""
        text = self.task(state) + "\x1f" + self.observation(state)
        return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()

    # Override to offer an oracle: the optimal action ids at `state`, or
    # (action_ids, optimal_return). rlid uses it for SFT demonstrations.
    oracle = None

    # Override (with oracle) to offer worked reasoning: one line that works the
    # oracle's action out, ending with it; `rlid sft` with [prompt] reasoning
    # demonstrates it as the scratchpad before the decision.
    reasoning = None

    # Override to offer a free-text compiler beyond rlid's own menu grammar:
    # return an action id, or raise Invalid("reason"). rlid asks it only for
    # answers its grammar (labels, commands, realisations) rejected.
    compile_text = None


def _capabilities(env, protocol):
    caps = ["clone", "restore", "close"] if env.clonable else ["close"]
    if protocol >= 2:
        caps.append("metadata")
    if callable(getattr(env, "compile_text", None)):
        caps.append("compile")
    if callable(getattr(env, "oracle", None)):
        caps.append("oracle")
        if protocol >= 2 and callable(getattr(env, "reasoning", None)):
            caps.append("reasoning")
    return caps


class _Server:
    def __init__(self, env_class):
        self.env_class = env_class
        self.env = None
        self.states = {}  # handle -> state
        self.done = {}    # handle -> terminal
        self.next_handle = 0
        self.protocol = 0  # agreed in hello

    def _state(self, req):
        h = req["handle"]
        if h not in self.states:
            raise _Refused("validation_error", f"no state with handle {h}")
        return h, self.states[h]

    def _hello(self, req):
        offered = req.get("protocols")
        if not isinstance(offered, list):
            offered = [req.get("protocol")]
        common = [v for v in offered if v in PROTOCOLS]
        if not common:
            raise _Refused("validation_error", f"this helper speaks protocols {list(PROTOCOLS)}, "
                                               f"rlid offered {offered}")
        self.protocol = max(common)
        try:
            self.env = self.env_class(req.get("params") or {})
        except ValueError as e:
            # The env refuses its parameters (a key out of range, a required one missing):
            # the user's config, which rlid reports as a config error naming the env.
            traceback.print_exc(file=sys.stderr)
            raise _Refused("config_error", str(e)) from e
        e = self.env
        e.wants_afterstates = req.get("afterstates", True) is not False
        return {"protocol": self.protocol, "name": e.name, "summary": e.summary,
                "instructions": e.instructions, "step_limit": e.step_limit,
                "deterministic": e.deterministic,
                "capabilities": _capabilities(e, self.protocol)}

    def _metadata(self):
        e = self.env
        packages = {}
        for name in e.packages:
            try:
                packages[name] = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                packages[name] = None
        return {"name": e.name, "version": str(e.version), "packages": packages,
                "python": sys.version.split()[0], "helper_protocols": list(PROTOCOLS)}

    def _ended(self, reply, terminated, truncated):
        """Version 1 says "terminal" (either end), version 2 Gymnasium's pair."""
        if self.protocol >= 2:
            reply["terminated"] = bool(terminated)
        else:
            reply["terminal"] = bool(terminated or truncated)
        reply["truncated"] = bool(truncated)

    def _menu(self, state):
        items = self.env.menu(state)
        out = []
        for a in items:
            if not isinstance(a, Action):
                raise TypeError(f"menu() must return Action objects, got {type(a).__name__}")
            if not isinstance(a.id, int) or isinstance(a.id, bool) or a.id < 0:
                raise TypeError(f"Action ids must be integers >= 0, got {a.id!r}")
            item = {"action": a.id, "command": a.command, "realisations": a.realisations}
            if self.env.wants_afterstates:  # rlid reads them
                if a.afterstate is not None:
                    item["afterstate"] = a.afterstate
                    if a.afterstate_hash is not None:
                        item["afterstate_hash"] = a.afterstate_hash
                elif self.env.afterstates and self.env.clonable:
                    child = self.env.clone(state)
                    self._outcome(self.env.step(child, a.id))
                    item["afterstate"] = self.env.observation(child)
                    item["afterstate_hash"] = self.env.state_hash(child)
            out.append(item)
        return out

    def _put_state(self, reply, state, terminal, cut=False):
        reply["task"] = self.env.task(state)
        reply["observation"] = self.env.observation(state)
        reply["state_hash"] = self.env.state_hash(state)
        facts = self.env.facts(state)
        if facts:
            reply["facts"] = list(facts)
        if not terminal:
            reply["menu"] = self._menu(state)
        elif cut:  # the menu at the cut, which a critic reads to bootstrap (if the env still has one)
            try:
                menu = self._menu(state)
            except Exception:  # noqa: BLE001 - an env that cannot list moves once cut sends none
                menu = []
            if menu:
                reply["menu"] = menu
        return reply

    @staticmethod
    def _outcome(out):
        if not isinstance(out, Step):
            raise TypeError(f"step() must return a Step, got {type(out).__name__}")
        return out

    def handle(self, req):
        if not isinstance(req, dict) or not isinstance(req.get("op"), str):
            raise _Refused("validation_error", "a request must be an object with a string 'op'")
        op = req["op"]
        if op == "hello":
            return self._hello(req)
        if self.env is None:
            raise _Refused("validation_error", "the first message must be hello")
        if op == "metadata" and self.protocol >= 2:
            return self._metadata()
        if op == "reset":
            try:
                state = self.env.reset(req["seed"], req.get("split", "train"))
            except Capacity as e:
                raise _Refused("capacity", str(e) or "the env has no room for another episode now")
            self.next_handle += 1
            self.states[self.next_handle] = state
            self.done[self.next_handle] = False
            reply = {"handle": self.next_handle}
            self._ended(reply, False, False)
            return self._put_state(reply, state, False)
        if op == "step":
            h, state = self._state(req)
            if self.done[h]:
                raise _Refused("validation_error", f"step on handle {h}, whose episode is over")
            out = self._outcome(self.env.step(state, req["action"]))
            reward = float(out.reward)
            if not math.isfinite(reward):  # JSON has no NaN: say so here, naming the step
                raise ValueError(f"step() returned the reward {reward!r} for action "
                                 f"{req['action']} (handle {h}); rewards must be finite numbers")
            terminal = bool(out.terminal or out.truncated)
            self.done[h] = terminal
            reply = {"reward": reward, "success": bool(out.success)}
            self._ended(reply, out.terminal and not out.truncated, out.truncated)
            return self._put_state(reply, state, terminal, cut=bool(out.truncated))
        if op in ("clone", "restore") and not self.env.clonable:
            raise _Refused("unknown_op", f"{op}: this env is not clonable (clonable = False)")
        if op == "clone":
            h, state = self._state(req)
            self.next_handle += 1
            self.states[self.next_handle] = self.env.clone(state)
            self.done[self.next_handle] = self.done[h]
            return {"handle": self.next_handle}
        if op == "restore":
            h, _ = self._state(req)
            src = req["from"]
            if src not in self.states:
                raise _Refused("validation_error", f"no state with handle {src}")
            self.states[h] = self.env.clone(self.states[src])
            self.done[h] = self.done[src]
            return {}
        if op == "close":
            h = req["handle"]
            self.states.pop(h, None)
            self.done.pop(h, None)
            return {}
        if op == "compile" and callable(getattr(self.env, "compile_text", None)):
            _, state = self._state(req)
            try:
                action = self.env.compile_text(state, req["text"])
            except Invalid as e:
                return {"invalid": str(e) or "not an action"}
            if action is None:
                return {"invalid": "not an action"}
            return {"action": action}
        if op == "oracle" and callable(getattr(self.env, "oracle", None)):
            _, state = self._state(req)
            best = self.env.oracle(state)
            if isinstance(best, tuple) and len(best) == 2:
                return {"actions": list(best[0]), "return": float(best[1])}
            return {"actions": list(best)}
        if op == "reasoning" and self.protocol >= 2 and callable(getattr(self.env, "reasoning", None)):
            _, state = self._state(req)
            return {"reasoning": str(self.env.reasoning(state))}
        raise _Refused("unknown_op", f"unknown op {op!r}")

    def error(self, code, message):
        """An error reply's body: version 2's {code, message}, version 1's message."""
        if self.protocol == 1:
            return message
        return {"code": code, "message": message}


def _from_request(e):
    """Whether a KeyError/TypeError was raised reading the request (this module's
    own frame, handle()), not inside the env's code."""
    tb = e.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_filename == __file__


def run(env_class, stdin=None, stdout=None):
    """Serves `env_class` on stdin/stdout until stdin closes."""
    proto_in = stdin or sys.stdin
    proto_out = stdout or sys.stdout
    if stdout is None:
        sys.stdout = sys.stderr  # the user's print() must not corrupt the protocol
    server = _Server(env_class)
    for line in proto_in:
        if not line.strip():
            continue
        req_id = None
        try:
            try:
                req = json.loads(line)
            except ValueError as e:
                raise _Refused("invalid_json", f"the request is not JSON: {e}")
            req_id = req.get("id") if isinstance(req, dict) else None
            reply = server.handle(req)
            reply["id"] = req_id
            text = json.dumps(reply, allow_nan=False)
        except _Refused as e:
            text = json.dumps({"id": req_id, "error": server.error(e.code, str(e))})
        except (KeyError, TypeError) as e:  # a missing or mistyped request field, or the env's bug
            traceback.print_exc(file=sys.stderr)
            code = "validation_error" if _from_request(e) else "execution_error"
            text = json.dumps({"id": req_id, "error": server.error(code, f"{type(e).__name__}: {e}")})
        except Exception as e:  # the env's own code failed: the traceback goes to stderr
            traceback.print_exc(file=sys.stderr)
            text = json.dumps({"id": req_id,
                               "error": server.error("execution_error", f"{type(e).__name__}: {e}")})
        proto_out.write(text + "\n")
        proto_out.flush()
