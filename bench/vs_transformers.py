#!/usr/bin/env python3
"""rlid vs Hugging Face transformers on the same checkpoint, side by side in one run.

    .venv/bin/python bench/vs_transformers.py [--models tiny,qwen3-0.6b] [--layers 28]
        [--dtypes float32,bfloat16] [--threads 1,2] [--ks 4,8,16,32] [--out results.json]

For each model (a random checkpoint written by transformers: the `tiny` preset's
shape, and Qwen3-0.6B's shape with --layers decoder layers), dtype and thread
count it times, with the fastest of --repeats runs after a warm-up:

- menu scoring, K candidates of 2-4 tokens after a --prompt-tokens prompt:
  transformers one row per candidate in one padded batch (TWOSOME's way; the LM
  head applied only where candidate tokens are read), transformers with the
  prompt encoded once and its KV cache copied per candidate (lamorel's
  `pre_encode_inputs` way), and rlid's single-pass readout (`rlid bench race`);
  the candidates' log-probs must agree (worst difference printed);
- generation: tokens/s of `model.generate` (KV cache) vs rlid's sampler, same
  prompts, group size and length, greedy and sampled (top-k off, top-p 1);
- batched readout: rlid with 8 states per pass vs 1 state per pass;
- one training iteration: forward + backward of decision PPO on 8 states,
  written in PyTorch through transformers (one row per candidate) vs rlid.

rlid runs as a subprocess (`rlid --threads N bench race`), transformers in this
process with torch.set_num_threads(N): the same machine, the same minute.
Ratios > 1 mean rlid is faster.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers

ROOT = Path(__file__).resolve().parents[1]


# ---- checkpoints ----------------------------------------------------------------------------

def make_checkpoint(name: str, layers: int, path: Path) -> Path:
    """A random Qwen3 checkpoint in float32: rlid's tiny preset shape, or Qwen3-0.6B's."""
    if name == "tiny":
        cfg = transformers.Qwen3Config(vocab_size=2048, hidden_size=128, intermediate_size=384,
                                       num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                                       head_dim=64, tie_word_embeddings=True)
    elif name == "qwen3-0.6b":
        cfg = transformers.Qwen3Config(vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                                       num_hidden_layers=layers, num_attention_heads=16, num_key_value_heads=8,
                                       head_dim=128, tie_word_embeddings=True, max_position_embeddings=40960,
                                       rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    else:
        raise SystemExit(f"unknown model '{name}': tiny | qwen3-0.6b")
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.save_pretrained(path)
    return path


def load(path: Path, dtype: str):
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.bfloat16 if dtype == "bfloat16" else torch.float32, attn_implementation="sdpa")
    return model.eval()


# ---- workload -------------------------------------------------------------------------------

def workload(vocab: int, args, rng: torch.Generator) -> dict:
    """Token ids for every task (ids below 2000 so the tiny vocabulary has them)."""
    top = min(vocab, 2000)

    def ids(n):
        return torch.randint(10, top, (n,), generator=rng).tolist()

    def menu(k):
        firsts = torch.randperm(top - 10, generator=rng)[:k] + 10  # distinct first tokens: no prefix clashes
        cands = [[int(f)] + ids(int(torch.randint(1, 4, (1,), generator=rng))) for f in firsts]
        return {"prompt": ids(args.prompt_tokens), "candidates": cands}

    shared = ids(args.prompt_tokens - 32)  # states of one env share the instructions
    states = [{"prompt": shared + ids(32), "candidates": menu(8)["candidates"]} for _ in range(8)]
    return {
        "repeats": args.repeats,
        "menus": [menu(k) for k in args.ks],
        "batched": states,
        "train": {"states": states, "chosen": [i % 8 for i in range(8)],
                  "advantages": torch.randn(8, generator=rng).tolist(),
                  "old_logp": [-2.0794] * 8},
        "generate": [{"prompts": [ids(args.prompt_tokens // 4) for _ in range(args.gen_prompts)],
                      "group": args.gen_group, "new_tokens": args.new_tokens, "temperature": t}
                     for t in (0.0, 1.0)],
    }


# ---- transformers' side ---------------------------------------------------------------------

def fastest(repeats: int, fn):
    fn()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def candidate_logps_per_row(model, prompt, cands):
    """TWOSOME's way: prompt + candidate as one row each, one padded batch; the LM
    head only where candidate tokens are predicted. -> [K] log π(w|s)."""
    rows = [prompt + c for c in cands]
    T = max(map(len, rows))
    ids = torch.zeros(len(rows), T, dtype=torch.long)
    mask = torch.zeros(len(rows), T, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r)
        mask[i, :len(r)] = 1
    hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
    out = []
    P = len(prompt)
    for i, c in enumerate(cands):
        logits = model.lm_head(hidden[i, P - 1:P - 1 + len(c)]).float()
        out.append(logits.log_softmax(-1).gather(1, torch.tensor(c)[:, None]).sum())
    return torch.stack(out)


def candidate_logps_cached(model, prompt, cands):
    """lamorel's way: the prompt once, its KV cache copied per candidate, then the
    candidates in one padded batch. -> [K] log π(w|s)."""
    P, K = len(prompt), len(cands)
    first = model(input_ids=torch.tensor([prompt]), use_cache=True, logits_to_keep=1)
    cache = first.cache
    cache.batch_repeat_interleave(K)
    C = max(map(len, cands))
    ids = torch.zeros(K, C, dtype=torch.long)
    cmask = torch.zeros(K, C, dtype=torch.long)
    for i, c in enumerate(cands):
        ids[i, :len(c)] = torch.tensor(c)
        cmask[i, :len(c)] = 1
    mask = torch.cat([torch.ones(K, P, dtype=torch.long), cmask], 1)
    pos = torch.arange(P, P + C)[None].expand(K, C)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache).logits.float()
    head = first.logits[0, -1].float().log_softmax(-1)
    out = []
    for i, c in enumerate(cands):
        rest = logits[i, :len(c) - 1].log_softmax(-1).gather(1, torch.tensor(c[1:])[:, None]).sum()
        out.append(head[c[0]] + rest)
    return torch.stack(out)


def generate(model, task):
    prompts = torch.tensor(task["prompts"]).repeat_interleave(task["group"], 0)
    kw = dict(do_sample=False) if task["temperature"] == 0 else dict(
        do_sample=True, temperature=task["temperature"], top_k=0, top_p=1.0)
    return model.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=task["new_tokens"],
                          min_new_tokens=task["new_tokens"], eos_token_id=None, pad_token_id=0, **kw)


def ppo_step(model, train):
    """Decision PPO, forward + backward, as a PyTorch user writes it on transformers."""
    model.zero_grad(set_to_none=True)
    logp = []
    for s, k in zip(train["states"], train["chosen"]):
        cand = candidate_logps_per_row(model, s["prompt"], s["candidates"])
        logp.append(cand.log_softmax(0)[k])
    logp = torch.stack(logp)
    ratio = torch.exp(logp - torch.tensor(train["old_logp"]))
    adv = torch.tensor(train["advantages"])
    loss = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()
    loss.backward()
    return loss.item()


def run_transformers(model, w, repeats):
    res = {"menus": []}
    with torch.no_grad():
        for m in w["menus"]:
            rows = candidate_logps_per_row(model, m["prompt"], m["candidates"])
            cached = candidate_logps_cached(model, m["prompt"], m["candidates"])
            res["menus"].append({
                "seconds_per_row": fastest(repeats, lambda: candidate_logps_per_row(model, m["prompt"], m["candidates"])),
                "seconds_cached": fastest(repeats, lambda: candidate_logps_cached(model, m["prompt"], m["candidates"])),
                "logp_rows": rows.tolist(), "logp_cached": cached.tolist()})
        res["generate"] = []
        for g in w["generate"]:
            out = None

            def gen():
                nonlocal out
                out = generate(model, g)
            s = fastest(repeats, gen)
            P = len(g["prompts"][0])
            res["generate"].append({"seconds": s, "tokens": int(out[:, P:].numel()),
                                    "sequences": out[:, P:].tolist()})
    model.train()
    loss = None

    def step():
        nonlocal loss
        loss = ppo_step(model, w["train"])
    res["train"] = {"seconds": fastest(repeats, step), "loss": loss}
    model.eval()
    return res


# ---- the race -------------------------------------------------------------------------------

def menu_p(logps) -> torch.Tensor:
    """p(a|s) over the menu from the candidates' log π(w|s) (float64)."""
    return torch.tensor(logps, dtype=torch.float64).softmax(0)


def race(ckpt: Path, dtype: str, threads: int, w: dict, args) -> dict:
    torch.set_num_threads(threads)
    model = load(ckpt, dtype)
    hf = run_transformers(model, w, args.repeats)
    del model
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(w, f)
    try:
        out = subprocess.run([str(args.rlid), "--threads", str(threads), "--log-level", "warn", "bench", "race",
                              "--checkpoint", str(ckpt), "--workload", f.name, "--dtype", dtype],
                             check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)
    rl = json.loads(out[out.index("{"):])
    rows = []
    for k, m, h, r in zip(args.ks, w["menus"], hf["menus"], rl["menus"]):
        diff = max(max(abs(a - b) for a, b in zip(r["logp"], h["logp_rows"])),
                   max(abs(a - b) for a, b in zip(r["logp"], h["logp_cached"])))
        p_diff = max((menu_p(r["logp"]) - menu_p(h[key])).abs().max().item() for key in ("logp_rows", "logp_cached"))
        rows.append({"task": f"menu K={k}", "transformers_per_row_s": h["seconds_per_row"],
                     "transformers_cached_s": h["seconds_cached"], "rlid_s": r["seconds"],
                     "vs_lamorel": h["seconds_cached"] / r["seconds"],
                     "vs_twosome": h["seconds_per_row"] / r["seconds"],
                     "vs_twosome_per_k": h["seconds_per_row"] / r["seconds"] / k,
                     "worst_logp_diff": diff, "worst_p_diff": p_diff})
    for g, h, r in zip(w["generate"], hf["generate"], rl["generate"]):
        name = "greedy" if g["temperature"] == 0 else "sampled"
        row = {"task": f"generate {name}", "transformers_tok_s": h["tokens"] / h["seconds"],
               "rlid_tok_s": r["tokens"] / r["seconds"], "vs_transformers": h["seconds"] / r["seconds"]}
        if name == "greedy":
            row["same_greedy_sequences"] = sum(a == b for a, b in zip(h["sequences"], r["sequences"]))
            row["sequences"] = len(r["sequences"])
        rows.append(row)
    b = rl["batched"]
    rows.append({"task": f"batched readout {b['states']} states", "rlid_one_per_pass_s": b["seconds_one_per_pass"],
                 "rlid_batched_s": b["seconds_batched"],
                 "batched_vs_one": b["seconds_one_per_pass"] / b["seconds_batched"]})
    rows.append({"task": "train iteration (fwd+bwd, 8 states)", "transformers_s": hf["train"]["seconds"],
                 "rlid_s": rl["train"]["seconds"], "vs_transformers": hf["train"]["seconds"] / rl["train"]["seconds"],
                 "loss_diff": abs(hf["train"]["loss"] - rl["train"]["loss"])})
    return {"dtype": dtype, "threads": threads, "rows": rows}


def print_table(model: str, res: dict):
    print(f"\n## {model}, {res['dtype']}, {res['threads']} thread(s)")
    print("| task | transformers | rlid | ratio (rlid faster > 1) | check |")
    print("|---|---|---|---|---|")
    for r in res["rows"]:
        t = r["task"]
        if t.startswith("menu"):
            print(f"| {t} | per row {r['transformers_per_row_s']*1e3:.2f} ms, cached {r['transformers_cached_s']*1e3:.2f} ms"
                  f" | {r['rlid_s']*1e3:.2f} ms | {r['vs_lamorel']:.2f}x lamorel, {r['vs_twosome']:.2f}x TWOSOME"
                  f" ({r['vs_twosome_per_k']:.2f} K) | max |Δ p(a|s)| {r['worst_p_diff']:.1e}, "
                  f"|Δ log π(w|s)| {r['worst_logp_diff']:.1e} |")
        elif t.startswith("generate"):
            check = (f"{r['same_greedy_sequences']}/{r['sequences']} identical" if "sequences" in r else "")
            print(f"| {t} | {r['transformers_tok_s']:.0f} tok/s | {r['rlid_tok_s']:.0f} tok/s | "
                  f"{r['vs_transformers']:.2f}x | {check} |")
        elif t.startswith("batched"):
            print(f"| {t} | | {r['rlid_one_per_pass_s']*1e3:.1f} ms one per pass, {r['rlid_batched_s']*1e3:.1f} ms "
                  f"batched | {r['batched_vs_one']:.2f}x | |")
        else:
            print(f"| {t} | {r['transformers_s']*1e3:.1f} ms | {r['rlid_s']*1e3:.1f} ms | "
                  f"{r['vs_transformers']:.2f}x | |Δ loss| {r['loss_diff']:.1e} |")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="tiny,qwen3-0.6b")
    p.add_argument("--layers", type=int, default=28, help="decoder layers of the Qwen3-0.6B-shaped model")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--ks", default="4,8,16,32")
    p.add_argument("--prompt-tokens", type=int, default=256)
    p.add_argument("--gen-prompts", type=int, default=4)
    p.add_argument("--gen-group", type=int, default=4)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rlid", type=Path, default=ROOT / "build" / "rlid")
    p.add_argument("--dir", type=Path, help="where checkpoints are written (default: a temp dir)")
    p.add_argument("--out", type=Path, help="also write the results as JSON")
    args = p.parse_args()
    args.ks = [int(k) for k in args.ks.split(",")]
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {os.cpu_count()} CPUs; "
          f"rlid {subprocess.run([str(args.rlid), '--version'], capture_output=True, text=True).stdout.strip()}")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = args.dir or Path(tmp)
        for name in args.models.split(","):
            ckpt = base / name
            if not (ckpt / "config.json").exists():
                make_checkpoint(name, args.layers, ckpt)
            vocab = json.loads((ckpt / "config.json").read_text())["vocab_size"]
            w = workload(vocab, args, torch.Generator().manual_seed(7))
            for dtype in args.dtypes.split(","):
                for threads in (int(t) for t in args.threads.split(",")):
                    res = race(ckpt, dtype, threads, w, args)
                    print_table(name, res)
                    sys.stdout.flush()
                    results.setdefault(name, []).append(res)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
