"""Live parity of rlid's forward pass with Hugging Face transformers.

Every case makes a fresh random tiny checkpoint with transformers' own config
classes and `save_pretrained` (Qwen3, Qwen2, Llama; Mistral and Gemma 3 text
with sliding windows shorter than the rows; Qwen3.5 text, hybrid Gated
DeltaNet and gated full-attention layers with partial rotary, on rows longer
than the 64-token chunk of the delta rule, in rlid's chunked and recurrent
forms against transformers' pure-PyTorch kernels; Qwen3-MoE with sparse and
dense layers, top-k routing with and without renormalisation; rope types default, linear,
llama3 and yarn; tied and untied heads; F32, BF16 and F16 weights; sharded
safetensors; the older config.json layout) and checks that
`rlid policy logits --dtype float32` gives the logits transformers computes
for the same directory (`from_pretrained`, eager attention, float32) to 1e-4
at every valid position: a single row, and a left-padded batch run with
positions from the mask (as `generate()` makes them) and with default
positions. BF16 checkpoints are also run with `--dtype bfloat16`, which must
stay about as close to that float32 reference as transformers in bfloat16 does.
Hand-written config.json files that leave keys to transformers' defaults (or
override the rope parameters at the top level) must give the same model in
both. Configs transformers runs but rlid cannot run exactly must be refused
with a ConfigError (exit code 2) whose message names the field, and `rlid
export` must write a directory transformers loads to the logits rlid computes
for the source.
"""
from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from transformers import (AutoModelForCausalLM, Gemma3TextConfig, LlamaConfig, MistralConfig, Qwen2Config,
                          Qwen3_5TextConfig, Qwen3Config, Qwen3MoeConfig)

from conftest import RlidError

transformers.logging.set_verbosity_error()
transformers.logging.disable_progress_bar()
torch.set_num_threads(1)

TOLERANCE = 1e-4  # absolute, on float32 logits
# A bfloat16 forward rounds activations to 8 significant bits at points that
# differ between rlid (LibTorch's fused attention) and transformers (eager
# matmuls), so there is no common bf16 answer to compare against: rlid's bf16
# error from the float32 reference may be at most this multiple of transformers'.
BF16_ERROR_RATIO = 2.0
CONFIG_ERROR_EXIT = 2  # core/error.h: ConfigError::exit_code()
# Each rlid call is a process that loads LibTorch (most of its ~1 s); a few run
# side by side, and while transformers computes its reference.
POOL = ThreadPoolExecutor(max_workers=3)

CONFIG_CLASSES = {"qwen3": Qwen3Config, "qwen2": Qwen2Config, "llama": LlamaConfig, "mistral": MistralConfig,
                  "gemma3_text": Gemma3TextConfig, "qwen3_5_text": Qwen3_5TextConfig, "qwen3_moe": Qwen3MoeConfig}
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Case:
    family: str                # qwen3 | qwen2 | llama | mistral | gemma3_text | qwen3_5_text | qwen3_moe
    rope: str                  # default | linear | llama3 | yarn
    seed: int
    weights: str = "float32"   # dtype written to disk
    sharded: bool = False
    legacy_layout: bool = False  # rope_theta + rope_scaling {"type": ...} + torch_dtype

    @property
    def id(self) -> str:
        extras = [self.weights] if self.weights != "float32" else []
        extras += ["sharded"] * self.sharded + ["legacy"] * self.legacy_layout
        return "-".join([self.family, self.rope, f"s{self.seed}", *extras])


CASES = [
    *(Case("qwen3", "default", s) for s in (0, 1, 2)),
    *(Case("qwen2", "default", s) for s in (0, 1)),
    Case("qwen2", "yarn", 2),
    *(Case("llama", rope, s) for rope in ("default", "linear", "llama3", "yarn") for s in (0, 1)),
    Case("qwen3", "default", 3, weights="bfloat16", sharded=True),
    Case("llama", "llama3", 2, weights="bfloat16"),
    Case("qwen2", "default", 3, weights="float16"),
    Case("llama", "yarn", 2, sharded=True),
    Case("llama", "linear", 3, legacy_layout=True),
    Case("llama", "yarn", 3, legacy_layout=True),
    Case("qwen3", "llama3", 4, legacy_layout=True),
    # Sliding windows of 3 to 16 tokens over rows of up to 40: most keys fall outside them.
    *(Case("mistral", "default", s) for s in (0, 1, 2)),
    Case("mistral", "yarn", 3, weights="bfloat16"),
    *(Case("gemma3_text", rope, s) for rope in ("default", "linear") for s in (0, 1, 2)),
    Case("gemma3_text", "linear", 3, weights="bfloat16"),
    Case("gemma3_text", "default", 4, legacy_layout=True),
    Case("gemma3_text", "linear", 5, sharded=True),
    # Hybrid layers; rows of up to 150 tokens cross the delta rule's 64-token chunks.
    *(Case("qwen3_5_text", "default", s) for s in (0, 1, 2, 3)),
    Case("qwen3_5_text", "linear", 4),
    Case("qwen3_5_text", "default", 5, weights="bfloat16"),
    Case("qwen3_5_text", "default", 6, sharded=True),
    # Sparse layers (4 to 8 experts, top 1 to 3) beside dense ones.
    *(Case("qwen3_moe", "default", s) for s in (0, 1, 2)),
    Case("qwen3_moe", "yarn", 3),
    Case("qwen3_moe", "default", 4, weights="bfloat16"),
    Case("qwen3_moe", "default", 5, sharded=True),
]


# ---------------------------------------------------------------- checkpoints


def random_rope(rope: str, rng: random.Random) -> dict:
    """Rope parameters of the given type, drawn from rng (current layout)."""
    params = {"rope_type": rope, "rope_theta": rng.choice([10000.0, 500000.0, 1000000.0])}
    if rope == "linear":
        params["factor"] = rng.uniform(1.5, 4.0)
    elif rope == "llama3":
        params.update(factor=rng.choice([4.0, 8.0]), low_freq_factor=1.0, high_freq_factor=rng.choice([2.0, 4.0]),
                      original_max_position_embeddings=rng.choice([16, 32, 64]))
    elif rope == "yarn":
        params.update(factor=rng.uniform(2.0, 8.0), original_max_position_embeddings=rng.choice([16, 32, 64]),
                      beta_fast=rng.choice([32.0, 16.0]), beta_slow=rng.choice([1.0, 2.0]))
        variant = rng.randrange(3)  # attention scale from factor, given, or from mscale / mscale_all_dim
        if variant == 1:
            params["attention_factor"] = rng.uniform(0.8, 1.5)
        elif variant == 2:
            params.update(mscale=rng.uniform(0.5, 1.5), mscale_all_dim=rng.uniform(0.5, 1.5), truncate=False)
    return params


def random_config(family: str, rope: str, seed: int, window_pattern: bool = False):
    """A tiny config of the family with sizes, GQA grouping, biases and tying drawn from the seed
    (Gemma 3: layer types at random, or with window_pattern every n-th layer global, as configs
    that state sliding_window_pattern instead of layer_types have them)."""
    rng = random.Random(f"{family}/{rope}/{seed}")
    kv_heads = rng.choice([1, 2, 4])
    heads = kv_heads * rng.choice([1, 2, 3])
    hidden = rng.choice([32, 48, 64, 96])
    while hidden % heads:
        heads = kv_heads * rng.choice([1, 2])
    kw = dict(vocab_size=rng.randint(100, 400), hidden_size=hidden, intermediate_size=rng.randint(32, 160),
              num_hidden_layers=rng.randint(1, 3), num_attention_heads=heads, num_key_value_heads=kv_heads,
              max_position_embeddings=256, rms_norm_eps=rng.choice([1e-6, 1e-5]),
              tie_word_embeddings=rng.random() < 0.5, rope_parameters=random_rope(rope, rng))
    if family == "qwen3":  # head_dim is explicit and need not be hidden / heads
        kw.update(head_dim=rng.choice([8, 16, 24, 32]), attention_bias=rng.random() < 0.3)
    elif family == "llama":
        kw["attention_bias"] = rng.random() < 0.5
        if rng.random() < 0.3:
            kw["head_dim"] = rng.choice([8, 16, 24])
    elif family == "mistral":  # all layers slide (None: none does)
        kw["sliding_window"] = rng.choice([None, 4, 7, 16])
        if rng.random() < 0.5:
            kw["head_dim"] = rng.choice([8, 16, 24])
    elif family == "gemma3_text":  # local layers slide with their own rope base, global ones scale
        layers = rng.randint(2, 4)
        types = [rng.choice(["sliding_attention", "full_attention"]) for _ in range(layers)]
        types[rng.randrange(layers)] = "sliding_attention"
        if window_pattern:
            n = rng.randint(2, layers)
            types = ["full_attention" if (i + 1) % n == 0 else "sliding_attention" for i in range(layers)]
        head_dim = rng.choice([8, 16, 24])
        kw.update(num_hidden_layers=layers, layer_types=types, head_dim=head_dim,
                  sliding_window=rng.choice([3, 5, 9]), attention_bias=rng.random() < 0.3,
                  query_pre_attn_scalar=rng.choice([head_dim, 32, 144]),
                  final_logit_softcapping=rng.choice([None, 3.0, 30.0]),
                  rope_parameters={"full_attention": kw["rope_parameters"],
                                   "sliding_attention": {"rope_type": "default",
                                                         "rope_theta": rng.choice([10000.0, 20000.0])}})
    elif family == "qwen3_5_text":  # linear-attention layers around at least one full one
        layers = rng.randint(2, 4)
        types = [rng.choice(["linear_attention", "full_attention"]) for _ in range(layers)]
        types[rng.randrange(layers)] = "full_attention"
        head_dim = rng.choice([8, 16, 32])
        key_heads = rng.choice([1, 2])
        kw["rope_parameters"]["partial_rotary_factor"] = rng.choice([0.25, 0.5, 1.0])
        kw.update(num_hidden_layers=layers, layer_types=types, head_dim=head_dim,
                  attention_bias=rng.random() < 0.3, linear_num_key_heads=key_heads,
                  linear_num_value_heads=key_heads * rng.choice([1, 2]),
                  linear_key_head_dim=rng.choice([8, 16]), linear_value_head_dim=rng.choice([8, 12, 16]),
                  linear_conv_kernel_dim=rng.choice([2, 4]))
    elif family == "qwen3_moe":  # sparse layers by decoder_sparse_step and mlp_only_layers
        layers = rng.randint(2, 4)
        experts = rng.choice([4, 6, 8])
        kw.update(num_hidden_layers=layers, head_dim=rng.choice([8, 16, 32]), attention_bias=rng.random() < 0.3,
                  num_experts=experts, num_experts_per_tok=rng.randint(1, 3), moe_intermediate_size=rng.randint(8, 48),
                  norm_topk_prob=rng.random() < 0.5, decoder_sparse_step=rng.choice([1, 1, 2]),
                  mlp_only_layers=sorted(rng.sample(range(layers), rng.randint(0, 1))))
    return CONFIG_CLASSES[family](**kw)


def randomize_(model: torch.nn.Module, seed: int) -> None:
    """Every weight random, biases and norm gains included (so norms are tested)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            mean = 1.0 if name.endswith("norm.weight") else 0.0
            p.copy_(torch.randn(p.shape, generator=gen) * 0.1 + mean)


def to_legacy_layout(config_path: Path) -> None:
    """Rewrites config.json as older transformers versions wrote it."""
    cfg = json.loads(config_path.read_text())
    rope = cfg.pop("rope_parameters")
    if cfg["model_type"] == "gemma3_text":  # one base per kind of layer, and a window pattern
        cfg["rope_local_base_freq"] = rope.pop("sliding_attention")["rope_theta"]
        rope = rope["full_attention"]
        cfg["sliding_window_pattern"] = cfg.pop("layer_types").index("full_attention") + 1
    cfg["rope_theta"] = rope.pop("rope_theta")
    kind = rope.pop("rope_type")
    cfg["rope_scaling"] = None if kind == "default" else {"type": kind, **rope}
    cfg["torch_dtype"] = cfg.pop("dtype")
    config_path.write_text(json.dumps(cfg, indent=2))


def save_model(model, out: Path, weights: str = "float32", sharded: bool = False) -> Path:
    model.to(TORCH_DTYPES[weights]).save_pretrained(out, max_shard_size="40KB" if sharded else "5GB")
    model.to(torch.float32)
    return out


def make_checkpoint(case: Case, out: Path) -> Path:
    torch.manual_seed(case.seed)
    model = AutoModelForCausalLM.from_config(random_config(case.family, case.rope, case.seed, case.legacy_layout),
                                             attn_implementation="eager", dtype=torch.float32)
    randomize_(model, case.seed)
    save_model(model, out, case.weights, case.sharded)
    if case.sharded:
        assert len(list(out.glob("model-*.safetensors"))) > 1, "max_shard_size gave one shard"
    if case.legacy_layout:
        to_legacy_layout(out / "config.json")
    return out


def load_hf(path: Path, dtype=torch.float32):
    """What transformers makes of the directory, in the given compute dtype (eager attention; MoE
    experts one by one, as written in modeling_qwen3_moe.py, not its grouped GEMM kernel)."""
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="eager",
                                                 experts_implementation="eager")
    return model.eval()


# --------------------------------------------------------------------- inputs


def single_row(rng: np.random.Generator, vocab: int, length: int) -> dict:
    ids = rng.integers(0, vocab, size=(1, length))
    return {"input_ids": ids, "attention_mask": np.ones_like(ids), "position_ids": np.arange(length)[None]}


def left_padded_batch(rng: np.random.Generator, vocab: int, lengths: list[int]) -> dict:
    """Rows of the given lengths padded on the left to the longest, each twice: with
    positions cumsum(mask) - 1 clamped at 0 (generate()'s) and with default 0..T-1."""
    T = max(lengths)
    mask = np.array([[0] * (T - n) + [1] * n for n in lengths])
    ids = np.where(mask == 1, rng.integers(0, vocab, size=mask.shape), 0)
    from_mask = np.clip(np.cumsum(mask, axis=1) - 1, 0, None)
    default = np.broadcast_to(np.arange(T), mask.shape)
    return {"input_ids": np.concatenate([ids, ids]), "attention_mask": np.concatenate([mask, mask]),
            "position_ids": np.concatenate([from_mask, default])}


def input_sets(vocab: int, seed: int, long: bool = False) -> list[dict]:
    """A single row and a left-padded batch; `long` rows reach past two 64-token chunks."""
    rng = np.random.default_rng(seed)
    length = [1, 2, 7, 19][seed % 4] + (130 if long and seed % 2 else 0)
    top = 150 if long else 41
    lengths = [int(rng.integers(24, top))] + [int(n) for n in rng.integers(1, 24, size=2)]
    return [single_row(rng, vocab, length), left_padded_batch(rng, vocab, lengths)]


# ------------------------------------------------------------------ forwards


def hf_logits(model, batch: dict) -> np.ndarray:
    with torch.no_grad():
        out = model(**{k: torch.from_numpy(np.ascontiguousarray(v)).long() for k, v in batch.items()})
    return out.logits.float().numpy()


def rlid_logits(rlid, checkpoint: Path, batch: dict, path: Path, dtype: str = "float32",
                form: str = "auto") -> np.ndarray:
    path.write_text(json.dumps({k: np.asarray(v).tolist() for k, v in batch.items()}))
    out = rlid("policy", "logits", "--checkpoint", checkpoint, "--input", path, "--dtype", dtype, "--json",
               "--recurrent-form", form)
    return np.asarray(json.loads(out)["logits"], dtype=np.float32)


def start_rlid(rlid, checkpoint: Path, batches: list[dict], tmp: Path, dtype: str = "float32",
               form: str = "auto") -> list:
    """One `rlid policy logits` per batch, started in the background (futures of [B, T, V])."""
    return [POOL.submit(rlid_logits, rlid, checkpoint, batch,
                        tmp / f"ids_{checkpoint.name}_{dtype}_{form}_{i}.json", dtype, form)
            for i, batch in enumerate(batches)]


def worst_valid(a: np.ndarray, b: np.ndarray, mask: np.ndarray) -> tuple[float, int]:
    """Largest |a - b| over the unmasked positions, and how many values were compared."""
    assert a.shape == b.shape, f"logits shapes differ: {a.shape} vs {b.shape}"
    valid = np.asarray(mask, dtype=bool)
    diff = np.abs(a - b)[valid]
    return float(diff.max()), int(diff.size)


def worst_over(outputs: list[np.ndarray], references: list[np.ndarray], batches: list[dict]) -> tuple[float, int]:
    pairs = [worst_valid(o, r, b["attention_mask"]) for o, r, b in zip(outputs, references, batches)]
    return max(w for w, _ in pairs), sum(n for _, n in pairs)


def compare(rlid, report, name, checkpoint, reference_model, batches, tmp, form: str = "auto"):
    """rlid (float32) vs the reference model on every batch, reported as one comparison."""
    running = start_rlid(rlid, checkpoint, batches, tmp, form=form)
    references = [hf_logits(reference_model, b) for b in batches]
    worst, count = worst_over([f.result() for f in running], references, batches)
    report(name, worst, TOLERANCE, count)


def compare_bf16(report, name, rlid_bf16, reference, reference_bf16, batches):
    """rlid's bfloat16 logits vs transformers' float32 ones, allowed BF16_ERROR_RATIO times the
    worst difference transformers' own bfloat16 forward has from them."""
    exact = [hf_logits(reference, b) for b in batches]
    transformers_error, _ = worst_over([hf_logits(reference_bf16, b) for b in batches], exact, batches)
    worst, count = worst_over(rlid_bf16, exact, batches)
    report(name, worst, BF16_ERROR_RATIO * transformers_error, count, transformers_bf16=f"{transformers_error:.3g}")


# ---------------------------------------------------------------------- tests

# Sizes of the configs below that are not drawn at random.
SMALL = dict(vocab_size=120, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_logits_match_transformers(rlid, report, tmp_path, case):
    checkpoint = make_checkpoint(case, tmp_path / "model")
    reference = load_hf(checkpoint)
    hybrid = case.family == "qwen3_5_text"
    batches = input_sets(reference.config.vocab_size, case.seed, long=hybrid)
    running_bf16 = start_rlid(rlid, checkpoint, batches, tmp_path, "bfloat16") if case.weights == "bfloat16" else []
    compare(rlid, report, f"transformers/{case.id}", checkpoint, reference, batches, tmp_path)
    if hybrid:  # the token-by-token form against the same (chunked) reference
        compare(rlid, report, f"transformers/{case.id}/recurrent", checkpoint, reference, batches, tmp_path,
                form="recurrent")
    if running_bf16:
        compare_bf16(report, f"transformers/{case.id}/rlid-bf16", [f.result() for f in running_bf16], reference,
                     load_hf(checkpoint, torch.bfloat16), batches)


def drop(*keys: str):
    """An edit of config.json that leaves out keys (dotted: inside an object)."""
    def edit(cfg: dict) -> None:
        for key in keys:
            *path, last = key.split(".")
            node = cfg
            for part in path:
                node = node[part]
            node.pop(last)
    return edit


YARN = {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0, "original_max_position_embeddings": 64}
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "rope_theta": 500000.0, "original_max_position_embeddings": 64}

# Hand-written config.json files transformers reads with its config class's defaults
# (or, for original_max_position_embeddings, with a top-level value overriding the
# rope parameters'): (name, family, config overrides, edit of config.json).
CONFIG_EDITS = [
    ("qwen3-head_dim-absent", "qwen3", dict(head_dim=128), drop("head_dim")),  # Qwen3Config: 128
    ("qwen2-num_key_value_heads-absent", "qwen2",  # Qwen2Config: 32
     dict(hidden_size=128, num_attention_heads=64, num_key_value_heads=32), drop("num_key_value_heads")),
    ("qwen3-yarn-max_position_embeddings-absent", "qwen3", dict(head_dim=16, rope_parameters=dict(YARN)),
     drop("max_position_embeddings", "rope_parameters.original_max_position_embeddings")),
    ("llama-llama3-original_max-absent", "llama", dict(max_position_embeddings=48, rope_parameters=dict(LLAMA3)),
     drop("rope_parameters.original_max_position_embeddings")),
    ("llama-yarn-original_max-top-level", "llama", dict(rope_parameters=dict(YARN)),
     lambda cfg: cfg.update(original_max_position_embeddings=16)),
]


@pytest.mark.parametrize("name,family,overrides,edit", CONFIG_EDITS, ids=[c[0] for c in CONFIG_EDITS])
def test_hand_written_config_json_reads_as_in_transformers(rlid, report, tmp_path, name, family, overrides, edit):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(CONFIG_CLASSES[family](**{**SMALL, **overrides}),
                                             attn_implementation="eager")
    randomize_(model, 0)
    checkpoint = save_model(model, tmp_path / "model")
    cfg = json.loads((checkpoint / "config.json").read_text())
    edit(cfg)
    (checkpoint / "config.json").write_text(json.dumps(cfg, indent=2))
    batch = left_padded_batch(np.random.default_rng(0), SMALL["vocab_size"], [40, 9])
    compare(rlid, report, f"config/{name}", checkpoint, load_hf(checkpoint), [batch], tmp_path)


# Configs transformers runs that rlid cannot run exactly: (family, overrides, field the error names).
REFUSED = [
    ("llama", dict(rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}), "rope_type"),
    ("llama", dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}),
     "partial_rotary_factor"),
    ("qwen2", dict(use_sliding_window=True, sliding_window=4, max_window_layers=1), "use_sliding_window"),
    ("qwen3", dict(use_sliding_window=True, sliding_window=4, max_window_layers=0, head_dim=8),
     "use_sliding_window"),
    ("qwen3", dict(hidden_act="gelu", head_dim=8), "hidden_act"),
    ("llama", dict(mlp_bias=True), "mlp_bias"),
    ("llama", dict(hidden_act="relu"), "hidden_act"),
    ("gemma3_text", dict(attn_logit_softcapping=50.0, head_dim=8), "attn_logit_softcapping"),
    ("gemma3_text", dict(hidden_activation="gelu", head_dim=8), "hidden_activation"),
    ("qwen3_5_text", dict(layer_types=["linear_attention"] * 2, head_dim=8, linear_num_key_heads=2,
                          linear_num_value_heads=2, linear_key_head_dim=8, linear_value_head_dim=8),
     "layer_types"),
]


@pytest.mark.parametrize("family,overrides,field", REFUSED, ids=lambda x: x if isinstance(x, str) else None)
def test_unsupported_configs_are_refused_naming_the_field(rlid, tmp_path, family, overrides, field):
    model = AutoModelForCausalLM.from_config(CONFIG_CLASSES[family](**{**SMALL, **overrides}),
                                             attn_implementation="eager")
    try:  # transformers runs it: rlid is the one refusing
        hf_logits(model, single_row(np.random.default_rng(0), SMALL["vocab_size"], 5))
    except ValueError as e:  # ... except an all-linear Qwen3.5, whose cache transformers cannot size either
        assert field == "layer_types" and "only contain LinearAttention layers" in str(e), e
    save_model(model, tmp_path / "model")
    (tmp_path / "ids.json").write_text(json.dumps({"input_ids": [[1, 2, 3]]}))
    with pytest.raises(RlidError) as err:
        rlid("policy", "logits", "--checkpoint", tmp_path / "model", "--input", tmp_path / "ids.json")
    assert err.value.code == CONFIG_ERROR_EXIT, err.value.stderr
    assert field in err.value.stderr, err.value.stderr


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", [Case("qwen3", "yarn", 5), Case("llama", "llama3", 6), Case("mistral", "default", 6),
                                  Case("gemma3_text", "linear", 6), Case("qwen3_5_text", "default", 7),
                                  Case("qwen3_moe", "default", 7)],
                         ids=lambda c: c.id)
def test_export_loads_in_transformers_with_rlids_logits(rlid, report, tmp_path, case, dtype):
    """`rlid export --merge`: transformers loads the directory and computes rlid's logits of the
    source (for bfloat16, of the source rounded to bfloat16, run by rlid in float32)."""
    source = make_checkpoint(case, tmp_path / "source")
    exported = tmp_path / "exported"
    rlid("export", "--checkpoint", source, "--out", exported, "--merge", "--dtype", dtype)
    batches = input_sets(load_hf(source).config.vocab_size, case.seed, long=case.family == "qwen3_5_text")
    if dtype == "bfloat16":  # the reference is rlid on the source rounded to bfloat16
        source = save_model(load_hf(source), tmp_path / "source_bf16", "bfloat16")
    compare(rlid, report, f"export/{case.id}/{dtype}", source, load_hf(exported), batches, tmp_path)


@pytest.mark.parametrize("family", ["qwen3", "qwen3_5_text"])
@pytest.mark.parametrize("head", ["differs", "equal"])
def test_tied_config_with_a_stored_head_reads_as_in_transformers(rlid, report, tmp_path, family, head):
    """tie_word_embeddings = true while the files store an lm_head.weight: transformers keeps a
    head that differs from the embedding as its own tensor (and ties an equal one); rlid must
    give its logits in both cases."""
    from safetensors.torch import load_file, save_file
    torch.manual_seed(11)
    config = random_config(family, "default", 11)
    config.tie_word_embeddings = True
    if hasattr(config, "text_config"):
        config.text_config.tie_word_embeddings = True
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=torch.float32)
    randomize_(model, 11)
    out = save_model(model, tmp_path / "model")
    weights = load_file(out / "model.safetensors")
    embed = next(k for k in weights if k.endswith("embed_tokens.weight"))
    # A differing head of the embedding's scale (the logits' rounding stays the other cases').
    weights["lm_head.weight"] = (weights[embed].clone() if head == "equal"
                                 else torch.randn(weights[embed].shape, generator=torch.Generator().manual_seed(3))
                                 * weights[embed].std())
    save_file(weights, out / "model.safetensors", metadata={"format": "pt"})
    reference = load_hf(out)
    tied = reference.lm_head.weight.data_ptr() == reference.get_input_embeddings().weight.data_ptr()
    assert tied == (head == "equal"), "transformers' tying rule is not the one this test expects"
    batches = input_sets(reference.config.get_text_config().vocab_size, 11)
    compare(rlid, report, f"transformers/tied-config-{head}-head/{family}", out, reference, batches, tmp_path)


def test_upcycled_moe_without_noise_computes_the_dense_model(rlid, report, tmp_path):
    """scripts/upcycle_moe.py with --noise 0: every expert is the dense MLP and the top-k weights
    sum to 1, so rlid and transformers must both give the dense model's logits on the MoE copy."""
    import subprocess
    import sys
    case = Case("qwen3", "default", 8)
    dense = make_checkpoint(case, tmp_path / "dense")
    moe = tmp_path / "moe"
    subprocess.run([sys.executable, str(Path(__file__).resolve().parents[2] / "scripts" / "upcycle_moe.py"),
                    str(dense), str(moe), "--experts", "4", "--top-k", "2", "--noise", "0"], check=True)
    assert json.loads((moe / "config.json").read_text())["model_type"] == "qwen3_moe"
    reference = load_hf(dense)
    batches = input_sets(reference.config.vocab_size, case.seed)
    compare(rlid, report, "upcycled-moe/rlid-vs-dense", moe, reference, batches, tmp_path)
    compare(rlid, report, "upcycled-moe/transformers-moe-vs-rlid-dense", dense, load_hf(moe), batches, tmp_path)
