#!/usr/bin/env python3
"""Writes the Mistral, Gemma 3 and Qwen3.5 Hugging Face reference fixtures.

    /work/main/.venv/bin/python tests/data/hf/make_family_fixtures.py

Makes tests/data/hf/mistral_tiny/, gemma3_tiny/ and qwen3_5_tiny/, each holding `config.json` and
`model.safetensors` (written by `save_pretrained`, float32) and `reference.json` (the logits that
transformers' own modeling code computes for them: eager attention, float32, CPU, one thread), in
the same layout and with the same five cases as the other fixtures in this folder (see README.md).

After saving, each fixture is checked: `AutoModelForCausalLM.from_pretrained(dir)` must reproduce
the stored logits exactly, and (Mistral, Gemma 3) the sliding window must change the logits of the
40-token rows (compared with a copy of the config whose window is larger than any row). Qwen3.5's
Gated DeltaNet runs transformers' pure-PyTorch chunked rule (no fused kernels are installed).
"""

import copy
import hashlib
import json
import math
import os
import sys

import torch

import huggingface_hub
import transformers
from transformers import (
    AutoModelForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    MistralConfig,
    MistralForCausalLM,
    Qwen3_5ForCausalLM,
    Qwen3_5TextConfig,
)

HERE = os.path.dirname(os.path.abspath(__file__))

# The same token ids as the other fixtures' cases (vocabulary 300; 0 is the pad id of the batch).
LEN1 = [13]
LEN7 = [95, 11, 120, 25, 242, 170, 235]
LEN40 = [42, 47, 75, 45, 175, 299, 166, 111, 163, 182, 275, 120, 77, 179, 201, 50, 8, 0, 158, 11,
         29, 176, 26, 4, 200, 272, 97, 227, 258, 95, 61, 78, 203, 275, 31, 47, 117, 116, 13, 265]
LEN23 = [198, 132, 57, 22, 257, 133, 4, 280, 125, 140, 189, 274, 261, 280, 164, 58, 92, 114, 123,
         226, 174, 107, 74]

COMMON = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256)


def mistral_config():
    return MistralConfig(
        **COMMON,
        num_hidden_layers=3,
        head_dim=16,
        sliding_window=8,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=False,
        rms_norm_eps=1e-5,
    )


def gemma3_config():
    return Gemma3TextConfig(
        **COMMON,
        num_hidden_layers=4,
        layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
        head_dim=24,
        sliding_window=6,
        query_pre_attn_scalar=32,
        final_logit_softcapping=30.0,
        attention_bias=False,
        tie_word_embeddings=True,
        rope_parameters={
            "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1000000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        },
        hidden_activation="gelu_pytorch_tanh",
    )


def qwen3_5_config():
    return Qwen3_5TextConfig(
        **COMMON,
        num_hidden_layers=4,
        layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"],
        head_dim=16,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=16,
        linear_value_head_dim=8,
        linear_conv_kernel_dim=4,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.25},
    )


FIXTURES = [
    # name, model class, config factory, seed, mean of the norm weights
    ("mistral_tiny", MistralForCausalLM, mistral_config, 1005, 1.0),
    # Gemma's RMSNorm scales by (1 + w): normal(0, 0.1) norm weights give scales around 1.
    ("gemma3_tiny", Gemma3ForCausalLM, gemma3_config, 1006, 0.0),
    # Qwen3.5's RMSNorms scale by (1 + w) as Gemma's; its gated norm inside linear_attn by w.
    ("qwen3_5_tiny", Qwen3_5ForCausalLM, qwen3_5_config, 1007, 0.0),
]


def init_weights(model, seed, norm_mean):
    """All parameters normal(0, 0.1), norm weights normal(norm_mean, 0.1). Returns the kind counts."""
    torch.manual_seed(seed)
    kinds = {}
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied lm_head.weight is not listed again
            if name.endswith("linear_attn.norm.weight"):
                kind, mean = "gated_norm", 1.0
            elif name.endswith("norm.weight"):
                kind, mean = "norm", norm_mean
            elif "embed_tokens" in name:
                kind, mean = "embed", 0.0
            elif name.endswith(".bias"):
                kind, mean = "bias", 0.0
            else:
                kind, mean = "linear", 0.0
            kinds[kind] = kinds.get(kind, 0) + 1
            p.normal_(mean, 0.1)
    return dict(sorted(kinds.items()))


def cases():
    pad = 40 - len(LEN23)
    batch_ids = [LEN40, [0] * pad + LEN23]
    batch_mask = [[1] * 40, [0] * pad + [1] * len(LEN23)]
    m = torch.tensor(batch_mask)
    pos = (m.cumsum(-1) - 1).clamp(min=0).tolist()
    return [
        dict(name="len1", input_ids=[LEN1], attention_mask=None, position_ids_passed=None),
        dict(name="len7", input_ids=[LEN7], attention_mask=None, position_ids_passed=None),
        dict(name="len40", input_ids=[LEN40], attention_mask=None, position_ids_passed=None),
        dict(name="batch2_left_padded", input_ids=batch_ids, attention_mask=batch_mask,
             position_ids_passed=pos,
             note="left padding; position_ids passed explicitly = cumsum(mask)-1 with pads set to 0 "
                  "(transformers generate() convention), so row 1's valid logits equal an unpadded "
                  "run of its 23 tokens"),
        dict(name="batch2_left_padded_default_positions", input_ids=batch_ids, attention_mask=batch_mask,
             position_ids_passed=None,
             note="same batch, position_ids=None: transformers then uses 0..39 for every row, pads included"),
    ]


def forward(model, case):
    kw = dict(input_ids=torch.tensor(case["input_ids"]), use_cache=False)
    if case["attention_mask"] is not None:
        kw["attention_mask"] = torch.tensor(case["attention_mask"])
    if case["position_ids_passed"] is not None:
        kw["position_ids"] = torch.tensor(case["position_ids_passed"])
    with torch.no_grad():
        return model(**kw).logits


def valid_of(case):
    ids = case["input_ids"]
    if case["attention_mask"] is None:
        return [[True] * len(r) for r in ids]
    return [[bool(x) for x in r] for r in case["attention_mask"]]


def f32_list(t):
    return t.to(torch.float32).tolist()


def reference_case(model, model64, case):
    logits = forward(model, case)  # [B, L, V] float32
    assert logits.dtype == torch.float32
    if not torch.isfinite(logits).all():
        raise SystemExit(f"non-finite logits in case {case['name']}")
    ids = torch.tensor(case["input_ids"])
    B, L = ids.shape
    valid = valid_of(case)
    if case["position_ids_passed"] is not None:
        eff = case["position_ids_passed"]
    else:
        eff = [list(range(L)) for _ in range(B)]
    logp = torch.log_softmax(logits, dim=-1)
    nxt = []
    for b in range(B):
        row = []
        for t in range(L - 1):
            if valid[b][t] and valid[b][t + 1]:
                row.append(logp[b, t, ids[b, t + 1]].item())
            else:
                row.append(None)
        nxt.append(row)
    # float64 run of each row's valid tokens alone, at the same positions: the padded batch itself
    # gives NaN logits in float64 with this transformers/torch, valid positions included.
    d64 = 0.0
    for b in range(B):
        keep = torch.tensor(valid[b])
        one = dict(input_ids=[ids[b][keep].tolist()], attention_mask=None,
                   position_ids_passed=[torch.tensor(eff[b])[keep].tolist()])
        d64 = max(d64, (forward(model64, one)[0] - logits[b][keep].double()).abs().max().item())
    out = dict(name=case["name"], input_ids=case["input_ids"], attention_mask=case["attention_mask"],
               position_ids_passed=case["position_ids_passed"], position_ids_effective=eff, valid=valid,
               logits=f32_list(logits), next_token_logprob=nxt, last_log_softmax=f32_list(logp[:, -1, :]),
               float64_vs_float32_max_abs_diff=float(f"{d64:.3g}"))
    if "note" in case:
        out["note"] = case["note"]
    return out, logits


def dump(v):
    """Compact JSON; floats as float32 with 9 significant digits (round-trips exactly)."""
    if isinstance(v, dict):
        return "{" + ",".join(json.dumps(k) + ":" + dump(x) for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(dump(x) for x in v) + "]"
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError("non-finite float")
        return format(v, ".9g")
    return json.dumps(v)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def make(name, cls, make_config, seed, norm_mean):
    out_dir = os.path.join(HERE, name)
    os.makedirs(out_dir, exist_ok=True)
    config = make_config()
    config._attn_implementation = "eager"
    model = cls(config).eval()
    kinds = init_weights(model, seed, norm_mean)
    model.save_pretrained(out_dir, safe_serialization=True)
    # Like the other fixtures: config.json, model.safetensors, reference.json only.
    os.remove(os.path.join(out_dir, "generation_config.json"))
    os.chmod(os.path.join(out_dir, "model.safetensors"), 0o644)
    files = sorted(f for f in os.listdir(out_dir) if f.endswith(".safetensors"))
    assert files == ["model.safetensors"], files

    from safetensors import safe_open
    with safe_open(os.path.join(out_dir, "model.safetensors"), "pt") as f:
        keys = sorted(f.keys())
        assert all(f.get_tensor(k).dtype == torch.float32 for k in keys)

    model64 = copy.deepcopy(model).to(torch.float64)
    results, stored = [], {}
    for c in cases():
        r, logits = reference_case(model, model64, c)
        results.append(r)
        stored[c["name"]] = logits

    init = {"seed": seed, "norm.weight": f"normal({norm_mean:g}, 0.1)", "embed_tokens": "normal(0, 0.1)",
            "linear": "normal(0, 0.1)", "parameter_kinds": kinds}
    if name == "gemma3_tiny":
        init["norm_note"] = "Gemma3RMSNorm scales by (1 + weight), so these norms scale by about 1"
    if name == "qwen3_5_tiny":
        init["norm_note"] = ("Qwen3_5RMSNorm scales by (1 + weight); linear_attn.norm (gated) by weight, "
                             "drawn normal(1, 0.1); A_log, dt_bias and conv1d.weight normal(0, 0.1)")
    ref = {
        "model": name,
        "architecture": cls.__name__,
        "producer": {
            "transformers_version": transformers.__version__,
            "transformers_commit": None,
            "huggingface_hub": huggingface_hub.__version__,
            "torch": f"{torch.__version__}, CPU, 1 thread",
            "attn_implementation": "eager",
            "compute_dtype": "float32",
            "import_patches": [],
            "import_stand_ins": [],
            "script": "tests/data/hf/make_family_fixtures.py",
        },
        "weights_dtype": "float32",
        "weights_note": "float32 weights",
        "init": init,
        "state_dict_keys": keys,
        "files_sha256": {fn: sha256(os.path.join(out_dir, fn)) for fn in files},
        "format_notes": [
            "logits[b][t][v] are float32 (9 significant digits, round-trips exactly) for every position t",
            "next_token_logprob[b][t] = log_softmax(logits[b][t])[input_ids[b][t+1]], null where t or t+1 is padding",
            "last_log_softmax[b] = log_softmax(logits[b][L-1]) over the whole vocabulary",
            "valid[b][t] is false at padding; logits there are what transformers returns for a fully masked "
            "query row and are not meaningful",
        ],
        "cases": results,
    }
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        f.write(dump(ref))

    # Check 1: the saved directory, loaded the ordinary way, gives exactly the stored logits. The
    # weights from_pretrained memory-maps sit at whatever offset the safetensors header leaves, and
    # on CPU a matrix-vector product (the 1-token case) may take a different SIMD path for unaligned
    # memory, so the check is also made with the loaded weights copied to fresh (aligned) memory:
    # that one must be exact; the raw one is printed and must agree to float32 rounding.
    loaded = AutoModelForCausalLM.from_pretrained(out_dir, attn_implementation="eager").eval()
    assert type(loaded) is cls, type(loaded)
    assert loaded.config._attn_implementation == "eager"
    with open(os.path.join(out_dir, "reference.json")) as f:
        back = json.load(f)

    def max_diff_vs_stored(m):
        diff = 0.0
        for r in back["cases"]:
            want = torch.tensor(r["logits"], dtype=torch.float32)
            assert torch.equal(stored[r["name"]], want)  # the JSON round-trips the float32 logits
            diff = max(diff, (forward(m, r) - want).abs().max().item())
        return diff

    raw_diff = max_diff_vs_stored(loaded)
    with torch.no_grad():
        for p in loaded.parameters():
            p.data = p.data.clone()
    reload_diff = max_diff_vs_stored(loaded)
    print(f"{name}: AutoModelForCausalLM.from_pretrained vs stored logits, all cases and positions: "
          f"max abs diff = {reload_diff} (weights as memory-mapped: {raw_diff:.3g})")

    # Check 2: the sliding window matters for the 40-token rows.
    if getattr(loaded.config, "sliding_window", None) is None:
        sizes = {fn: os.path.getsize(os.path.join(out_dir, fn)) for fn in sorted(os.listdir(out_dir))}
        print(f"{name}: files {sizes}, total {sum(sizes.values())} bytes")
        return reload_diff == 0.0 and raw_diff < 1e-5
    wide = copy.deepcopy(loaded.config)
    wide.sliding_window = 1 << 20
    wide_model = cls(wide).eval()
    wide_model.load_state_dict(loaded.state_dict())
    win_diff = 0.0
    for r in back["cases"]:
        if r["name"] not in ("len40", "batch2_left_padded", "batch2_left_padded_default_positions"):
            continue
        vmask = torch.tensor(r["valid"])
        rows40 = torch.tensor([sum(v) == 40 for v in r["valid"]])
        vmask &= rows40[:, None]
        d = (forward(wide_model, r) - forward(loaded, r)).abs()[vmask].max().item()
        win_diff = max(win_diff, d)
    print(f"{name}: 40-token rows, window {loaded.config.sliding_window} vs {wide.sliding_window}: "
          f"max abs logit diff = {win_diff:.6g}")

    ok = reload_diff == 0.0 and raw_diff < 1e-5 and win_diff > 1e-3
    sizes = {fn: os.path.getsize(os.path.join(out_dir, fn)) for fn in sorted(os.listdir(out_dir))}
    print(f"{name}: files {sizes}, total {sum(sizes.values())} bytes")
    return ok


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    ok = True
    for fx in FIXTURES:
        ok &= make(*fx)
    if not ok:
        print("CHECK FAILED")
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
