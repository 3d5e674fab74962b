#!/usr/bin/env bash
# The GPU check: rlid's CUDA tests and the GPU-vs-CPU benchmark, on a machine
# with an NVIDIA GPU that has torch 2.11.0+cu130 in a Python environment but no
# compiler toolchain for rlid's other libraries and no package registry.
#
#   scripts/gpu_check.sh --pack [DIR]   (here, on the build machine)
#       builds build/rlid and build/rlid_tests against the venv's torch (the same
#       CUDA 13.0 build of LibTorch 2.11.0) and packs them, stripped, with the
#       non-LibTorch shared libraries they load (Debian's fmt, spdlog, toml++,
#       SQLite, PCRE2, utf8proc, Boost.Graph) into DIR (default .gpu/, ignored by
#       git; about 25 MiB). LibTorch itself is not packed: the GPU machine's own
#       torch wheel provides it.
#   scripts/gpu_check.sh [DIR]          (there, from the repository root)
#       finds LibTorch in python3's torch (RLID_PYTHON names another interpreter),
#       prints `rlid --version`, runs the CUDA tests (Device.*, Cuda.*: readout
#       and scoring vs the CPU within 1e-4, host syncs per decoded token, a
#       CUDA -> CPU -> CUDA checkpoint round trip, a decision-PPO and a GRPO
#       iteration with LoRA) and `rlid bench device` (tiny preset and a generated
#       Qwen3-0.6B-shaped checkpoint, bf16 base + LoRA, GPU vs CPU in one run).
#       Logs and the benchmark's JSON go to $OUT when set, else DIR/results.
#       Takes about 3-5 minutes on one H200 with 16 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "--pack" ]]; then
  dir=${2:-.gpu}
  RLID_BUILD_TARGETS="rlid rlid_tests" scripts/build.sh
  rm -rf "$dir" && mkdir -p "$dir/bin" "$dir/lib"
  for b in rlid rlid_tests; do
    cp "build/$b" "$dir/bin/$b" && strip --strip-unneeded "$dir/bin/$b"
  done
  # Every shared library the binaries load except LibTorch, CUDA's and glibc's.
  ldd build/rlid build/rlid_tests | awk '/=> \//{print $3}' | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
      libtorch*|libc10*|libcaffe2*|libgomp*|libshm*|libnv*|libcu*|libnccl*|libcudnn*|libcufile*) ;;
      libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libutil.so*|ld-linux*|libstdc++*|libgcc_s*) ;;
      *) cp -L "$lib" "$dir/lib/" ;;
    esac
  done
  echo "gpu_check: packed $(du -sh "$dir" | cut -f1) into $dir: $(ls "$dir/lib" | tr '\n' ' ')"
  echo "gpu_check: on the GPU machine run scripts/gpu_check.sh $dir (carry $dir with the tree)"
  exit 0
fi

dir=${1:-.gpu}
out=${OUT:-$dir/results}
mkdir -p "$out"
python=${RLID_PYTHON:-python3}
[[ -x "$dir/bin/rlid" ]] || { echo "gpu_check: no $dir/bin/rlid: run scripts/gpu_check.sh --pack first" >&2; exit 2; }
torch_lib=$("$python" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
torch_version=$("$python" -c 'import torch; print(torch.__version__)')
[[ "$torch_version" == 2.11.0* ]] ||
  echo "gpu_check: warning: rlid was built against torch 2.11.0, this python has $torch_version" >&2
export LD_LIBRARY_PATH="$torch_lib:$PWD/$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export RLID_SOURCE_DIR=$PWD

start=$SECONDS
set -o pipefail
{
  echo "== rlid --version"
  "$dir/bin/rlid" --version
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
  echo "== CUDA tests"
  "$dir/bin/rlid_tests" --gtest_filter='Device.*:Cuda.*' --gtest_color=no
  echo "== bench device (GPU vs CPU, one run)"
  "$dir/bin/rlid" bench device --checkpoint /tmp/rlid_qwen3_0.6b_shaped --out "$out/bench_device.json"
  echo "== done in $((SECONDS - start)) s"
} 2>&1 | tee "$out/gpu_check.log"
