#!/usr/bin/env python3
"""bench/llama_cpp's two Python pieces on the CPU: records.py pairs each bench_e2e case with the
llama.cpp result of the same case (and reports an error, never a ratio, where one side has
none), and sentencepiece.py reads Llama 2's tokenizer.model as the real package does."""
import json
import os
import subprocess
import sys
import tempfile

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(root, "bench", "llama_cpp"))
import sentencepiece  # noqa: E402  (this folder's reader: the machine lacks the package)

problems = []


def check(ok, what):
    if not ok:
        problems.append(what)


def write(d, name, rows, prefix=""):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(prefix)
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return path


with tempfile.TemporaryDirectory() as d:
    e2e = write(d, "e2e.jsonl", [
        {"bench": "e2e_decode", "prompt_len": 128, "output_len": 256, "decode_tokens_per_s": 300.0},
        {"bench": "e2e_offline", "prompt_len": 512, "output_len": 1, "num_requests": 1, "elapsed_s": 0.05},
        {"bench": "e2e_offline", "prompt_len": 128, "output_len": 128, "num_requests": 16,
         "output_tokens_per_s": 2000.0},
        {"bench": "e2e_offline", "prompt_len": 128, "output_len": 128, "num_requests": 64,
         "error": "refused"},
        {"bench": "e2e_ceilings"}])
    bench = write(d, "bench.jsonl", [
        {"n_prompt": 0, "n_gen": 256, "n_depth": 128, "avg_ts": 200.0},
        {"n_prompt": 0, "n_gen": 256, "n_depth": 0, "avg_ts": 999.0},
        {"n_prompt": 512, "n_gen": 0, "n_depth": 0, "avg_ts": 5120.0}])
    batched = write(d, "batched.log", [{"n_kv_max": 16384, "pp": 128, "tg": 128, "pl": 16, "t": 2.048},
                                       {"n_kv_max": 16384, "pp": 128, "tg": 128, "pl": 64, "t": 4.0}],
                    prefix="llama.cpp log lines\n")
    out = subprocess.run([sys.executable, os.path.join(root, "bench", "llama_cpp", "records.py"),
                          "--label", "l", "--model", "llama2-7b", "--weights", "bf16",
                          "--llama-weights", "bf16", "--e2e", e2e, "--llama-bench", bench,
                          "--llama-batched", batched, "--command", "c", "--gpu", "g"],
                         capture_output=True, text=True, check=True).stdout
    recs = {r["case"]: r for r in map(json.loads, out.splitlines())}
    check(sorted(recs) == ["decode:1x128x256", "offline:16x128x128", "offline:64x128x128",
                           "prefill:1x512x0"], f"cases {sorted(recs)}")
    check(abs(recs["decode:1x128x256"]["speedup_vs_llama_cpp"] - 1.5) < 1e-9, "decode: 300 over tg256 at depth 128")
    check(abs(recs["prefill:1x512x0"]["speedup_vs_llama_cpp"] - 2.0) < 1e-9, "prefill: 512/0.05 over pp512")
    check(abs(recs["offline:16x128x128"]["speedup_vs_llama_cpp"] - 2.0) < 1e-9,
          "offline 16: 2000 over 16*128/2.048")
    check("speedup_vs_llama_cpp" not in recs["offline:64x128x128"]
          and recs["offline:64x128x128"].get("error") == "refused", "a refused case has an error, no ratio")

sp = sentencepiece.SentencePieceProcessor()
sp.LoadFromFile(os.path.join(root, "..", "shared", "models", "llama2-tokenizer", "tokenizer.model"))
check(sp.vocab_size() == 32000, f"vocab {sp.vocab_size()}")
check([sp.IdToPiece(i) for i in (0, 1, 2, 3)] == ["<unk>", "<s>", "</s>", "<0x00>"], "first pieces")
check(sp.IsUnknown(0) and sp.IsControl(1) and sp.IsControl(2) and sp.IsByte(3) and not sp.IsByte(300),
      "piece types")
check(sp.GetScore(1000) < 0 and sp.GetScore(1000) > sp.GetScore(20000), "scores fall with the id")

for p in problems:
    print("FAIL:", p)
print("ok" if not problems else f"{len(problems)} problems")
sys.exit(1 if problems else 0)
