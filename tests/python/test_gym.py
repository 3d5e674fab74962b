"""rlid.gym.MenuEnv: gymnasium's own checker, the menu in info, invalid
actions as under penalty_noop, and seeding."""
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import rlid
import rlid.gym


@pytest.mark.parametrize("name", ["maze", "keys", "household", "bandit"])
def test_passes_gymnasiums_checker(name):
    check_env(rlid.gym.MenuEnv(name), skip_render_check=True)


def test_menu_and_mask_in_info_and_steps_match_rlid():
    genv = rlid.gym.MenuEnv("keys", split="test")
    obs, info = genv.reset(seed=5)
    env = rlid.make("keys", seed=5)
    assert obs == env.observation and info["seed"] == 5
    menu = env.menu()
    assert info["menu"] == [(m.label, m.command) for m in menu]
    assert info["action_mask"].tolist() == [1] * len(menu) + [0] * (26 - len(menu))
    done = False
    while not done:
        item = env.oracle()[0]
        t = env.step(item)
        obs, reward, terminated, truncated, info = genv.step(np.int64(item))
        assert (obs, reward, terminated) == (t.observation, t.reward, t.terminal)
        done = terminated or truncated
    assert terminated and not truncated and info["success"]


def test_invalid_actions_cost_a_turn_and_keep_the_state():
    genv = rlid.gym.MenuEnv("maze", invalid_reward=-0.25)
    obs, info = genv.reset(seed=2)
    n = len(info["menu"])
    obs2, reward, terminated, truncated, info2 = genv.step(25)
    assert obs2 == obs and reward == -0.25 and not terminated and not truncated
    assert str(n - 1) in info2["invalid"]
    _, reward, _, _, info3 = genv.step("fly away")
    assert reward == -0.25 and "no menu action" in info3["invalid"]
    _, _, _, _, info4 = genv.step(info["menu"][0][1])  # a command is a valid text action
    assert "invalid" not in info4 and genv.env.steps == 1
    limit = genv.step_limit
    truncated = False
    for _ in range(limit):
        *_, truncated, _ = genv.step(25)
        if truncated:
            break
    assert truncated and genv.env.steps == 1


def test_unseeded_resets_draw_instances_of_the_split():
    train = rlid.gym.MenuEnv("maze")
    train.reset(seed=None)
    seeds = {train.reset()[1]["seed"] for _ in range(8)}
    assert len(seeds) > 1 and all(s % 2 == 0 for s in seeds)
    test = rlid.gym.MenuEnv("maze", split="test")
    test.reset(seed=None)
    assert all(test.reset()[1]["seed"] % 2 == 1 for _ in range(4))
    with pytest.raises(rlid.ConfigError):
        rlid.gym.MenuEnv("maze", split="valid")


def test_render_ansi_shows_state_and_menu():
    genv = rlid.gym.MenuEnv("maze", render_mode="ansi")
    _, info = genv.reset(seed=0)
    text = genv.render()
    assert text.startswith(genv.env.observation)
    assert all(f"{label}) {cmd}" in text for label, cmd in info["menu"])
