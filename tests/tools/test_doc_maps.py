#!/usr/bin/env python3
"""The maps in the docs list what the code has (label unit; ctest test_doc_maps).

Each list is read from the code, so a folder, route or architecture added there fails this test
until the map that should list it does:
- every top-level folder, and every room of server/, in docs/ARCHITECTURE.md;
- every route of server/http_server.cpp's table in README.md, docs/API_CONTRACT.md,
  docs/SERVER.md and the first line of `flashserve --help` (when the binary is given);
- every supported architecture (the rows of weights/hf_config.cpp's kFamilies) in
  README.md, docs/ARCHITECTURE.md and docs/MODELS.md;
- docs/ holds UPPER_CASE.md files only, and every relative link in README.md and docs/ resolves.

usage: test_doc_maps.py [path/to/flashserve]
"""
import os
import re
import subprocess
import sys

from doc_checks import ROOT, finish, read


def tracked_top_folders():
    """Top-level folders with tracked files (the checkout's build outputs are not)."""
    try:
        out = subprocess.run(["git", "-C", ROOT, "ls-files"], capture_output=True, text=True,
                             check=True).stdout
        return sorted({p.split("/")[0] for p in out.splitlines() if "/" in p and not p.startswith(".")})
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (a source tarball)
        skip = {"build", "models", "shared", "node_modules"}
        return sorted(d for d in os.listdir(ROOT) if os.path.isdir(os.path.join(ROOT, d))
                      and not d.startswith(".") and not d.startswith("build") and d not in skip)


def server_rooms():
    server = os.path.join(ROOT, "server")
    return sorted(d for d in os.listdir(server) if os.path.isdir(os.path.join(server, d)))


def routes():
    """The route table's paths, a capture group spelled {id} as the docs do."""
    table = re.findall(r'\{"(GET|POST|DELETE)",\s*"([^"]+)"', read("server/http_server.cpp"))
    return sorted({re.sub(r"\([^)]*\)", "{id}", path) for _, path in table})


def architectures():
    """The supported architectures: the rows of weights/hf_config.cpp's kFamilies table (not the
    refused ones that name why)."""
    table = re.search(r"kFamilies\[\] = \{(.*?)\n\};", read("weights/hf_config.cpp"), re.S)
    return sorted(set(re.findall(r'\{"([A-Za-z0-9]+For[A-Za-z]+)",', table.group(1))))


def mentions(text, name):
    """`name` as a whole word: a route not only as the start of a longer one."""
    after = r"(?![A-Za-z0-9_{])" if name.endswith("/") else r"(?![A-Za-z0-9_/{])"
    return re.search(r"(?<![A-Za-z0-9_/])" + re.escape(name) + after, text) is not None


def broken_links(rel):
    text, base, bad = read(rel), os.path.dirname(os.path.join(ROOT, rel)), []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#")[0]
        if path and not os.path.exists(os.path.join(base, path)):
            bad.append(f"{rel}: link to {target}")
    return bad


def main():
    problems = []
    arch_doc = read("docs/ARCHITECTURE.md")
    folders = tracked_top_folders()
    for d in folders:
        if not mentions(arch_doc, d + "/"):
            problems.append(f"docs/ARCHITECTURE.md: top-level folder {d}/ is not listed")
    for room in server_rooms():
        if not mentions(arch_doc, f"server/{room}/"):
            problems.append(f"docs/ARCHITECTURE.md: server/{room}/ is not listed")

    paths = routes()
    help_line = None
    if len(sys.argv) > 1:
        out = subprocess.run([sys.argv[1], "--help"], capture_output=True, text=True).stdout
        help_line = out.splitlines()[0] if out else ""
    for doc in ("README.md", "docs/API_CONTRACT.md", "docs/SERVER.md"):
        text = read(doc)
        for p in paths:
            if not mentions(text, p):
                problems.append(f"{doc}: endpoint {p} is not listed")
    if help_line is not None:
        for p in paths:
            if not mentions(help_line, p):
                problems.append(f"flashserve --help, first line: endpoint {p} is missing")

    archs = architectures()
    for doc in ("README.md", "docs/ARCHITECTURE.md", "docs/MODELS.md"):
        text = read(doc)
        for a in archs:
            if a not in text:
                problems.append(f"{doc}: architecture {a} is not listed")

    for f in os.listdir(os.path.join(ROOT, "docs")):
        if f.endswith(".md") and f != f.upper().replace(".MD", ".md"):
            problems.append(f"docs/{f}: docs are named UPPER_CASE.md")
    for doc in ["README.md"] + ["docs/" + f for f in os.listdir(os.path.join(ROOT, "docs"))
                                if f.endswith(".md")]:
        problems += broken_links(doc)

    # The lists must not be empty: a parse that finds nothing would pass everything.
    for name, items, least in (("top-level folders", folders, 10), ("routes", paths, 9),
                               ("architectures", archs, 8)):
        if len(items) < least:
            problems.append(f"found only {len(items)} {name} in the code: the parse is broken")

    return finish(f"{len(folders)} folders, {len(paths)} routes, {len(archs)} architectures checked",
                  problems)


if __name__ == "__main__":
    sys.exit(main())
