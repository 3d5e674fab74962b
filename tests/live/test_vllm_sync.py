"""vLLM engines beyond one LoRA run (the setup of test_vllm_engine.py, which this file
shares; a file of its own so that CTest runs it beside that one):

- a full-parameter run restarts the server on each new version's weights, and only
  then (the weights it started on are not loaded twice); the restart is measured;
- with `--nproc 2` each rank owns its engine (engine/rank<r>), probes it and stops it.
"""
from __future__ import annotations

import sqlite3
import subprocess

from test_vllm_engine import CONFIG, _rlid_cmd, _server_processes


def test_full_parameter_sync_restarts_the_server_on_the_new_weights(tmp_path):
    """Without LoRA the engine serves the merged weights: the server starts on version 0's (the
    first sync finds them served and does not restart), and after the update it restarts on
    version 1's, which the probe must then find there. The restart is measured."""
    cfg = tmp_path / "run.toml"
    # Decision PPO whose scratchpads the engine samples: its advantages are not all zero at the
    # first update (a random policy's GRPO groups can be), so the weights change.
    cfg.write_text(CONFIG.replace("[policy.lora]\nrank = 8\nalpha = 16\n", "")
                   .replace("history_steps = 2", "history_steps = 2\nreasoning = true\nmax_think_tokens = 6")
                   .replace('algorithm = "grpo"', 'algorithm = "ppo_decision"').replace("group_size = 4\n", "")
                   .replace("iterations = 2", "iterations = 1"))
    out = tmp_path / "run"
    proc = subprocess.run(_rlid_cmd("train", cfg, "--out", out), capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    db = sqlite3.connect(out / "rlid.db")

    def metric(key):
        return [v for (v,) in db.execute("SELECT value FROM metrics WHERE key = ? ORDER BY iteration", (key,))]

    assert metric("engine/restarted") == [1.0]
    probes, sync_s = metric("engine/probe_max_abs_logp_diff"), metric("time/engine_sync_s")
    assert len(probes) == 1 and probes[0] < 0.02, probes
    starts = (out / "engine" / "vllm.log").read_text().count("---- rlid starts vLLM")
    assert starts == 2, f"{starts} server starts: one for the run, one for version 1"
    assert (out / "engine" / "weights" / "full_v1").is_dir()
    print(f"\nLIVE vllm full-parameter sync by restart: {sync_s[0]:.1f} s, probe {probes[0]:.2g}")
    assert not _server_processes(str(out)), "the vLLM server outlived the run"


def test_each_rank_of_a_data_parallel_job_owns_its_engine(tmp_path):
    """`--nproc 2`: each rank starts its own server under engine/rank<r>, syncs and probes it,
    and stops it when the job ends."""
    cfg = tmp_path / "run.toml"
    cfg.write_text(CONFIG.replace("iterations = 2", "iterations = 1"))
    out = tmp_path / "run"
    proc = subprocess.run(_rlid_cmd("train", cfg, "--out", out, "--nproc", 2), capture_output=True, text=True,
                          timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for rank in (0, 1):
        log = (out / "engine" / f"rank{rank}" / "vllm.log").read_text()
        assert log.count("---- rlid starts vLLM") == 1, f"rank {rank}'s engine log:\n{log[-2000:]}"
    db = sqlite3.connect(out / "rlid.db")
    probes = [v for (v,) in db.execute("SELECT value FROM metrics WHERE key = 'engine/probe_max_abs_logp_diff'")]
    assert len(probes) == 1 and probes[0] < 0.02, probes
    assert not _server_processes(str(out)), "a rank's vLLM server outlived the job"
