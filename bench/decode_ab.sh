#!/bin/bash
# Before/after A/B of a decode-path change on the GPU machine (docs/decode.md): an older tree
# (OLD_SRC, e.g. `git archive` of main into .carry/old) and this one (NEW_SRC, default .) built
# there with tests/backends/carried_session.sh build, the new GPU tests, then bench_e2e (TinyLlama
# and Llama-2-7B shapes), bench_decode_ops and bench_linear, before and after alternated in one
# call; everything under $OUT as one archive. Used for decode_fusion_*.jsonl (bench/results/).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
BN=/tmp/new BO=/tmp/old M=$PWD/.carry/models
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,temperature.gpu --format=csv,noheader | tee $OUT/gpu.txt
SRC=${NEW_SRC:-.} BUILD=$BN TARGETS="test_cuda_ops test_cuda_backend test_fused_decode_ref bench_decode_ops bench_linear bench_e2e flashserve-random-model flashserve-generate" bash tests/backends/carried_session.sh build > $OUT/build_new.log 2>&1
echo "new build rc=$? t=${SECONDS}s"; grep -E "error|FAILED" -A5 $OUT/build_new.log | head -20
SRC=${OLD_SRC:?OLD_SRC: the older tree} BUILD=$BO TARGETS="bench_decode_ops bench_e2e" bash tests/backends/carried_session.sh build > $OUT/build_old.log 2>&1
echo "old build rc=$? t=${SECONDS}s"; grep -E "error|FAILED" -A5 $OUT/build_old.log | head -20
export LD_LIBRARY_PATH=$PWD/.carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p /work/shared && ln -sfn $M /work/shared/models
T=/tmp/fs_models/tinyllama-1.1b T7=/tmp/fs_models/llama2-7b
timeout 100 $BN/weights/flashserve-random-model --out $T --preset tinyllama-1.1b --tokenizer $M/llama2-tokenizer/tokenizer.model > $OUT/random_tiny.log 2>&1
(timeout 250 $BN/weights/flashserve-random-model --out $T7 --preset llama2-7b --tokenizer $M/llama2-tokenizer/tokenizer.model > $OUT/random_7b.log 2>&1; echo "7b model rc=$?" >> $OUT/random_7b.log) &
for t in tests/backends/test_cuda_ops tests/backends/test_cuda_backend tests/kernels/test_fused_decode_ref; do
  n=$(basename $t); timeout 150 $BN/$t > $OUT/$n.log 2>&1; echo "$n rc=$? t=${SECONDS}s: $(grep -E '^\[  (PASSED|FAILED)' $OUT/$n.log | tr '\n' ' ')"
  grep -E "Failure|FAILED  \]|graphs vs eager|NMSE" $OUT/$n.log | head -16
done
grep -c "first difference at -1" $OUT/test_cuda_backend.log
for be in cpu cuda; do timeout 60 $BN/tools/flashserve-generate --model $M/stories260K --backend $be --temperature 0 --max-tokens 200 > $OUT/generate_$be.txt 2>&1; done
strip() { sed 's/prompt [0-9]* tokens in .*//' "$1"; }
cmp -s <(strip $OUT/generate_cpu.txt) <(strip $OUT/generate_cuda.txt) && echo "generate stories260K: cpu == cuda" || echo "generate stories260K: DIFFER"
C=decode:1x128x256,offline:8x128x256,offline:16x128x256,offline:256x128x128,offline:256x512x256
e2e() {  # side label model cases [env]
  env ${5:-X=1} timeout 150 ${1}/bench/bench_e2e --model $3 --backend cuda --label "$2" --cases $4 --max-seconds 60 >> $OUT/e2e.jsonl 2> $OUT/e2e_${2// /_}.log
  echo "e2e $2 rc=$? t=${SECONDS}s: $(grep -E '^(decode|offline)' $OUT/e2e_${2// /_}.log | tr '\n' ' ')"
}
e2e $BO "tinyllama-1.1b before" $T $C
e2e $BN "tinyllama-1.1b after" $T $C
e2e $BN "tinyllama-1.1b after FUSE=0" $T decode:1x128x256,offline:8x128x256 FLASHSERVE_FUSE=0
e2e $BO "tinyllama-1.1b before r2" $T decode:1x128x256
e2e $BN "tinyllama-1.1b after r2" $T decode:1x128x256
for b in old new; do B=$BO; [ $b = new ] && B=$BN
  for cfg in "tinyllama-1.1b 1" "tinyllama-1.1b 8" "llama2-7b 1"; do set -- $cfg
    timeout 60 $B/bench/bench_decode_ops --shape $1 --m $2 --kv-len 256 >> $OUT/decode_ops_$b.jsonl 2>> $OUT/decode_ops.log; done
done
echo "ops t=${SECONDS}s"
timeout 100 $BN/bench/bench_linear --rows 1,2,3,4,8,16 > $OUT/linear.jsonl 2> $OUT/linear.log; echo "linear rc=$? t=${SECONDS}s"
wait; cat $OUT/random_7b.log | tail -2
e2e $BO "llama2-7b before" $T7 decode:1x128x256,offline:16x128x256
e2e $BN "llama2-7b after" $T7 decode:1x128x256,offline:16x128x256
python3 - $OUT <<'PY'
import json, sys, os
d = sys.argv[1]
def lines(f):
    p = os.path.join(d, f)
    return [json.loads(l) for l in open(p) if l.strip()] if os.path.exists(p) else []
for b in ("old", "new"):
    for j in lines(f"decode_ops_{b}.jsonl"):
        if j["bench"] == "decode_op": print(f'ops {b} {j["shape"][:9]} m={j["m"]} {j["op"]:28} {j["us"]:6.2f} us')
        else: print(f'ops {b} {j["shape"][:9]} m={j["m"]} LAYER sum {j["layer_us"]:.1f} us in graph {j.get("layer_in_graph_us", 0):.1f} us, step {j["layers_ms"]:.3f} ms')
for j in lines("linear.jsonl"):
    if j["bench"] == "linear_weights_per_step": print(f'linear {j["shape"][:9]} m={j["m"]} {j["ms"]:.3f} ms frac {j["frac_of_copy_bw"]:.3f} cublaslt {j["cublaslt_ms"]:.3f}')
for j in lines("e2e.jsonl"):
    if "engine_steps" in j: print("e2e", j["model"], j["bench"][4:], j.get("num_requests", 1), j.get("prompt_len"), j.get("output_len"), "tok/s", round(j.get("decode_tokens_per_s", j.get("output_tokens_per_s", 0)), 1), "frac", round(j.get("frac_of_roofline", j.get("frac_of_step_lower_bound", 0)), 3), "fwd", round(j["engine_forward_ms_per_step"], 3))
PY
cd $OUT && tar czf /tmp/decode_ab.tgz . && rm -rf $OUT/* && mv /tmp/decode_ab.tgz $OUT/
echo "done t=${SECONDS}s"
