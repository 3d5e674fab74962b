"""LoRA adapters against PEFT, both ways, on tiny random Hugging Face bases.

rlid -> PEFT: a short `rlid train` with [policy.lora] on the base (a large learning
rate, so lora_B is far from its zero start), `rlid export` of the checkpoint as a
PEFT adapter directory, `PeftModel.from_pretrained(base, DIR)`: its logits must be
the ones `rlid policy logits` gives on the rlid checkpoint. `rlid export --merge`,
loaded by transformers alone, must give them too.
Qwen3.5's bases put adapters on its linear-attention projections too; Qwen3-MoE's on
every expert's projections, which PEFT (transformers 5 fuses the experts) converts
from the per-expert layout rlid writes into its fused one when it loads them.
PEFT -> rlid: `get_peft_model` with several ranks, alphas, target-module sets and
seeds, lora_A and lora_B drawn, `save_pretrained`; `rlid policy logits` on that
directory must give PEFT's logits. Configs PEFT accepts but rlid cannot compute
exactly (rsLoRA, DoRA, aLoRA, PiSSA, bias training, ...) must be refused with the
field named.
Logits are compared at the valid positions of a batch with left padding.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import peft
import pytest
import torch
import transformers
from conftest import SOURCE_DIR, RlidError, run_rlid_json

TOL = 1e-4  # float32 logits, absolute
ALL_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LINEAR_ATTENTION = ["in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"]  # Qwen3.5
VOCAB = 400  # `rlid tokenizer train --vocab-size`; the bases' vocab_size
PAD = 397  # the trained tokenizer's <|endoftext|>

torch.set_num_threads(1)
transformers.utils.logging.disable_progress_bar()
pytestmark = pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning")


def _base_config(arch: str):
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                  initializer_range=0.1)  # logits of order 1, not 0.02's near-uniform ones
    if arch == "qwen3":  # q/k norms, tied embeddings
        return transformers.Qwen3Config(head_dim=16, tie_word_embeddings=True, **common)
    if arch == "llama":  # llama3 rope scaling, untied head
        return transformers.LlamaConfig(
            head_dim=16, tie_word_embeddings=False,
            rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                             "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 64}, **common)
    if arch == "qwen2":  # biased q/k/v projections under the adapters
        return transformers.Qwen2Config(tie_word_embeddings=False, **common)
    if arch == "qwen3_5":  # a Gated DeltaNet layer, then gated full attention
        return transformers.Qwen3_5TextConfig(
            head_dim=16, tie_word_embeddings=False, layer_types=["linear_attention", "full_attention"],
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=8,
            **common)
    if arch == "qwen3_moe":  # every layer sparse: 4 experts, top 2, renormalised
        return transformers.Qwen3MoeConfig(
            head_dim=16, tie_word_embeddings=False, num_experts=4, num_experts_per_tok=2,
            moe_intermediate_size=32, norm_topk_prob=True, **common)
    raise ValueError(arch)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("peft")


@pytest.fixture(scope="module")
def tokenizer_json(workdir, rlid) -> Path:
    path = workdir / "tokenizer.json"
    rlid("tokenizer", "train", "--env", "maze", "--vocab-size", VOCAB, "--out", path)
    return path


@pytest.fixture(scope="module")
def bases(workdir, tokenizer_json) -> dict:
    """arch -> a random float32 model directory (config.json, model.safetensors, tokenizer.json)."""
    out = {}
    for seed, arch in enumerate(["qwen3", "llama", "qwen2", "qwen3_5", "qwen3_moe"]):
        torch.manual_seed(100 + seed)
        model = transformers.AutoModelForCausalLM.from_config(_base_config(arch), dtype=torch.float32)
        path = workdir / f"base_{arch}"
        model.save_pretrained(path)
        shutil.copy(tokenizer_json, path / "tokenizer.json")
        out[arch] = path
    return out


def _load_base(path: Path):
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def _batch(path: Path, seed: int):
    """Four rows of 13 random ids (special tokens included), three of them left-padded,
    with the positions a left-padded generate() uses; written as rlid's --input file."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (4, 13), generator=g)
    mask = torch.ones_like(ids)
    for row, pad in enumerate([0, 1, 5, 11]):
        mask[row, :pad] = 0
    ids[mask == 0] = PAD
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    path.write_text(json.dumps({"input_ids": ids.tolist(), "attention_mask": mask.tolist(),
                                "position_ids": pos.tolist()}))
    return ids, mask, pos


def _hf_logits(model, ids, mask, pos) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float()


def _rlid_logits(checkpoint, input_path) -> torch.Tensor:
    return torch.tensor(run_rlid_json("policy", "logits", "--checkpoint", checkpoint,
                                      "--input", input_path, "--json")["logits"])


def _worst(a, b, mask) -> float:
    return (a.double() - b.double())[mask.bool()].abs().max().item()


# ---- rlid -> PEFT ----

TRAINED = {
    # arch: (rank, alpha, dropout, target_modules)
    "qwen3": (4, 12.0, 0.0, ALL_TARGETS),
    "llama": (8, 8.0, 0.1, ["v_proj", "q_proj", "down_proj"]),
    "qwen3_5": (4, 8.0, 0.0, ALL_TARGETS + LINEAR_ATTENTION),
    "qwen3_moe": (4, 8.0, 0.0, ALL_TARGETS),
}


def _expected_lora_layers(arch: str, base, targets) -> int:
    """How many LoRA layers PEFT makes on `base`: one per targeted projection, and in a
    Qwen3-MoE model one per fused expert weight (gate_up_proj, down_proj) of each layer."""
    count = sum(name.rsplit(".", 1)[-1] in targets for name, _ in base.named_modules())
    if arch == "qwen3_moe":
        count += 2 * base.config.num_hidden_layers
    return count


@pytest.mark.parametrize("arch", sorted(TRAINED))
def test_rlid_trained_adapter_loads_in_peft(arch, bases, workdir, rlid, report):
    rank, alpha, dropout, targets = TRAINED[arch]
    run, adapter, merged = (workdir / f"{kind}_{arch}" for kind in ("run", "adapter", "merged"))
    # One PPO iteration at lr 0.05: Adam moves every lora_B entry by ~lr per step.
    rlid("train", SOURCE_DIR / "configs" / "maze_lora.toml", "--out", run,
         "--set", f"policy.init={bases[arch]}", "--set", "policy.gradient_checkpointing=false",
         "--set", f"policy.lora.rank={rank}", "--set", f"policy.lora.alpha={alpha}",
         "--set", f"policy.lora.dropout={dropout}",
         "--set", f"policy.lora.target_modules={json.dumps(targets)}",
         "--set", "trainer.iterations=1", "--set", "trainer.episodes_per_iteration=4",
         "--set", "trainer.num_envs=4", "--set", "trainer.eval_episodes=2", "--set", "trainer.lr=0.05")
    checkpoint = run / "checkpoints" / "latest"
    rlid("export", "--checkpoint", checkpoint, "--out", adapter)
    rlid("export", "--checkpoint", checkpoint, "--out", merged, "--merge")

    config = json.loads((adapter / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["lora_dropout"]) == (rank, alpha, dropout)
    assert sorted(config["target_modules"]) == sorted(targets)

    ids, mask, pos = _batch(workdir / f"batch_{arch}.json", seed=7)
    base = _load_base(bases[arch])
    plain = _hf_logits(base, ids, mask, pos)
    model = peft.PeftModel.from_pretrained(base, adapter).eval()
    want = _expected_lora_layers(arch, _load_base(bases[arch]), targets)
    adapted = modules = 0
    for name, module in model.named_modules():
        if isinstance(module, peft.tuners.lora.LoraLayer):
            modules += 1
            adapted += int(module.lora_B["default"].weight.abs().max() > 0)
    assert modules == want and adapted == modules, (
        f"PEFT found {modules} adapted projections ({adapted} with lora_B != 0), expected {want}")
    expected = _hf_logits(model, ids, mask, pos)
    # The adapters must matter by far more than the tolerance, or this test could not fail.
    effect = _worst(expected, plain, mask)
    assert effect > 1000 * TOL, f"the trained adapters change the logits by only {effect}"

    got = _rlid_logits(checkpoint, workdir / f"batch_{arch}.json")
    report(f"peft.rlid_adapter_in_peft.{arch}", _worst(got, expected, mask), TOL, int(mask.sum()) * VOCAB,
           adapter_effect=f"{effect:.3g}", rank=rank, alpha=alpha, targets=len(targets))

    merged_model = _load_base(merged)
    report(f"peft.rlid_merged_export_in_transformers.{arch}",
           _worst(_hf_logits(merged_model, ids, mask, pos), expected, mask), TOL, int(mask.sum()) * VOCAB)


# ---- PEFT -> rlid ----

PEFT_CASES = [
    # (arch, seed, rank, alpha, dropout, target_modules)
    ("qwen3", 0, 8, 16.0, 0.0, ALL_TARGETS),
    ("qwen3", 1, 2, 5.0, 0.05, ["v_proj", "q_proj"]),
    ("llama", 2, 4, 32.0, 0.0, ["o_proj", "gate_proj", "down_proj", "k_proj"]),
    ("llama", 3, 16, 8.0, 0.1, "all-linear"),
    ("qwen2", 4, 3, 7.0, 0.0, ["q_proj", "k_proj", "v_proj", "up_proj"]),
    ("qwen3_5", 5, 4, 8.0, 0.0, "all-linear"),
    ("qwen3_5", 6, 8, 16.0, 0.05, ["in_proj_qkv", "out_proj", "in_proj_b", "q_proj", "down_proj"]),
]


def _peft_model(base_dir: Path, seed: int, **lora):
    """A PEFT LoRA model on the base with lora_A and lora_B drawn from `seed`."""
    torch.manual_seed(seed)
    model = peft.get_peft_model(_load_base(base_dir), peft.LoraConfig(task_type="CAUSAL_LM", **lora))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_A." in name or ".lora_B." in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return model.eval()


@pytest.mark.parametrize("arch,seed,rank,alpha,dropout,targets", PEFT_CASES,
                         ids=[f"{c[0]}-r{c[2]}-{len(c[5]) if isinstance(c[5], list) else c[5]}"
                              for c in PEFT_CASES])
def test_peft_saved_adapter_loads_in_rlid(arch, seed, rank, alpha, dropout, targets, bases, workdir, report):
    adapter = workdir / f"peft_{arch}_{seed}"
    model = _peft_model(bases[arch], seed, r=rank, lora_alpha=alpha, lora_dropout=dropout,
                        target_modules=targets)
    model.save_pretrained(adapter)
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(bases[arch])

    ids, mask, pos = _batch(workdir / f"batch_peft_{seed}.json", seed=seed)
    expected = _hf_logits(model, ids, mask, pos)
    with model.disable_adapter():
        effect = _worst(expected, _hf_logits(model, ids, mask, pos), mask)
    assert effect > 1000 * TOL, f"the drawn adapters change the logits by only {effect}"

    got = _rlid_logits(adapter, workdir / f"batch_peft_{seed}.json")
    report(f"peft.peft_adapter_in_rlid.{arch}.seed{seed}", _worst(got, expected, mask), TOL,
           int(mask.sum()) * VOCAB, adapter_effect=f"{effect:.3g}", rank=rank, alpha=alpha,
           targets=len(config["target_modules"]))


REFUSED = [
    # (LoraConfig fields PEFT accepts, what rlid's error must name). Each makes
    # PeftModel.from_pretrained compute something else than x W^T + (alpha / r) B A x
    # on the unchanged base (PiSSA: it rewrites the base weights when it loads).
    ({"use_rslora": True}, "use_rslora"),
    ({"use_dora": True}, "use_dora"),
    ({"bias": "all"}, "bias"),
    ({"lora_bias": True}, "lora_bias"),
    ({"alora_invocation_tokens": [5, 6]}, "alora_invocation_tokens"),
    ({"init_lora_weights": "pissa"}, "init_lora_weights"),
    ({"exclude_modules": ["model.layers.0.self_attn.q_proj"]}, "exclude_modules"),
    ({"layers_to_transform": [1]}, "layers_to_transform"),
    ({"target_modules": ["model.layers.1.self_attn.q_proj", "v_proj"]}, "q_proj in some layers only"),
    ({"target_modules": r".*\.(q_proj|v_proj)"}, "target_modules"),
    ({"rank_pattern": {"q_proj": 2}}, "rank_pattern"),
]
REFUSED_IDS = [next(iter(extra)) for extra, _ in REFUSED]
REFUSED_IDS[-3:-1] = ["one_layer_target", "regex_target"]


@pytest.mark.parametrize("extra,field", REFUSED, ids=REFUSED_IDS)
def test_peft_configs_rlid_cannot_compute_are_refused(extra, field, bases, workdir, rlid, request):
    adapter = workdir / f"refused_{request.node.callspec.id}"
    lora = {"r": 4, "lora_alpha": 8.0, "target_modules": ["q_proj", "v_proj"], **extra}
    _peft_model(bases["qwen2"], 0, **lora).save_pretrained(adapter)
    ids_path = workdir / "batch_refused.json"
    _batch(ids_path, seed=0)
    with pytest.raises(RlidError) as e:
        rlid("policy", "logits", "--checkpoint", adapter, "--input", ids_path)
    assert e.value.code != 0
    assert field in e.value.stderr, e.value.stderr
