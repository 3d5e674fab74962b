#!/usr/bin/env bash
# Configures and builds rlid into build/ (Release, Ninja, ccache when present).
#   scripts/build.sh [extra cmake args]
#   RLID_BUILD_TARGETS="rlid" scripts/build.sh   only those targets (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
fi
jobs=${RLID_BUILD_JOBS:-$(nproc)}
targets=()
for t in ${RLID_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "$jobs" "${targets[@]}"
