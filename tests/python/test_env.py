"""rlid.make and rlid.Env against the CLI (`rlid env show --json`), free-text
compilation, stepping and the errors bad input raises."""
import pytest

import rlid
from conftest import cli_json

BUILT_IN = sorted(n for n in rlid.envs() if n in {
    "arcgrid", "arith", "bandit", "craft", "household", "keys", "maze"})


def test_version_matches_the_cli():
    import subprocess
    from conftest import rlid_binary
    out = subprocess.run([str(rlid_binary()), "--version"], capture_output=True, text=True).stdout
    assert rlid.__version__ in out
    assert rlid.version_string.split(" (git ")[0] == rlid.__version__


def test_every_registered_env_is_listed():
    names = rlid.envs()
    assert set(BUILT_IN) == {"arcgrid", "arith", "bandit", "craft", "household", "keys", "maze"}
    assert {"external", "textworld", "scienceworld"} <= set(names)
    assert all(isinstance(s, str) and s for s in names.values())


@pytest.mark.parametrize("name", BUILT_IN)
@pytest.mark.parametrize("seed", [0, 1, 6])
def test_state_and_menu_equal_the_cli(name, seed):
    cli = cli_json("env", "show", "--env", name, "--seed", seed, "--json")
    env = rlid.make(name, seed=seed)
    assert env.observation == cli["observation"]
    assert env.instructions == cli["instructions"]
    assert f"{env.state_hash:016x}" == cli["state_hash"]
    menu = env.menu()
    assert len(menu) == len(cli["menu"])
    for item, want in zip(menu, cli["menu"]):
        assert (item.label, item.command, item.action) == (want["label"], want["command"],
                                                          want["action"])
        assert item.realisations == want["realisations"]
        assert item.afterstate == want["afterstate"]
        assert f"{item.afterstate_hash:016x}" == want["afterstate_hash"]
        assert item.same_afterstate_as == want["same_afterstate_as"]


def test_params_reach_the_env_and_match_the_cli():
    cli = cli_json("env", "show", "--env", "maze", "--seed", "3", "--set", "env.size=4",
                   "--json")
    env = rlid.make("maze", seed=3, size=4)
    assert env.observation == cli["observation"]
    assert env.observation != rlid.make("maze", seed=3).observation


def test_step_follows_the_afterstate_and_the_oracle_solves():
    env = rlid.make("keys", seed=5)
    total = 0.0
    while not env.terminal:
        item = env.oracle()[0]
        after = env.menu()[item].afterstate_hash
        t = env.step(item)
        total += t.reward
        if not env.terminal:
            assert env.state_hash == after
    assert t.success and t.terminal and not t.truncated
    assert env.steps > 0 and total > 0
    assert env.menu() == []
    env.reset()
    assert env.steps == 0 and not env.terminal


def test_text_actions_compile_like_the_grammar():
    env = rlid.make("maze", seed=3)
    menu = env.menu()
    b = env.compile("I choose B.")
    assert b.valid and b.item == 1 and b.matched == "B" and b.realisation == 0
    w = env.compile(menu[0].realisations[-1].upper())
    assert w.valid and w.item == 0 and w.realisation == len(menu[0].realisations)
    bad = env.compile(f"{menu[0].command} or {menu[1].command}")
    assert not bad.valid and not bad and bad.item == -1 and bad.reason
    t = env.step(menu[1].command)
    assert t.item == 1 and t.command == menu[1].command


def test_invalid_input_raises_and_keeps_the_state():
    env = rlid.make("maze", seed=3)
    before = (env.state_hash, env.steps)
    with pytest.raises(rlid.InvalidAction) as e:
        env.step("fly away")
    assert isinstance(e.value, ValueError) and "no menu action" in e.value.reason
    with pytest.raises(rlid.ConfigError, match="does not exist"):
        env.step(len(env.menu()))
    with pytest.raises(rlid.ConfigError):
        env.step(-1)
    with pytest.raises(rlid.ConfigError, match="menu index or text"):
        env.step(1.5)
    assert (env.state_hash, env.steps) == before
    while not env.terminal:
        env.step(env.oracle()[0])
    with pytest.raises(rlid.ConfigError, match="episode is over") as over:
        env.step(0)
    assert "reset()" in over.value.hint


def test_bad_env_names_and_params_are_value_errors_with_hints():
    with pytest.raises(rlid.ConfigError, match="did you mean 'maze'"):
        rlid.make("mazee")
    with pytest.raises(ValueError) as e:
        rlid.make("maze", size=-1)
    assert isinstance(e.value, rlid.Error) and "size" in e.value.hint
    with pytest.raises(rlid.ConfigError, match="sizee"):
        rlid.make("maze", sizee=5)
    with pytest.raises(rlid.ConfigError, match="type set"):
        rlid.make("maze", size={1})
    with pytest.raises(rlid.ConfigError, match="non-negative"):
        rlid.make("maze", seed=-2)


def test_external_env_runs_a_python_process():
    from conftest import SOURCE_DIR
    import sys
    script = SOURCE_DIR / "envs" / "external" / "python" / "examples" / "courier.py"
    env = rlid.make("external", command=[sys.executable, str(script)], params={"rooms": 3},
                    seed=1)
    assert env.info["name"] == "courier" and env.menu() and env.observation
    first = env.menu()[0].command
    t = env.step(0)
    assert (t.item, t.command) == (0, first) and isinstance(t.reward, float)
    with pytest.raises(rlid.ConfigError):
        rlid.make("external", command=[])
    with pytest.raises(rlid.EnvError):
        rlid.make("external", command=[sys.executable, "-c", "import sys; sys.exit(3)"])


def test_torch_and_rlid_share_a_process_in_either_order():
    import subprocess
    import sys
    for first, second in (("torch", "rlid"), ("rlid", "torch")):
        code = (f"import {first}, {second}; import torch, rlid; "
                "e = rlid.make('keys', seed=1); print(len(e.menu()), int(torch.ones(3).sum()))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["2", "3"]



def test_one_env_shared_by_threads_runs_its_calls_one_at_a_time():
    """Two threads resetting, reading and stepping one Env and one gym.MenuEnv
    at once: no call crashes the interpreter or sees half a state (the bindings
    release the GIL, so each object's own lock serialises its calls). A call
    may still find the episode ended by the other thread: that is an rlid.Error."""
    import threading
    import rlid.gym

    env = rlid.make("maze", seed=0, size=4)
    gym_env = rlid.gym.MenuEnv("maze", size=4)
    gym_env.reset(seed=0)
    crashes = []

    def hammer(worker):
        for i in range(300):
            try:
                if i % 7 == 0:
                    env.reset(seed=2 * (i % 5) + worker)
                menu = env.menu()
                assert env.observation
                if menu:
                    env.step(i % len(menu))
                _, _, terminated, truncated, _ = gym_env.step(0)
                if terminated or truncated:
                    gym_env.reset(seed=worker)
            except rlid.Error:
                pass
            except Exception as e:  # noqa: BLE001 - anything else is a bug
                crashes.append(repr(e))

    threads = [threading.Thread(target=hammer, args=(w,)) for w in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not crashes, crashes[:3]
