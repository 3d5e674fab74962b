#!/usr/bin/env bash
# Disk-full drill: N trials of the crash drill's small decision-PPO run, each
# on a filesystem too small for the whole run (a tmpfs of a random size: 64 KB
# to 2 MB every third trial, else a fifth of the finished run directory up to
# all of it), so some write fails
# with ENOSPC: the store, a checkpoint's safetensors, tokenizer or optimizer
# state, the latest link. Each trial is checked for
#   clean stop  exit 0 (it fitted) or 3, an error naming the file and "disk full",
#               never an abort (SIGABRT) or a signal,
#   no debris   no half-written checkpoint (iter_N.tmp-PID) left behind,
#   the store   PRAGMA integrity_check passes and the run is not 'running' or 'completed',
#   resume      after the filesystem grows, `--resume` finishes the run, and the
#               directory then holds exactly the uninterrupted reference run.
# One more trial runs under `ulimit -f`: the write past the limit is an i/o
# error (EFBIG), not a silent death by SIGXFSZ.
# Needs root (or an unprivileged user namespace) to mount the tmpfs: the
# script re-runs itself in a private mount namespace, so no mount outlives it.
#   scripts/disk_full_drill.sh [N=8] [SEED=1]      (work dir: $RLID_DRILL_DIR or a temp dir)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-8}
SEED=${2:-1}
if [[ -z "${RLID_DRILL_NAMESPACE:-}" ]]; then
  export RLID_DRILL_NAMESPACE=1
  if [[ $(id -u) -eq 0 ]] && unshare -m true 2>/dev/null; then exec unshare -m --propagation private "$0" "$@"; fi
  if unshare -rm true 2>/dev/null; then exec unshare -rm "$0" "$@"; fi
  echo "disk_full_drill: cannot make a mount namespace (needs root or user namespaces)" >&2
  exit 1
fi
source scripts/drill_common.sh
drill_setup disk_full_drill rlid_disk_drill
RANDOM=$SEED

echo "disk-full drill: $N trials in $WORK"
"$RLID" --log-level warn train "$CONFIG" --out "$WORK/reference" "${SETS[@]}" >/dev/null
dump "$WORK/reference" > "$WORK/reference.dump"
full_kb=$(du -sk "$WORK/reference" | cut -f1)
echo "reference run: ${full_kb} KB on disk"

problems=0 fitted=0 full=0 resumed=0
for ((i = 1; i <= N; i++)); do
  mnt="$WORK/mnt_$i"
  mkdir -p "$mnt"
  # Every third trial a filesystem of 64 KB to 2 MB (the store, config and
  # tokenizer fill it), the others a fifth of the run up to all of it (checkpoints).
  if (( i % 3 == 0 )); then
    size_kb=$(( 64 + RANDOM % 1985 ))
  else
    size_kb=$(( full_kb / 5 + RANDOM % (full_kb - full_kb / 5 + 1) ))
  fi
  mount -t tmpfs -o "size=${size_kb}k" tmpfs "$mnt"
  dir="$mnt/run"
  code=0
  "$RLID" --log-level warn train "$CONFIG" --out "$dir" "${SETS[@]}" >"$WORK/trial_$i.log" 2>&1 || code=$?
  trial_problems=()
  note=""
  if [[ $code -eq 0 ]]; then
    fitted=$((fitted + 1)); note="the run fitted"
  else
    full=$((full + 1))
    [[ $code -eq 3 ]] || trial_problems+=("exit code $code, expected 3 (an i/o error)")
    grep -q "disk full" "$WORK/trial_$i.log" || trial_problems+=("no 'disk full' in: $(tail -2 "$WORK/trial_$i.log" | tr '\n' ' ')")
    grep -qiE "terminate called|Aborted|core dumped" "$WORK/trial_$i.log" && trial_problems+=("aborted")
    note="stopped: $(grep -m1 "error" "$WORK/trial_$i.log" | cut -c1-140)"
    if [[ -d "$dir/checkpoints" ]] && ls "$dir/checkpoints" | grep -qE 'tmp-|old-'; then
      trial_problems+=("debris: $(ls "$dir/checkpoints" | grep -E 'tmp-|old-' | tr '\n' ' ')")
    fi
    if [[ -f "$dir/rlid.db" ]]; then
      integrity "$dir" >"$WORK/trial_$i.integrity" 2>&1 || trial_problems+=("integrity: $(cat "$WORK/trial_$i.integrity")")
    fi
  fi
  # Free space (the filesystem grows to twice the run), then finish the run.
  mount -o "remount,size=$((2 * full_kb + 4096))k" "$mnt"
  if [[ $code -ne 0 ]]; then
    if [[ -L "$dir/checkpoints/latest" ]]; then
      if "$RLID" --log-level warn train "$CONFIG" --out "$dir" --resume "${SETS[@]}" >"$WORK/trial_$i.resume.log" 2>&1; then
        resumed=$((resumed + 1)); note+="; resumed"
      else
        trial_problems+=("resume failed: $(tail -2 "$WORK/trial_$i.resume.log" | tr '\n' ' ')")
      fi
    else
      # Full before the first checkpoint: nothing to resume; a new run must fit now.
      rm -rf "$dir"
      "$RLID" --log-level warn train "$CONFIG" --out "$dir" "${SETS[@]}" >"$WORK/trial_$i.rerun.log" 2>&1 ||
        trial_problems+=("rerun failed: $(tail -2 "$WORK/trial_$i.rerun.log" | tr '\n' ' ')")
      note+="; before the first checkpoint: run again"
    fi
  fi
  if [[ -f "$dir/rlid.db" ]]; then
    dump "$dir" > "$WORK/trial_$i.dump" 2>&1 || true
    cmp -s "$WORK/reference.dump" "$WORK/trial_$i.dump" ||
      trial_problems+=("differs from the uninterrupted run: $(diff "$WORK/reference.dump" "$WORK/trial_$i.dump" | head -3 | tr '\n' ' ')")
  fi
  umount "$mnt"
  if [[ ${#trial_problems[@]} -gt 0 ]]; then
    problems=$((problems + ${#trial_problems[@]}))
    printf 'trial %2d  %6d KB  exit %3d  PROBLEM: %s\n' "$i" "$size_kb" "$code" "${trial_problems[*]}"
  else
    printf 'trial %2d  %6d KB  exit %3d  ok: %s\n' "$i" "$size_kb" "$code" "$note"
  fi
done

# The file size limit: a write past it is EFBIG and an i/o error naming the file.
code=0
( ulimit -f 64; exec "$RLID" --log-level warn train "$CONFIG" --out "$WORK/ulimit" "${SETS[@]}" ) \
  >"$WORK/ulimit.log" 2>&1 || code=$?
if [[ $code -eq 3 ]] && grep -q "file size limit" "$WORK/ulimit.log"; then
  echo "ulimit -f 64: exit 3: $(grep -m1 "error" "$WORK/ulimit.log" | cut -c1-160)"
else
  problems=$((problems + 1))
  echo "ulimit -f 64: PROBLEM: exit $code, expected 3 naming the file size limit: $(tail -2 "$WORK/ulimit.log" | tr '\n' ' ')"
fi

echo "summary: $N trials ($fitted fitted, $full hit a full disk, $resumed resumed); problems $problems"
if [[ $problems -eq 0 ]]; then
  [[ -z "${cleanup:-}" ]] || rm -rf "$WORK"
  exit 0
fi
echo "the trial logs are in $WORK" >&2
exit 1
