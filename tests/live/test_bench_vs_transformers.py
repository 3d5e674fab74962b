"""bench/vs_transformers.py on a tiny checkpoint: the race runs end to end and its
two sides compute the same numbers (timings are reported, never asserted):
every candidate's log π(w|s) from transformers' per-row and cached scorers vs
rlid's single-pass readout, greedy continuations, and the decision-PPO loss."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import SimpleNamespace

import torch

from conftest import SOURCE_DIR

spec = importlib.util.spec_from_file_location("vs_transformers", SOURCE_DIR / "bench" / "vs_transformers.py")
vs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(vs)


def test_the_race_compares_equal_numbers(tmp_path, rlid, report):
    args = SimpleNamespace(ks=[4, 16], prompt_tokens=64, gen_prompts=2, gen_group=2, new_tokens=6, repeats=1,
                           rlid=Path(os.environ.get("RLID_BIN", SOURCE_DIR / "build" / "rlid")))
    ckpt = vs.make_checkpoint("tiny", 0, tmp_path / "tiny")
    w = vs.workload(2048, args, torch.Generator().manual_seed(3))
    res = vs.race(ckpt, "float32", 1, w, args)
    rows = {r["task"]: r for r in res["rows"]}
    worst = max(rows[f"menu K={k}"]["worst_logp_diff"] for k in args.ks)
    report("bench.vs_transformers.menu_logp", worst, 1e-5, sum(args.ks))
    worst_p = max(rows[f"menu K={k}"]["worst_p_diff"] for k in args.ks)
    report("bench.vs_transformers.menu_p", worst_p, 1e-5, sum(args.ks))
    greedy = rows["generate greedy"]
    report("bench.vs_transformers.greedy_mismatches", greedy["sequences"] - greedy["same_greedy_sequences"], 0,
           greedy["sequences"])
    report("bench.vs_transformers.train_loss", rows["train iteration (fwd+bwd, 8 states)"]["loss_diff"], 1e-5, 1)
    for r in res["rows"]:
        assert all(v > 0 for k, v in r.items() if k.endswith("_s")), r


def test_a_bad_workload_is_a_config_error(tmp_path, rlid):
    from conftest import RlidError
    ckpt = vs.make_checkpoint("tiny", 0, tmp_path / "tiny")
    for bad in ('{"menus": [{}]}', '{"menus": [{"prompt": [1, 2], "candidates": [[99999]]}]}', "[1,"):
        (tmp_path / "w.json").write_text(bad)
        try:
            rlid("bench", "race", "--checkpoint", ckpt, "--workload", tmp_path / "w.json")
        except RlidError as e:
            assert e.code == 2 and "config error" in e.stderr, (bad, e.stderr)
        else:
            raise AssertionError(f"workload {bad} was accepted")
