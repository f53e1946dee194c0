#!/usr/bin/env bash
# FP8 weights on the GPU machine in one device call (docs/FP8.md, issue 19 part 2): build, the
# FP8 gpu tests, bench_linear FP8 vs bf16, bench_e2e bf16 vs FP8 on the TinyLlama-1.1B and
# Llama-2-7B shapes in the same run (speedup_vs_bf16), and the quality check (flashserve-logits
# bf16 vs FP8 on random-weight TinyLlama: NMSE, top-1 agreement teacher-forced, greedy agreement).
# Like tests/backends/carried_session.sh (whose `build` and environment it uses): .carry/debs
# filled on the development machine first, then on the GPU machine (device tool, carry .carry):
#   tests/backends/fp8_session.sh [STAGE...]    (OUT=dir for the logs; default: every stage)
# Stages, in order: build, tests, linear, e2e_tinyllama, quality, e2e_7b. Results: $OUT/fp8_*.
# Not by default: hf_compare (FP8 against transformers on its comparison models, torch needed).
# With binaries already in build/release (an earlier `build`, or carried_session.sh's packed
# .carry/bin.tar.xz including the targets below), leave `build` out.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-/tmp/fs_out}
mkdir -p "$OUT"
B=$root/build/release
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(build tests linear e2e_tinyllama quality e2e_7b)
targets="test_fp8_matmul test_cuda_ops test_cuda_backend bench_linear bench_e2e flashserve-logits
         flashserve-random-model flashserve-generate"
export LD_LIBRARY_PATH=$root/.carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p /work/shared && ln -sfn "$root/.carry/models" /work/shared/models
M=$root/.carry/models
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
rc=0

# A random-weight bf16 model of a preset's shape under /tmp/fs_models (made once per machine).
random_model() {
  local dir=/tmp/fs_models/$1
  [ -f $dir/config.json ] || timeout 300 "$B/weights/flashserve-random-model" --out $dir \
    --preset $1 --tokenizer $M/llama2-tokenizer/tokenizer.model > "$OUT/fp8_random_$1.log" 2>&1
  echo $dir
}

# bench_e2e of one model in bf16, with --quantize fp8 (larger steps as W8A8 GEMMs, the default
# on FP8 tensor cores), and with --quantize fp8 under FLASHSERVE_FP8_GEMM=0 (larger steps
# dequantize the weight: the weight-only path), back to back on the same GPU; the FP8 records
# get fp8_gemm and speedup_vs_bf16 (tokens/s over the bf16 record of the same case; for cases of
# at most 2 output tokens, the prefill cases, total tokens/s).
e2e_pair() {  # label preset cases
  local T; T=$(random_model $2)
  for v in none fp8 fp8_dequant; do
    FLASHSERVE_FP8_GEMM=$([ $v = fp8_dequant ] && echo 0 || echo 1) timeout 280 \
      "$B/bench/bench_e2e" --model $T --backend cuda --label $1 --quantize ${v%_dequant} \
      --cases $3 --max-seconds 90 \
      > "$OUT/fp8_e2e_$1_$v.jsonl" 2> "$OUT/fp8_e2e_$1_$v.log" || rc=1
    echo "$v:"; grep -E "^(decode|offline)|error" "$OUT/fp8_e2e_$1_$v.log" | head -8
  done
  /usr/bin/python3 - "$OUT/fp8_e2e_$1_none.jsonl" "$OUT/fp8_e2e_$1_fp8.jsonl" \
    "$OUT/fp8_e2e_$1_fp8_dequant.jsonl" >> "$OUT/fp8_e2e.jsonl" <<'PY'
import json, sys
def recs(path):
    # The run records only (not the ceilings line: no model, no prompt length).
    return [j for j in (json.loads(l) for l in open(path) if l.startswith("{"))
            if j.get("bench") in ("e2e_decode", "e2e_offline")]
bf16 = recs(sys.argv[1])
key = lambda j: (j["bench"], j.get("num_requests", 1), j["prompt_len"], j["output_len"])
def rate(j):
    if j["output_len"] <= 2 and j["bench"] == "e2e_offline":
        return j.get("total_tokens_per_s")
    return j.get("decode_tokens_per_s", j.get("output_tokens_per_s"))
tagged = [(j, None) for j in bf16] + [(j, True) for j in recs(sys.argv[2])] + \
         [(j, False) for j in recs(sys.argv[3])]
for j, fp8_gemm in tagged:
    if j.get("dtype") == "fp8":
        j["fp8_gemm"] = fp8_gemm
        base = [b for b in bf16 if key(b) == key(j) and rate(b) and rate(j)]
        if base:
            j["bf16_tokens_per_s"] = rate(base[0])
            j["speedup_vs_bf16"] = rate(j) / rate(base[0])
            j["weight_bytes_ratio_vs_bf16"] = j["weight_bytes"] / base[0]["weight_bytes"]
    print(json.dumps(j))
    print(f'{j["model"]:15} {j["bench"]:12} n={j.get("num_requests", 1):<3} '
          f'p={j["prompt_len"]:<5} {j.get("dtype")}{"" if j.get("fp8_gemm", True) else " (dequantize)"}: '
          f'{rate(j) or 0:9.1f} tok/s  weights {j["weight_bytes"] / 1e9:.2f} GB'
          + (f'  speedup_vs_bf16 {j["speedup_vs_bf16"]:.3f}' if "speedup_vs_bf16" in j else ''),
          file=sys.stderr)
PY
}

for stage in "${stages[@]}"; do
  echo "== stage $stage (t=${SECONDS}s)"
  case $stage in
  build)
    TARGETS=$(echo $targets) tests/backends/carried_session.sh build || exit 1
    ;;
  tests)  # the FP8 kernels against their CPU twins, the backend's ops, the FP8 model vs the CPU
    for t in tests/kernels/test_fp8_matmul tests/backends/test_cuda_ops \
             tests/backends/test_cuda_backend; do
      name=$(basename $t)
      filter=$([ $name = test_cuda_backend ] && echo '*Fp8*' || echo '*')  # its FP8 test
      timeout 400 "$B/$t" --gtest_filter="$filter" > "$OUT/fp8_$name.log" 2>&1; r=$?
      [ $r -ne 0 ] && rc=1
      echo "$name rc=$r: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/fp8_$name.log" | tr '\n' ' ')"
      grep -E "^fp8|NMSE|FAILED  \]|Failure" "$OUT/fp8_$name.log" | head -20
    done
    ;;
  linear)  # each projection: FP8 kernels vs the bf16 kernel and cuBLASLt; above 16 rows the
    # W8A8 GEMM (default) and, under FLASHSERVE_FP8_GEMM=0, dequantize + bf16 GEMM
    timeout 200 "$B/bench/bench_linear" --dtype fp8 --rows 1,2,4,8,16,32,64,256 \
      > "$OUT/fp8_linear.jsonl" 2> "$OUT/fp8_linear.log" || rc=1
    FLASHSERVE_FP8_GEMM=0 timeout 150 "$B/bench/bench_linear" --dtype fp8 --rows 32,64,256 \
      > "$OUT/fp8_linear_dequant.jsonl" 2> "$OUT/fp8_linear_dequant.log" || rc=1
    for f in fp8_linear fp8_linear_dequant; do
      echo "$f:"
      /usr/bin/python3 - "$OUT/$f.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    if j["bench"] == "linear" and j["m"] in (1, 8, 32, 256):
        print(f'{j["shape"]:15} {j["proj"]:8} m={j["m"]:<3} {j["dtype"]} {j["us"]:8.1f} us '
              f'frac_of_copy_bw {j["frac_of_copy_bw"]:.2f}  bf16 {j.get("bf16_us", 0):8.1f} us  '
              f'cuBLASLt {j["cublaslt_us"]:8.1f} us  x{j.get("speedup_vs_bf16", 0):.2f} vs bf16')
    elif j["bench"] == "linear_weights_per_step":
        print(f'{j["shape"]:15} step m={j["m"]:<3} {j["ms"]:.3f} ms frac_of_copy_bw {j["frac_of_copy_bw"]:.2f} '
              f'bf16 {j.get("bf16_ms", 0):.3f} ms cuBLASLt {j["cublaslt_ms"]:.3f} ms x{j.get("speedup_vs_bf16", 0):.2f} vs bf16')
PY
    done
    ;;
  e2e_tinyllama)  # batch-1 decode (the 1.7x target), offline at 8 (skinny) and 64 (W8A8 or
    # dequantize), and prefill (16 x 512 prompt tokens, 2 output tokens each)
    e2e_pair tinyllama-1.1b tinyllama-1.1b \
      decode:1x128x256,offline:8x128x256,offline:64x128x256,offline:16x512x2
    ;;
  quality)  # random-weight TinyLlama, bf16 vs FP8 weights on the GPU, 8 prompts of 256 tokens
    T=$(random_model tinyllama-1.1b)
    /usr/bin/python3 -c "
import json, random
random.seed(19)
json.dump({'prompts': [[1] + [random.randrange(3, 32000) for _ in range(255)] for _ in range(8)]},
          open('$OUT/fp8_prompts.json', 'w'))"
    # fp8: the prompts' positions through the W8A8 GEMM (the default), fp8_dequant: weight-only
    for v in none fp8 fp8_dequant; do
      FLASHSERVE_FP8_GEMM=$([ $v = fp8_dequant ] && echo 0 || echo 1) timeout 200 \
        "$B/bench/flashserve-logits" --model $T --backend cuda --quantize ${v%_dequant} \
        --prompts "$OUT/fp8_prompts.json" --steps 64 --out-logits "$OUT/fp8_last_$v.npy" \
        --out-json "$OUT/fp8_logits_$v.json" --out-all-logits /tmp/fp8_all_$v.npy \
        2> "$OUT/fp8_logits_$v.log" || rc=1
    done
    for v in fp8 fp8_dequant; do
      python3 bench/fp8_quality.py --label tinyllama-1.1b-random-$v \
        --bf16 /tmp/fp8_all_none.npy "$OUT/fp8_logits_none.json" \
        --fp8 /tmp/fp8_all_$v.npy "$OUT/fp8_logits_$v.json" | tee -a "$OUT/fp8_quality.jsonl" || rc=1
    done
    ;;
  e2e_7b)
    e2e_pair llama2-7b llama2-7b decode:1x128x256,offline:8x128x256,offline:64x128x256,offline:16x512x2
    ;;
  hf_compare)  # not in the default list: FP8 flashserve against transformers bf16 and fp32
    # (tools/hf_compare.py, the comparison models of bench/gpu_e2e.sh; needs torch + transformers)
    timeout 400 python3 tools/hf_compare.py --fs-logits "$B/bench/flashserve-logits"       --tokenizer $M/llama2-tokenizer/tokenizer.model --workdir /tmp/fs_hf --logdir "$OUT"       --out "$OUT/fp8_hf_compare.jsonl" --shapes tinyllama-1.1b,llama3.2-1b --steps 64       --quantize fp8 > "$OUT/fp8_hf_compare.log" 2>&1 || rc=1
    grep -E "^(model|-----|tinyllama|llama3)" "$OUT/fp8_hf_compare.log" | head -20
    ;;
  *) echo "unknown stage $stage"; rc=1 ;;
  esac
done
echo "== done (t=${SECONDS}s) rc=$rc"
exit $rc
