#!/usr/bin/env bash
# Do two rlid binaries give the same numbers? Runs fixed-seed training of every
# trainer (synchronous, with stale rollouts, data-parallel, from a warm start,
# with memory and scratchpads, and SFT) with each binary and compares what the
# runs recorded: every metric that is not a clock reading, every episode, step,
# menu item and memory item, and the final weights byte for byte.
#
#   scripts/same_numbers.sh OLD_RLID NEW_RLID [WORK_DIR] [CASE_PATTERN]
#
# Used to check that a refactor changes no number: build the old commit, copy
# its build/rlid away, build the new one, and run this. Exit 0 when every case
# matches; otherwise the first lines of each difference are printed.
set -uo pipefail

old=${1:?usage: scripts/same_numbers.sh OLD_RLID NEW_RLID [WORK_DIR] [CASE_PATTERN]}
new=${2:?usage: scripts/same_numbers.sh OLD_RLID NEW_RLID [WORK_DIR] [CASE_PATTERN]}
work=${3:-$(mktemp -d)}
pattern=${4:-.}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 3
mkdir -p "$work"

short="--set trainer.eval_every=2 --set trainer.eval_episodes=16 --set trainer.checkpoint_every=2"
# name | command after the binary ({OUT} is the run directory)
cases=(
  "ppo|train configs/bandit_ppo.toml --out {OUT} --set trainer.iterations=4 $short"
  "ppo_stale2|train configs/bandit_ppo.toml --out {OUT} --set trainer.iterations=5 --set trainer.max_staleness=2 $short"
  "ppo_stale1_nocorr|train configs/bandit_ppo.toml --out {OUT} --set trainer.iterations=4 --set trainer.max_staleness=1 --set trainer.loss.staleness.kind=none $short"
  "ppo_all_action|train configs/bandit_ppo.toml --out {OUT} --set trainer.iterations=3 --set trainer.gradient_estimator=all_action $short"
  "ppo_gigpo|train configs/keys_gigpo_compare.toml --out {OUT} --set trainer.algorithm=ppo_decision --set trainer.iterations=3 --set trainer.advantage.estimator=gigpo --set trainer.group_size=8 --set trainer.grad_snr_every=1 $short"
  "ppo_memory|train configs/keys_memory.toml --out {OUT} --set trainer.iterations=3 $short"
  "ppo_think|train configs/arith_think.toml --out {OUT} --set trainer.iterations=2 --set trainer.episodes_per_iteration=16 --set trainer.num_envs=16 $short"
  "ppo_nproc2|train configs/bandit_ppo.toml --out {OUT} --nproc 2 --set trainer.iterations=3 --set trainer.max_staleness=1 $short"
  "grpo|train configs/bandit_grpo.toml --out {OUT} --set trainer.iterations=4 --set trainer.grad_snr_every=2 $short"
  "grpo_stale2|train configs/bandit_grpo.toml --out {OUT} --set trainer.iterations=5 --set trainer.max_staleness=2 $short"
  "grpo_nproc2|train configs/bandit_grpo.toml --out {OUT} --nproc 2 --set trainer.iterations=3 --set trainer.max_staleness=1 $short"
  "dr_grpo|train configs/bandit_dr_grpo.toml --out {OUT} --set trainer.iterations=3 $short"
  "dapo|train configs/bandit_dapo.toml --out {OUT} --set trainer.iterations=4 $short"
  "grpo_kl_reward|train configs/bandit_grpo.toml --out {OUT} --set trainer.iterations=3 --set trainer.kl.coef=0.05 --set trainer.kl.placement=reward $short"
  "ppo_kl_loss|train configs/bandit_ppo.toml --out {OUT} --set trainer.iterations=3 --set trainer.kl.coef=0.05 $short"
  "ppo_target_kl|train configs/bandit_ppo.toml --out {OUT} --set trainer.iterations=3 --set trainer.target_kl=0.0005 $short"
  "grpo_target_kl|train configs/bandit_grpo.toml --out {OUT} --set trainer.iterations=3 --set trainer.target_kl=0.0005 $short"
  "gspo|train configs/bandit_gspo.toml --out {OUT} --set trainer.iterations=3 $short"
  "grpo_gigpo|train configs/keys_gigpo_compare.toml --out {OUT} --set trainer.algorithm=grpo --set trainer.iterations=2 --set trainer.advantage.estimator=gigpo --set trainer.group_size=8 $short"
  "sft|sft configs/bandit_ppo.toml --out {OUT} --set sft.episodes=64 --set sft.epochs=2 --set trainer.eval_episodes=16"
)

# What a run recorded, minus clock readings (timestamps, seconds, time/*).
dump() {
  local bin=$1 dir=$2
  local q=(
    "SELECT iteration, key, printf('%.17g', value) FROM metrics WHERE key NOT LIKE 'time/%'
       AND key NOT LIKE '%seconds%' AND key NOT LIKE '%\_s' ESCAPE '\' ORDER BY run_id, iteration, key"
    "SELECT id, env, seed, split, plane, policy_version, iteration, printf('%.17g', ret), success,
       length, truncated FROM episodes ORDER BY id"
    "SELECT episode_id, t, observation, prompt_hash, action, label, generated_text, generated_tokens,
       printf('%.17g', logp_rollout), printf('%.17g', logp_train), printf('%.17g', value),
       printf('%.17g', reward), invalid, invalid_reason FROM steps ORDER BY episode_id, t"
    "SELECT episode_id, t, position, action, label, command, afterstate,
       printf('%.17g', probability), realisations FROM menu_items ORDER BY episode_id, t, position"
    "SELECT id, content, kind, source_episode_id, source_t, split, policy_version FROM memory_items ORDER BY id"
    "SELECT episode_id, t, rank, item_id, printf('%.17g', score) FROM memory_reads ORDER BY episode_id, t, rank"
    "SELECT run_id, iteration, replace(path, '$dir', '') AS path FROM checkpoints ORDER BY id"
  )
  for s in "${q[@]}"; do "$bin" sql "$dir" "$s" --csv --max-width 0 --timeout-s 0 --max-memory-mb 0 || return 1; done
  # The final weights (safetensors), byte for byte.
  local ck
  ck=$(ls -d "$dir"/checkpoints/latest "$dir"/checkpoints/sft 2>/dev/null | head -1)
  [ -n "$ck" ] && (cd "$ck" && sha256sum ./*.safetensors)
  return 0
}

failed=0
for c in "${cases[@]}"; do
  name=${c%%|*}
  cmd=${c#*|}
  [[ $name =~ $pattern ]] || continue
  for side in old new; do
    bin=$old; [ $side = new ] && bin=$new
    out=$work/$name.$side
    rm -rf "$out"
    args=${cmd//\{OUT\}/$out}
    # shellcheck disable=SC2086
    "$bin" $args > "$out.log" 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then
      echo "$name: $side binary failed (exit $rc); see $out.log"
      failed=1
      continue 2
    fi
    dump "$bin" "$out" > "$out.dump" 2>&1 || { echo "$name: cannot read $out"; failed=1; continue 2; }
  done
  if cmp -s "$work/$name.old.dump" "$work/$name.new.dump"; then
    echo "$name: same ($(wc -l < "$work/$name.new.dump") rows)"
  else
    echo "$name: DIFFERENT"
    diff "$work/$name.old.dump" "$work/$name.new.dump" | head -20
    failed=1
  fi
done
exit $failed
