#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite:
#   1. the main build's tests (ctest: rlid_tests_base + rlid_tests + CLI checks)
#   2. core/envs/memory tests again under AddressSanitizer + UndefinedBehaviorSanitizer
#   3. each libFuzzer target for 20 s on its seed corpus (scripts/fuzz.sh;
#      RLID_SKIP_FUZZ=1 skips it, RLID_FUZZ_SECONDS changes the time)
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's wall time, so a slow CI run says where its time went.
phase_start=$SECONDS
phase_done() {
  echo "test.sh: $1 took $((SECONDS - phase_start)) s (total $SECONDS s)"
  phase_start=$SECONDS
}
scripts/setup.sh --test
phase_done "setup"
scripts/build.sh
scripts/fetch_test_assets.sh
phase_done "build"
jobs=${RLID_TEST_JOBS:-2}
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 900
phase_done "ctest"

# Sanitizer build of the LibTorch-free components.
if [[ "${RLID_SKIP_SANITIZE:-0}" != "1" ]]; then
  if [[ ! -f build-asan/build.ninja ]]; then
    cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DRLID_WITH_TORCH=OFF -DRLID_SANITIZE=ON >/dev/null
  fi
  cmake --build build-asan -j "$(nproc)"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 900
  phase_done "sanitizer build and tests"
fi

# Fuzz targets (clang + libFuzzer, torch-free), a fixed short time each.
if [[ "${RLID_SKIP_FUZZ:-0}" != "1" ]]; then
  scripts/fuzz.sh "${RLID_FUZZ_SECONDS:-20}"
  phase_done "fuzzing"
fi
echo "all tests passed"
