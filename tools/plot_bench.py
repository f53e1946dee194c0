#!/usr/bin/python3
# Plots the benchmark records in bench/results/**/*.jsonl as PNGs (docs/img/ by default) and
# prints the README's benchmark tables as Markdown. Docs tool only: needs Debian's
# python3-matplotlib (hence /usr/bin/python3), nothing at run time depends on it.
#   tools/plot_bench.py [--results bench/results] [--out docs/img] [--tables]
# For each GPU folder the newest prefill and decode files are used (a record's "date" field if
# it has one, else the date git committed the file, else its mtime); every title names the GPU
# as the driver reported it and that date.
import argparse
import collections
import datetime
import json
import os
import subprocess
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def run_date(path, rows):
    """(date string, how it was found) for a results file."""
    for r in rows:
        for k in ("date", "timestamp"):
            if r.get(k):
                return str(r[k])[:10], "run"
    try:
        d = subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%cs", "--", path],
                           capture_output=True, text=True, check=True).stdout.strip()
        if d:
            return d, "recorded"
    except (OSError, subprocess.CalledProcessError):
        pass
    return datetime.date.fromtimestamp(os.path.getmtime(path)).isoformat(), "file date"


# Files of another timing method than the main one (decode: memset L2 flush, runs held behind a
# spin kernel) are plotted only when nothing else is there.
ALTERNATE_METHODS = ("_memset_flush", "_rotate_held")


def newest(files):
    """The newest (date, name) of [(path, rows, date, how)], main timing method first."""
    main = [f for f in files if not any(m in os.path.basename(f[0]) for m in ALTERNATE_METHODS)]
    return max(main or files, key=lambda f: (f[2], os.path.basename(f[0])))


def collect(results_dir):
    """{(gpu_folder, bench): [(path, rows, date, how)]} for every .jsonl under results_dir."""
    found = collections.defaultdict(list)
    for dirpath, _, names in os.walk(results_dir):
        for name in sorted(names):
            if not name.endswith(".jsonl"):
                continue
            path = os.path.join(dirpath, name)
            rows = load(path)
            benches = {r.get("bench") for r in rows}
            kind = next((b for b in ("attention_prefill", "attention_decode", "server") if b in benches), None)
            if kind is None:
                continue
            date, how = run_date(path, rows)
            found[(os.path.relpath(dirpath, results_dir), kind)].append((path, rows, date, how))
    return found


def gpu_name(rows):
    names = sorted({r["gpu"] for r in rows if r.get("gpu") and r["gpu"] != "none"})
    return ", ".join(names) or "unknown GPU"


def title(what, device, date, how, path):
    device = "\n".join(textwrap.wrap(device, 110))
    return f"{what}\n{device}\n{how} {date}: {os.path.relpath(path, ROOT)}"


# ---- prefill ------------------------------------------------------------------------------

def prefill_series(rows):
    """shape -> {series name: TFLOP/s}; ours = the launcher's default in that run and the best
    compiled tile variant measured in the same run."""
    by_shape = collections.OrderedDict()
    for r in rows:
        if r.get("bench") != "attention_prefill" or r.get("tflops") is None:
            continue
        s = by_shape.setdefault(r["shape"], {})
        impl = r["impl"]
        if impl == "flashserve":
            s["flashserve (default)"] = r["tflops"]
        elif impl.startswith("flashserve:"):
            if r["tflops"] > s.get("flashserve (best variant)", (0, ""))[0]:
                s["flashserve (best variant)"] = (r["tflops"], impl.split(":", 1)[1])
        elif impl in ("torch_flash", "torch_cudnn"):
            s[impl] = r["tflops"]
    return by_shape


def shape_label(shape):
    """b1_h32_l4096_d128_causal -> three short lines for an axis tick."""
    parts = shape.split("_")
    return "\n".join(" ".join(parts[i:i + 3]) for i in range(0, len(parts), 3))


def plot_prefill(path, rows, date, how, out):
    data = prefill_series(rows)
    shapes = list(data)
    series = [("flashserve (default)", "#1f77b4"), ("flashserve (best variant)", "#6baed6"),
              ("torch_flash", "#ff7f0e"), ("torch_cudnn", "#7f7f7f")]
    fig, ax = plt.subplots(figsize=(11, 5.2))
    width = 0.2
    for i, (name, color) in enumerate(series):
        vals = [data[s].get(name) for s in shapes]
        vals = [v[0] if isinstance(v, tuple) else (v or 0) for v in vals]
        xs = [j + (i - 1.5) * width for j in range(len(shapes))]
        bars = ax.bar(xs, vals, width, label=name.replace("torch_", "torch SDPA "), color=color)
        if name == "flashserve (default)":
            for b, s in zip(bars, shapes):
                flash = data[s].get("torch_flash")
                if flash and b.get_height():
                    ax.annotate(f"{b.get_height() / flash:.2f}x", (b.get_x() + b.get_width() / 2, b.get_height()),
                                ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels([shape_label(s) for s in shapes], fontsize=7)
    ax.set_ylabel("TFLOP/s (bf16, useful FLOPs)")
    ax.legend(fontsize=8, ncol=4, loc="upper left")
    ax.set_ylim(0, max(v for d in data.values() for v in
                       [x[0] if isinstance(x, tuple) else x for x in d.values()]) * 1.15)
    ax.set_title(title("Prefill attention (paged KV, block 16) vs PyTorch SDPA; label = speedup vs flash",
                       gpu_name(rows), date, how, path), fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def prefill_table(rows):
    data = prefill_series(rows)
    lines = ["| shape | flashserve default | best variant | torch flash | torch cuDNN | default vs flash |",
             "|---|---|---|---|---|---|"]
    for s, d in data.items():
        best = d.get("flashserve (best variant)")
        ours = d.get("flashserve (default)")
        flash = d.get("torch_flash")
        lines.append(f"| {s} | {ours:.0f} | {best[0]:.0f} ({best[1]}) | {flash:.0f} | "
                     f"{d.get('torch_cudnn', 0):.0f} | {ours / flash:.2f} |")
    mm = [r["tflops"] for r in rows if r.get("bench") == "bf16_matmul"]
    if mm:
        lines.append(f"\nTFLOP/s; bf16 8192^3 matmul in the same run: {mm[0]:.0f} TFLOP/s.")
    return "\n".join(lines)


# ---- decode -------------------------------------------------------------------------------

def decode_configs(rows):
    """(hq, hkv, d) -> {impl: {B: [(kv_len, gb_s, us)]}} for flashserve and torch_best."""
    cfg = collections.OrderedDict()
    for r in rows:
        if r.get("bench") != "attention_decode" or r.get("impl") not in ("flashserve", "torch_best"):
            continue
        c = cfg.setdefault((r["hq"], r["hkv"], r["d"]), {})
        c.setdefault(r["impl"], collections.defaultdict(list))[r["B"]].append(
            (r["kv_len"], r["gb_s"], r["time_us_p50"]))
    for c in cfg.values():
        for per_b in c.values():
            for pts in per_b.values():
                pts.sort()
    return cfg


def plot_decode(path, rows, date, how, out):
    cfg = decode_configs(rows)
    copy = next((r["gb_s"] for r in rows if r.get("impl") == "d2d_copy"), None)
    fig, axes = plt.subplots(1, len(cfg), figsize=(5 * len(cfg), 4.8), sharey=True, squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, ((hq, hkv, d), c) in zip(axes[0], cfg.items()):
        for i, b in enumerate(sorted(c.get("flashserve", {}))):
            for impl, style in (("flashserve", "-o"), ("torch_best", "--x")):
                pts = c.get(impl, {}).get(b)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=colors[i % len(colors)],
                            ms=4, label=f"B={b} {'flashserve' if impl == 'flashserve' else 'torch best'}")
        if copy:
            ax.axhline(copy, color="k", lw=0.8, ls=":", label=f"D2D copy {copy:.0f} GB/s")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("kv_len (tokens per sequence)")
        ax.set_title(f"{hq} q heads / {hkv} kv heads, head_dim {d}", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("GB/s of K+V read (bf16)")
    axes[0][-1].legend(fontsize=7, loc="lower right")
    fig.suptitle(title("Decode attention (split-K, paged KV) vs PyTorch SDPA best backend",
                       gpu_name(rows), date, how, path), fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def decode_table(rows):
    by_key = {}
    for r in rows:
        if r.get("bench") == "attention_decode" and r.get("impl") == "flashserve":
            by_key[(r["hq"], r["hkv"], r["d"], r["B"], r["kv_len"])] = r
    lines = ["| B | kv_len | hq/hkv | d | µs | GB/s | frac_of_copy_bw | speedup_vs_torch_best |",
             "|---|---|---|---|---|---|---|---|"]
    for (hq, hkv, d, b, L), r in by_key.items():
        if b not in (1, 32) or L not in (2048, 32768):
            continue  # the README shows a few; docs/decode_attention.md has them all
        sp = r.get("speedup_vs_torch_best")
        lines.append(f"| {b} | {L} | {hq}/{hkv} | {d} | {r['time_us_p50']:.1f} | {r['gb_s']:.0f} | "
                     f"{r.get('frac_of_copy_bw', 0):.2f} | {sp:.2f} |" if sp is not None else
                     f"| {b} | {L} | {hq}/{hkv} | {d} | {r['time_us_p50']:.1f} | {r['gb_s']:.0f} | "
                     f"{r.get('frac_of_copy_bw', 0):.2f} | n/a |")
    return "\n".join(lines)


# ---- CPU server ---------------------------------------------------------------------------

def plot_server(path, rows, date, how, out):
    rows = sorted((r for r in rows if r.get("bench") == "server"), key=lambda r: r["concurrency"])
    # One sweep per plot: the label of the first record (others, e.g. a long-prompt TTFT probe,
    # stay in the file and the tables).
    rows = [r for r in rows if r.get("label") == rows[0].get("label")]
    conc = [r["concurrency"] for r in rows]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4.6))
    # Every request generates max_tokens tokens, so requests/s is output tokens/s / max_tokens:
    # one line, with requests/s written at each point.
    a1.plot(conc, [r["output_tokens_per_s"] for r in rows], "-o")
    for r in rows:
        a1.annotate(f"{r['requests_per_s']:.1f} req/s", (r["concurrency"], r["output_tokens_per_s"]),
                    textcoords="offset points", xytext=(0, -14), ha="center", fontsize=8)
    a1.set_xlabel("concurrent streaming requests")
    a1.set_ylabel("output tokens/s")
    a1.set_ylim(bottom=0)
    for key, style in (("ttft_ms_p50", "-o"), ("ttft_ms_p99", "--o"), ("tpot_ms_p50", "-s"), ("tpot_ms_p99", "--s")):
        a2.plot(conc, [r[key] for r in rows], style, label=key)
    a2.set_yscale("log")
    a2.set_xlabel("concurrent streaming requests")
    a2.set_ylabel("ms (client side)")
    a2.legend(fontsize=8)
    for a in (a1, a2):
        a.set_xscale("log", base=2)
        a.set_xticks(conc)
        a.set_xticklabels([str(c) for c in conc])
        a.grid(alpha=0.3)
    r0 = rows[0]
    gpu = r0.get("gpu")
    where = f"GPU {gpu}" if gpu and gpu not in ("none", "cpu") else f"CPU {r0.get('cpu', '?')}"
    device = f"{r0.get('label') or 'CPU backend'}; {where}; prompt {r0.get('prompt_len')} " \
             f"+ {r0.get('max_tokens')} tokens"
    fig.suptitle(title("flashserve server throughput and latency (bench_server, loopback)",
                       device, date, how, path), fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def server_table(rows):
    lines = ["| concurrency | requests/s | output tokens/s | TTFT p50 / p99 ms | TPOT p50 / p99 ms |",
             "|---|---|---|---|---|"]
    for r in sorted((r for r in rows if r.get("bench") == "server"), key=lambda r: r["concurrency"]):
        lines.append(f"| {r['concurrency']} | {r['requests_per_s']:.1f} | {r['output_tokens_per_s']:.0f} | "
                     f"{r['ttft_ms_p50']:.1f} / {r['ttft_ms_p99']:.1f} | {r['tpot_ms_p50']:.2f} / {r['tpot_ms_p99']:.2f} |")
    return "\n".join(lines)


# ---- main ---------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--results", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "img"))
    ap.add_argument("--tables", action="store_true", help="print Markdown tables of the same data")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    plotters = {"attention_prefill": ("prefill", plot_prefill, prefill_table),
                "attention_decode": ("decode", plot_decode, decode_table),
                "server": ("server", plot_server, server_table)}
    found = collect(args.results)
    if not found:
        sys.exit(f"no benchmark records under {args.results}")
    for (folder, kind), files in sorted(found.items()):
        path, rows, date, how = newest(files)
        stem, plot, table = plotters[kind]
        out = os.path.join(args.out, f"{stem}_{folder.replace(os.sep, '_')}.png")
        plot(path, rows, date, how, out)
        print(f"{os.path.relpath(out, ROOT)}  <-  {os.path.relpath(path, ROOT)} ({how} {date})", file=sys.stderr)
        if args.tables:
            print(f"\n### {stem}: {gpu_name(rows) if kind != 'server' else 'CPU'}, "
                  f"{os.path.relpath(path, ROOT)} ({how} {date})\n")
            print(table(rows))


if __name__ == "__main__":
    main()
