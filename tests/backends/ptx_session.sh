#!/usr/bin/env bash
# The Ampere/Ada code paths, tested on a Hopper GPU: the CUDA code built as compute_80 PTX only (no
# SASS at all), so the driver JIT-compiles every kernel for the GPU at hand and no Hopper-only
# instruction is in them; kernels/cuda/pdl.cuh then launches without programmatic dependent launch,
# as on an A100/L4/L40S/RTX 4090. Everything else is carried_session.sh's: binaries built here.
#   here:        tests/backends/ptx_session.sh pack    builds build/ptx80 and packs it into .carry/
#                (.carry/models must hold stories260K and llama2-tokenizer, as for carried_session)
#   GPU machine: OUT=dir tests/backends/ptx_session.sh run    (device tool, carry .carry)
# run = carried_session.sh's `gpu` stage (every gpu test program, cpu vs cuda generate) and its
# `e2e` stage on the TinyLlama shape (flashserve vs Hugging Face transformers logits and greedy
# text, bench_e2e). The JIT costs seconds per program; its cache is kept between them.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
case "${1:-}" in
  pack)
    source scripts/common.sh
    build=build/ptx80
    fs_build "$build" -DCMAKE_BUILD_TYPE=Release -DFLASHSERVE_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=80-virtual -- flashserve flashserve-generate \
      flashserve-random-model bench_e2e flashserve-logits bench_server bench_linear \
      bench_decode_ops bench_sampling test_cuda_backend test_cuda_ops test_cuda_sampling \
      test_attention_decode test_attention_prefill test_soak || exit 1
    # The proof that nothing Hopper-specific is inside: no SASS, only compute_80 PTX.
    cuobjdump=${CUOBJDUMP:-/usr/local/cuda/bin/cuobjdump}
    t=$build/tests/kernels/test_attention_decode
    if "$cuobjdump" --list-elf "$t" | grep -q sm_; then
      echo "$t has SASS: $("$cuobjdump" --list-elf "$t" | head -3)" >&2; exit 1
    fi
    "$cuobjdump" --list-ptx "$t" | grep -q "sm_80" || { echo "$t: no compute_80 PTX" >&2; exit 1; }
    echo "$t: compute_80 PTX only"
    exec tests/backends/carried_session.sh pack "$build"
    ;;
  run)
    export CUDA_CACHE_MAXSIZE=4294967296  # keep every JIT-compiled kernel between programs
    nvidia-smi --query-gpu=name,compute_cap --format=csv
    echo "CUDA code: compute_80 PTX, JIT-compiled here (the Ampere/Ada paths; no PDL)"
    E2E_SHAPES=${E2E_SHAPES:-tinyllama-1.1b} E2E_COMPILE=${E2E_COMPILE:-0} \
      exec tests/backends/carried_session.sh run gpu e2e
    ;;
  *)
    echo "usage: $0 pack | run" >&2; exit 2 ;;
esac
