"""Checks the random walks of test_structured_walks with validators nobody here wrote.

Each line of the walks file is JSON: {"kind": "schema"|"regex"|"choice", "spec": <schema file, pattern
or list>, "hex": <the walk's bytes in hex>}. A schema walk must be UTF-8 JSON that python3-jsonschema
accepts (formats checked as its draft defines them); a regex walk must fully match under Python's re; a choice walk must be
one of the choices. Exits 1 listing every failure, 0 when all pass.
"""
import json
import re
import sys

import jsonschema


def openapi_nullable(schema):
    """OpenAPI 3.0's nullable (unknown to JSON Schema validators) as a type list with null."""
    if isinstance(schema, list):
        return [openapi_nullable(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: openapi_nullable(v) for k, v in schema.items()}
    if out.get("nullable") is True and "type" in out:
        types = out["type"] if isinstance(out["type"], list) else [out["type"]]
        out["type"] = types + (["null"] if "null" not in types else [])
    return out


def check(entry, schemas):
    text = bytes.fromhex(entry["hex"]).decode("utf-8")
    kind, spec = entry["kind"], entry["spec"]
    if kind == "schema":
        schema = schemas.setdefault(spec, openapi_nullable(json.load(open(spec, encoding="utf-8"))))
        cls = jsonschema.validators.validator_for(schema)
        cls(schema, format_checker=cls.FORMAT_CHECKER).validate(json.loads(text))
    elif kind == "regex":
        if re.fullmatch(spec, text) is None:
            raise ValueError(f"{text!r} does not match {spec!r}")
    elif text not in spec:
        raise ValueError(f"{text!r} is not one of {spec!r}")


def main():
    schemas, failures, count = {}, 0, 0
    with open(sys.argv[1], encoding="utf-8") as f:
        for line in f:
            entry = json.loads(line)
            count += 1
            try:
                check(entry, schemas)
            except Exception as e:  # every kind of failure is a test failure
                failures += 1
                print(f"INVALID {entry['kind']} {entry['spec']!r}: {bytes.fromhex(entry['hex'])!r}: {e}")
    print(f"{count} walks, {failures} invalid")
    sys.exit(1 if failures or count == 0 else 0)


if __name__ == "__main__":
    main()
