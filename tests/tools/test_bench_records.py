#!/usr/bin/env python3
"""The benchmark records and the docs that cite them agree (label unit; ctest test_bench_records).

- Every record a doc cites exists: a link or path into bench/results/, or a record's file name
  (`name.jsonl`, a glob such as `hf_compare_*.jsonl` matching at least one).
- No record is orphaned: every file under bench/results/ (but its README.md) is cited by name,
  path or glob in README.md, bench/README.md, bench/results/README.md or docs/.
A record no doc cites shows nothing to a reader: cite it where its numbers are used, or delete it
(git keeps it).
"""
import fnmatch
import os
import re
import sys

from doc_checks import ROOT, finish, read

RESULTS = os.path.join(ROOT, "bench", "results")


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


def main():
    texts, recs = docs(), records()
    names = {os.path.basename(r) for r in recs}
    problems = []
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
            if not matches and not ("{" in path):
                problems.append(f"{doc}: cites {path}, which does not exist")
            cited.update(matches)
        # Record names: `name.jsonl` or a glob of them.
        # A versioned name (`prefill_v4.jsonl`) is a record; others are output names in commands.
        for name in set(re.findall(r"(?<![\w*-])([\w*-]+\.jsonl)\b", text)):
            matches = [r for r in recs if fnmatch.fnmatch(os.path.basename(r), name)]
            fixture = re.search(r"plot_bench_fixture/[\w/]*" + re.escape(name), text)
            if not matches and re.search(r"_v\d", name) and not fixture:
                problems.append(f"{doc}: cites the record {name}, which is not in bench/results")
            cited.update(matches)
        for name in set(re.findall(r"(?<![\w/*-])([\w.-]+\.(?:txt|log))\b", text)):
            cited.update(r for r in recs if os.path.basename(r) == name)
    for r in recs:
        if r not in cited:
            problems.append(f"{r}: no doc cites it (cite it where its numbers are used, or delete it)")
    if len(recs) < 10:
        problems.append(f"found only {len(recs)} records: the walk is broken")
    return finish(f"{len(recs)} records, {len(cited)} cited", problems)


if __name__ == "__main__":
    sys.exit(main())
