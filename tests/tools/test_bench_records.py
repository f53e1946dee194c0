#!/usr/bin/env python3
"""The benchmark records and the docs that cite them agree (label unit; ctest test_bench_records).

- Every record a doc cites exists: a link or path into bench/results/, or a record's file name
  (`name.jsonl`, a glob such as `hf_compare_*.jsonl` matching at least one).
- No record is orphaned: every file under bench/results/ (but its README.md) is cited by itself
  in README.md, bench/README.md, bench/results/README.md or docs/: by its path, by `<gpu>/name`,
  or by its bare name where no other record has that name. A glob cites none: it would keep every
  superseded record of a benchmark alive.
- Code does not cite records: no source file names a record or a folder of bench/results/ (a
  comment points at the doc section that gives the figures; docs cite the records).
A record no doc cites shows nothing to a reader: cite it where its numbers are used, or delete it
(git keeps it).
"""
import collections
import fnmatch
import os
import re
import sys

from doc_checks import ROOT, finish, read

RESULTS = os.path.join(ROOT, "bench", "results")
SOURCE_EXTS = (".h", ".hpp", ".cpp", ".cu", ".cuh", ".py", ".sh", ".mjs", ".cmake", "CMakeLists.txt")
# Not product code: the records themselves, the docs, build trees, and this check and the
# plotter's test, whose fixtures are records by design.
SKIP_DIRS = {".git", "build", "out", "docs", os.path.join("bench", "results"),
             os.path.join("tests", "tools", "plot_bench_fixture")}
SKIP_FILES = {os.path.join("tests", "tools", "test_bench_records.py"),
              os.path.join("tests", "tools", "test_plot_bench.py")}


def docs():
    paths = ["README.md", "bench/README.md", "bench/results/README.md"]
    paths += ["docs/" + f for f in sorted(os.listdir(os.path.join(ROOT, "docs"))) if f.endswith(".md")]
    return {p: read(p) for p in paths}


def records():
    out = []
    for d, _, files in os.walk(RESULTS):
        for f in files:
            rel = os.path.relpath(os.path.join(d, f), ROOT)
            if rel != os.path.join("bench", "results", "README.md"):
                out.append(rel)
    return sorted(out)


def check_docs(texts, recs, problems):
    """The records the docs cite by themselves; a problem for every citation that matches none."""
    by_name = collections.defaultdict(list)
    for r in recs:
        by_name[os.path.basename(r)].append(r)
    cited = set()
    for doc, text in texts.items():
        base = os.path.dirname(os.path.join(ROOT, doc))
        # Paths into bench/results: links (relative to the doc) and paths from the repository root.
        for link in re.findall(r"\]\(([^)\s#]*bench/results/[^)\s#]+)", text):
            path = os.path.normpath(os.path.join(base, link))
            if not os.path.exists(path):
                problems.append(f"{doc}: cites {link}, which does not exist")
            cited.add(os.path.relpath(path, ROOT))
        for path in re.findall(r"(?<![./\w])(bench/results/[\w./*{},-]+\.(?:jsonl|txt|log))", text):
            matches = [r for r in recs if fnmatch.fnmatch(r, path)]
            if not matches and "{" not in path:
                problems.append(f"{doc}: cites {path}, which does not exist")
            if not any(c in path for c in "*?{"):
                cited.update(matches)
        # `<gpu>/name` (the table of bench/results/README.md).
        for path in re.findall(r"(?<![./\w])([\w-]+/(?:logs/)?[\w.-]+\.(?:jsonl|txt|log))\b", text):
            matches = [r for r in recs if r.endswith("/" + path)]
            if not matches and os.path.isdir(os.path.join(RESULTS, path.split("/")[0])):
                problems.append(f"{doc}: cites {path}, which is not in bench/results")
            cited.update(matches)
        # Record names: `name.jsonl` or a glob of them.
        # A versioned name (`prefill_v4.jsonl`) is a record; others are output names in commands.
        for name in set(re.findall(r"(?<![\w*/-])([\w*-]+\.jsonl)\b", text)):
            matches = [r for r in recs if fnmatch.fnmatch(os.path.basename(r), name)]
            fixture = re.search(r"plot_bench_fixture/[\w/]*" + re.escape(name), text)
            if not matches and re.search(r"_v\d", name) and not fixture:
                problems.append(f"{doc}: cites the record {name}, which is not in bench/results")
            if "*" not in name and len(by_name[name]) == 1:
                cited.update(matches)
        for name in set(re.findall(r"(?<![\w/*-])([\w.-]+\.(?:txt|log))\b", text)):
            if len(by_name[name]) == 1:
                cited.update(by_name[name])
    return cited


def check_code(recs, problems):
    names = {os.path.basename(r) for r in recs}
    folders = sorted({r.split(os.sep)[2] for r in recs})
    pattern = re.compile(r"bench/results/(?:" + "|".join(map(re.escape, folders)) + r")\b|"
                         r"(?<![\w/.-])(?:" + "|".join(map(re.escape, sorted(names))) + r")\b")
    for d, dirs, files in os.walk(ROOT):
        rel_dir = os.path.relpath(d, ROOT)
        dirs[:] = [x for x in dirs if os.path.normpath(os.path.join(rel_dir, x)) not in SKIP_DIRS]
        for f in files:
            rel = os.path.normpath(os.path.join(rel_dir, f))
            if not f.endswith(SOURCE_EXTS) or rel in SKIP_FILES:
                continue
            with open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace") as fh:
                for n, line in enumerate(fh, 1):
                    m = pattern.search(line)
                    if m:
                        problems.append(f"{rel}:{n}: cites the record {m.group(0)} (point at the "
                                        "doc section that uses it instead)")


def main():
    texts, recs = docs(), records()
    problems = []
    cited = check_docs(texts, recs, problems)
    for r in recs:
        if r not in cited:
            problems.append(f"{r}: no doc cites it by itself (cite it where its numbers are used, "
                            "or delete it)")
    check_code(recs, problems)
    if len(recs) < 10:
        problems.append(f"found only {len(recs)} records: the walk is broken")
    return finish(f"{len(recs)} records, {len(cited & set(recs))} cited", problems)


if __name__ == "__main__":
    sys.exit(main())
