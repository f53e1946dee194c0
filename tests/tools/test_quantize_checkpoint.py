#!/usr/bin/env python3
# tools/quantize_checkpoint.py as users run it, on the CPU: sharded sources (written here and by
# flashserve-random-model --shards) quantize to the bytes of the single-file source, sharded
# output holds the same tensors as single-file output with a transformers-style index, the
# tokenizer and generation files are copied beside, any --jobs writes identical bytes,
# mixture-of-experts experts (Qwen2/Qwen3-MoE, Mixtral) are quantized while routers and the
# shared expert's gate stay as stored, the committed test checkpoints are reproduced byte for
# byte, and bad input fails with a one-line message naming the problem.
# With flashserve-generate and a SentencePiece tokenizer, a sharded quantized folder is served
# as it is: the program loads it and its copied tokenizer and generates the same text as from
# the single-file quantization.
# Registered in tests/tools/CMakeLists.txt (label unit) with a python3 that has numpy; run alone:
#   python3 tests/tools/test_quantize_checkpoint.py [--random-model PATH] [--generate PATH]
#       [--tokenizer tokenizer.model]
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOOL = os.path.join(ROOT, "tools", "quantize_checkpoint.py")
sys.path.insert(0, os.path.join(ROOT, "tools"))
from quantize import safetensors  # noqa: E402
from quantize.numbers import E4M3, bf16_bits, e4m3_decode, e4m3_encode, to_f32  # noqa: E402

_ap = argparse.ArgumentParser(add_help=False)
for _flag in ("--random-model", "--generate", "--tokenizer"):
    _ap.add_argument(_flag, default="")
PROGRAMS, _rest = _ap.parse_known_args()
sys.argv[1:] = _rest  # the rest is unittest's

SIDE = {"tokenizer.json": b'{"model": {"type": "BPE"}}', "tokenizer_config.json": b'{"a": 1}',
        "tokenizer.model": bytes(range(256)), "special_tokens_map.json": b'{"bos_token": "<s>"}',
        "generation_config.json": b'{"temperature": 0.6}', "chat_template.jinja": b"{{ x }}"}
NOT_SIDE = {"README.md": b"# card", "pytorch_model.bin": b"\0" * 64, "training_args.bin": b"\1"}

FORMATS = {"gptq": ["--format", "gptq", "--group-size", "32", "--asym", "--act-order"],
           "awq": ["--format", "awq", "--group-size", "32"],
           "ct": ["--format", "ct", "--group-size", "32", "--act-order"],
           "ct-fp8": ["--format", "ct-fp8"],
           "block-fp8": ["--format", "block-fp8", "--block-size", "32"]}


def run(*args):
    """(exit status, stderr) of the tool."""
    p = subprocess.run([sys.executable, TOOL, "--quiet", *args], capture_output=True, text=True,
                       timeout=300)
    return p.returncode, p.stderr


def read_json(path):
    with open(path) as f:
        return json.load(f)


def write_json(path, value):
    with open(path, "w") as f:
        json.dump(value, f)


def quantize(*args):
    rc, err = run(*args)
    assert rc == 0, f"quantize_checkpoint.py {' '.join(args)} failed:\n{err}"


def weights(rng, shape, dtype):
    """Random weights not centred on zero, stored as dtype ("BF16", "F16", "F32")."""
    v = (0.05 * rng.standard_normal(shape) + rng.uniform(-0.02, 0.03, shape[-1])).astype(np.float32)
    return (dtype, bf16_bits(v) if dtype == "BF16" else v.astype(np.float16 if dtype == "F16" else np.float32))


def write_folder(folder, config, tensors, shards):
    """config.json, the tensors in one model.safetensors (shards 1) or in `shards` files with the
    index, and the side files (plus files that must not be copied)."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    for name, data in {**SIDE, **NOT_SIDE}.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
    names = sorted(tensors)
    if shards == 1:
        safetensors.write(os.path.join(folder, "model.safetensors"), tensors)
        return
    weight_map = {}
    for s in range(shards):
        part = names[len(names) * s // shards:len(names) * (s + 1) // shards]
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        safetensors.write(os.path.join(folder, file), {n: tensors[n] for n in part})
        weight_map.update({n: file for n in part})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)


def llama(seed, layers=2, dtype="BF16"):
    """A small Llama (hidden 64, intermediate 128, 4 heads of 16, 2 KV heads, vocab 96)."""
    rng = np.random.default_rng(seed)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
              "intermediate_size": 128, "num_hidden_layers": layers, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 96, "rms_norm_eps": 1e-5,
              "tie_word_embeddings": False}
    t = {"model.embed_tokens.weight": weights(rng, (96, 64), dtype),
         "lm_head.weight": weights(rng, (96, 64), dtype),
         "model.norm.weight": ("F32", np.ones(64, np.float32))}
    for i in range(layers):
        p = f"model.layers.{i}."
        for name, shape in (("self_attn.q_proj", (64, 64)), ("self_attn.k_proj", (32, 64)),
                            ("self_attn.v_proj", (32, 64)), ("self_attn.o_proj", (64, 64)),
                            ("mlp.gate_proj", (128, 64)), ("mlp.up_proj", (128, 64)),
                            ("mlp.down_proj", (64, 128))):
            t[p + name + ".weight"] = weights(rng, shape, dtype)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            t[p + norm + ".weight"] = ("F32", np.ones(64, np.float32))
    return config, t


def moe(seed, kind):
    """Two MoE layers of 4 experts: kind "qwen3" (mlp.experts.E.*, router mlp.gate), "qwen2"
    (plus mlp.shared_expert.* and mlp.shared_expert_gate) or "mixtral"
    (block_sparse_moe.experts.E.w1/w2/w3, router block_sparse_moe.gate)."""
    rng = np.random.default_rng(seed)
    config, t = llama(seed, 2)
    config["architectures"] = [{"qwen3": "Qwen3MoeForCausalLM", "qwen2": "Qwen2MoeForCausalLM",
                                "mixtral": "MixtralForCausalLM"}[kind]]
    for i in range(2):
        p = f"model.layers.{i}."
        for name in ("gate_proj", "up_proj", "down_proj"):
            del t[p + "mlp." + name + ".weight"]
        block = p + ("block_sparse_moe." if kind == "mixtral" else "mlp.")
        t[block + "gate.weight"] = weights(rng, (4, 64), "BF16")
        for e in range(4):
            names = ("w1", "w3", "w2") if kind == "mixtral" else ("gate_proj", "up_proj", "down_proj")
            for name, shape in zip(names, ((32, 64), (32, 64), (64, 32))):
                t[f"{block}experts.{e}.{name}.weight"] = weights(rng, shape, "BF16")
        if kind == "qwen2":
            for name, shape in (("gate_proj", (64, 64)), ("up_proj", (64, 64)), ("down_proj", (64, 64))):
                t[f"{p}mlp.shared_expert.{name}.weight"] = weights(rng, shape, "BF16")
            t[p + "mlp.shared_expert_gate.weight"] = weights(rng, (1, 64), "BF16")
    return config, t


def tensors_of(folder):
    """{name: (dtype, shape, bytes)} of every tensor of an output folder, single or sharded."""
    files = [f for f in os.listdir(folder) if f.startswith("model") and f.endswith(".safetensors")]
    out = {}
    for f in files:
        for name, ref in safetensors.read_header(os.path.join(folder, f)).items():
            assert name not in out, f"{name} in two files"
            out[name] = (ref.dtype, ref.shape, ref.load().tobytes())
    return out


def files_of(folder):
    """{relative path: bytes} of every file under folder."""
    out = {}
    for base, _, names in os.walk(folder):
        for n in names:
            with open(os.path.join(base, n), "rb") as f:
                out[os.path.relpath(os.path.join(base, n), folder)] = f.read()
    return out


class QuantizeCheckpoint(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="test_quantize_checkpoint_")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def test_sharded_source_and_output_hold_the_single_file_bytes(self):
        config, t = llama(1, layers=3)
        write_folder(self.path("single"), config, t, 1)
        write_folder(self.path("sharded"), config, t, 4)
        for fmt, flags in FORMATS.items():
            with self.subTest(fmt):
                quantize("--source", self.path("single"), "--out", self.path(fmt, "a"), *flags)
                quantize("--source", self.path("sharded"), "--out", self.path(fmt, "b"), *flags)
                a, b = files_of(self.path(fmt, "a")), files_of(self.path(fmt, "b"))
                self.assertIn("model.safetensors", a)
                self.assertEqual(a, b)  # every file, the weights' bytes included
                # Sharded output: the same tensors, bit for bit, in files of at most 20 kB.
                limit = 20000
                quantize("--source", self.path("sharded"), "--out", self.path(fmt, "c"), *flags,
                         "--max-shard-size", f"{limit // 1000}KB")
                self.check_shards(self.path(fmt, "c"), limit, tensors_of(self.path(fmt, "a")))
                self.assertEqual(read_json(self.path(fmt, "c", "config.json")),
                                 read_json(self.path(fmt, "a", "config.json")))

    def check_shards(self, folder, limit, want):
        """folder holds want's tensors in shards named and indexed as transformers writes them."""
        names = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))
        self.assertNotIn("model.safetensors", names)
        self.assertGreater(len(names), 2)
        self.assertEqual(names, [f"model-{i + 1:05d}-of-{len(names):05d}.safetensors"
                                 for i in range(len(names))])
        with open(os.path.join(folder, "model.safetensors.index.json")) as f:
            text = f.read()
        index = json.loads(text)
        self.assertEqual(text, json.dumps(index, indent=2, sort_keys=True) + "\n")
        self.assertEqual(set(index), {"metadata", "weight_map"})
        self.assertEqual(index["metadata"]["total_size"], sum(len(v[2]) for v in want.values()))
        self.assertEqual(set(index["weight_map"]), set(want))
        got = {}
        for name in names:
            held = safetensors.read_header(os.path.join(folder, name))
            self.assertEqual({n for n, f in index["weight_map"].items() if f == name}, set(held))
            size = sum(r.nbytes for r in held.values())
            self.assertTrue(size <= limit or len(held) == 1, f"{name}: {size} bytes")
            got.update({n: (r.dtype, r.shape, r.load().tobytes()) for n, r in held.items()})
        self.assertEqual(got, want)

    def test_side_files_are_copied_and_only_they(self):
        config, t = llama(2)
        write_folder(self.path("src"), config, t, 3)
        os.makedirs(self.path("src", "additional_chat_templates"))
        with open(self.path("src", "additional_chat_templates", "tool_use.jinja"), "wb") as f:
            f.write(b"{{ tools }}")
        quantize("--source", self.path("src"), "--out", self.path("out"), *FORMATS["gptq"])
        got = files_of(self.path("out"))
        for name, data in SIDE.items():
            self.assertEqual(got.get(name), data, name)
        self.assertEqual(got.get(os.path.join("additional_chat_templates", "tool_use.jinja")),
                         b"{{ tools }}")
        for name in NOT_SIDE:
            self.assertNotIn(name, got)
        out_config = json.loads(got["config.json"])
        self.assertEqual(out_config["quantization_config"]["quant_method"], "gptq")
        self.assertEqual({k: v for k, v in out_config.items() if k != "quantization_config"}, config)

    def test_every_job_count_writes_the_same_bytes(self):
        config, t = llama(3, layers=4)
        write_folder(self.path("src"), config, t, 2)
        for fmt in ("gptq", "block-fp8"):
            runs = []
            for jobs in ("1", "2", "3"):
                out = self.path(fmt + jobs)
                quantize("--source", self.path("src"), "--out", out, *FORMATS[fmt], "--jobs", jobs,
                         "--max-shard-size", "30KB", "--expected")
                runs.append(files_of(out))
            self.assertIn("model.safetensors.index.json", runs[0])
            self.assertEqual(runs[1], runs[0], fmt)
            self.assertEqual(runs[2], runs[0], fmt)

    def test_rerun_into_the_same_folder_leaves_one_layout(self):
        config, t = llama(4)
        write_folder(self.path("src"), config, t, 1)
        out = self.path("out")
        quantize("--source", self.path("src"), "--out", out, *FORMATS["awq"], "--max-shard-size", "10KB")
        self.assertIn("model.safetensors.index.json", os.listdir(out))
        quantize("--source", self.path("src"), "--out", out, *FORMATS["awq"])
        weights_files = sorted(f for f in os.listdir(out) if f.startswith("model"))
        self.assertEqual(weights_files, ["model.safetensors"])

    def test_random_model_shards(self):
        if not PROGRAMS.random_model:
            self.skipTest("no --random-model given")  # the ctest run passes it
        for shards in ("1", "3"):
            subprocess.run([PROGRAMS.random_model, "--out", self.path("rm" + shards), "--preset", "tiny",
                            "--dtype", "bf16", "--seed", "5", "--shards", shards],
                           check=True, capture_output=True, timeout=120)
        self.assertIn("model.safetensors.index.json", os.listdir(self.path("rm3")))
        # The tiny preset's intermediate size (688) is no multiple of 32: whole-row groups.
        for fmt, flags in (("gptq", ["--format", "gptq", "--group-size", "-1", "--act-order"]),
                           ("ct", ["--format", "ct", "--group-size", "-1", "--asym"]),
                           ("block-fp8", FORMATS["block-fp8"])):
            quantize("--source", self.path("rm1"), "--out", self.path(fmt + "1"), *flags)
            quantize("--source", self.path("rm3"), "--out", self.path(fmt + "3"), *flags)
            self.assertEqual(files_of(self.path(fmt + "3")), files_of(self.path(fmt + "1")), fmt)

    def test_sharded_quantized_folder_is_served_as_it_is(self):
        if not (PROGRAMS.random_model and PROGRAMS.generate and os.path.exists(PROGRAMS.tokenizer)):
            self.skipTest("no --random-model, --generate or --tokenizer given")  # ctest passes them
        # Llama 2's tokenizer beside random weights of the tiny preset (vocabulary 32000), in 3
        # shards; quantized into shards of at most 2 MB and into one file.
        subprocess.run([PROGRAMS.random_model, "--out", self.path("src"), "--preset", "tiny",
                        "--dtype", "bf16", "--seed", "8", "--shards", "3", "--scale", "0.1",
                        "--tokenizer", PROGRAMS.tokenizer], check=True, capture_output=True, timeout=120)
        texts = {}
        for fmt, flags in (("gptq", ["--format", "gptq", "--group-size", "-1", "--act-order"]),
                           ("block-fp8", FORMATS["block-fp8"])):
            for layout, size in (("sharded", "2MB"), ("single", "5GB")):
                out = self.path(fmt + "-" + layout)
                quantize("--source", self.path("src"), "--out", out, "--max-shard-size", size, *flags)
                self.assertEqual(os.path.exists(os.path.join(out, "model.safetensors.index.json")),
                                 layout == "sharded")
                with open(os.path.join(out, "tokenizer.model"), "rb") as a, open(PROGRAMS.tokenizer, "rb") as b:
                    self.assertEqual(a.read(), b.read())
                p = subprocess.run([PROGRAMS.generate, "--model", out, "--prompt", "Once upon a time",
                                    "--max-tokens", "12", "--temperature", "0", "--backend", "cpu",
                                    "--threads", "1"], capture_output=True, text=True, timeout=300)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertTrue(p.stdout.startswith("Once upon a time"), p.stdout)
                self.assertGreater(len(p.stdout.strip()), len("Once upon a time"), p.stdout)
                texts[fmt, layout] = p.stdout
            self.assertEqual(texts[fmt, "sharded"], texts[fmt, "single"], fmt)

    def test_moe_experts_quantized_routers_kept(self):
        for kind in ("qwen3", "qwen2", "mixtral"):
            config, t = moe(5, kind)
            src = self.path(kind)
            write_folder(src, config, t, 3)
            routers = sorted(n for n in t if n.endswith(("mlp.gate.weight", "shared_expert_gate.weight",
                                                         "block_sparse_moe.gate.weight")))
            experts = sorted(n[:-len(".weight")] for n in t if ".experts." in n or ".shared_expert." in n)
            self.assertEqual(len(routers), 4 if kind == "qwen2" else 2)
            self.assertEqual(len(experts), 2 * 4 * 3 + (6 if kind == "qwen2" else 0))
            for fmt, flags in FORMATS.items():
                with self.subTest(kind=kind, fmt=fmt):
                    out = self.path(kind + "-" + fmt)
                    quantize("--source", src, "--out", out, *flags, "--expected")
                    got = tensors_of(out)
                    for r in routers:  # as stored
                        self.assertEqual(got[r], (t[r][0], t[r][1].shape, t[r][1].tobytes()), r)
                    packed = {"gptq": ".qweight", "awq": ".qweight", "ct": ".weight_packed"}
                    for m in experts:
                        if fmt in packed:
                            self.assertIn(m + packed[fmt], got)
                            self.assertNotIn(m + ".weight", got)
                        else:
                            self.assertEqual(got[m + ".weight"][0], "F8_E4M3", m)
                    self.check_expert_values(out, fmt, t, experts)
                    self.check_router_config(read_json(os.path.join(out, "config.json")),
                                             fmt, kind, routers)

    def check_expert_values(self, out, fmt, t, experts):
        """Each expert's quantized values lie within a step of its weights: the unpacked int4
        codes (expected.safetensors) dequantize to within one scale (half a step of rounding,
        and up to half a step more where a rounded zero point or a scale rounded down to its
        stored precision clips the group's edge values), FP8 to within E4M3's relative
        half-step (2^-4)."""
        exp = safetensors.read_header(os.path.join(out, "expected.safetensors"))
        for m in experts:
            w = to_f32(*t[m + ".weight"]).astype(np.float64)
            if fmt in ("gptq", "awq", "ct"):
                codes = exp[m + ".codes"].load().astype(np.float64)
                zeros, scales = exp[m + ".zeros"].load(), exp[m + ".scales"].load()
                g = exp[m + ".g_idx"].load()
                deq = (codes - zeros[:, g]) * scales[:, g]
                self.assertTrue(np.all(np.abs(deq - w) <= scales[:, g] * (1 + 1e-6)), m)
            elif fmt == "block-fp8":
                deq = exp[m + ".dequantized"].load().astype(np.float64)
                self.assertTrue(np.all(np.abs(deq - w) <= np.abs(w) * 2.0 ** -4 + 2.0 ** -10), m)
            else:  # ct-fp8: one scale per row
                ref = safetensors.read_header(os.path.join(out, "model.safetensors"))
                deq = e4m3_decode(ref[m + ".weight"].load()) * ref[m + ".weight_scale"].load()
                self.assertTrue(np.all(np.abs(deq - w) <= np.abs(w) * 2.0 ** -4 + 2.0 ** -10), m)

    def check_router_config(self, config, fmt, kind, routers):
        """The routers are named where each format's uploads name what they keep."""
        q = config["quantization_config"]
        modules = [r[:-len(".weight")] for r in routers]
        if fmt in ("awq", "block-fp8"):  # substring match: full names, never a bare "gate"
            kept = q["modules_to_not_convert"]
            self.assertTrue(set(modules) <= set(kept), kept)
            self.assertNotIn("gate", kept)
        elif fmt in ("ct", "ct-fp8"):
            want = {"qwen3": [r"re:.*mlp\.gate$"],
                    "qwen2": [r"re:.*mlp\.gate$", r"re:.*mlp\.shared_expert_gate$"],
                    "mixtral": [r"re:.*block_sparse_moe\.gate$"]}[kind]
            self.assertEqual(q["ignore"], ["lm_head"] + sorted(want))
        else:  # GPTQ lists what it quantizes, and only with --ignore
            self.assertNotIn("modules_in_block_to_quantize", q)

    def test_gptq_ignore_lists_the_experts_quantized(self):
        config, t = moe(6, "mixtral")
        write_folder(self.path("src"), config, t, 1)
        quantize("--source", self.path("src"), "--out", self.path("out"), *FORMATS["gptq"],
                 "--ignore", "self_attn.o_proj")
        q = read_json(self.path("out", "config.json"))["quantization_config"]
        listed = q["modules_in_block_to_quantize"][0]
        self.assertEqual(listed[:3], ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"])
        self.assertEqual(listed[3:6], ["block_sparse_moe.experts.0.w1",
                                       "block_sparse_moe.experts.0.w3", "block_sparse_moe.experts.0.w2"])
        self.assertEqual(len(listed), 3 + 4 * 3)
        self.assertIn("model.layers.1.self_attn.o_proj.weight", tensors_of(self.path("out")))

    def test_committed_checkpoints_are_reproduced(self):
        data = os.path.join(ROOT, "tests", "weights", "data", "quantized")
        runs = {"gptq_sym": ["--format", "gptq", "--group-size", "32"],
                "gptq_asym_actorder": ["--format", "gptq", "--group-size", "32", "--asym", "--act-order"],
                "awq": ["--format", "awq", "--group-size", "32"],
                "ct_group_asym": ["--format", "ct", "--group-size", "32", "--asym", "--act-order"],
                "ct_channel_sym": ["--format", "ct", "--group-size", "-1", "--ignore", "mlp.down_proj"],
                "ct_fp8": ["--format", "ct-fp8"],
                "block_fp8": ["--format", "block-fp8", "--block-size", "16"]}
        self.assertEqual(sorted(runs), sorted(os.listdir(data)))
        for name, flags in runs.items():
            out = self.path(name)
            quantize("--tiny", "7", "--out", out, "--expected", *flags)
            want = files_of(os.path.join(data, name))
            got = files_of(out)
            self.assertEqual({k: got[k] for k in want}, want, name)

    def test_e4m3_codes_are_the_nearest(self):
        """The bit-level encoder against a search over the 127 non-negative finite codes (ties
        to the even code, saturation at 448): every code, every midpoint and their f32
        neighbours, and a million log-uniform values of both signs."""
        def nearest(x):
            a = np.minimum(np.abs(x.astype(np.float64)), 448.0)
            hi = np.clip(np.searchsorted(E4M3, a), 1, 126)
            lo = hi - 1
            dl, dh = a - E4M3[lo], E4M3[hi] - a
            code = np.where(dl < dh, lo, np.where(dh < dl, hi, np.where(lo % 2 == 0, lo, hi)))
            return (code | np.where(x < 0, 0x80, 0)).astype(np.uint8)
        pts = np.concatenate([E4M3, (E4M3[1:] + E4M3[:-1]) / 2, [449, 464, 465, 1e6, np.inf]])
        pts = pts.astype(np.float32)
        pts = np.concatenate([pts, np.nextafter(pts, np.float32(np.inf)),
                              np.nextafter(pts, np.float32(0))])
        rng = np.random.default_rng(0)
        r = np.exp(rng.uniform(np.log(1e-5), np.log(600), 1_000_000)).astype(np.float32)
        for x in (pts, -pts, r, -r):
            np.testing.assert_array_equal(e4m3_encode(x), nearest(x))
        self.assertEqual(e4m3_encode(np.float32([-0.0, -1e-9, 448, -448])).tolist(),
                         [0x00, 0x80, 0x7E, 0xFE])

    def test_bad_input_fails_with_a_clear_message(self):
        config, t = llama(7)
        good = self.path("good")
        write_folder(good, config, t, 3)

        def broken(name, change):
            folder = self.path(name)
            shutil.copytree(good, folder)
            change(folder)
            return folder

        def edit_index(folder, f):
            path = os.path.join(folder, "model.safetensors.index.json")
            index = read_json(path)
            f(index["weight_map"])
            write_json(path, index)

        def truncate(folder):
            path = os.path.join(folder, "model-00002-of-00003.safetensors")
            size = os.path.getsize(path)
            with open(path, "r+b") as f:
                f.truncate(size - 100)

        def quantized_config(folder):
            write_json(os.path.join(folder, "config.json"),
                       {**config, "quantization_config": {"quant_method": "awq"}})

        def replace_weights(folder, name, value):
            """The folder's weights as one model.safetensors, with tensor `name` replaced."""
            os.remove(os.path.join(folder, "model.safetensors.index.json"))
            for f in os.listdir(folder):
                if f.endswith(".safetensors"):
                    os.remove(os.path.join(folder, f))
            safetensors.write(os.path.join(folder, "model.safetensors"), {**t, name: value})

        def odd_columns(folder):
            replace_weights(folder, "model.layers.0.mlp.down_proj.weight",
                            weights(np.random.default_rng(1), (64, 120), "BF16"))

        def nan_weight(folder):
            k = t["model.layers.1.self_attn.k_proj.weight"][1].copy()
            k[3, 5] = 0x7FC0  # a bf16 NaN
            replace_weights(folder, "model.layers.1.self_attn.k_proj.weight", ("BF16", k))

        cases = [
            ("missing_shard", lambda d: os.remove(os.path.join(d, "model-00002-of-00003.safetensors")),
             [], ["model-00002-of-00003.safetensors", "not found"]),
            ("missing_tensor", lambda d: edit_index(d, lambda m: m.update(
                {"model.layers.9.mlp.up_proj.weight": "model-00001-of-00003.safetensors"})),
             [], ["model.layers.9.mlp.up_proj.weight", "model-00001-of-00003.safetensors",
                  "does not hold it"]),
            ("shard_path", lambda d: edit_index(d, lambda m: m.update(
                {"lm_head.weight": "../elsewhere.safetensors"})), [], ["lm_head.weight", "not a file name"]),
            ("no_weights", lambda d: os.remove(os.path.join(d, "model.safetensors.index.json")),
             [], ["no model.safetensors and no model.safetensors.index.json"]),
            ("truncated", truncate, [], ["model-00002-of-00003.safetensors", "truncated"]),
            ("quantized", quantized_config, [], ["quantized already", "awq"]),
            ("odd_columns", odd_columns, [], ["model.layers.0.mlp.down_proj [64, 120]", "--ignore"]),
            ("fused_experts", lambda d: replace_weights(d, "model.layers.1.mlp.experts.gate_up_proj", (
                "BF16", np.zeros((4, 64, 64), np.uint16))), [],
             ["model.layers.1.mlp.experts.gate_up_proj [4, 64, 64]", "per-expert"]),
            ("nan", lambda d: nan_weight(d), [], ["model.layers.1.self_attn.k_proj", "NaN"]),
            ("shard_size", lambda d: None, ["--max-shard-size", "lots"], ["--max-shard-size", "'lots'"]),
        ]
        for name, change, extra, words in cases:
            with self.subTest(name):
                folder = broken(name, change)
                rc, err = run("--source", folder, "--out", self.path(name + "_out"),
                              *FORMATS["gptq"], *extra)
                self.assertEqual(rc, 1, err)
                self.assertNotIn("Traceback", err)
                out = self.path(name + "_out")  # no weights left behind
                self.assertFalse(os.path.exists(out) and any(
                    f.endswith((".safetensors", ".part")) for f in os.listdir(out)), name)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                for w in words:
                    self.assertIn(w, err)
        rc, err = run("--source", good, "--out", good, *FORMATS["awq"])
        self.assertEqual(rc, 1)
        self.assertIn("is the source folder", err)


if __name__ == "__main__":
    unittest.main()
