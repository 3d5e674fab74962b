#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job: the quickstart
# comparison (decision PPO vs GRPO vs GSPO on the bandit, from one shared warm
# start, matched env-step budget). Results go to runs/quickstart-<timestamp>;
# runs/latest points at the newest one.
#   scripts/run.sh [extra `rlid compare` flags, e.g. --set compare.seeds=[1]]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
RLID_BUILD_TARGETS=rlid scripts/build.sh  # the CLI only: the test binaries are not needed here
out="runs/quickstart-$(date +%Y%m%d-%H%M%S)"
mkdir -p runs
./build/rlid compare configs/quickstart.toml --out "$out" "$@"
ln -sfn "$(basename "$out")" runs/latest
echo "run directory: $out (also runs/latest); query it with: build/rlid sql runs/latest \"SELECT ...\""
