#!/usr/bin/env bash
# The main job: installs what is missing, builds the server and flashserve-chat (no tests, no
# benchmarks), and starts the OpenAI-compatible server on 127.0.0.1:8000 with the default model
# (stories260K). Extra arguments go to `flashserve` (see `flashserve --help`).
#   scripts/run.sh                      serve the default model
#   scripts/run.sh generate [flags]     print a story with flashserve-generate instead
# The CUDA backend is compiled only when it will be used: FLASHSERVE_CUDA=ON or OFF decides; unset,
# it is ON when nvidia-smi sees a GPU, and then only for that GPU's architecture (a minute of nvcc
# instead of four; scripts/test.sh builds every default architecture).
set -euo pipefail
source "$(dirname "$0")/common.sh"
# clang and lld, as CI builds: clang compiles this code 1.5-3x faster than g++, which is most of
# the first start.
fs_install_packages clang lld
build="$FS_ROOT/build/release"
export CC=${CC:-clang} CXX=${CXX:-clang++}

cuda=${FLASHSERVE_CUDA:-}
gpu_cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 || true)
[ -n "$cuda" ] || { [ -n "$gpu_cap" ] && cuda=ON || cuda=OFF; }
# As CI builds: a unity build (a library's files compiled a batch at a time) with the JSON header
# precompiled once (docs/CONVENTIONS.md#build-time). The CUDA files are not merged.
cmake_args=(-DCMAKE_BUILD_TYPE=Release "-DFLASHSERVE_CUDA=$cuda" -DFLASHSERVE_PCH=ON
            -DCMAKE_UNITY_BUILD=ON -DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld)
if [ "$cuda" != OFF ] && [ -n "$gpu_cap" ]; then
  arch=${gpu_cap/./}
  [ "$arch" = 90 ] && arch=90a  # Hopper: the sm_90a-only instructions (see CMakeLists.txt)
  cmake_args+=("-DCMAKE_CUDA_ARCHITECTURES=$arch")
fi

has_model_flag() { for a in "$@"; do [ "$a" = "--model" ] && return 0; done; return 1; }

if [ "${1:-}" = "generate" ]; then
  shift
  fs_build "$build" "${cmake_args[@]}" -- flashserve-generate >&2
  has_model_flag "$@" || set -- --model "$(fs_default_model)" "$@"
  exec "$build/tools/flashserve-generate" "$@"
fi
# flashserve-chat too (a few seconds more): the terminal client for the server started here.
fs_build "$build" "${cmake_args[@]}" -- flashserve flashserve-chat >&2
has_model_flag "$@" || set -- --model "$(fs_default_model)" "$@"
exec "$build/server/flashserve" "$@"
