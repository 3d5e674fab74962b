#!/usr/bin/env bash
# Crash drill: N trials of a small decision-PPO run killed at a random moment by
# SIGKILL or SIGTERM, each checked for
#   integrity  PRAGMA integrity_check / foreign_key_check of rlid.db (sqlite3),
#   status     a SIGTERM'd run is 'interrupted'; a SIGKILL'd one 'crashed' once reopened,
#   orphans    no half-written checkpoint (iter_N.tmp-PID) survives the resume,
#   resume     `--resume` finishes the run, and the finished directory holds exactly
#              the uninterrupted reference run: the same episodes (so no duplicates),
#              steps, deterministic metrics, checkpoint rows and final weights.
# A trial killed before its first checkpoint must have --resume refused with a
# message naming the missing checkpoint. Prints one line per trial and a summary;
# exits 1 when any problem was found.
#   scripts/crash_drill.sh [N=20] [SEED=1]      (work dir: $RLID_DRILL_DIR or a temp dir)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20}
SEED=${2:-1}
source scripts/drill_common.sh
drill_setup crash_drill rlid_drill
RANDOM=$SEED

echo "crash drill: $N trials in $WORK ($(nproc) cores)"
t0=$(now)
"$RLID" --log-level warn train "$CONFIG" --out "$WORK/reference" "${SETS[@]}" >/dev/null
ref_seconds=$(awk -v a="$(now)" -v b="$t0" 'BEGIN { printf "%.2f", a - b }')
dump "$WORK/reference" > "$WORK/reference.dump"
ref_episodes=$("$RLID" sql "$WORK/reference" "SELECT count(*) FROM episodes" --csv | tail -1)
echo "reference run: ${ref_seconds}s, $ref_episodes episodes"

problems=0 killed=0 termed=0 finished_first=0 no_ckpt=0 resumed=0 dup_runs=0 bad_integrity=0
for ((i = 1; i <= N; i++)); do
  dir="$WORK/trial_$i"
  rm -rf "$dir"
  sig=$([[ $((RANDOM % 2)) -eq 0 ]] && echo KILL || echo TERM)
  # Uniform over the reference duration (startup included), in milliseconds.
  delay_ms=$(awk -v r=$RANDOM -v t="$ref_seconds" 'BEGIN { printf "%d", r * t * 1000 / 32768 }')
  "$RLID" --log-level warn train "$CONFIG" --out "$dir" "${SETS[@]}" >"$dir.log" 2>&1 &
  pid=$!
  sleep "$(awk -v d="$delay_ms" 'BEGIN { printf "%.3f", d / 1000 }')"
  kill -s "$sig" "$pid" 2>/dev/null || true
  code=0
  wait "$pid" 2>/dev/null || code=$?
  trial_problems=()
  note=""
  status=""
  if [[ -f "$dir/rlid.db" ]]; then
    integrity "$dir" >"$dir.integrity" 2>&1 || { trial_problems+=("integrity after the kill: $(cat "$dir.integrity")"); bad_integrity=$((bad_integrity + 1)); }
    # A run killed between creating rlid.db and committing its schema leaves an
    # empty database: `rlid sql` refuses it by name, and --resume below writes
    # the schema. Any other failure to read the store is a problem.
    if ! status=$("$RLID" sql "$dir" "SELECT group_concat(status) FROM runs" --csv 2>"$dir.status.err" | tail -1); then
      status=""
      grep -q "empty database" "$dir.status.err" ||
        trial_problems+=("rlid sql failed on the killed run: $(tail -2 "$dir.status.err" | tr '\n' ' ')")
    fi
  fi
  full_checks=0
  if [[ $code -eq 0 ]]; then
    finished_first=$((finished_first + 1)); note="finished before the signal"; full_checks=1
    [[ "$status" == "completed" ]] || trial_problems+=("exit 0 but status '$status'")
  else
    if [[ $sig == TERM ]]; then
      termed=$((termed + 1))
      [[ $code -eq 143 ]] || trial_problems+=("SIGTERM exit code $code, expected 143")
      [[ -z "$status" || "$status" == "interrupted" ]] || trial_problems+=("SIGTERM left status '$status'")
    else
      killed=$((killed + 1))
      [[ $code -eq 137 ]] || trial_problems+=("SIGKILL exit code $code, expected 137")
    fi
    if [[ -L "$dir/checkpoints/latest" ]]; then
      from=$(readlink "$dir/checkpoints/latest")
      if "$RLID" --log-level warn train "$CONFIG" --out "$dir" --resume "${SETS[@]}" >"$dir.resume.log" 2>&1; then
        resumed=$((resumed + 1)); full_checks=1
        note="resumed from $from: identical to the uninterrupted run"
      else
        trial_problems+=("resume failed: $(tail -2 "$dir.resume.log" | tr '\n' ' ')")
      fi
    elif [[ -f "$dir/rlid.db" ]]; then
      no_ckpt=$((no_ckpt + 1))
      note="killed before the first checkpoint: resume refused, run marked"
      if "$RLID" --log-level warn train "$CONFIG" --out "$dir" --resume "${SETS[@]}" >"$dir.resume.log" 2>&1; then
        trial_problems+=("resume without a checkpoint succeeded")
      else
        grep -q "no checkpoint" "$dir.resume.log" || trial_problems+=("resume without a checkpoint: unclear error: $(tail -1 "$dir.resume.log")")
      fi
      # The refused resume opened the store for writing: a killed run now shows as crashed.
      after=$("$RLID" sql "$dir" "SELECT group_concat(status) FROM runs" --csv | tail -1)
      want=$([[ $sig == KILL ]] && echo crashed || echo interrupted)
      [[ -z "$after" || "$after" == "$want" ]] || trial_problems+=("status '$after' after SIG$sig, expected '$want'")
      note+=" '${after:-no run row yet}'"
    else
      note="killed before the store existed"
    fi
  fi
  if [[ $full_checks -eq 1 ]]; then
    integrity "$dir" >"$dir.integrity" 2>&1 || { trial_problems+=("integrity after resume: $(cat "$dir.integrity")"); bad_integrity=$((bad_integrity + 1)); }
    if ls "$dir/checkpoints" | grep -qE 'tmp-|old-'; then
      trial_problems+=("orphan checkpoint directories: $(ls "$dir/checkpoints" | grep -E 'tmp-|old-' | tr '\n' ' ')")
    fi
    episodes=$("$RLID" sql "$dir" "SELECT count(*) FROM episodes" --csv | tail -1)
    if [[ "$episodes" -gt "$ref_episodes" ]]; then
      dup_runs=$((dup_runs + 1)); trial_problems+=("$((episodes - ref_episodes)) duplicate episodes")
    fi
    dump "$dir" > "$dir.dump" 2>&1 || true
    if ! cmp -s "$WORK/reference.dump" "$dir.dump"; then
      trial_problems+=("differs from the uninterrupted run: $(diff "$WORK/reference.dump" "$dir.dump" | head -3 | tr '\n' ' ')")
    fi
  fi
  if [[ ${#trial_problems[@]} -gt 0 ]]; then
    problems=$((problems + ${#trial_problems[@]}))
    printf 'trial %3d  SIG%-4s at %5d ms  exit %3d  PROBLEM: %s\n' "$i" "$sig" "$delay_ms" "$code" "${trial_problems[*]}"
  else
    printf 'trial %3d  SIG%-4s at %5d ms  exit %3d  ok: %s\n' "$i" "$sig" "$delay_ms" "$code" "$note"
  fi
done

echo "summary: $N trials ($killed SIGKILL, $termed SIGTERM, $finished_first finished first); $resumed resumed," \
  "$no_ckpt killed before a checkpoint; integrity failures $bad_integrity, runs with duplicate episodes $dup_runs;" \
  "problems $problems"
if [[ $problems -eq 0 ]]; then
  [[ -z "${cleanup:-}" ]] || rm -rf "$WORK"
  exit 0
fi
echo "the trial directories and logs are in $WORK" >&2
exit 1
