#!/usr/bin/env python3
"""Validates JSON instances against JSON Schemas with python3-jsonschema (a validator nobody here
wrote), for the structured-output server tests. Input: a file of JSON lines, each
{"schema": ..., "instance": "<the JSON text the server returned>"}. Prints one line per failure
and exits 1 if any; exits 77 (skipped) when jsonschema is not installed."""
import json
import sys

try:
    import jsonschema
except ImportError:
    print("python3-jsonschema is not installed")
    sys.exit(77)

failures = 0
with open(sys.argv[1], encoding="utf-8") as f:
    for n, line in enumerate(f, 1):
        case = json.loads(line)
        try:
            instance = json.loads(case["instance"])
            jsonschema.validate(instance, case["schema"],
                                format_checker=jsonschema.FormatChecker())
        except (ValueError, jsonschema.ValidationError) as e:
            failures += 1
            print(f"case {n}: {case['instance']!r}: {str(e).splitlines()[0]}")
sys.exit(1 if failures else 0)
