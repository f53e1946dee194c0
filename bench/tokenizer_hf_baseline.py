#!/usr/bin/env python3
"""Single-threaded encode throughput of Hugging Face `tokenizers` (the baseline for bench_tokenizer).

  TOKENIZERS_PARALLELISM=false RAYON_NUM_THREADS=1 \
    tokenizer_hf_baseline.py TEXT_FILE NAME=DIR/tokenizer.json [NAME=...] > hf.jsonl

For each tokenizer, two modes on the same UTF-8 text (add_special_tokens=False):
  whole  Tokenizer.encode(text) on the whole file as one string;
  lines  Tokenizer.encode(line) in a Python loop over its lines (split at "\\n" only, newline
         kept; docs/TOKENIZER.md says how the recorded run split them).
encode_batch is not used (it runs on a thread pool). Best of 3 runs; MB = 1e6 bytes of the file.
Prints one JSON line per (tokenizer, mode) with MB/s and the token count.
"""
import json
import os
import sys
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")
import tokenizers  # noqa: E402


def best_of(n, fn):
    best, result = None, None
    for _ in range(n):
        t0 = time.perf_counter()
        result = fn()
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return best, result


def main():
    text = open(sys.argv[1], "rb").read().decode("utf-8")
    nbytes = len(text.encode("utf-8"))
    lines, b = [], 0  # split at "\n" only, newline kept: the same lines as the C++ bench
    while b < len(text):
        e = text.find("\n", b)
        e = len(text) if e < 0 else e + 1
        lines.append(text[b:e])
        b = e
    for arg in sys.argv[2:]:
        name, path = arg.split("=", 1)
        tok = tokenizers.Tokenizer.from_file(path)
        for mode in ("whole", "lines"):
            if mode == "whole":
                secs, n = best_of(3, lambda: len(tok.encode(text, add_special_tokens=False).ids))
            else:
                secs, n = best_of(3, lambda: sum(len(tok.encode(l, add_special_tokens=False).ids)
                                                 for l in lines))
            print(json.dumps({"tokenizer": name, "impl": "hf_tokenizers", "mode": mode,
                              "version": tokenizers.__version__, "bytes": nbytes, "tokens": n,
                              "seconds": secs, "mb_per_s": nbytes / secs / 1e6}), flush=True)


if __name__ == "__main__":
    main()
