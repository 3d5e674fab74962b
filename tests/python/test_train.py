"""rlid.train and rlid.compare against the CLI: the same config gives the same
run (metrics, episodes), progress reaches Python, and bad input raises."""
import tomllib

import pytest

import rlid
from conftest import SOURCE_DIR, run_cli

pytestmark = pytest.mark.skipif(not rlid.with_torch, reason="rlid built without LibTorch")

# conftest's run_dir: configs/bandit_ppo.toml with these overrides, by the CLI (--threads 1).
SETS = ["trainer.iterations=2", "trainer.episodes_per_iteration=16", "trainer.num_envs=16",
        "trainer.eval_every=1", "trainer.eval_episodes=8", "run.threads=1"]
CONFIG = SOURCE_DIR / "configs" / "bandit_ppo.toml"
QUERY_METRICS = "SELECT iteration, key, value FROM metrics WHERE key NOT LIKE 'time/%' " \
                "AND key NOT LIKE '%wall%' ORDER BY iteration, key"
QUERY_EPISODES = "SELECT split, seed, ret, success, length FROM episodes ORDER BY id"


def same_run(a, b):
    for q in (QUERY_METRICS, QUERY_EPISODES):
        ca, ra = a.rows(q)
        cb, rb = b.rows(q)
        assert ca == cb and len(ra) == len(rb) > 0
        assert ra == rb, q


def test_train_equals_the_cli(run_dir, tmp_path):
    lines = []
    r = rlid.train(CONFIG, out=tmp_path / "py", set=SETS, progress=lines.append)
    assert r["iterations"] == 2 and r["algorithm"] == "ppo_decision"
    assert r["test_greedy"]["episodes"] == 8
    assert any("iteration" in line for line in lines), lines
    same_run(r.run, rlid.Run(run_dir))
    # The same config as a dict of its sections.
    with open(CONFIG, "rb") as f:
        as_dict = tomllib.load(f)
    d = rlid.train(as_dict, out=tmp_path / "dict", set=SETS, progress=False)
    same_run(d.run, rlid.Run(run_dir))


def test_train_refuses_bad_input(tmp_path, run_dir):
    with pytest.raises(rlid.ConfigError, match="already"):
        rlid.train(CONFIG, out=run_dir, set=SETS, progress=False)
    with pytest.raises(ValueError, match="resume"):
        rlid.train(CONFIG, resume=True, progress=False)
    with pytest.raises(rlid.ConfigError):
        rlid.train(CONFIG, out=tmp_path / "x", set=["trainer.lr=-1"], progress=False)
    with pytest.raises(rlid.ConfigError):
        rlid.train({"trainer": {"algorithm": "no_such_trainer"}}, out=tmp_path / "y",
                   progress=False)
    with pytest.raises(rlid.IoError):
        rlid.train(tmp_path / "missing.toml", progress=False)
    with pytest.raises(rlid.ConfigError):
        rlid.train(CONFIG, set="trainer.lr=1e-4")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_compare_equals_the_cli(tmp_path):
    sets = ["compare.seeds=[1]", "compare.budget_value=16", "trainer.episodes_per_iteration=16",
            "trainer.num_envs=16", "trainer.epochs=1", "trainer.minibatch_size=16",
            "trainer.grad_snr_every=0", "sft.episodes=32", "sft.epochs=1",
            "trainer.eval_episodes=8", "compare.chance_episodes=0", "compare.plots=false"]
    config = SOURCE_DIR / "configs" / "quickstart.toml"
    args = [a for s in sets for a in ("--set", s)]
    run_cli("compare", config, "--out", tmp_path / "cli", *args)
    r = rlid.compare(config, out=tmp_path / "py", set=sets + ["run.threads=1"], progress=False)
    assert len(r["arms"]) >= 2 and r["verdict"] and r["table"]
    assert all(0 <= a["success"] <= 1 and a["seeds"] == 1 for a in r["arms"])
    cli = rlid.Run(tmp_path / "cli")
    q = ("SELECT r.arm, r.seed, e.split, e.ret, e.success, e.length FROM episodes e "
         "JOIN runs r ON r.id = e.run_id ORDER BY e.id")
    assert r.run.rows(q) == cli.rows(q)


INTERRUPTED_SCRIPT = r"""
import sys, rlid
try:
    rlid.train(sys.argv[1], out=sys.argv[2], set=["trainer.iterations=100000", "run.threads=1"],
               progress=lambda line: print(line, end="", flush=True))
except rlid.Interrupted as e:
    print("INTERRUPTED", e.hint, flush=True)
    sys.exit(42)
"""


def test_ctrl_c_stops_at_a_safe_point_and_keeps_the_run(tmp_path):
    import signal
    import subprocess
    import sys
    out = tmp_path / "stopped"
    proc = subprocess.Popen([sys.executable, "-c", INTERRUPTED_SCRIPT, str(CONFIG), str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in proc.stdout:  # wait until training has started
        seen.append(line)
        if "iter" in line:
            break
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=120)
    assert proc.returncode == 42, "".join(seen) + rest
    assert "--resume" in rest
    status = rlid.Run(out).rows("SELECT status FROM runs")[1]
    assert status == [("interrupted",)]
