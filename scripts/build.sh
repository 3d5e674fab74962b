#!/usr/bin/env bash
# Configures and builds rlid into build/ (Release, Ninja, ccache when present).
#   scripts/build.sh [extra cmake args]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
fi
jobs=${RLID_BUILD_JOBS:-$(nproc)}
cmake --build "$BUILD_DIR" -j "$jobs"
