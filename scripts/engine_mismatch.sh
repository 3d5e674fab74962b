#!/usr/bin/env bash
# The rollout engine's mismatch with rlid's trainer, measured on one checkpoint:
# the bandit's warm start (configs/bandit_grpo.toml's SFT), with LoRA adapters,
# GRPO for a few iterations with each engine: rlid's (float32, bfloat16) and
# vLLM's (float32, bfloat16; needs .venv-vllm, scripts/setup.sh --vllm). Prints
# a Markdown table of the engine/* metrics (means over the iterations), the
# table docs/engines.md shows.
#
#   scripts/engine_mismatch.sh [WORK_DIR] [ITERATIONS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rlid=${RLID_BIN:-$root/build/rlid}
work=${1:-$root/runs/engine_mismatch}
iterations=${2:-4}
cfg=$root/configs/bandit_grpo.toml
mkdir -p "$work"
if [[ ! -d $work/sft/checkpoints/sft ]]; then
  "$rlid" --log-level error sft "$cfg" --out "$work/sft" >/dev/null
fi
echo "| engine | dtype | mean \|Δ log p\| | max \|Δ log p\| | KL(engine‖trainer) | ratio p05 | ratio p95 | outside IcePop band | sync s |"
echo "|---|---|---|---|---|---|---|---|---|"
for engine in rlid vllm; do
  for dtype in float32 bfloat16; do
    out=$work/${engine}_${dtype}
    rm -rf "$out"
    "$rlid" --log-level error train "$cfg" --out "$out" --set "policy.init=$work/sft/checkpoints/sft" \
      --set policy.lora.rank=8 --set policy.lora.alpha=16 --set "sampler.engine=$engine" \
      --set "sampler.dtype=$dtype" --set "trainer.iterations=$iterations" --set trainer.eval_every=0 \
      --set trainer.checkpoint_every=0 >/dev/null
    sqlite3 -separator ' | ' "$out/rlid.db" "
      SELECT '| $engine', '$dtype',
        printf('%.2e', AVG(CASE WHEN key = 'engine/logp_gap_abs' THEN value END)),
        printf('%.2e', MAX(CASE WHEN key = 'engine/logp_gap_max' THEN value END)),
        printf('%.2e', AVG(CASE WHEN key = 'engine/kl' THEN value END)),
        printf('%.4f', AVG(CASE WHEN key = 'engine/ratio_p05' THEN value END)),
        printf('%.4f', AVG(CASE WHEN key = 'engine/ratio_p95' THEN value END)),
        printf('%.4f', AVG(CASE WHEN key = 'engine/outside_band_frac' THEN value END)),
        printf('%.3f', AVG(CASE WHEN key = 'time/engine_sync_s' THEN value END)) || ' |'
      FROM metrics"
  done
done
