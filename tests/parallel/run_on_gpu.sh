#!/usr/bin/env bash
# Tensor parallelism (issue 20) on the GPU machine: build, tests, generate, collectives, benchmark,
# on whatever GPUs the machine has (1: TP 1 through NCCL; 2 or 4: TP 2 and 4 as well). Run from
# the root of the tree the device call carries (it holds .carry/debs and .carry/models, see
# tests/backends/carried_session.sh), with the tree to build in SRC (default: this script's):
#   SRC=.carry/src-tensor-parallel OUT=$OUT bash .carry/src-tensor-parallel/tests/parallel/run_on_gpu.sh [STAGE...]
# Stages (default: build tests generate collectives):
#   build        carried_session.sh build of SRC into BUILD (default /tmp/tp_build), these targets
#   tests        test_tensor_parallel_cuda (NCCL: TP 1 .. min(GPUs, 4) against one GPU),
#                test_parallel_unit, test_tensor_parallel_cpu
#   gpu_tp2      the GPU model tests (test_cuda_backend, test_cascade_attention,
#                test_prefix_cache_engine) with their CUDA runners at TP 2
#                (FLASHSERVE_TEST_TENSOR_PARALLEL=2, tests/common/test_tensor_parallel.h); the kernel
#                tests run no model and have no TP form
#   generate     flashserve-generate stories260K on cuda, greedy, 200 tokens, at each TP size the
#                GPUs allow (1, 2, 4): the texts compared with TP 1's
#   collectives  bench_tp_collectives on the llama2-7b shape at each TP size (1: NCCL on one GPU)
#   bench        random llama2-7b weights: bench_e2e decode:1x128x256 and offline:16x128x256 at
#                each TP size, bench_tp_collectives, then bench/tp_merge.py: speedup_vs_tp1 and
#                allreduce_ms_per_step in $OUT/tp_e2e.jsonl
#   bench70b     the same on a random llama2-70b at TP 4 (138 GB of weights, 32 shards written
#                on parallel threads: no TP 1; frac_of_roofline is its measure; a call of its own)
#   hang         HANG_RUNS (8) short runs at TP 2 and 4 under a watchdog (see the stage)
#   symmetric    NCCL symmetric memory for the decode all-reduces, A/B (see the stage)
#   bench70b8    8 of the 70B's 80 layers (its exact layer shape, 14.6 GB: TP 1, 2 and 4 fit),
#                written in seconds: every layer is the same work, so per-layer bandwidth and
#                collective costs, and frac_of_roofline, are the 70B's (the lm_head and the
#                embedding are a larger share: 3.6% of the bytes instead of 0.4%)
# BUILD=DIR with binaries already there (e.g. unpacked from .carry/tp_bin.tar.xz): no build stage.
# Tests read their golden files from the source folder they were configured with: for binaries
# built in another checkout (CI's clone in /work/ci, say), link that path to this tree first
# (`ln -sfn $PWD /work/ci`), or test_tensor_parallel_* read no golden ids and fail.
# Everything written goes to $OUT/tp_session.tgz, refreshed after each stage, so a run cut short
# still brings back what it finished.
# Env: TP_SIZES (default: 1, 2, 4 as the GPUs allow), HANG_RUNS (8).
# NCCL_NVLS_ENABLE=0 for everything started here (flashserve sets it too before NCCL starts).
set -uo pipefail
export NCCL_NVLS_ENABLE=0
here=$(cd "$(dirname "$0")/../.." && pwd)
SRC=${SRC:-$here}
B=${BUILD:-/tmp/tp_build}
RESULTS=${OUT:-/tmp/tp_out}
OUT=/tmp/tp_work  # the logs; packed into $RESULTS after each stage
M=$PWD/.carry/models
mkdir -p "$OUT" "$RESULTS"
stages=${*:-build tests generate collectives}
G=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
sizes=""
for n in 1 2 4; do [ "$n" -le "$G" ] && sizes="$sizes $n"; done
sizes=${TP_SIZES:-$sizes}  # e.g. TP_SIZES="1 2" to spend less device time
echo "GPUs: $G; TP sizes:$sizes; stages: $stages"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
export LD_LIBRARY_PATH=$PWD/.carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
# The tests read FS_MODELS_DIR=/work/shared/models (the build's): there, the carried models.
[ -e /work/shared/models ] || { mkdir -p /work/shared && ln -s "$M" /work/shared/models; }
rc=0

# Runs a command with stdout/stderr to $3/$4, allowing it $1 seconds; past that it is taken as
# hung: every thread's stack is printed with cuda-gdb (the image has no gdb) into $2, then it is
# killed. Returns the command's status (137 when killed).
run_watched() {  # seconds stacks_file stdout_file stderr_file cmd...
  local secs=$1 stacks=$2 so=$3 se=$4; shift 4
  "$@" > "$so" 2> "$se" &
  local pid=$! waited=0
  while kill -0 $pid 2>/dev/null && [ $waited -lt "$secs" ]; do sleep 1; waited=$((waited + 1)); done
  if kill -0 $pid 2>/dev/null; then
    echo "still running after $secs s: $*; stacks in $(basename "$stacks")"
    timeout -s KILL 90 cuda-gdb -p $pid -batch -ex "info threads" -ex "thread apply all bt" > "$stacks" 2>&1
    grep -E "^#[0-9]+ " "$stacks" | grep -v " in ?? " | head -40
    kill -9 $pid
  fi
  wait $pid
}

# Random weights of a preset (once), with the Llama 2 tokenizer beside them, into $T.
random_model() {  # $1 preset, $2 seconds allowed to write it, $3 label, [$4...] more flags
  T=/tmp/fs_models/$3
  local t0=$SECONDS
  [ -f "$T/config.json" ] || timeout "$2" "$B/weights/flashserve-random-model" --out "$T" \
    --preset "$1" --tokenizer "$M/llama2-tokenizer/tokenizer.model" "${@:4}" > "$OUT/random_$3.log" 2>&1 || rc=1
  echo "random $3 written in $((SECONDS - t0)) s"
}

# $1 preset, $2 seconds to write it, $3 the smallest TP size it fits, [$4 label, $5... flags]
bench_shape() {
  local label=${4:-$1}
  random_model "$1" "$2" "$label" "${@:5}"
  for n in $sizes; do
    [ "$n" -lt "$3" ] && continue
    run_watched 240 "$OUT/bench_${label}_tp${n}_stacks.txt" "$OUT/bench_${label}_tp$n.jsonl" \
      "$OUT/bench_${label}_tp$n.log" "$B/bench/bench_e2e" --model "$T" --backend cuda \
      --label "$label" --tensor-parallel-size $n --cases decode:1x128x256,offline:16x128x256 \
      --max-seconds 90 || rc=1
    cat "$OUT/bench_${label}_tp$n.jsonl" >> "$OUT/tp_e2e_raw.jsonl"
    echo "TP $n:"; grep -E "^(decode|offline)|error" "$OUT/bench_${label}_tp$n.log"
    timeout 120 "$B/bench/bench_tp_collectives" --model "$T" --tensor-parallel-size $n \
      --batch 1,16 >> "$OUT/tp_collectives.jsonl" 2>> "$OUT/collectives.log" || rc=1
  done
  python3 "$SRC/bench/tp_merge.py" --e2e "$OUT/tp_e2e_raw.jsonl" \
    --collectives "$OUT/tp_collectives.jsonl" --out "$OUT/tp_e2e.jsonl" || rc=1
  rm -rf "$T"  # the disk for the next shape
}

for stage in $stages; do
  echo "== stage $stage (t=${SECONDS}s)"
  case $stage in
  build)
    SRC=$SRC BUILD=$B TARGETS="test_tensor_parallel_cuda test_parallel_unit test_tensor_parallel_cpu \
flashserve-generate flashserve-random-model bench_e2e bench_tp_collectives" \
      bash tests/backends/carried_session.sh build || { echo "build failed"; rc=1; break; }
    ;;
  tests)
    for t in parallel/test_tensor_parallel_cuda parallel/test_parallel_unit parallel/test_tensor_parallel_cpu; do
      name=$(basename $t)
      timeout 300 "$B/tests/$t" > "$OUT/$name.log" 2>&1; r=$?
      [ $r -ne 0 ] && rc=1
      echo "$name rc=$r: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$name.log" | tr '\n' ' ')"
      grep -E "NCCL group|vs one GPU|skipped|Failure|FAILED  \]" "$OUT/$name.log" | head -20
    done
    ;;
  gpu_tp2)
    if [ "$G" -lt 2 ]; then echo "gpu_tp2: skipped, one GPU"; continue; fi
    for t in backends/test_cuda_backend backends/test_cascade_attention engine/test_prefix_cache_engine; do
      name=$(basename $t)
      CUDA_MODULE_LOADING=EAGER FLASHSERVE_TEST_TENSOR_PARALLEL=2 timeout 300 "$B/tests/$t" \
        > "$OUT/${name}_tp2.log" 2>&1; r=$?
      [ $r -ne 0 ] && rc=1
      echo "$name at TP 2 rc=$r: $(grep -E '^\[  (PASSED|FAILED)|tests ran' "$OUT/${name}_tp2.log" | tr '\n' ' ')"
      grep -E "backend: |Failure|FAILED  \]" "$OUT/${name}_tp2.log" | head -20
    done
    ;;
  generate)
    # Greedy text at each TP size against TP 1's. bf16 rounds at other points at each TP size, so
    # a near-tie can flip a token after many steps (the tests bound the logits instead): a
    # difference is reported with where it starts, a failure to run is an error. A run that has
    # not finished in 40 s (200 tokens of stories260K take well under a second) is taken as hung.
    for n in $sizes; do
      NCCL_DEBUG=WARN run_watched 40 "$OUT/generate_tp${n}_stacks.txt" "$OUT/generate_tp$n.out" \
        "$OUT/generate_tp$n.log" "$B/tools/flashserve-generate" --model "$M/stories260K" \
        --backend cuda --temperature 0 --max-tokens 200 --tensor-parallel-size $n || rc=1
      # NCCL_DEBUG prints NCCL's version line on stdout: the text is the rest.
      grep -v "^NCCL version" "$OUT/generate_tp$n.out" > "$OUT/generate_tp$n.txt"
      tail -n 3 "$OUT/generate_tp$n.log"
      if [ -s "$OUT/generate_tp$n.txt" ] && cmp -s "$OUT/generate_tp1.txt" "$OUT/generate_tp$n.txt"; then
        echo "generate stories260K TP $n: text identical to TP 1"
      else
        echo "generate stories260K TP $n: text differs from TP 1 from byte" \
          "$(cmp "$OUT/generate_tp1.txt" "$OUT/generate_tp$n.txt" 2>&1 | grep -o 'byte [0-9]*' | head -1)" \
          "of $(wc -c < "$OUT/generate_tp1.txt")"
      fi
    done
    ;;
  collectives)
    CFG=/tmp/fs_models/fs_configs/llama2-7b
    "$B/weights/flashserve-random-model" --out $CFG --preset llama2-7b --config-only 1 > /dev/null 2>&1
    for n in $sizes; do
      timeout 120 "$B/bench/bench_tp_collectives" --model $CFG --tensor-parallel-size $n \
        --batch 1,16,64 >> "$OUT/tp_collectives_7b_shape.jsonl" 2>> "$OUT/collectives.log" || rc=1
    done
    cat "$OUT/collectives.log"
    ;;
  hang)
    # Steps that never returned (generate's first step at TP 4; a 7B's first batch-16 step at
    # TP 2): cuBLASLt loading a kernel's library under its process-wide lock while the GPU waits
    # in an all-reduce for a rank that waits for that lock (model/tensor_parallel_runner.cpp).
    # Before the runner's warm-up of new row counts, 2 of 6 runs of this stage stalled. Now:
    # HANG_RUNS short runs at TP 2, 4, 2, ..., each meeting new row counts and graph buckets,
    # under a watchdog (stacks on a stall).
    random_model tinyllama-1.1b 120 tinyllama-1.1b
    stalled=0
    for i in $(seq "${HANG_RUNS:-8}"); do
      n=$(( i % 2 ? 2 : 4 )); [ "$n" -gt "$G" ] && n=2
      run_watched 60 "$OUT/hang_${i}_stacks.txt" "$OUT/hang_$i.jsonl" "$OUT/hang_$i.log" \
        "$B/bench/bench_e2e" --model "$T" --backend cuda --label tinyllama-1.1b \
        --tensor-parallel-size $n --no-ceilings 1 \
        --cases decode:1x128x64,offline:16x128x64,offline:64x512x32 --max-seconds 30
      r=$?
      [ $r -eq 137 ] && stalled=$((stalled + 1))
      [ $r -ne 0 ] && rc=1
      echo "run $i (TP $n): rc=$r $(grep -cE '^(decode|offline)' "$OUT/hang_$i.log") cases"
    done
    echo "hang: $stalled of ${HANG_RUNS:-8} runs stalled" | tee -a "$OUT/hang_summary.txt"
    ;;
  symmetric)
    # Experimental: the decode steps' all-reduces in NCCL symmetric memory
    # (FLASHSERVE_NCCL_SYMMETRIC=1, docs/TENSOR_PARALLEL.md). The collectives alone with and
    # without it, the TP tests with it, then Llama-2-7B batch-1 decode at TP 2 without and with
    # it, alternated twice (labels llama2-7b-sym0 / -sym1).
    CFG=/tmp/fs_models/fs_configs/llama2-7b
    "$B/weights/flashserve-random-model" --out $CFG --preset llama2-7b --config-only 1 > /dev/null 2>&1
    for n in $sizes; do
      [ "$n" -lt 2 ] && continue
      for sym in 0 1; do
        timeout 120 "$B/bench/bench_tp_collectives" --model $CFG --tensor-parallel-size $n \
          --batch 1,16,64 --symmetric $sym >> "$OUT/tp_collectives_symmetric.jsonl" \
          2>> "$OUT/symmetric.log" || rc=1
      done
    done
    cat "$OUT/symmetric.log"
    FLASHSERVE_NCCL_SYMMETRIC=1 timeout 300 "$B/tests/parallel/test_tensor_parallel_cuda" \
      > "$OUT/test_tensor_parallel_cuda_symmetric.log" 2>&1 || rc=1
    echo "test_tensor_parallel_cuda, symmetric: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/test_tensor_parallel_cuda_symmetric.log" | tr '\n' ' ')"
    random_model llama2-7b 300 llama2-7b
    for round in 1 2; do
      for sym in 0 1; do
        FLASHSERVE_NCCL_SYMMETRIC=$sym run_watched 200 "$OUT/sym_${sym}_${round}_stacks.txt" \
          "$OUT/sym_${sym}_${round}.jsonl" "$OUT/sym_${sym}_${round}.log" "$B/bench/bench_e2e" \
          --model "$T" --backend cuda --label llama2-7b-sym$sym --tensor-parallel-size 2 \
          --cases decode:1x128x256 --max-seconds 60 || rc=1
        cat "$OUT/sym_${sym}_${round}.jsonl" >> "$OUT/tp_symmetric_e2e.jsonl"
        echo "round $round, symmetric $sym: $(grep -E '^decode|error' "$OUT/sym_${sym}_${round}.log")"
      done
    done
    ;;
  bench) bench_shape llama2-7b 300 1 ;;
  # 138 GB, written as 32 shards on parallel threads: TP 4 only (TP 2 would need 69 GB a GPU)
  bench70b) bench_shape llama2-70b 400 4 llama2-70b --shards 32 ;;
  bench70b8) bench_shape llama2-70b 120 1 llama2-70b-8layers --layers 8 ;;
  *) echo "unknown stage $stage"; rc=1 ;;
  esac
  # The device returns a few files: everything goes back as one archive, after every stage.
  tar czf "$RESULTS/tp_session.tgz.part" -C "$OUT" . && mv "$RESULTS/tp_session.tgz.part" "$RESULTS/tp_session.tgz"
done
echo "session rc=$rc (t=${SECONDS}s)"
exit $rc
