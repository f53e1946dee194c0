#!/usr/bin/env python3
"""Checks flashserve's /v1/embeddings against sentence-transformers on a random Qwen3-Embedding.

Builds a random-weight model of the Qwen3-Embedding-0.6B shape (hidden 1024, 16 heads, 8 KV heads,
head_dim 128, intermediate 3072, rope_theta 1e6, rms eps 1e-6; fewer layers and a small synthetic
byte-level BPE vocabulary, made here with `tokenizers`, whose post-processor appends <|endoftext|>
as Qwen3-Embedding's does), saved as the Qwen3-Embedding checkpoints are: the bare Qwen3Model
(tensor names without "model.", no lm_head, tie_word_embeddings false as in the 8B's config) in
bf16, with a sentence-transformers modules.json, 1_Pooling/config.json (last token) and Normalize.
Starts the
built flashserve on it, posts a batch of varied inputs, and compares each vector with
sentence-transformers' (fp32 over the same bf16 weights; transformers plus manual last-token
pooling when sentence-transformers is missing). Prints each cosine similarity, appends one JSON
line to --out, and exits 1 when any is below --min-cos. Needs torch, transformers and tokenizers;
no downloads.

  python3 tools/check_embeddings.py --flashserve build/server/flashserve \\
      --out out/gpu/embeddings_check.jsonl [--backend cuda] [--layers 4]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

SHAPE = {"hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
         "intermediate_size": 3072, "rope_theta": 1e6, "rms_norm_eps": 1e-6}

INPUTS = [
    "hi",
    "Once upon a time there was a little girl who lived in a village near the forest.",
    "What is the capital of France?",
    "Instruct: Given a web search query, retrieve relevant passages\nQuery: how do embeddings work",
    "The quick brown fox jumps over the lazy dog. " * 20,  # a few hundred tokens
    "a",
    "Embeddings map text to vectors; similar texts map to nearby vectors.",
    "1234567890 !@#$%^&*() mixed 字符 and émojis 🙂",
    "Once upon a time there was a little girl who lived in a village near the sea.",
    "The cat sat on the mat. " * 60,  # long: several prefill chunks
]


def make_tokenizer(folder, vocab_size):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - 1, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = INPUTS * 4 + ["the of and to in is was for on with as by at from " * 8]
    tok.train_from_iterator(corpus, trainer)
    eos = tok.token_to_id("<|endoftext|>")
    tok.post_processor = processors.TemplateProcessing(
        single="$A <|endoftext|>", pair="$A <|endoftext|> $B <|endoftext|>",
        special_tokens=[("<|endoftext|>", eos)])
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>",
                   "pad_token": "<|endoftext|>", "padding_side": "left"}, f)
    return tok.get_vocab_size(), eos


def make_model(folder, layers, vocab_size, seed):
    import torch
    from transformers import Qwen3Config, Qwen3Model
    os.makedirs(folder, exist_ok=True)
    vocab, eos = make_tokenizer(folder, vocab_size)
    torch.manual_seed(seed)
    # Untied with no lm_head in the file: flashserve must serve it for embeddings all the same.
    config = Qwen3Config(vocab_size=vocab, num_hidden_layers=layers, max_position_embeddings=4096,
                         tie_word_embeddings=False, bos_token_id=eos, eos_token_id=eos, **SHAPE)
    model = Qwen3Model(config).to(torch.bfloat16)  # config.json "architectures": ["Qwen3Model"]
    model.save_pretrained(folder, safe_serialization=True)
    names = safetensors_names(folder)
    if any(n.startswith("model.") or n.startswith("lm_head") for n in names):
        sys.exit(f"{folder}: expected bare Qwen3Model tensor names, got e.g. {sorted(names)[:3]}")
    os.makedirs(os.path.join(folder, "1_Pooling"), exist_ok=True)
    with open(os.path.join(folder, "modules.json"), "w") as f:
        json.dump([{"idx": 0, "name": "0", "path": "",
                    "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling",
                    "type": "sentence_transformers.models.Pooling"},
                   {"idx": 2, "name": "2", "path": "2_Normalize",
                    "type": "sentence_transformers.models.Normalize"}], f)
    pooling = {"word_embedding_dimension": SHAPE["hidden_size"], "pooling_mode_cls_token": False,
               "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False,
               "pooling_mode_mean_sqrt_len_tokens": False,
               "pooling_mode_weightedmean_tokens": False, "pooling_mode_lasttoken": True,
               "include_prompt": True}
    with open(os.path.join(folder, "1_Pooling", "config.json"), "w") as f:
        json.dump(pooling, f)
    with open(os.path.join(folder, "sentence_bert_config.json"), "w") as f:
        json.dump({"max_seq_length": 4096, "do_lower_case": False}, f)
    return vocab


def safetensors_names(folder):
    """Every tensor name in the folder's safetensors files (one file or an index's shards)."""
    from safetensors import safe_open
    names = []
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(folder, f), framework="pt") as st:
                names += list(st.keys())
    return names


def reference(folder, texts, device):
    """fp32 vectors, one text at a time (no padding): sentence-transformers, else transformers."""
    import torch
    try:
        from sentence_transformers import SentenceTransformer
        st = SentenceTransformer(folder, device=device, model_kwargs={"torch_dtype": torch.float32})
        out = st.encode(texts, batch_size=1, convert_to_numpy=True, normalize_embeddings=False)
        return [list(map(float, v)) for v in out], "sentence-transformers"
    except ImportError:
        from transformers import AutoModel, AutoTokenizer
        tok = AutoTokenizer.from_pretrained(folder)
        model = AutoModel.from_pretrained(folder, torch_dtype=torch.float32).to(device).eval()
        vectors = []
        with torch.no_grad():
            for t in texts:
                ids = tok(t, return_tensors="pt").to(device)
                h = model(**ids).last_hidden_state[0, -1]
                vectors.append((h / h.norm()).tolist())
        return vectors, "transformers (last token, L2)"


def start_server(binary, folder, backend, log_path):
    log = open(log_path, "w")
    proc = subprocess.Popen([binary, "--model", folder, "--port", "0", "--backend", backend,
                             "--task", "auto", "--no-request-log"],
                            stdout=subprocess.PIPE, stderr=log, text=True)
    deadline = time.time() + 600
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if "listening on http://" in line:
            return proc, int(line.rsplit(":", 1)[1].split()[0].strip("/"))
    proc.kill()
    sys.exit(f"flashserve did not start; see {log_path}")


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def cosine(a, b):
    ab = sum(x * y for x, y in zip(a, b))
    aa = sum(x * x for x in a)
    bb = sum(y * y for y in b)
    return ab / (aa * bb) ** 0.5


def gpu_name():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, check=True).stdout
        return out.strip().splitlines()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "none"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flashserve", required=True, help="the built flashserve binary")
    ap.add_argument("--out", required=True, help="JSONL file the record is appended to")
    ap.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-cos", type=float, default=0.999)
    ap.add_argument("--keep", help="write the model folder here and keep it")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="fs_embed_check_")
    folder = args.keep or os.path.join(work, "model")
    try:
        vocab = make_model(folder, args.layers, args.vocab_size, args.seed)
        proc, port = start_server(args.flashserve, folder, args.backend,
                                  os.path.join(work, "server.log"))
        try:
            got = post(port, "/v1/embeddings", {"input": INPUTS})
            again = post(port, "/v1/embeddings", {"input": INPUTS[::-1]})  # prefix cache warm
            ids = [post(port, "/tokenize", {"prompt": t})["tokens"] for t in INPUTS]
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        device = "cuda" if args.backend == "cuda" else "cpu"
        want, ref_name = reference(folder, INPUTS, device)
        from transformers import AutoTokenizer
        hf_ids = [AutoTokenizer.from_pretrained(folder)(t)["input_ids"] for t in INPUTS]
        cos = []
        for i, text in enumerate(INPUTS):
            v = got["data"][i]["embedding"]
            c = cosine(v, want[i])
            c_again = cosine(v, again["data"][len(INPUTS) - 1 - i]["embedding"])
            same_ids = "" if ids[i] == hf_ids[i] else "  TOKENS DIFFER from transformers'"
            print(f"{i:2d} tokens {len(ids[i]):4d} cos {c:.6f} (batch order reversed: "
                  f"{c_again:.6f}){same_ids}  {text[:40]!r}")
            cos.append(min(c, c_again) if same_ids == "" else -1.0)
        min_cos = min(cos)
        record = {"bench": "embeddings_check", "gpu": gpu_name(), "backend": args.backend,
                  "reference": ref_name, "model_shape": dict(SHAPE, num_hidden_layers=args.layers,
                                                             vocab_size=vocab),
                  "weights": "random bf16, reference fp32", "n": len(INPUTS), "min_cos": min_cos,
                  "usage_prompt_tokens": got["usage"]["prompt_tokens"],
                  "command": " ".join(sys.argv)}
        with open(args.out, "a") as f:
            f.write(json.dumps(record) + "\n")
        print(f"min cos {min_cos:.6f} over {len(INPUTS)} vectors ({ref_name}); "
              f"{'ok' if min_cos >= args.min_cos else 'FAILED'} (threshold {args.min_cos})")
        return 0 if min_cos >= args.min_cos else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
