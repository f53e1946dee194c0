#!/usr/bin/env python3
"""Reads ctest JUnit files (ctest --output-junit) and prints one line: how many tests were skipped
and why, e.g. "skipped 7 of 58 tests: no CUDA device (6: test_cuda_ops, ...); podman info fails
here (1: test_docker)". The reason is the last line of the test's output that mentions skipping,
so "100% tests passed" never hides a GPU suite that did not run.
usage: skipped_tests.py JUNIT.xml..."""
import re
import sys
import xml.etree.ElementTree as ET


def reason_of(case):
    out = "".join(e.text or "" for e in case.iter("system-out"))
    lines = [l.strip() for l in out.splitlines() if re.search(r"skip", l, re.I) and l.strip()]
    if not lines:
        return "no reason printed"
    r = re.sub(r"^\[[^\]]*\]\s*", "", lines[-1])  # "[test_docker] SKIPPED: ..." -> "SKIPPED: ..."
    r = re.sub(r"^SKIPPED:\s*", "", r, flags=re.I)
    return re.sub(r":?\s*skipping \(exit 77\)$", "", r)


def main(paths):
    total, by_reason = 0, {}
    for p in paths:
        try:
            root = ET.parse(p).getroot()
        except (OSError, ET.ParseError) as e:
            print(f"skipped tests: cannot read {p}: {e}")
            return 1
        for case in root.iter("testcase"):
            total += 1
            if case.get("status") == "notrun" or case.find("skipped") is not None:
                by_reason.setdefault(reason_of(case), []).append(case.get("name"))
    n = sum(len(v) for v in by_reason.values())
    if n == 0:
        print(f"skipped 0 of {total} tests")
        return 0
    parts = [f"{r} ({len(names)}: {', '.join(names)})" for r, names in sorted(by_reason.items())]
    print(f"skipped {n} of {total} tests: " + "; ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
