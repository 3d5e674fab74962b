"""Sparse upcycling: a dense Qwen3 checkpoint (rlid's or Hugging Face's) as a Qwen3-MoE one.

Every layer's MLP becomes `--experts` experts, each a copy of it with Gaussian noise of
`--noise` times the weight's standard deviation, behind a random router (`--router-std`);
each token runs `--top-k` of them, renormalised. With no noise the model computes exactly
what the dense one did, whatever the routing; with some, routing matters a little, as in a
freshly upcycled MoE. docs/engines.md uses it to measure the engine's routing mismatch on a
warm start that already answers. Run with the project's venv:

    .venv/bin/python scripts/upcycle_moe.py DENSE_DIR OUT_DIR [--experts 4 --top-k 2]
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

MLP = re.compile(r"^model\.layers\.(\d+)\.mlp\.(gate_proj|up_proj|down_proj)\.weight$")


def upcycle(dense: Path, out: Path, experts: int, top_k: int, noise: float, router_std: float, seed: int) -> None:
    config = json.loads((dense / "config.json").read_text())
    if config.get("model_type", "qwen3") != "qwen3":
        sys.exit(f"upcycle_moe: {dense} is a {config.get('model_type')} model; this script upcycles qwen3")
    if not 1 <= top_k <= experts:
        sys.exit(f"upcycle_moe: --top-k {top_k} must be in [1, --experts {experts}]")
    weights = load_file(str(dense / "model.safetensors"))
    gen = torch.Generator().manual_seed(seed)
    hidden = config["hidden_size"]
    moe = {}
    for name, w in weights.items():
        m = MLP.match(name)
        if not m:
            moe[name] = w
            continue
        layer, proj = m.groups()
        for e in range(experts):
            jitter = torch.randn(w.shape, generator=gen) * noise * w.float().std()
            moe[f"model.layers.{layer}.mlp.experts.{e}.{proj}.weight"] = (w.float() + jitter).to(w.dtype)
        router = f"model.layers.{layer}.mlp.gate.weight"
        if router not in moe:
            moe[router] = (torch.randn(experts, hidden, generator=gen) * router_std).to(w.dtype)
    config.update(model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], num_experts=experts,
                  num_experts_per_tok=top_k, moe_intermediate_size=config["intermediate_size"],
                  norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[])
    out.mkdir(parents=True, exist_ok=True)
    save_file(moe, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2))
    for extra in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        if (dense / extra).is_file():
            shutil.copy(dense / extra, out / extra)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dense", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--experts", type=int, default=4)
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--noise", type=float, default=0.1, help="expert noise, in weight standard deviations")
    p.add_argument("--router-std", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    upcycle(a.dense, a.out, a.experts, a.top_k, a.noise, a.router_std, a.seed)


if __name__ == "__main__":
    main()
