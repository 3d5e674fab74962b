"""The field adapters (envs/external/adapters/) refuse what they cannot read
right instead of running something else: a numeric key out of its documented range is
an error naming the key, the value and the range (never clamped, never read as the
default); an OpenEnv server's NaN or infinite reward is an error naming it (never 0);
a Gymnasium env's info["success"] / info["is_success"] must be a flag and its
info["action_mask"] a 0/1 entry per action (never read by truthiness).

The adapters are imported here and built in-process (no rlid binary, no network: the
OpenEnv server is a tiny app the adapter serves itself on 127.0.0.1). A ValueError
from an env's constructor is how every adapter reports a bad key: the helper answers
hello with a config_error carrying the message, which rlid reports as a config error
(test_a_bad_key_reaches_rlid_as_the_hello_error checks that path).
"""
import importlib.util
import io
import json
import math
import os
import sys
import textwrap

import gymnasium
import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ADAPTERS = os.path.abspath(os.environ.get("RLID_ADAPTERS_DIR") or os.path.join(
    HERE, "..", "..", "envs", "external", "adapters"))
for path in (HERE, os.path.join(ADAPTERS, "..", "python"), ADAPTERS):
    if path not in sys.path:
        sys.path.insert(0, path)


def load_adapter(name):
    """The adapter in ADAPTERS/<name>/adapter.py as a module (every adapter is adapter.py)."""
    spec = importlib.util.spec_from_file_location(f"{name}_adapter",
                                                  os.path.join(ADAPTERS, name, "adapter.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


import rlid_env  # noqa: E402

babyai_text_env = load_adapter("babyai_text")
gymnasium_env = load_adapter("gymnasium")
openenv_env = load_adapter("openenv")
openspiel_env = load_adapter("openspiel")
reasoning_gym_env = load_adapter("reasoning_gym")
textarena_env = load_adapter("textarena")
textworld_env = load_adapter("textworld")

CORRIDOR = {"id": "text_corridor:Corridor"}  # tests/python/text_corridor.py
NOWHERE = {"url": "http://127.0.0.1:9"}      # openenv: refused before any server is reached


def refused(make, params, *words):
    """make(params) raises a ValueError whose message has each of `words`; returns it."""
    with pytest.raises(ValueError) as caught:
        make(params)
    message = str(caught.value)
    for w in words:
        assert w in message, f"{w!r} not in {message!r}"
    return message


# ---- step_limit = -1 (and other keys out of range) -----------------------------------------

@pytest.mark.parametrize("make, params, allowed", [
    (openspiel_env.OpenSpiel, {}, "1..1000"),
    (textarena_env.TextArena, {}, "1..1000000"),
    (openenv_env.OpenEnv, NOWHERE, "1..1000"),
    (gymnasium_env.Gymnasium, CORRIDOR, "1..1000000"),
], ids=["openspiel", "textarena", "openenv", "gymnasium"])
def test_a_negative_step_limit_is_refused(make, params, allowed):
    """Was: 1 (openspiel, openenv: clamped; textarena: max(1, -1)), or -1 sent on to rlid."""
    refused(make, {**params, "step_limit": -1}, "step_limit", "got -1", allowed)


def test_babyai_text_refuses_a_step_limit_it_would_ignore():
    """babyai_text has no step_limit key (the level's max_steps is the limit): it was
    ignored, the episode running to the level's default; now it is named."""
    refused(babyai_text_env.BabyAIText, {"step_limit": -1}, "unknown key(s) step_limit",
            "level_params", "max_steps")


@pytest.mark.parametrize("max_steps", [-1, 0, 2.5])
def test_babyai_text_refuses_a_max_steps_out_of_range(max_steps):
    """level_params.max_steps = -1 (or 0) was read by minigrid and made the limit 1."""
    assert babyai_text_env.BabyAIText({"level_params": {"max_steps": 20}}).step_limit == 20
    refused(babyai_text_env.BabyAIText, {"level_params": {"max_steps": max_steps}},
            "level_params.max_steps", "2.5" if max_steps == 2.5 else f"got {max_steps}",
            "1..1000000")


@pytest.mark.parametrize("make, params, key, value, words", [
    # openspiel: opening -1 is the default, other negatives were read as it
    (openspiel_env.OpenSpiel, {}, "opening", -7, ["got -7", "-1 (the default", ">= 0"]),
    (openspiel_env.OpenSpiel, {}, "step_limit", 1001, ["got 1001", "1..1000"]),  # was 1000
    (openspiel_env.OpenSpiel, {}, "step_limit", 2.5, ["2.5", "integer"]),        # was 2
    (openspiel_env.OpenSpiel, {}, "player", 1.5, ["1.5", "integer"]),            # was 1
    (openspiel_env.OpenSpiel, {}, "success_return", math.nan, ["nan", "finite"]),  # never won
    (textarena_env.TextArena, {}, "opening", -7, ["got -7", "-1 (the game's default)"]),
    (textarena_env.TextArena, {}, "step_limit", 2_000_000, ["got 2000000", "1..1000000"]),
    (openenv_env.OpenEnv, NOWHERE, "step_limit", 0, ["got 0", "1..1000"]),       # was 1
    (openenv_env.OpenEnv, NOWHERE, "step_limit", 5000, ["got 5000", "1..1000"]),  # was 1000
    (openenv_env.OpenEnv, NOWHERE, "sessions", 2.5, ["2.5", "1..64"]),           # was 2
    (openenv_env.OpenEnv, NOWHERE, "server_timeout_s", math.nan, ["nan", "> 0"]),
    (openenv_env.OpenEnv, NOWHERE, "server_start_timeout_s", -1, ["got -1", "> 0"]),
    (openenv_env.OpenEnv, NOWHERE, "success_return", math.inf, ["inf", "finite"]),
    (gymnasium_env.Gymnasium, CORRIDOR, "success_return", math.nan, ["nan", "finite"]),
    (reasoning_gym_env.ReasoningGym, {}, "options", 2.5, ["2.5", "2..26"]),      # was 2
    (textworld_env.TextWorld, {}, "step_limit", 5.5, ["5.5", "1..1000"]),        # was 5
], ids=lambda x: x.__name__ if isinstance(x, type) else None)
def test_a_key_out_of_its_range_is_refused(make, params, key, value, words):
    refused(make, {**params, key: value}, key, *words)


def test_a_bad_key_reaches_rlid_as_the_hello_error():
    """Over the protocol: hello is answered with the env's error, which rlid reports
    (a config_error: rlid reports it as a config error, exit 2)."""
    hello = {"op": "hello", "id": 0, "protocol": 2, "protocols": [1, 2],
             "params": {"game": "tic_tac_toe", "opening": -7, "step_limit": -1}}
    out = io.StringIO()
    rlid_env.run(openspiel_env.OpenSpiel, stdin=io.StringIO(json.dumps(hello) + "\n"), stdout=out)
    reply = json.loads(out.getvalue())
    assert reply["id"] == 0 and "error" in reply, reply
    assert reply["error"]["code"] == "config_error"
    assert "openspiel: opening must be -1" in reply["error"]["message"]
    assert "got -7" in reply["error"]["message"]


# ---- openenv: a server's NaN / infinite reward ------------------------------------------

# A raw OpenEnv server (the wire protocol by hand, as a server not built on openenv-core
# may speak it): action `choice` 0..5; each step's reward is REWARDS[choice], written with
# Python's json, which spells NaN and the infinities as NaN / Infinity / -Infinity.
SERVER = '''
import json

from fastapi import FastAPI, WebSocket, WebSocketDisconnect

REWARDS = [0.5, None, float("nan"), float("inf"), float("-inf"), "0.5"]
app = FastAPI()


@app.get("/schema")
def schema():
    return {"action": {"title": "Pick", "type": "object", "required": ["choice"],
                       "properties": {"choice": {"type": "integer", "minimum": 0, "maximum": 5}}},
            "observation": {"title": "Seen", "type": "object",
                            "properties": {"text": {"type": "string"}}},
            "state": {"title": "State", "type": "object", "properties": {}}}


@app.get("/metadata")
def metadata():
    return {"name": "rewards", "description": "a step's reward is REWARDS[choice]"}


@app.websocket("/ws")
async def ws(socket: WebSocket):
    await socket.accept()
    try:
        while True:
            msg = json.loads(await socket.receive_text())
            kind = msg.get("type")
            if kind == "close":
                break
            if kind == "reset":
                data = {"observation": {"text": "choose"}, "reward": None, "done": False}
            elif kind == "step":
                data = {"observation": {"text": "chosen"}, "done": True,
                        "reward": REWARDS[msg["data"]["choice"]]}
            else:
                await socket.send_text(json.dumps({"type": "state", "data": {}}))
                continue
            await socket.send_text(json.dumps({"type": "observation", "data": data}))
    except WebSocketDisconnect:
        pass
'''


@pytest.fixture(scope="module")
def rewards_env(tmp_path_factory):
    path = tmp_path_factory.mktemp("openenv") / "reward_server.py"
    path.write_text(textwrap.dedent(SERVER))
    return openenv_env.OpenEnv({"server": f"{path}:app", "seeded": 1, "server_timeout_s": 10})


def reward_of_choice(env, choice):
    ep = env.reset(0, "train")
    return env.step(ep, choice).reward


@pytest.mark.parametrize("choice, shown", [(2, "nan"), (3, "inf"), (4, "-inf"), (5, "'0.5'")])
def test_openenv_refuses_a_reward_that_is_not_a_finite_number(rewards_env, choice, shown):
    """A NaN reward was passed on (and the helper then failed on "Out of range float values
    are not JSON compliant", naming nothing); "0.5" was read as 0.5. Now the step is an error
    naming the reward; a number and null (no reward: 0) are read as before."""
    assert reward_of_choice(rewards_env, 0) == 0.5
    assert reward_of_choice(rewards_env, 1) == 0.0
    with pytest.raises(RuntimeError) as caught:
        reward_of_choice(rewards_env, choice)
    message = str(caught.value)
    assert "the server's reward" in message and f"is {shown}," in message, message
    assert f"action {choice}" in message, message


# ---- gymnasium: info["success"] / info["is_success"] and info["action_mask"] -------------

class Scripted(gymnasium.Env):
    """Three actions, one step to the end; reset's and step's info are the test's."""

    action_names = ["north", "south", "wait"]

    def __init__(self, reset_info=None, step_info=None, reward=1.0):
        self.observation_space = gymnasium.spaces.Text(max_length=50)
        self.action_space = gymnasium.spaces.Discrete(3)
        self.reset_info, self.step_info, self.reward = reset_info or {}, step_info or {}, reward

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "start", dict(self.reset_info)

    def step(self, action):
        return "end", self.reward, True, False, dict(self.step_info)


SCRIPTED = f"{__name__}:Scripted"


def gym_env(**env_params):
    return gymnasium_env.Gymnasium({"id": SCRIPTED, "env_params": env_params})


def success_of(info):
    env = gym_env(step_info=info)
    return env.step(env.reset(0, "train"), 0).success


@pytest.mark.parametrize("key", ["success", "is_success"])
@pytest.mark.parametrize("value", ["no", "yes", None, 0.5, math.nan, [True]])
def test_gymnasium_success_must_be_a_flag(key, value):
    """"no" counted as a success (truthiness), None as a failure, NaN as a success."""
    assert success_of({key: True}) is True and success_of({key: 0}) is False
    assert success_of({key: np.bool_(True)}) is True and success_of({key: 1.0}) is True
    with pytest.raises(ValueError) as caught:
        success_of({key: value})
    assert f"info['{key}'] = {value!r}" in str(caught.value), str(caught.value)


def menu_of(mask):
    env = gym_env(reset_info={"action_mask": mask})
    return [a.id for a in env.menu(env.reset(0, "train"))]


@pytest.mark.parametrize("mask", [
    "abc",                       # text: each character was truthy, all legal
    [math.nan, 0, 1],            # NaN was truthy
    [1, 0],                      # too short: an IndexError that named no mask
    [1, 0, 1, 1],                # too long: the extra entry was ignored
    [2, 0, 1],                   # 2 is no flag
    np.array([[1, 0, 1]]),       # 2-d: numpy's "truth value ... is ambiguous"
    [0, 0, 0],                   # allows nothing: an empty menu
], ids=["text", "nan", "short", "long", "two", "2d", "none"])
def test_gymnasium_action_mask_must_be_a_flag_per_action(mask):
    assert menu_of(np.array([1, 0, 1], dtype=np.int8)) == [0, 2]
    assert menu_of([True, False, True]) == [0, 2] and menu_of(None) == [0, 1, 2]
    with pytest.raises(ValueError) as caught:
        menu_of(mask)
    message = str(caught.value)
    assert "info['action_mask']" in message and repr(mask)[:40] in message, message


def test_a_nan_reward_is_named_over_the_protocol():
    """The helper's own guard (rlid_env.py): JSON has no NaN, so a non-finite reward is an
    error naming it, not "Out of range float values are not JSON compliant"."""
    lines = [{"op": "hello", "id": 0, "protocol": 2, "protocols": [1, 2],
              "params": {"id": SCRIPTED, "env_params": {"reward": math.nan}}},
             {"op": "reset", "id": 1, "seed": 0},
             {"op": "step", "id": 2, "handle": 1, "action": 0}]
    out = io.StringIO()
    rlid_env.run(gymnasium_env.Gymnasium,
                 stdin=io.StringIO("".join(json.dumps(m) + "\n" for m in lines)), stdout=out)
    step = json.loads(out.getvalue().splitlines()[2])
    assert step["error"]["code"] == "execution_error", step
    assert "reward nan for action 0" in step["error"]["message"], step
