#!/usr/bin/env python3
"""Turns a random-weight Llama folder into a gpt-oss-speaking one for the client tests: a
byte-level BPE tokenizer.json (tests/tokenizer/data/hf/gpt2's) with harmony's markers added as
special tokens as o200k_harmony has them, gpt-oss's chat_template.jinja, and <|return|> and
<|call|> as the end-of-sequence tokens (gpt-oss's generation_config.json).

usage: make_harmony_model.py SOURCE_DIR MODEL_DIR   (prints the vocabulary size the weights need)
"""
import json
import os
import shutil
import sys

MARKERS = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>",
           "<|call|>"]


def main():
    src, out = sys.argv[1], sys.argv[2]
    with open(os.path.join(src, "tests/tokenizer/data/hf/gpt2/tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    next_id = max(len(tok["model"]["vocab"]), 1 + max(t["id"] for t in tok["added_tokens"]))
    ids = {}
    for m in MARKERS:
        ids[m] = next_id
        tok["added_tokens"].append({"id": next_id, "content": m, "single_word": False,
                                    "lstrip": False, "rstrip": False, "normalized": False,
                                    "special": True})
        next_id += 1
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": "<|endoftext|>", "eos_token": "<|return|>"}, f)
    with open(os.path.join(out, "generation_config.json"), "w", encoding="utf-8") as f:
        json.dump({"eos_token_id": [ids["<|return|>"], ids["<|call|>"]]}, f)
    shutil.copy(os.path.join(src, "tests/chat_template/gpt_oss/chat_template.jinja"),
                os.path.join(out, "chat_template.jinja"))
    print(next_id)


if __name__ == "__main__":
    main()
