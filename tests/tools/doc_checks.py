"""What the docs checks share (test_doc_maps.py, test_bench_records.py): the repository root,
reading a file of it, and the report: a summary line, one line per problem, exit 1 on any."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def finish(summary, problems):
    print(summary)
    for p in problems:
        print(p)
    return 1 if problems else 0
