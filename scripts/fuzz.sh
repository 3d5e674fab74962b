#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/*_fuzz.cc) with clang + ASan + UBSan in
# build-fuzz/ and runs each for SECONDS (default 20) on a copy of its seed
# corpus fuzz/corpus/<target>/, so the committed files never change. Prints one
# line per target; exits non-zero if any target crashed, naming the input.
#   scripts/fuzz.sh            CI: 20 s per target
#   scripts/fuzz.sh 600        a longer local run
#   RLID_FUZZ_TARGETS="sql_fuzz config_fuzz" scripts/fuzz.sh 60
# See docs/fuzzing.md for what each target checks and how a crash becomes a test.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
root=$PWD
build=build-fuzz
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}

if [[ ! -f $build/build.ninja ]]; then
  CC=clang CXX=clang++ cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DRLID_FUZZ=ON -DRLID_WITH_TORCH=OFF -DRLID_BUILD_TESTS=OFF >/dev/null
fi
if ! cmake --build $build -j "${RLID_FUZZ_JOBS:-$(nproc)}" >$build/fuzz-build.log 2>&1; then
  grep -v '^\[' $build/fuzz-build.log | tail -40 >&2
  echo "fuzz: build failed (full log: $build/fuzz-build.log)" >&2
  exit 1
fi

targets=${RLID_FUZZ_TARGETS:-$(cd fuzz && ls *_fuzz.cc | sed 's/\.cc$//')}
work=$(mktemp -d "${TMPDIR:-/tmp}/rlid_fuzz.XXXXXX")
keep_work=0
trap '[[ $keep_work == 1 ]] || rm -rf "$work"' EXIT
export TMPDIR=$work  # targets' scratch files (sql_fuzz's database) go here too
failed=()
for t in $targets; do
  [[ -x $build/$t ]] || { echo "fuzz: no binary $build/$t" >&2; exit 1; }
  corpus=$work/$t/corpus artifacts=$work/$t/artifacts/
  mkdir -p "$corpus" "$artifacts"
  if [[ -d fuzz/corpus/$t ]]; then cp -r fuzz/corpus/$t/. "$corpus/"; fi
  log=$work/$t/log
  set +e
  ASAN_OPTIONS=abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$build/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$artifacts" "$corpus" >"$log" 2>&1
  rc=$?
  set -e
  # libFuzzer's final stats (printed twice after a crash) and its coverage lines.
  final_stat() { grep -o "stat::$1: *[0-9]*" "$log" | tail -1 | grep -o '[0-9]*$' || echo 0; }
  execs=$(final_stat number_of_executed_units) rate=$(final_stat average_exec_per_sec)
  cov=$(grep -o ' cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || true)
  start_cov=$(grep 'INITED' "$log" | grep -o ' cov: [0-9]*' | head -1 | grep -o '[0-9]*' || true)
  cov=${cov:-0} start_cov=${start_cov:-$cov}
  crash=$(ls "$artifacts" 2>/dev/null | head -1)
  if [[ $rc -eq 0 && -z $crash ]]; then
    result=ok
  else
    result="CRASH (exit $rc)"
    failed+=("$t")
    if [[ -n $crash ]]; then
      mkdir -p $build/fuzz-crashes
      cp "$artifacts/$crash" "$build/fuzz-crashes/$t-$crash"
      result+=": $build/fuzz-crashes/$t-$crash"
    fi
  fi
  printf '%-26s %9s execs %6s/s  cov %5s (+%s from seeds)  %s\n' "$t" "$execs" "$rate" "$cov" \
    "$((cov - start_cov))" "$result"
  if [[ $result != ok ]]; then
    grep -E 'ERROR|SUMMARY|fuzz invariant|runtime error|unexpected|deadly signal' "$log" | head -8 | sed 's/^/    /'
    cp "$log" "$build/fuzz-crashes/$t.log" 2>/dev/null || true
  fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz: ${#failed[@]} target(s) crashed: ${failed[*]}; reproduce with $build/<target> <input>" >&2
  exit 1
fi
echo "fuzz: all targets ran ${seconds} s without a crash"
