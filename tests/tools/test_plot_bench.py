#!/usr/bin/env python3
# tools/plot_bench.py --tables, the generator of the README's benchmark tables: run on the small
# fixture folder beside this file (tests/tools/plot_bench_fixture/) and on bench/results, with
# matplotlib made unimportable, so the tables are shown to need nothing but python3. Checks the
# exact rows, the caption (GPU and date) above each table, which file of a kind is used, that the
# server's TTFT probe is not a row of its sweep, and the end-to-end tables' transformers columns.
# Registered in tests/tools/CMakeLists.txt (label unit); run alone: python3 tests/tools/test_plot_bench.py
import datetime
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(ROOT, "tools", "plot_bench.py")
FIXTURE = os.path.join(HERE, "plot_bench_fixture")
GPU = "Fixture GPU 80GB"


def run(*args):
    """(exit status, stdout, stderr) of plot_bench.py with matplotlib hidden behind a stub that
    fails to import."""
    with tempfile.TemporaryDirectory() as stub:
        os.makedirs(os.path.join(stub, "matplotlib"))
        with open(os.path.join(stub, "matplotlib", "__init__.py"), "w") as f:
            f.write("raise ImportError('matplotlib hidden by test_plot_bench')\n")
        env = dict(os.environ, PYTHONPATH=stub)
        p = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, env=env,
                           cwd=ROOT, timeout=120)
    return p.returncode, p.stdout, p.stderr


def blocks(out):
    """{marker line: text up to the next marker} of the --tables output."""
    found, key = {}, None
    for line in out.splitlines():
        if line.startswith("<!-- ") and line.endswith(" -->"):
            key = line
            found[key] = []
        elif key:
            found[key].append(line)
    return {k: "\n".join(v) for k, v in found.items()}


class FixtureTables(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rc, cls.out, cls.err = run("--tables", "--results", FIXTURE)
        cls.blocks = blocks(cls.out)

    def block(self, kind, name):
        key = f"<!-- {kind}: tests/tools/plot_bench_fixture/{name} -->"
        self.assertIn(key, self.blocks, self.out)
        return self.blocks[key]

    def test_runs_without_matplotlib(self):
        self.assertEqual(self.rc, 0, self.err)
        self.assertNotIn(".png", self.err)  # --tables alone writes no plots

    def test_order_and_files(self):
        # prefill, decode, end to end, server; per kind the newest file, the main timing method
        # before a newer alternate one, the e2e file with a same-run comparison.
        self.assertEqual(list(self.blocks), [
            "<!-- prefill: tests/tools/plot_bench_fixture/GPU_X/prefill_v2.jsonl -->",
            "<!-- decode: tests/tools/plot_bench_fixture/GPU_X/decode_v1.jsonl -->",
            "<!-- e2e: tests/tools/plot_bench_fixture/GPU_X/same_run_v1.jsonl -->",
            "<!-- server: tests/tools/plot_bench_fixture/GPU_X/serve_v1.jsonl -->",
            "<!-- server: tests/tools/plot_bench_fixture/cpu/server.jsonl -->"])

    def test_prefill(self):
        b = self.block("prefill", "GPU_X/prefill_v2.jsonl")
        self.assertIn(f"*{GPU} · 2026-01-02 (run date in the records) · "
                      "`tests/tools/plot_bench_fixture/GPU_X/prefill_v2.jsonl`*", b)
        self.assertIn("| b1_h32_l4096_d128_causal | 306 | 308 (m128n48w4s2) | 248 | 534 | 1.23 |", b)
        self.assertIn("bf16 8192^3 matmul in the same run: 793 TFLOP/s.", b)

    def test_decode(self):
        b = self.block("decode", "GPU_X/decode_v1.jsonl")
        self.assertIn(f"*{GPU} · 2026-01-02 (run date in the records)", b)
        self.assertIn("| 1 | 2048 | 32/8 | 128 | 13.4 | 628 | 0.15 | 1.29 |", b)
        self.assertNotIn("| 4 | 2048 |", b)  # the README shows B = 1 and 32 only
        self.assertIn("Device-to-device copy in the same run: 4275 GB/s.", b)

    def test_e2e(self):
        b = self.block("e2e", "GPU_X/same_run_v1.jsonl")
        self.assertEqual(b.count(f"*{GPU} · 2026-01-04 (run date in the records)"), 2)  # both tables
        for row in (
                "| tinyllama-1.1b | 1 x 128/256 | 746.5 | 0.513 | 13.7 | 54.5 | 283.0 | 2.64 | 1 |",
                "| llama2-7b | 1 x 128/256 | 191.3 | 0.845 | 11.6 | 16.5 | 119.1 | 1.61 | 2 |",
                "| tinyllama-1.1b | 16 x 128/256 | 8,932 | 0.409 | 186.4 | 47.9 | – | – | 1 |",
                "| tinyllama-1.1b | 16 x 128/256 | 9,213 | 0.422 | – | – | 2,694 | 3.42 | 2 |"):
            self.assertIn(row, b)
        self.assertIn("copy 3020-3023 GB/s, bf16 GEMM 788-789 TFLOP/s", b)
        self.assertIn("transformers 5.17.0, torch 2.11.0+cu130", b)
        self.assertNotIn("111.0", b)  # e2e_v1_ab.jsonl has no transformers comparison

    def test_server(self):
        b = self.block("server", "GPU_X/serve_v1.jsonl")
        self.assertIn(f"*{GPU} · 2026-01-05 (run date in the records)", b)
        self.assertIn("| 1 | 5.1 | 650 | 2.9 / 13.0 | 1.51 / 1.58 |", b)
        self.assertIn("| 16 | 69.3 | 8,865 | 8.9 / 56.4 | 1.71 / 1.85 |", b)
        rows = [line for line in b.splitlines() if line.startswith("| 1 |")]
        self.assertEqual(len(rows), 1, b)  # the ttft2048 probe is no row of the sweep
        self.assertIn("TTFT probe `tinyllama-1.1b-ttft2048` (4 requests of 2040 prompt tokens, "
                      "concurrency 1): TTFT p50 14.1 ms", b)

    def test_cpu_server(self):
        b = self.block("server", "cpu/server.jsonl")
        self.assertIn("*no GPU: CPU backend on AMD EPYC · 2025-12-31 (run date in the records)", b)
        self.assertIn("| 1 | 17.9 | 2,291 | 10.2 / 18.6 | 0.36 / 0.61 |", b)


class DateFallback(unittest.TestCase):
    def test_file_date_outside_git(self):
        # No "date" in the records and no git history: the file's modification date.
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "GPU_Y"))
            path = os.path.join(d, "GPU_Y", "serve.jsonl")
            with open(path, "w") as f:
                f.write(json.dumps({"bench": "server", "label": "x", "concurrency": 2, "gpu": "GPU Y",
                                    "requests_per_s": 1.0, "output_tokens_per_s": 10.0,
                                    "ttft_ms_p50": 1.0, "ttft_ms_p99": 2.0, "tpot_ms_p50": 0.5,
                                    "tpot_ms_p99": 0.6}) + "\n")
            t = datetime.datetime(2025, 3, 4, 12).timestamp()
            os.utime(path, (t, t))
            rc, out, err = run("--tables", "--results", d)
        self.assertEqual(rc, 0, err)
        self.assertIn("*GPU Y · 2025-03-04 (file modification date)", out)
        self.assertIn("| 2 | 1.0 | 10 | 1.0 / 2.0 | 0.50 / 0.60 |", out)


class RealResults(unittest.TestCase):
    def test_bench_results(self):
        # The repository's own records: every kind has a table, each with its caption.
        rc, out, err = run("--tables")
        self.assertEqual(rc, 0, err)
        b = blocks(out)
        for kind in ("prefill", "decode", "e2e", "server"):
            self.assertTrue(any(k.startswith(f"<!-- {kind}: bench/results/") for k in b), out)
        for key, text in b.items():
            self.assertRegex(text, r"(?m)^\*[^*]+ · \d{4}-\d\d-\d\d \([a-z ]+\) · `bench/results/", key)

    def test_plots_need_matplotlib(self):
        # Without --tables it plots, and says clearly what is missing.
        with tempfile.TemporaryDirectory() as d:
            rc, _, err = run("--results", FIXTURE, "--out", d)
        self.assertNotEqual(rc, 0)
        self.assertIn("plots need matplotlib", err)


if __name__ == "__main__":
    unittest.main(verbosity=2)
