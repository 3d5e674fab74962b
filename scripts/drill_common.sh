# What the drills (crash_drill.sh, disk_full_drill.sh) share: their setup, the
# small run they train and how they compare a finished run directory with the
# reference. Sourced from the checkout's root.

# drill_setup NAME TMP_PREFIX: the binary ($RLID_BIN, else build/rlid, built if
# missing), the sqlite3 shell, and the work directory $WORK ($RLID_DRILL_DIR,
# else a temp dir that goes away when the drill passes: cleanup=1). $RLID
# becomes a private copy of the binary, so a rebuild during the drill cannot
# change or hide it halfway (every trial and the reference use one program).
drill_setup() {
  RLID=${RLID_BIN:-build/rlid}
  if [[ ! -x "$RLID" ]]; then RLID_BUILD_TARGETS=rlid scripts/build.sh; fi
  command -v sqlite3 >/dev/null || { echo "$1: needs the sqlite3 shell (scripts/setup.sh)" >&2; exit 1; }
  WORK=${RLID_DRILL_DIR:-}
  if [[ -z "$WORK" ]]; then
    WORK=$(mktemp -d "/tmp/$2.XXXXXX")
    cleanup=1
  fi
  mkdir -p "$WORK"
  cp "$RLID" "$WORK/rlid-under-test"
  RLID=$WORK/rlid-under-test
}

# A small run: 20 iterations, a checkpoint after each, one thread (so reruns are
# bit-identical on this machine).
CONFIG=configs/bandit_ppo.toml
SETS=(--set trainer.iterations=20 --set trainer.episodes_per_iteration=16 --set trainer.num_envs=16
      --set trainer.epochs=1 --set trainer.minibatch_size=16 --set trainer.eval_every=5
      --set trainer.eval_episodes=16 --set trainer.checkpoint_every=1 --set run.threads=1)

# Everything a finished run directory must agree on with the reference.
dump() {
  local dir=$1
  for q in \
    "SELECT id, iteration, split, seed, ret, success, length, truncated FROM episodes ORDER BY id" \
    "SELECT episode_id, t, action, reward, logp_rollout, prompt_hash, realisation FROM steps ORDER BY episode_id, t" \
    "SELECT iteration, key, value FROM metrics WHERE key NOT LIKE 'time/%' AND key NOT IN ('budget/wall_seconds', 'budget/engine_sync_seconds') ORDER BY rowid" \
    "SELECT iteration FROM checkpoints ORDER BY iteration" \
    "SELECT count(*), group_concat(status) FROM runs"; do
    "$RLID" sql "$dir" "$q" --csv --max-rows 0
  done
  sha256sum < "$dir/checkpoints/latest/model.safetensors"
}

integrity() {
  local out
  out=$(sqlite3 "$1/rlid.db" "PRAGMA integrity_check; PRAGMA foreign_key_check;" 2>&1)
  [[ "$out" == "ok" ]] || { echo "integrity: $out" | head -3; return 1; }
}

now() { date +%s.%N; }

