#!/usr/bin/env bash
# Unpacks the large test assets that are committed compressed into build/assets/.
# Idempotent and silent when everything is present. Used by scripts/test.sh and
# by the tokenizer golden tests.
#   build/assets/qwen3/tokenizer.json  Qwen3's tokenizer.json (151,669 ids), from
#                                      tests/data/qwen3/tokenizer.json.xz (README there)
set -euo pipefail
cd "$(dirname "$0")/.."

QWEN3_SHA256="aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"
src=tests/data/qwen3/tokenizer.json.xz
dest=build/assets/qwen3/tokenizer.json  # the tokenizer tests read it here

if [[ -f "$dest" ]] && echo "$QWEN3_SHA256  $dest" | sha256sum --check --status; then
  exit 0
fi
mkdir -p "$(dirname "$dest")"
xz -d -c "$src" > "$dest.tmp"
if ! echo "$QWEN3_SHA256  $dest.tmp" | sha256sum --check --status; then
  rm -f "$dest.tmp"
  echo "fetch_test_assets: $src does not unpack to Qwen3's tokenizer.json (sha256 differs)" >&2
  exit 1
fi
mv "$dest.tmp" "$dest"
