"""A Gymnasium text env as an rlid env (envs/external/adapters/gymnasium/adapter.py):
the conformance suite passes, episodes equal the Gymnasium env's own, its action mask
is the menu, it trains, and envs that are not text or not Discrete are refused."""
import os
import subprocess
import tomllib

import gymnasium
import pytest

import rlid
from conftest import SOURCE_DIR, rlid_binary
from text_corridor import Corridor

HERE = os.path.dirname(os.path.abspath(__file__))
ID = "text_corridor:Corridor"


@pytest.fixture(autouse=True)
def adapter_finds_the_module(monkeypatch):
    """The adapter process imports text_corridor from this folder."""
    monkeypatch.setenv("PYTHONPATH", HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))


def test_conformance_suite_passes():
    proc = subprocess.run([str(rlid_binary()), "env", "check", "--env", "gymnasium",
                           "--param", f"id={ID}", "--param", "env_params={length = 6}",
                           "--seeds", "3", "--graph-seeds", "1"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 failed" in proc.stdout, proc.stdout


@pytest.mark.parametrize("seed", [0, 1, 4])
def test_episodes_equal_the_gymnasium_env(seed):
    env = rlid.make("gymnasium", seed=seed, id=ID, env_params={"length": 6})
    assert env.instructions == Corridor.instructions
    direct = Corridor(length=6)
    obs, info = direct.reset(seed=seed)
    assert env.observation == obs
    total = 0.0
    while not env.terminal:
        commands = [item.command for item in env.menu()]
        assert ("go left" in commands) == bool(info["action_mask"][0])
        t = env.step("go right")
        obs, reward, terminated, _, info = direct.step(1)
        assert (t.observation, t.reward, t.terminal) == (obs, reward, terminated)
        total += t.reward
    assert t.success and total == pytest.approx(1.0 - 0.05 * (env.steps - 1))


def test_named_actions_and_bad_envs():
    env = rlid.make("gymnasium", id=ID, actions={"0": "west", "1": "east", "2": "rest"})
    assert "east" in [item.command for item in env.menu()]
    with pytest.raises(rlid.Error, match="not text"):
        rlid.make("gymnasium", id="CartPole-v1")
    with pytest.raises(rlid.Error, match="Discrete"):
        rlid.make("gymnasium", id="Pendulum-v1")
    with pytest.raises(rlid.Error, match="each of the 3 actions"):
        rlid.make("gymnasium", id=ID, actions={"0": "west"})


@pytest.mark.skipif(not rlid.with_torch, reason="rlid built without LibTorch")
def test_it_trains(tmp_path):
    with open(SOURCE_DIR / "configs" / "bandit_ppo.toml", "rb") as f:
        config = tomllib.load(f)
    config["env"] = {"name": "gymnasium", "id": ID, "env_params": {"length": 4}, "step_limit": 8}
    r = rlid.train(config, out=tmp_path / "corridor", progress=False,
                   set={"trainer.iterations": 1, "trainer.episodes_per_iteration": 8,
                        "trainer.num_envs": 8, "trainer.eval_episodes": 4, "run.threads": 1})
    assert r["iterations"] == 1
    steps = r.run.rows("SELECT COUNT(*) FROM steps")[1][0][0]
    assert steps >= 8
