#!/usr/bin/python3
# Plots the benchmark records in bench/results/**/*.jsonl as PNGs (docs/img/ by default) and
# prints docs/BENCHMARKS.md's benchmark tables as Markdown.
#   tools/plot_bench.py [--results bench/results] [--out docs/img]   # plots (needs matplotlib)
#   tools/plot_bench.py --tables [--plots]                          # tables (Python 3 only)
# Docs tool only: plotting needs Debian's python3-matplotlib (hence /usr/bin/python3), imported
# only when plotting, so `--tables` runs on any python3; nothing at run time depends on it.
# For each results folder the newest file of each kind is used (a record's "date" field if it has
# one, else the date git committed the file, else its mtime): prefill and decode attention,
# end-to-end (the newest file whose records carry transformers speedups from the same run) and
# the HTTP server. Every plot title and every table's caption names the GPU as the driver
# reported it (the records' `gpu` field) and that date.
import argparse
import collections
import datetime
import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pyplot():
    """matplotlib.pyplot, imported on first use (plots only; the tables need no matplotlib)."""
    try:
        import matplotlib
    except ImportError:
        sys.exit("plot_bench.py: plots need matplotlib (Debian: apt-get install python3-matplotlib, "
                 "then /usr/bin/python3 tools/plot_bench.py); --tables alone needs none")
    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt
    return plt


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


E2E_BENCHES = ("e2e_decode", "e2e_offline")


def kind_of(rows):
    """The table/plot kind of a results file, or None for files of other benchmarks."""
    benches = {r.get("bench") for r in rows}
    for b in ("attention_prefill", "attention_decode"):
        if b in benches:
            return b
    if server_records(rows):  # closed-loop sweeps; the open loop's goodput is tabled in docs/
        return "server"
    # End-to-end: only files whose flashserve records carry a transformers speedup measured in
    # the same run (the others are A/B runs of one change, listed in bench/results/README.md).
    if any(r.get("bench") in E2E_BENCHES and any(k.startswith("speedup_vs_hf_") for k in r)
           for r in rows):
        return "e2e"
    return None


def collect(results_dir):
    """{(gpu_folder, kind): [(path, rows, date, how)]} for every .jsonl under results_dir."""
    found = collections.defaultdict(list)
    for dirpath, _, names in os.walk(results_dir):
        for name in sorted(names):
            if not name.endswith(".jsonl"):
                continue
            path = os.path.join(dirpath, name)
            rows = load(path)
            kind = kind_of(rows)
            if kind is None:
                continue
            date, how = run_date(path, rows)
            found[(os.path.relpath(dirpath, results_dir), kind)].append((path, rows, date, how))
    return found


def gpu_name(rows):
    names = sorted({r["gpu"] for r in rows if r.get("gpu") and r["gpu"] != "none"})
    return ", ".join(names) or "unknown GPU"


def save(fig, out):
    plt = pyplot()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def title(what, device, date, how, path):
    device = "\n".join(textwrap.wrap(device, 110))
    return f"{what}\n{device}\n{how} {date}: {relpath(path)}"


def relpath(path):
    """A path relative to the repository when it is inside it, else as given."""
    rel = os.path.relpath(os.path.abspath(path), ROOT)
    return path if rel.startswith("..") else rel


HOW = {"run": "run date in the records", "recorded": "date the file was committed",
       "file date": "file modification date"}


def caption(device, date, how, path):
    """The line above every table: device, date (and where the date came from), records."""
    return f"*{device} · {date} ({HOW.get(how, how)}) · `{relpath(path)}`*"


def fmt_rate(v):
    """tokens/s: 746.5, 8,932."""
    return "–" if v is None else (f"{v:,.0f}" if v >= 1000 else f"{v:.1f}")


def fmt_ratio(v, digits=2):
    return "–" if v is None else f"{v:.{digits}f}"


def fmt_speedup(v):
    """54.5, 2.64."""
    return "–" if v is None else (f"{v:.1f}" if v >= 10 else f"{v:.2f}")


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
    plt = pyplot()
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
    save(fig, out)


def prefill_table(path, rows, date, how):
    data = prefill_series(rows)
    lines = [caption(gpu_name(rows), date, how, path), "",
             "| shape | flashserve default | best variant | torch flash | torch cuDNN | default vs flash |",
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
    plt = pyplot()
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
    save(fig, out)


def decode_table(path, rows, date, how):
    by_key = {}
    for r in rows:
        if r.get("bench") == "attention_decode" and r.get("impl") == "flashserve":
            by_key[(r["hq"], r["hkv"], r["d"], r["B"], r["kv_len"])] = r
    lines = [caption(gpu_name(rows), date, how, path), "",
             "| B | kv_len | hq/hkv | d | µs | GB/s | frac_of_copy_bw | speedup_vs_torch_best |",
             "|---|---|---|---|---|---|---|---|"]
    for (hq, hkv, d, b, L), r in by_key.items():
        if b not in (1, 32) or L not in (2048, 32768):
            continue  # docs/BENCHMARKS.md shows a few; docs/DECODE_ATTENTION.md has them all
        sp = r.get("speedup_vs_torch_best")
        lines.append(f"| {b} | {L} | {hq}/{hkv} | {d} | {r['time_us_p50']:.1f} | {r['gb_s']:.0f} | "
                     f"{r.get('frac_of_copy_bw', 0):.2f} | {fmt_ratio(sp)} |")
    copy = next((r["gb_s"] for r in rows if r.get("impl") == "d2d_copy"), None)
    if copy:
        lines.append(f"\nDevice-to-device copy in the same run: {copy:.0f} GB/s.")
    return "\n".join(lines)


# ---- end to end ---------------------------------------------------------------------------

def e2e_rows(rows, bench):
    """flashserve's records of one bench, grouped by model (in file order), then by case and
    device call."""
    order = {}
    for r in rows:
        order.setdefault(r.get("model"), len(order))
    sel = [r for r in rows if r.get("bench") == bench]
    size = "batch_size" if bench == "e2e_decode" else "num_requests"
    return sorted(sel, key=lambda r: (order[r.get("model")], r.get(size, 0), r.get("prompt_len", 0),
                                      r.get("output_len", 0), r.get("device_call", 0)))


def e2e_notes(rows):
    """One line: the ceilings measured in the same processes and the baselines' versions."""
    def span(vals, unit):
        vals = sorted(vals)
        if not vals:
            return None
        lo, hi = f"{vals[0]:.0f}", f"{vals[-1]:.0f}"
        return f"{lo} {unit}" if lo == hi else f"{lo}-{hi} {unit}"
    ceil = [r for r in rows if r.get("bench") == "e2e_ceilings"]
    parts = []
    copy = span([r["copy_gb_s"] for r in ceil if r.get("copy_gb_s")], "GB/s")
    gemm = span([r["bf16_tflops"] for r in ceil if r.get("bf16_tflops")], "TFLOP/s")
    if copy or gemm:
        parts.append("ceilings measured in the same processes: " +
                     ", ".join(x for x in (copy and f"copy {copy}", gemm and f"bf16 GEMM {gemm}") if x))
    versions = sorted({(v.get("transformers"), v.get("torch")) for r in rows
                       if r.get("bench") == "hf_generate" for v in [r.get("versions") or {}]
                       if v.get("transformers")})
    if versions:
        parts.append("baselines: " + "; ".join(f"transformers {t}, torch {p}" for t, p in versions))
    if any("device_call" in r for r in rows):
        parts.append("each row's baselines ran in the same device call as its flashserve run "
                     "(– = not run in that call)")
    if not parts:
        return ""
    text = "; ".join(parts)
    return "\n" + text[0].upper() + text[1:] + "."


# The two end-to-end tables: (bench, heading, count field, its column label, rate field, its
# column label, fraction field). merge_e2e.py names the baselines' rates hf_<impl>_<rate field>.
E2E_KINDS = [
    ("e2e_decode", "Batch-1 decode (tokens/s after the first token; fraction of the bandwidth roofline):",
     "batch_size", "batch", "decode_tokens_per_s", "flashserve tokens/s", "frac_of_roofline"),
    ("e2e_offline", "Offline throughput (all requests at once; output tokens/s; fraction of the "
     "step-time lower bound):", "num_requests", "requests", "output_tokens_per_s",
     "flashserve output tokens/s", "frac_of_step_lower_bound"),
]


def e2e_table(path, rows, date, how):
    """Batch-1 decode and offline throughput, with the transformers baselines of the same run."""
    calls = any("device_call" in r for r in rows)
    cap = caption(gpu_name(rows), date, how, path)
    call_head, call_sep = (" device call |", "---|") if calls else ("", "")

    def call(r):
        return f" {r.get('device_call', '')} |" if calls else ""

    lines = []
    for bench, heading, count, count_label, rate, rate_label, frac in E2E_KINDS:
        recs = e2e_rows(rows, bench)
        if not recs:
            continue
        lines += ([""] if lines else []) + [
            heading, "", cap, "",
            f"| shape | {count_label} x prompt/output | {rate_label} | {frac} | "
            "transformers eager | speedup_vs_hf_eager | transformers static cache + compile | "
            "speedup_vs_hf_static_compile |" + call_head,
            "|---|---|---|---|---|---|---|---|" + call_sep]
        for r in recs:
            lines.append(f"| {r.get('model')} | {r.get(count)} x {r.get('prompt_len')}/{r.get('output_len')} | "
                         f"{fmt_rate(r.get(rate))} | {fmt_ratio(r.get(frac), 3)} | "
                         f"{fmt_rate(r.get('hf_eager_' + rate))} | {fmt_speedup(r.get('speedup_vs_hf_eager'))} | "
                         f"{fmt_rate(r.get('hf_static_compile_' + rate))} | "
                         f"{fmt_speedup(r.get('speedup_vs_hf_static_compile'))} |" + call(r))
    lines.append(e2e_notes(rows))
    return "\n".join(lines).rstrip()


# ---- HTTP server ----------------------------------------------------------------------------

def server_records(rows):
    """The closed-loop sweeps (a concurrency each); open-loop records (--request-rate) have none."""
    return sorted((r for r in rows if r.get("bench") == "server" and "concurrency" in r),
                  key=lambda r: r["concurrency"])


def server_probes(rows):
    """Single-case probes kept beside a sweep (e.g. label `...-ttft2048`: TTFT of long prompts)."""
    return [r for r in server_records(rows) if "ttft" in (r.get("label") or "")]


def server_sweep(rows):
    """The concurrency sweep: the probes left out, one label (the first record's)."""
    probes = server_probes(rows)
    rows = [r for r in server_records(rows) if r not in probes]
    return [r for r in rows if r.get("label") == rows[0].get("label")]


def plot_server(path, rows, date, how, out):
    rows = server_sweep(rows)
    conc = [r["concurrency"] for r in rows]
    plt = pyplot()
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
    save(fig, out)


def server_table(path, rows, date, how):
    sweep = server_sweep(rows)
    r0 = sweep[0]
    gpu = r0.get("gpu")
    device = gpu if gpu and gpu not in ("none", "cpu") else f"no GPU: CPU backend on {r0.get('cpu', '?')}"
    lines = [caption(device, date, how, path), "",
             "| concurrency | requests/s | output tokens/s | TTFT p50 / p99 ms | TPOT p50 / p99 ms |",
             "|---|---|---|---|---|"]
    for r in sweep:
        lines.append(f"| {r['concurrency']} | {r['requests_per_s']:.1f} | {r['output_tokens_per_s']:,.0f} | "
                     f"{r['ttft_ms_p50']:.1f} / {r['ttft_ms_p99']:.1f} | {r['tpot_ms_p50']:.2f} / {r['tpot_ms_p99']:.2f} |")
    for r in server_probes(rows):
        lines.append(f"\nTTFT probe `{r.get('label')}` ({r.get('num_requests')} requests of "
                     f"{r.get('prompt_len')} prompt tokens, concurrency {r.get('concurrency')}): "
                     f"TTFT p50 {r['ttft_ms_p50']:.1f} ms, p99 {r['ttft_ms_p99']:.1f} ms.")
    return "\n".join(lines)


# ---- main ---------------------------------------------------------------------------------

# kind -> (file stem, plotter or None, table), in the order the tables are printed.
KINDS = collections.OrderedDict([
    ("attention_prefill", ("prefill", plot_prefill, prefill_table)),
    ("attention_decode", ("decode", plot_decode, decode_table)),
    ("e2e", ("e2e", None, e2e_table)),
    ("server", ("server", plot_server, server_table)),
])


def main():
    ap = argparse.ArgumentParser(description="Plots and Markdown tables of bench/results.")
    ap.add_argument("--results", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "img"))
    ap.add_argument("--tables", action="store_true",
                    help="print Markdown tables (no plots, no matplotlib needed, unless --plots)")
    ap.add_argument("--plots", action="store_true", help="with --tables: write the plots too")
    args = ap.parse_args()
    plots = args.plots or not args.tables
    found = collect(args.results)
    if not found:
        sys.exit(f"no benchmark records under {args.results}")
    if plots:
        os.makedirs(args.out, exist_ok=True)
    first = True
    for kind, (stem, plot, table) in KINDS.items():
        for folder in sorted(f for f, k in found if k == kind):
            path, rows, date, how = newest(found[(folder, kind)])
            if plots and plot:
                out = os.path.join(args.out, f"{stem}_{folder.replace(os.sep, '_')}.png")
                plot(path, rows, date, how, out)
                print(f"{relpath(out)}  <-  {relpath(path)} ({how} {date})", file=sys.stderr)
            if args.tables:
                if not first:
                    print()
                print(f"<!-- {stem}: {relpath(path)} -->")
                print(table(path, rows, date, how))
                first = False


if __name__ == "__main__":
    main()
