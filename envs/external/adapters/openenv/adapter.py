"""openenv: any OpenEnv server with a discrete action space, as an rlid environment.

[env]
name = "openenv"
url = "http://127.0.0.1:8000"  # the server (http(s):// or ws(s)://); required unless `server` is set
server = ""                  # or "module:app" / "path/to/file.py:app": an OpenEnv app this adapter
                             # serves itself (uvicorn, 127.0.0.1, a free port) while it runs
action_field = ""            # the action field that carries the choice (default: the one required field)
legal_field = ""             # the observation field listing the legal actions (default: the first
                             # of legal_actions, legal_moves, valid_actions, ... the schema has)
action_params = {}           # fixed values of the action's other fields, sent with every action
tools = ""                   # MCP servers: comma-separated tools to offer (default: all)
reset_params = {}            # more reset() arguments besides the seed (e.g. {difficulty = 2})
split_param = ""             # a reset() argument that gets "train" / "test" (default: none sent)
observation_fields = ""      # comma-separated observation fields to show (default: all but the
                             # legal-actions and truncation fields)
truncated_field = ""         # a boolean observation field meaning "ended by a time limit"
                             # (default: truncated or is_truncated when the schema has one; "none":
                             # every done is terminal)
seeded = -1                  # 1: reset(seed) fixes the episode; 0: it does not; -1: probe at start
sessions = 8                 # WebSocket sessions this process keeps open, 1..64 (the server may
                             # allow fewer); with fewer than its live episodes it replays (seeded)
step_limit = 100             # agent decisions before rlid truncates the episode, 1..1000
success_return = 1e-9        # success: a real end (not truncated) with a return >= this (finite)
server_timeout_s = 25        # seconds one server reply may take, > 0 (rlid's own timeout_s is 30)
server_start_timeout_s = 30  # seconds the `server` app may take to start, > 0

A key out of its range is refused with a message naming the key, the value and
the range, before any server is reached: never clamped, never read as the
default.

The OpenEnv protocol (openenv-core 0.2.x / 0.3.x): GET /schema gives the JSON
schemas of the action, the observation and the state (pydantic models); GET
/metadata the env's name and description; GET /health. POST /reset and
/step are stateless (each makes and closes a fresh env), so an episode runs
on a WebSocket session at /ws: {"type": "reset", "data": {"seed": ...}},
{"type": "step", "data": <action>}, {"type": "state"}, {"type": "close"};
replies are {"type": "observation", "data": {"observation": {...},
"reward": r, "done": d}} or {"type": "error", "data": {"message", "code"}}.
MCP servers (action = CallToolAction) list their tools with
{"type": "mcp", "data": {"jsonrpc": "2.0", "method": "tools/list"}} and take
{"type": "call_tool", "tool_name": ..., "arguments": {...}} as a step.

The menu is the action space the server declares, when it is discrete: the
values of an enum / Literal / bool / bounded-int action field (the same menu
at every state), narrowed to the observation's legal-actions list when the
observation has one (then that list is the menu, whatever the field's type);
for MCP servers, every tool call whose required arguments are all discrete
(a tool without arguments is one item, `press(button: Literal["l", "r"])`
two). A free-text or continuous action (a string or number field with no
legal-actions list, a tool with a free-text argument) is refused with a
message that names the schema and the field. More than 26 items at a state
is refused too (a menu's limit): no cap, the env's action set is not cut.

Reward: the server's reward (None is 0; NaN, an infinity or a value that is
not a number is an error naming it, never read as 0). OpenEnv's `done` merges
a real end and a time limit; a true `truncated_field` marks a truncation (rlid
bootstraps it), otherwise done is terminal. A remote server cannot be
copied (the protocol has no state save/restore): clonable = False, and the
menu shows no afterstates. Seeds: the server's reset gets seed mod 2**31
(seed parity, even train / odd test, is kept); when it honours the seed
(`seeded`, probed at start by resetting twice with one seed), the env is
deterministic and rlid copies a state by replaying its actions; this
process also replays an episode on another session when the server allows
fewer sessions than it has live episodes. When it does not, deterministic
= False and every live episode holds its own session.
"""

import atexit
import hashlib
import importlib
import importlib.util
import inspect
import itertools
import json
import math
import os
import re
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import weakref

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, "..", "..", "python"))  # rlid_env, uninstalled
sys.path.append(os.path.join(HERE, ".."))  # _params, _pinned
from _params import integer, number  # noqa: E402
from _pinned import pinned_packages, require  # noqa: E402
from rlid_env import Action, Env, Step, run  # noqa: E402

try:
    from rlid_env import Capacity  # noqa: E402 (newer helpers: rlid waits and asks again)
except ImportError:  # pragma: no cover
    Capacity = RuntimeError

REQUIRES = pinned_packages(HERE)  # adapter.toml
MAX_MENU = 26
MAX_STEP_LIMIT = 1000  # agent decisions an episode may take (step_limit's bound)
MAX_SESSIONS = 64      # WebSocket sessions one adapter process may keep open
DECORATION = re.compile(r"""[()\[\]{}<>*_`'".,:!?\s]+""")
LEGAL_FIELDS = ("legal_actions", "legal_moves", "valid_actions", "valid_moves", "available_actions",
                "admissible_actions", "admissible_commands")
TRUNCATED_FIELDS = ("truncated", "is_truncated")
SEED_MOD = 1 << 31
DECORATION_CHARS = "()[]{}<>*_`'\".,:! \t\r\v\f"


def command_of(text):
    """A value as a realisation the free-text grammar reads back unchanged."""
    return DECORATION.sub(" ", text).strip()


def reads_back(text):
    """True if the free-text grammar reads `text` back unchanged (no decoration at its ends)."""
    return (bool(text) and "\n" not in text and not text.endswith("?")
            and text.strip(DECORATION_CHARS) == text and len(text.encode("utf-8")) <= 512)


def words(name):
    return command_of(str(name)) or str(name)


def csv(value):
    return [x.strip() for x in str(value or "").split(",") if x.strip()]


# ---- JSON schema: which values a field can take -------------------------------------------
def _resolve(schema, defs):
    seen = 0
    while isinstance(schema, dict) and "$ref" in schema and seen < 20:
        ref = schema["$ref"]
        name = ref.rsplit("/", 1)[-1]
        if name not in defs:
            return schema
        merged = dict(defs[name])
        merged.update({k: v for k, v in schema.items() if k != "$ref"})
        schema, seen = merged, seen + 1
    return schema if isinstance(schema, dict) else {}


def discrete_values(schema, defs):
    """(values, None) for an enum / const / Literal / bool / bounded-int schema, else (None, why)."""
    s = _resolve(schema, defs)
    if "enum" in s:
        return list(s["enum"]), None
    if "const" in s:
        return [s["const"]], None
    branches = s.get("anyOf") or s.get("oneOf") or (s.get("allOf") if len(s.get("allOf", [])) == 1
                                                     else None)
    if branches:
        values = []
        for b in branches:
            rb = _resolve(b, defs)
            if rb.get("type") == "null":
                continue
            vals, why = discrete_values(rb, defs)
            if vals is None:
                return None, why
            values += [v for v in vals if v not in values]
        return (values, None) if values else (None, "only null")
    t = s.get("type")
    if t == "boolean":
        return [False, True], None
    if t == "integer":
        lo = s.get("minimum", s["exclusiveMinimum"] + 1 if "exclusiveMinimum" in s else None)
        hi = s.get("maximum", s["exclusiveMaximum"] - 1 if "exclusiveMaximum" in s else None)
        if lo is None or hi is None:
            return None, "an integer without bounds"
        if hi - lo + 1 > MAX_MENU:
            return None, f"an integer of {hi - lo + 1} values ({lo}..{hi}), more than {MAX_MENU}"
        return list(range(int(lo), int(hi) + 1)), None
    if t == "string":
        return None, "free text (a string without an enum)"
    if t == "number":
        return None, "a continuous number"
    if t in ("array", "object"):
        return None, f"structured (a JSON {t})"
    return None, f"of no declared discrete type ({json.dumps(s, sort_keys=True)[:120]})"


# ---- rendering ------------------------------------------------------------------------------
def _scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return format(v, ".6g")
    return str(v)


def mcp_text(result):
    """The text of an MCP tool result (its content items), or None if it is not one."""
    if not isinstance(result, dict) or not isinstance(result.get("content"), list):
        return None
    parts = [c.get("text", "") for c in result["content"] if isinstance(c, dict) and c.get("type") == "text"]
    text = "\n".join(p for p in parts if p)
    if not text and result.get("data") is not None:
        text = render_value(result["data"])
    if result.get("is_error") or result.get("isError"):
        text = "error: " + text
    return text


def render_value(v):
    if isinstance(v, str):
        return v
    if isinstance(v, (bool, int, float)):
        return _scalar(v)
    if isinstance(v, list):
        if all(isinstance(x, str) for x in v):
            return "\n".join(v)
        if all(isinstance(x, (bool, int, float)) for x in v):
            return ", ".join(_scalar(x) for x in v)
        if all(isinstance(x, list) and all(isinstance(y, (bool, int, float, str)) for y in x) for x in v):
            return "\n".join(" ".join(_scalar(y) for y in row) for row in v)
    if isinstance(v, dict):
        text = mcp_text(v)
        if text is not None:
            return text
        if set(v) >= {"error_type", "message"}:  # an MCP ToolError
            return f"error ({v['error_type']}): {v['message']}"
    return json.dumps(v, sort_keys=True, separators=(", ", ": "))


# ---- the server connection --------------------------------------------------------------
class ServerError(RuntimeError):
    def __init__(self, message, code=""):
        super().__init__(message)
        self.code = code


class AtCapacity(Exception):
    pass


def _local(url):
    host = urllib.parse.urlparse(url).hostname or ""
    return host in ("localhost", "127.0.0.1", "::1")


class Session:
    """One WebSocket session (/ws): one env instance on the server."""

    def __init__(self, ws_url, timeout, local):
        from websockets.sync.client import connect

        kwargs = {"open_timeout": timeout, "max_size": None}
        params = inspect.signature(connect).parameters
        if local and "proxy" in params:
            kwargs["proxy"] = None
        try:
            self.ws = connect(ws_url, **kwargs)
        except Exception as e:
            raise RuntimeError(f"openenv: cannot open a WebSocket session at {ws_url}: {e}") from None
        if hasattr(self.ws, "__enter__"):
            self.ws.__enter__()  # websockets >= 17 wants connect() used as a context manager
        self.timeout = timeout
        self.key = None    # (seed, actions) of the state the server's env is in, None: unknown
        self.owner = None  # weakref to the Episode whose state this is
        self.used = 0
        self.fresh = True
        self.dead = False  # closed, or out of step with its replies after a timeout

    def call(self, message):
        from websockets.exceptions import ConnectionClosed

        try:
            self.ws.send(json.dumps(message))
            raw = self.ws.recv(timeout=self.timeout)
        except ConnectionClosed as e:
            self.dead = True
            try:  # the server may have said why before it closed (capacity)
                raw = self.ws.recv(timeout=0.5)
            except Exception:
                if self.fresh:
                    raise AtCapacity(f"the server closed the session ({e})") from None
                raise RuntimeError(f"openenv: the server closed the session: {e}") from None
        except TimeoutError:
            self.dead = True
            raise RuntimeError(f"openenv: the server did not answer a '{message.get('type')}' "
                               f"message in {self.timeout:g} s (server_timeout_s)") from None
        reply = json.loads(raw)
        if reply.get("type") == "error":
            data = reply.get("data") or {}
            if data.get("code") == "CAPACITY_REACHED":
                raise AtCapacity(data.get("message", "at capacity"))
            raise ServerError(f"openenv: the server answered '{message.get('type')}' with an error: "
                              f"{data.get('message', data)} (code {data.get('code', '?')})",
                              data.get("code", ""))
        self.fresh = False
        return reply

    def close(self):
        try:
            self.ws.send(json.dumps({"type": "close"}))
        except Exception:
            pass
        try:
            self.ws.close()
        except Exception:
            pass


def serve_app(spec, timeout):
    """Starts the OpenEnv app `spec` ("module:app" or "file.py:app") on 127.0.0.1; returns its URL."""
    if ":" not in spec:
        raise ValueError(f"openenv: server must be 'module:app' or 'path/to/file.py:app', got '{spec}'")
    where, attr = spec.rsplit(":", 1)
    try:
        if where.endswith(".py") or os.sep in where:
            path = os.path.abspath(where)
            if not os.path.isfile(path):
                raise ValueError(f"openenv: server file {path} does not exist")
            sys.path.insert(0, os.path.dirname(path))
            name = "_openenv_server_" + re.sub(r"\W", "_", os.path.basename(path)[:-3])
            loader = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(loader)
            sys.modules[name] = module
            loader.loader.exec_module(module)
        else:
            sys.path.insert(0, os.getcwd())
            module = importlib.import_module(where)
    except ValueError:
        raise
    except Exception as e:
        raise RuntimeError(f"openenv: cannot import the server '{spec}': {type(e).__name__}: {e}") from e
    app = getattr(module, attr, None)
    if app is None:
        raise ValueError(f"openenv: '{where}' has no attribute '{attr}' (server = '{spec}')")

    import asyncio

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    failure = []

    def main():
        try:
            asyncio.run(server.serve(sockets=[sock]))
        except BaseException as e:  # noqa: BLE001 (reported below)
            failure.append(e)

    thread = threading.Thread(target=main, name="openenv-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if failure or not thread.is_alive():
            raise RuntimeError(f"openenv: the server '{spec}' did not start: "
                               f"{failure[0] if failure else 'it stopped'}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"openenv: the server '{spec}' did not start in {timeout:g} s")
        time.sleep(0.01)

    def stop():
        server.should_exit = True
        thread.join(5)

    atexit.register(stop)
    return f"http://127.0.0.1:{port}"


def reward_of(value, where):
    """A step reply's reward as a finite float: None (no reward) is 0; NaN, an infinity or
    anything but a number is a RuntimeError that names the value and `where` (the step).

    Raised here rather than passed through to rlid's own guard (envs/external/external.cc refuses a
    non-finite reward): the helper writes JSON without NaN, so a NaN would reach rlid only as
    the helper's "Out of range float values are not JSON compliant", which names neither the
    server nor the reward. (openenv-core's own servers write a NaN or infinite reward as null
    (pydantic), which arrives here as None: the protocol cannot tell it from no reward.)"""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RuntimeError(f"openenv: the server's reward for {where} is {value!r}, not a number; "
                           "rlid needs a finite number (or null for none)")
    reward = float(value)
    if not math.isfinite(reward):
        raise RuntimeError(f"openenv: the server's reward for {where} is {reward!r}, not a finite "
                           "number; rlid needs finite rewards (fix the server's reward)")
    return reward


class Episode:
    """One episode: its seed, the actions taken, the last reply."""

    __slots__ = ("seed", "ids", "payloads", "obs", "done", "truncated", "ret", "text", "menu",
                 "__weakref__")

    def key(self):
        return (self.seed, tuple(self.ids))


class OpenEnv(Env):
    name = "openenv"
    summary = "any OpenEnv server with a discrete action space (enum field, legal-actions list, MCP tools)"
    packages = tuple(REQUIRES)  # their installed versions go into the metadata message
    clonable = False     # the protocol has no state save/restore; rlid replays when deterministic
    afterstates = False  # a remote state cannot be copied to step ahead: the menu shows none

    def __init__(self, params):
        super().__init__(params)
        require("openenv", REQUIRES)
        import websockets.sync.client  # noqa: F401 (openenv-core's dependency; after the check)

        p = params
        # The numeric keys first: a bad one is refused before a server is started or reached.
        self.timeout = number("openenv", p, "server_timeout_s", 25.0, 0, lo_open=True)
        start_timeout = number("openenv", p, "server_start_timeout_s", 30.0, 0, lo_open=True)
        self.max_sessions = integer("openenv", p, "sessions", 8, 1, MAX_SESSIONS)
        self.step_limit = integer("openenv", p, "step_limit", 100, 1, MAX_STEP_LIMIT)
        self.success_return = number("openenv", p, "success_return", 1e-9)
        seeded = integer("openenv", p, "seeded", -1, -1, 1, "-1 (probe at start), 0 or 1")
        url, spec = str(p.get("url", "") or ""), str(p.get("server", "") or "")
        if url and spec:
            raise ValueError("openenv: set either url (a running server) or server (an app to start), "
                             "not both")
        if not url and not spec:
            raise ValueError("openenv: set url = \"http://host:port\" (a running OpenEnv server) or "
                             "server = \"module:app\" (an OpenEnv app this adapter serves itself)")
        if spec:
            url = serve_app(spec, start_timeout)
        self.http, self.ws_url = self._urls(url)
        self.local = _local(self.http)
        self.sessions = []
        self.clock = itertools.count(1)
        atexit.register(self._close_all)
        self.reset_params = dict(p.get("reset_params") or {})
        self.split_param = str(p.get("split_param", "") or "")
        self.action_params = dict(p.get("action_params") or {})

        schema = self._get("/schema")
        meta = self._get("/metadata", optional=True) or {}
        self.action_schema = schema.get("action") or {}
        self.obs_schema = schema.get("observation") or {}
        self._plan_actions(p)
        self._plan_observation(p)
        self.seeded = self._probe_seed() if seeded == -1 else bool(seeded)
        self.deterministic = self.seeded
        self.instructions = self._instructions(meta)

    # ---- plumbing ------------------------------------------------------------------------
    @staticmethod
    def _urls(url):
        u = url.rstrip("/")
        parts = urllib.parse.urlparse(u)
        if parts.scheme not in ("http", "https", "ws", "wss") or not parts.netloc:
            raise ValueError(f"openenv: url must be http(s):// or ws(s)://host:port, got '{url}'")
        scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
        http = urllib.parse.urlunparse(parts._replace(scheme=scheme))
        if http.endswith("/ws"):
            http = http[:-3]
        ws = urllib.parse.urlunparse(urllib.parse.urlparse(http)._replace(
            scheme="wss" if scheme == "https" else "ws")) + "/ws"
        return http, ws

    def _get(self, path, optional=False):
        handlers = [urllib.request.ProxyHandler({})] if self.local else []
        opener = urllib.request.build_opener(*handlers)
        try:
            with opener.open(self.http + path, timeout=self.timeout) as r:
                return json.loads(r.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            if optional:
                return None
            raise RuntimeError(f"openenv: GET {self.http}{path} failed: HTTP {e.code} {e.reason}; is this "
                               "an OpenEnv server (openenv-core's create_app)?") from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            if optional:
                return None
            raise RuntimeError(f"openenv: cannot reach the OpenEnv server at {self.http} ({e}); start it, "
                               "or give server = \"module:app\" to serve one here") from None

    def _close_all(self):
        for s in self.sessions:
            s.close()
        self.sessions = []

    def _session(self, busy=RuntimeError):
        """A session for a new state: a free one, a new one, or (seeded) the least recently used.
        With none to give, raises `busy` (Capacity from reset: rlid waits and asks again)."""
        def free(s):
            return s.owner is None or s.owner() is None

        for s in [s for s in self.sessions if s.dead]:
            s.close()
            self.sessions.remove(s)
        for s in sorted(self.sessions, key=lambda s: s.used):
            if free(s):
                return s
        while len(self.sessions) < self.max_sessions:
            s = Session(self.ws_url, self.timeout, self.local)
            try:
                s.call({"type": "state"})  # the server refuses a session over its capacity here
            except ServerError:
                pass  # an env whose state needs a reset first: the session itself is open
            except AtCapacity as e:
                s.close()
                self.max_sessions = len(self.sessions)
                if not self.sessions:
                    raise busy(f"openenv: the server at {self.http} accepts no more sessions ({e}); "
                               "other clients (or rlid's other workers: lower [env] workers) hold "
                               "them all; raise the server's max_concurrent_envs") from None
                break
            self.sessions.append(s)
            return s
        if not self.seeded:
            raise busy(f"openenv: this process has {len(self.sessions)} live episodes, as many as "
                       f"the server allows it sessions (sessions = {self.max_sessions}), and the "
                       "server does not honour seeds, so an episode cannot be set aside and "
                       "replayed later; raise the server's max_concurrent_envs (and sessions), or "
                       "run fewer episodes per worker")
        return min(self.sessions, key=lambda s: s.used)

    def _bind(self, s, ep):
        s.key, s.owner, s.used = ep.key(), weakref.ref(ep), next(self.clock)

    def _reset_message(self, seed):
        data = dict(self.reset_params)
        data["seed"] = seed % SEED_MOD
        if self.split_param:
            data[self.split_param] = "train" if seed % 2 == 0 else "test"
        return {"type": "reset", "data": data}

    def _at(self, ep):
        """A session whose env is in ep's state (replaying ep's actions on one if need be)."""
        key = ep.key()
        for s in self.sessions:
            if not s.dead and s.key == key and (self.seeded or (s.owner is not None and s.owner() is ep)):
                return s
        if not self.seeded:
            raise RuntimeError("openenv: the server session of this episode was lost, and the server "
                               "does not honour seeds, so it cannot be replayed")
        s = self._session()
        reply = s.call(self._reset_message(ep.seed))
        for payload in ep.payloads:
            reply = s.call({"type": "step", "data": payload})
        if self._text(reply["data"]) != ep.text:
            raise RuntimeError("openenv: replaying an episode's actions from reset(seed) on another "
                               "session gave a different observation: the server is not deterministic "
                               "given the seed; set seeded = 0 (and allow as many sessions as live "
                               "episodes)")
        self._bind(s, ep)
        return s

    # ---- the action space ----------------------------------------------------------------
    def _plan_actions(self, p):
        a = self.action_schema
        props = {k: v for k, v in (a.get("properties") or {}).items() if k != "metadata"}
        self.defs = a.get("$defs") or a.get("definitions") or {}
        title = a.get("title", "the action")
        self.mcp = "tool_name" in props or not props
        self.fixed = None   # [(payload, command)] when the menu is the same at every state
        if self.mcp:
            self._plan_tools(csv(p.get("tools")), title)
            return
        field = str(p.get("action_field", "") or "")
        required = [f for f in a.get("required", []) if f in props and f not in self.action_params]
        if field:
            if field not in props:
                raise ValueError(f"openenv: action_field '{field}' is not a field of the server's action "
                                 f"{title}; its fields: {', '.join(props)}")
        elif len(required) == 1:
            field = required[0]
        elif not required:
            enumish = [f for f in props if f not in self.action_params
                       and discrete_values(props[f], self.defs)[0] is not None]
            if len(enumish) != 1:
                raise ValueError(f"openenv: cannot tell which field of the action {title} carries the "
                                 f"choice (fields: {', '.join(props)}); set action_field")
            field = enumish[0]
        else:
            raise ValueError(f"openenv: the action {title} requires several fields ({', '.join(required)}); "
                             "set action_field to the one that carries the choice and give the others "
                             "fixed values in action_params")
        missing = [f for f in required if f != field]
        if missing:
            raise ValueError(f"openenv: the action {title} also requires {', '.join(missing)}; give "
                             "fixed values in action_params (e.g. {" + f"{missing[0]} = ...}}")
        unknown = [k for k in self.action_params if k not in props]
        if unknown and a.get("additionalProperties") is False:
            raise ValueError(f"openenv: action_params names {', '.join(unknown)}, not fields of the "
                             f"action {title} ({', '.join(props)})")
        self.field = field
        self.field_doc = props[field].get("description", "")
        self.values, why = discrete_values(props[field], self.defs)
        oprops = self.obs_schema.get("properties") or {}
        legal = str(p.get("legal_field", "") or "")
        if legal and legal not in oprops:
            raise ValueError(f"openenv: legal_field '{legal}' is not a field of the server's observation "
                             f"{self.obs_schema.get('title', '')}; its fields: {', '.join(oprops)}")
        if not legal:
            odefs = self.obs_schema.get("$defs", {})
            legal = next((f for f in LEGAL_FIELDS
                          if f in oprops and _resolve(oprops[f], odefs).get("type") == "array"), "")
        self.legal = legal
        if self.values is None and not legal:
            raise ValueError(
                f"openenv: the server's action space is not discrete, so it cannot be an rlid menu: the "
                f"action schema {title} chooses with field '{field}', which is {why}, and the observation "
                f"schema {self.obs_schema.get('title', '')} lists no legal actions (none of "
                f"{', '.join(LEGAL_FIELDS)}; legal_field names another). Free-text and continuous "
                "OpenEnv servers need a policy that writes the action itself")
        if self.values is not None and not legal:
            if len(self.values) > MAX_MENU:
                raise ValueError(f"openenv: field '{field}' of the action {title} has {len(self.values)} "
                                 f"values; rlid menus hold at most {MAX_MENU} (and there is no legal-actions "
                                 "list to narrow them)")
            self.fixed = [({field: v, **self.action_params}, v) for v in self.values]
            self._commands([v for _, v in self.fixed])  # refuse clashing realisations now

    def _plan_tools(self, wanted, title):
        s = self._session()
        try:
            reply = s.call({"type": "mcp", "data": {"jsonrpc": "2.0", "method": "tools/list",
                                                     "params": {}, "id": 1}})
        except ServerError as e:
            raise ValueError(f"openenv: the action schema {title} is MCP's CallToolAction (or empty), but "
                             f"the server's tools/list failed: {e}") from None
        data = reply.get("data") or {}
        if "error" in data:
            raise ValueError(f"openenv: the action schema {title} has no field that chooses an action, and "
                             f"the server lists no MCP tools: {data['error'].get('message', data['error'])}")
        tools = (data.get("result") or {}).get("tools") or []
        names = [t.get("name") for t in tools]
        for w in wanted:
            if w not in names:
                raise ValueError(f"openenv: tools names '{w}', which the server does not offer; its tools: "
                                 f"{', '.join(names)}")
        items, self.tool_docs = [], []
        for t in tools:
            if wanted and t["name"] not in wanted:
                continue
            ischema = t.get("input_schema") or t.get("inputSchema") or {}
            defs = ischema.get("$defs") or {}
            props = ischema.get("properties") or {}
            choices = []
            for arg in ischema.get("required", []):
                vals, why = discrete_values(props.get(arg, {}), defs)
                if vals is None:
                    raise ValueError(
                        f"openenv: the server's action space is not discrete, so it cannot be an rlid "
                        f"menu: the action schema {title} is MCP's, and its tool '{t['name']}' (tools/list) "
                        f"takes argument '{arg}', which is {why}. Free-text "
                        "tools need a policy that writes the call itself (or leave the tool out: tools = "
                        "\"a,b\" names the ones to offer)")
                choices.append([(arg, v) for v in vals])
            for combo in itertools.product(*choices):
                args = dict(combo)
                label = " ".join([t["name"]] + [_scalar(v) for _, v in combo])
                items.append(({"type": "call_tool", "tool_name": t["name"], "arguments": args}, label))
            self.tool_docs.append(f"{t['name']}: {(t.get('description') or '').strip()[:200]}")
        if not items:
            among = f" among {','.join(wanted)}" if wanted else ""
            raise ValueError(f"openenv: the MCP server offers no tools{among}")
        if len(items) > MAX_MENU:
            raise ValueError(f"openenv: the MCP tools make {len(items)} distinct calls; rlid menus hold at "
                             f"most {MAX_MENU} (name fewer with tools = \"a,b\")")
        self.fixed = items
        self.field, self.legal, self.field_doc = None, "", ""
        self._commands([label for _, label in items])

    def _commands(self, values):
        """[(command, realisations)] for the menu values, refusing two that read the same.

        The command is the value with the grammar's decoration characters turned into
        spaces; a number, a boolean or a one-character value is prefixed with the field's
        name ("take 2"). The raw value (when the grammar reads it back unchanged) and
        "<field> <value>" are other realisations, unless another item has them too."""
        out, seen = [], {}
        prefix = words(self.field) if self.field else "call"
        for v in values:
            raw = _scalar(v)
            text = command_of(raw)
            plain = (isinstance(v, str) and len(text) >= 2 and not re.fullmatch(r"-?\d+(\.\d+)?", text))
            command = text if plain else f"{prefix} {text}".strip()
            if len(command.encode("utf-8")) > 512:
                raise ValueError(f"openenv: an action reads {len(command.encode('utf-8'))} bytes "
                                 f"('{command[:60]}...'); rlid realisations hold at most 512")
            k = command.lower()
            if k in seen:
                raise ValueError(f"openenv: two actions read the same once decoration is removed: "
                                 f"{seen[k]!r} and {raw!r} (both '{command}')")
            seen[k] = raw
            alts = [raw, f"{prefix} {text}" if self.field else ""]
            out.append((command, [a for a in alts if a and a.lower() != k and reads_back(a)
                                  and (len(a) > 1 or a.isdigit())]))
        counts = {}
        for c, alts in out:
            for a in set(x.lower() for x in alts):
                counts[a] = counts.get(a, 0) + 1
        return [(c, list(dict.fromkeys(a for a in alts if a.lower() not in seen and counts[a.lower()] == 1)))
                for c, alts in out]

    # ---- the observation -----------------------------------------------------------------
    def _plan_observation(self, p):
        oprops = self.obs_schema.get("properties") or {}
        trunc = str(p.get("truncated_field", "") or "")
        if trunc and trunc != "none" and trunc not in oprops:
            raise ValueError(f"openenv: truncated_field '{trunc}' is not a field of the server's observation "
                             f"({', '.join(oprops)})")
        if trunc == "none":
            trunc = ""
        elif not trunc:
            trunc = next((f for f in TRUNCATED_FIELDS if f in oprops), "")
        self.trunc = trunc
        self.show = csv(p.get("observation_fields"))
        for f in self.show:
            if f not in oprops:
                shown = [k for k in oprops if k not in ("done", "reward", "metadata")]
                raise ValueError(f"openenv: observation_fields names '{f}', not a field of the server's "
                                 f"observation ({', '.join(shown)})")
        self.hide = {self.legal, self.trunc, "done", "reward", "metadata"} - {""}

    def _text(self, data):
        obs = data.get("observation") or {}
        fields = self.show or [k for k in obs if k not in self.hide]
        parts = []
        for k in fields:
            v = obs.get(k)
            if v is None or v == "" or v == [] or v == {}:
                continue
            text = render_value(v)
            parts.append((k, text))
        if not parts:
            return "(the server's observation is empty)"
        if len(parts) == 1:
            return parts[0][1]
        return "\n".join(f"{words(k)}:\n{t}" if "\n" in t else f"{words(k)}: {t}" for k, t in parts)

    def _instructions(self, meta):
        name = str(meta.get("name") or "OpenEnv environment")
        desc = str(meta.get("description") or "").strip()
        text = f"You act in the OpenEnv environment {name}"
        if desc and desc != f"{name} environment":
            text += f": {desc[:500]}"
        text += ". Each turn, choose one of the listed actions"
        if self.mcp:
            text += ", each a call of one of the server's tools:\n" + "\n".join(self.tool_docs)
        else:
            doc = f": {self.field_doc}" if self.field_doc else ""
            text += f" (the action's '{self.field}'{doc})."
        return text

    def _probe_seed(self):
        """Two resets with one seed must show the same observation (a reset that ignores the seed
        almost never does); a step that draws from an unseeded source goes unseen: say seeded = 0."""
        s = self._session()
        first = self._text(s.call(self._reset_message(0))["data"])
        again = self._text(s.call(self._reset_message(0))["data"])
        s.key = None
        return first == again

    # ---- the Env interface ---------------------------------------------------------------
    def _adopt(self, ep, data):
        obs = data.get("observation") or {}
        ep.obs = obs
        ep.done = bool(data.get("done", False))
        ep.truncated = bool(ep.done and self.trunc and obs.get(self.trunc))
        ep.text = self._text(data)
        ep.menu = None if ep.done else self._menu_of(obs)

    def _menu_of(self, obs):
        if self.fixed is not None:
            items = [(i, payload, v) for i, (payload, v) in enumerate(self.fixed)]
        else:
            legal = obs.get(self.legal)
            if not isinstance(legal, list) or not legal:
                raise RuntimeError(f"openenv: the observation's {self.legal} is {legal!r} at a state that is "
                                   "not done; rlid needs at least one action")
            if len(legal) > MAX_MENU:
                raise ValueError(f"openenv: {len(legal)} legal actions ({self.legal}) at this state; rlid "
                                 f"menus hold at most {MAX_MENU}")
            if self.values is not None:
                bad = [v for v in legal if v not in self.values]
                if bad:
                    raise RuntimeError(f"openenv: {self.legal} lists {bad}, which field '{self.field}' "
                                       f"does not take ({self.values})")
            natural = all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in legal)
            items = []
            for i, v in enumerate(legal):
                aid = v if natural else (self.values.index(v) if self.values is not None else i)
                items.append((aid, {self.field: v, **self.action_params}, v))
            if len({a for a, _, _ in items}) < len(items):
                raise RuntimeError(f"openenv: {self.legal} lists a value twice: {legal}")
        words_ = self._commands([v for _, _, v in items])
        return [(aid, payload, c, rs) for (aid, payload, _), (c, rs) in zip(items, words_)]

    def reset(self, seed, split):
        ep = Episode()
        ep.seed, ep.ids, ep.payloads, ep.ret = seed, [], [], 0.0
        s = self._session(busy=Capacity)
        reply = s.call(self._reset_message(seed))
        self._adopt(ep, reply["data"])
        if ep.done:
            raise RuntimeError(f"openenv: the server's reset (seed {seed}) returned an episode that is done")
        self._bind(s, ep)
        return ep

    def observation(self, ep):
        return ep.text

    def state_hash(self, ep):
        menu = [] if ep.menu is None else [c for _, _, c, _ in ep.menu]
        key = json.dumps([ep.text, menu, ep.done])
        return hashlib.blake2b(key.encode("utf-8"), digest_size=8).hexdigest()

    def menu(self, ep):
        return [Action(aid, c, rs) for aid, _, c, rs in ep.menu or []]

    def step(self, ep, action):
        item = next((m for m in ep.menu or [] if m[0] == action), None)
        if item is None:
            raise ValueError(f"openenv: action {action} is not on this state's menu")
        s = self._at(ep)
        reply = s.call({"type": "step", "data": item[1]})
        data = reply["data"]
        ep.ids.append(action)
        ep.payloads.append(item[1])
        self._adopt(ep, data)
        self._bind(s, ep)
        reward = reward_of(data.get("reward"), f"action {action} (step {len(ep.ids)} of the "
                                               f"episode of seed {ep.seed})")
        ep.ret += reward
        terminal = ep.done and not ep.truncated
        return Step(reward, terminal=terminal, truncated=ep.truncated,
                    success=terminal and ep.ret >= self.success_return)


if __name__ == "__main__":
    run(OpenEnv)
