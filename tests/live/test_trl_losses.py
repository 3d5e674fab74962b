"""TRL's own loss code, live, vs `rlid loss --json` on fresh random batches (float64).

The reference is the pinned TRL's `GRPOTrainer` itself, not a re-implementation:
- `GRPOTrainer._compute_loss` runs unbound on a stand-in trainer object whose
  `_get_per_token_logps_and_entropies` returns the batch's log-probs as a leaf
  tensor, so TRL computes the loss and autograd gives d loss / d log_prob;
- the train-vs-rollout correction (TRL's "vLLM importance sampling": token- and
  sequence-level truncation = TIS, masks = IcePop) is an inline block of
  `GRPOTrainer._generate_and_score_completions`; the test cuts that block out of
  the installed source and executes it, so a change in TRL changes the reference.

Mapping (TRL -> rlid), checked to <= 1e-6 on the loss and every gradient entry:
  loss_type grpo    -> aggregation seq_mean_token_mean
  loss_type dapo    -> aggregation token_mean (TRL divides by num_items_in_batch)
  loss_type dr_grpo -> seq_mean_token_sum_norm, aggregation_norm = max_completion_length
  importance_sampling_level sequence (GSPO) -> policy_loss gspo
  loss_type cispo   -> policy_loss cispo, clip_high = epsilon_high - 1, clip_low 10 (no lower bound)
  epsilon / epsilon_high -> clip_low / clip_high;  beta -> kl coef (k3, placement loss)
  vllm_importance_sampling_mode token_truncate / sequence_truncate -> engine tis (floor = clip_min or 0, cap = clip_max)
  token_mask / sequence_mask -> engine icepop (low = clip_min or 0, high = clip_max or inf)
Every row has at least one response token (a completion is never empty), where
TRL's mean over all rows and rlid's mean over non-empty rows agree.
"""
from __future__ import annotations

import inspect
import json
import math
import textwrap
import zlib
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from conftest import run_rlid_json

trl_grpo = pytest.importorskip("trl.trainer.grpo_trainer")
GRPOTrainer = trl_grpo.GRPOTrainer
TOL = 1e-6


# ---- TRL's rollout-correction block, cut out of the installed source ----------------------

def _trl_is_block():
    """The statements of `_generate_and_score_completions` that turn training and
    sampling log-probs into `vllm_importance_sampling_ratio`, as a code object."""
    src = textwrap.dedent(inspect.getsource(GRPOTrainer._generate_and_score_completions))
    lines = src.splitlines()
    start = next(i for i, l in enumerate(lines)
                 if l.strip() == "if self.use_vllm and self.vllm_importance_sampling_correction:"
                 and "mask = completion_mask" in lines[i + 1])
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
    block = textwrap.dedent("\n".join(lines[start:end]))
    assert "vllm_importance_sampling_ratio" in block and "sequence_mask" in block, (
        "TRL's importance-sampling block moved: update _trl_is_block")
    return compile(block, "<trl GRPOTrainer IS block>", "exec")


IS_BLOCK = _trl_is_block()


def trl_is_ratio(mode, clip_min, clip_max, old, rollout, mask):
    """TRL's importance-sampling ratio for one batch (its own code, executed)."""
    stand_in = SimpleNamespace(use_vllm=True, vllm_importance_sampling_correction=True,
                               vllm_importance_sampling_mode=mode,
                               vllm_importance_sampling_clip_min=clip_min,
                               vllm_importance_sampling_clip_max=clip_max)
    scope = {"self": stand_in, "completion_mask": mask, "tool_mask": None,
             "old_per_token_logps": old, "sampling_per_token_logps": rollout,
             "torch": torch, "math": math}
    exec(IS_BLOCK, scope)
    return scope["vllm_importance_sampling_ratio"]


# ---- TRL's loss, through a stand-in trainer ---------------------------------------------------

class _Accelerator:
    num_processes = 1
    sync_gradients = True

    def gather(self, x):
        return x

    gather_for_metrics = gather

    def reduce(self, x, reduction="sum"):
        return x


def trl_loss(case):
    """(loss, d loss / d log_prob) from GRPOTrainer._compute_loss in eval mode
    (no gradient-accumulation scaling)."""
    logp = torch.tensor(case["log_prob"], dtype=torch.float64, requires_grad=True)
    mask = torch.tensor(case["mask"], dtype=torch.float64)
    B, T = logp.shape
    stand_in = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (logp, torch.zeros_like(logp), None),
        aux_loss_enabled=False, top_entropy_quantile=1.0, off_policy_mask_threshold=None,
        importance_sampling_level=case["level"], beta=case["beta"], loss_type=case["loss_type"],
        epsilon_low=case["epsilon"], epsilon_high=case["epsilon_high"],
        args=SimpleNamespace(use_bias_correction_kl=False, delta=None),
        use_vllm=case["is_mode"] is not None, vllm_importance_sampling_correction=case["is_mode"] is not None,
        model=SimpleNamespace(training=False), current_gradient_accumulation_steps=1,
        max_completion_length=T, accelerator=_Accelerator(), _entropy_bonus_enabled=False,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)})
    old = torch.tensor(case["old_log_prob"], dtype=torch.float64)
    inputs = {
        "prompt_ids": torch.zeros(B, 1, dtype=torch.long), "prompt_mask": torch.ones(B, 1, dtype=torch.long),
        "completion_ids": torch.zeros(B, T, dtype=torch.long), "completion_mask": mask,
        "advantages": torch.tensor(case["advantages"], dtype=torch.float64),
        "old_per_token_logps": old, "num_items_in_batch": mask.sum(),
    }
    if case["beta"]:
        inputs["ref_per_token_logps"] = torch.tensor(case["ref_log_prob"], dtype=torch.float64)
    if case["is_mode"] is not None:
        rollout = torch.tensor(case["rollout_log_prob"], dtype=torch.float64)
        inputs["importance_sampling_ratio"] = trl_is_ratio(
            case["is_mode"], case["clip_min"], case["clip_max"], old, rollout, mask)
    loss = GRPOTrainer._compute_loss(stand_in, None, inputs)
    loss.backward()
    return loss.item(), logp.grad.tolist()


# ---- the same case as `rlid loss --json` --------------------------------------------------

def rlid_case(case):
    """The rlid loss JSON for a TRL setting (mapping in the module docstring)."""
    loss = {"clip_low": case["epsilon"], "clip_high": case["epsilon_high"], "dual_clip": 0.0,
            "log_ratio_clamp": 20.0, "policy_loss": "ppo_clip"}
    aggregation = {"grpo": "seq_mean_token_mean", "dapo": "token_mean", "dr_grpo": "seq_mean_token_sum_norm",
                   "cispo": "token_mean"}[case["loss_type"]]
    loss["aggregation"] = aggregation
    if aggregation == "seq_mean_token_sum_norm":
        loss["aggregation_norm"] = float(len(case["log_prob"][0]))
    if case["level"] == "sequence":
        loss["policy_loss"] = "gspo"
    if case["loss_type"] == "cispo":
        loss.update(policy_loss="cispo", clip_low=10.0, clip_high=case["epsilon_high"] - 1.0)
    mode = case["is_mode"]
    if mode is not None:
        level = "sequence" if mode.startswith("sequence") else "token"
        if mode.endswith("truncate"):
            loss["engine"] = {"kind": "tis", "level": level, "floor": case["clip_min"] or 0.0,
                              "cap": case["clip_max"]}
        else:
            loss["engine"] = {"kind": "icepop", "level": level, "low": case["clip_min"] or 0.0,
                              "high": "inf" if case["clip_max"] is None else case["clip_max"]}
    out = {"loss": loss, "inputs": {"log_prob": case["log_prob"], "old_log_prob": case["old_log_prob"],
                                    "advantages": case["advantages"], "response_mask": case["mask"]}}
    if mode is not None:
        out["inputs"]["rollout_log_prob"] = case["rollout_log_prob"]
    if case["beta"]:
        out["kl"] = {"estimator": "k3", "coef": case["beta"], "placement": "loss"}
        out["inputs"]["ref_log_prob"] = case["ref_log_prob"]
    return out


def random_case(rng: torch.Generator, **setting):
    """A batch of B responses of up to T tokens, every row non-empty; log-probs
    near each other so ratios straddle the clip and correction bounds."""
    B = int(torch.randint(2, 9, (1,), generator=rng))
    T = int(torch.randint(2, 13, (1,), generator=rng))
    logp = -torch.empty(B, T, dtype=torch.float64).exponential_(1.0, generator=rng)
    old = logp + 0.3 * torch.randn(B, T, dtype=torch.float64, generator=rng)
    rollout = old + 0.25 * torch.randn(B, T, dtype=torch.float64, generator=rng)
    ref = logp + 0.3 * torch.randn(B, T, dtype=torch.float64, generator=rng)
    lengths = torch.randint(1, T + 1, (B,), generator=rng)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).to(torch.int64)
    adv = torch.randn(B, dtype=torch.float64, generator=rng)
    case = dict(log_prob=logp.tolist(), old_log_prob=old.tolist(), rollout_log_prob=rollout.tolist(),
                ref_log_prob=ref.tolist(), mask=mask.tolist(), advantages=adv.tolist(),
                loss_type="grpo", level="token", beta=0.0, epsilon=0.2, epsilon_high=0.2, is_mode=None, clip_min=None,
                clip_max=None)
    case.update(setting)
    return case


def compare(case, tmp_path, rlid):
    want_loss, want_grad = trl_loss(case)
    path = tmp_path / "case.json"
    path.write_text(json.dumps(rlid_case(case)))
    got = run_rlid_json("loss", "--json", path)
    diffs = [abs(got["loss"] - want_loss)]
    for row_got, row_want, row_mask in zip(got["grad_log_prob"], want_grad, case["mask"]):
        diffs += [abs(g - w) for g, w, m in zip(row_got, row_want, row_mask) if m]
    return max(diffs), len(diffs)


SETTINGS = {
    "grpo": dict(loss_type="grpo"),
    "grpo.kl": dict(loss_type="grpo", beta=0.04),
    "dapo": dict(loss_type="dapo", epsilon_high=0.28),
    "dr_grpo": dict(loss_type="dr_grpo"),
    "gspo": dict(loss_type="grpo", level="sequence", epsilon=3e-4, epsilon_high=4e-4),
    "gspo.wide": dict(loss_type="grpo", level="sequence", epsilon=0.05, epsilon_high=0.08),
    "cispo": dict(loss_type="cispo", epsilon_high=1.3),
    "tis.token_truncate": dict(loss_type="dapo", is_mode="token_truncate", clip_max=1.2),
    "tis.token_truncate.floor": dict(loss_type="grpo", is_mode="token_truncate", clip_min=0.8, clip_max=1.2),
    "tis.sequence_truncate": dict(loss_type="dapo", is_mode="sequence_truncate", clip_max=1.5),
    "icepop.token_mask": dict(loss_type="dapo", is_mode="token_mask", clip_min=0.8, clip_max=1.25),
    # The shape of TRL's default (sequence_mask, clip_max 3, no lower bound; rlid: low = 0).
    "icepop.sequence_mask.default": dict(loss_type="grpo", is_mode="sequence_mask", clip_max=1.5),
    "icepop.token_mask.upper_only": dict(loss_type="dr_grpo", is_mode="token_mask", clip_min=0.8),
}


@pytest.mark.parametrize("name", list(SETTINGS))
def test_loss_and_gradient_match_trl(name, tmp_path, rlid, report):
    rng = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    worst, count = 0.0, 0
    for _ in range(4):
        w, n = compare(random_case(rng, **SETTINGS[name]), tmp_path, rlid)
        worst, count = max(worst, w), count + n
    report(f"trl.{name}", worst, TOL, count)


def test_the_correction_bounds_bind_on_these_batches():
    """The masks and truncations above are not vacuous: on these batches some
    ratios fall outside each bound (else a wrong bound could not fail the test)."""
    rng = torch.Generator().manual_seed(1)
    outside = defaultdict(int)
    for name, setting in SETTINGS.items():
        if setting.get("is_mode") is None:
            continue
        for _ in range(4):
            c = random_case(rng, **setting)
            mask = torch.tensor(c["mask"], dtype=torch.float64)
            ratio = trl_is_ratio(c["is_mode"], c["clip_min"], c["clip_max"],
                                 torch.tensor(c["old_log_prob"], dtype=torch.float64),
                                 torch.tensor(c["rollout_log_prob"], dtype=torch.float64), mask)
            raw = trl_is_ratio(c["is_mode"].split("_")[0] + "_truncate", None, math.inf,
                               torch.tensor(c["old_log_prob"], dtype=torch.float64),
                               torch.tensor(c["rollout_log_prob"], dtype=torch.float64), mask)
            outside[name] += int(((ratio != raw) & (mask.bool() if ratio.shape[1] > 1 else True)).sum())
    assert all(n > 0 for n in outside.values()), dict(outside)


def test_negative_and_nan_bounds_are_still_refused(tmp_path, rlid):
    from conftest import RlidError
    case = rlid_case(random_case(torch.Generator().manual_seed(0), is_mode="token_mask", clip_max=2.0))
    for low in (-0.5, "nan"):
        case["loss"]["engine"]["low"] = low
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(case))
        with pytest.raises(RlidError) as err:
            run_rlid_json("loss", "--json", path)
        assert err.value.code == 2 and "loss.engine.low" in err.value.stderr
