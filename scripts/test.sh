#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite:
#   1. the main build's tests (ctest: rlid_tests_base + rlid_tests + CLI checks, the live
#      references, vLLM as the token plane's rollout engine (from .venv-vllm) and the
#      Python package's tests, after installing it into .venv)
#   2. core, jinja, envs and memory tests again under AddressSanitizer + UndefinedBehaviorSanitizer
#      (clang, in build-fuzz/; RLID_SKIP_SANITIZE=1 skips them)
#   3. each libFuzzer target for 20 s on its seed corpus (scripts/fuzz.sh, same build;
#      RLID_SKIP_FUZZ=1 skips it, RLID_FUZZ_SECONDS changes the time)
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's wall time, so a slow CI run says where its time went.
phase_start=$SECONDS
phase_done() {
  echo "test.sh: $1 took $((SECONDS - phase_start)) s (total $SECONDS s)"
  phase_start=$SECONDS
}
# --vllm: the engine venv too, so the engine tests (tests/live/test_vllm_engine.py)
# run against a real vLLM server; RLID_REQUIRE_VLLM makes its absence a failure.
scripts/setup.sh --test --vllm
export RLID_REQUIRE_VLLM=1
phase_done "setup"
scripts/build.sh
scripts/fetch_test_assets.sh
# The Python package from this checkout, into the project's venv (offline: the
# build requirements are pinned in requirements.txt), built in build/ so that it
# links the objects just built; CTest's Python.* tests import it.
.venv/bin/pip install -q --disable-pip-version-check --no-build-isolation --no-deps \
  -C build-dir=build -C cmake.define.RLID_BUILD_TESTS=ON .
phase_done "build"
jobs=${RLID_TEST_JOBS:-2}
# A fresh build directory has no record of test durations, so CTest would
# start the longest tests last and finish on one core: seed it with durations
# measured on the development machine (tests/ctest_costs.txt; CTest updates
# the copy as it runs).
if [[ ! -f build/Testing/Temporary/CTestCostData.txt ]]; then
  mkdir -p build/Testing/Temporary
  cp tests/ctest_costs.txt build/Testing/Temporary/CTestCostData.txt
fi
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 900
phase_done "ctest"

# The LibTorch-free components once more, built by clang with AddressSanitizer,
# UndefinedBehaviorSanitizer and libFuzzer's coverage (build-fuzz/): their
# tests run under the sanitizers, then each fuzz target runs for a fixed time.
# One build serves both, which saves CI a second sanitizer build.
if [[ "${RLID_SKIP_SANITIZE:-0}" != "1" || "${RLID_SKIP_FUZZ:-0}" != "1" ]]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DRLID_FUZZ=ON -DRLID_WITH_TORCH=OFF -DRLID_BUILD_TESTS=ON >/dev/null
  cmake --build build-fuzz -j "$(nproc)"
  phase_done "sanitizer build"
fi
if [[ "${RLID_SKIP_SANITIZE:-0}" != "1" ]]; then
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-fuzz --output-on-failure -j "$jobs" --timeout 900
  phase_done "sanitizer tests"
fi
if [[ "${RLID_SKIP_FUZZ:-0}" != "1" ]]; then
  scripts/fuzz.sh "${RLID_FUZZ_SECONDS:-20}"
  phase_done "fuzzing"
fi
echo "all tests passed"
