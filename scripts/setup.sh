#!/usr/bin/env bash
# Installs what rlid needs that is missing; idempotent, and quiet and fast when
# everything is there.
#   1. Debian packages (apt-get as root, sudo if needed): compilers, CMake,
#      Ninja, ccache and the C++ libraries rlid links besides LibTorch.
#   2. The project's virtual environment .venv with the pinned Python packages
#      of requirements.txt: torch 2.11.0 (its LibTorch is the one rlid builds
#      against: CUDA 13.0 build, runs on CPU too), and the references the tests
#      use. Reinstalled only when requirements.txt changes.
#   scripts/setup.sh            build + run dependencies
#   scripts/setup.sh --test     also what the test suite needs: Chromium (report
#                               rendering test), clang + libFuzzer's runtime
#                               (sanitizer tests, scripts/fuzz.sh)
# RLID_VENV names another venv directory; RLID_PYTHON the interpreter that makes it.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build ccache pkg-config git xz-utils
  libboost-graph-dev libtomlplusplus-dev libsqlite3-dev sqlite3 libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libcli11-dev nlohmann-json3-dev libpcre2-dev libutf8proc-dev
  gnuplot-nox python3 python3-venv default-jre-headless
)
if [[ "${1:-}" == "--test" ]]; then
  packages+=(chromium clang libclang-rt-14-dev)
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "installed" ]] || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "setup: installing ${#missing[@]} missing Debian package(s): ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null; then SUDO="sudo"; else
      echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The CUDA toolkit is not a Debian package here: a CUDA build of torch needs nvcc
# at configure time. Look where NVIDIA installs it when it is not on PATH.
if ! command -v nvcc >/dev/null && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "setup: warning: no CUDA toolkit (nvcc) found; CMake needs it to configure against" \
       "torch's CUDA build (install CUDA 13.0 and put its bin/ on PATH)" >&2
fi

venv=${RLID_VENV:-.venv}
stamp="$venv/.rlid-requirements"
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  exit 0
fi
python=${RLID_PYTHON:-python3}
if [[ ! -x "$venv/bin/python" ]]; then
  echo "setup: making the virtual environment $venv with $($python --version 2>&1)"
  "$python" -m venv "$venv"
fi
echo "setup: installing the pinned Python packages of requirements.txt into $venv" \
     "(torch's CUDA wheels are a few GB the first time; pip caches them)"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r requirements.txt
echo "$want" > "$stamp"
echo "setup: done"
