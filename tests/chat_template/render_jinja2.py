#!/usr/bin/env python3
"""Renders every template in a folder against every conversation with jinja2 configured as
transformers' apply_chat_template does (chat_template_utils._compile_jinja_template): an
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loopcontrols, a tojson filter
that is json.dumps(ensure_ascii=False), and raise_exception/strftime_now globals. The variables
are those transformers passes: messages, tools=None, documents=None, add_generation_prompt and
the special tokens.

usage: render_jinja2.py TEMPLATE_DIR CONVERSATIONS_JSON  -> JSON on stdout:
  {"<template>": {"<conversation>": {"text": "..."} | {"raised": "msg"} | {"error": "..."}}}
A template jinja2 cannot compile gives {"<template>": {"compile_error": "..."}}.
"""
import copy
import json
import os
import sys
import warnings

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Raised(jinja2.exceptions.TemplateError):
    """What raise_exception throws (a TemplateError, as in transformers), told apart here."""


def raise_exception(message):
    raise Raised(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def main():
    # jinja2 compiles templates to Python; odd constant expressions in random templates make
    # Python warn (SyntaxWarning) on stderr. The outcome is what is compared, not the warnings.
    warnings.simplefilter("ignore", SyntaxWarning)
    template_dir, conversations_path = sys.argv[1], sys.argv[2]
    with open(conversations_path, encoding="utf-8") as f:
        spec = json.load(f)
    env = environment()
    results = {}
    for file in sorted(os.listdir(template_dir)):
        if not file.endswith(".jinja"):
            continue
        with open(os.path.join(template_dir, file), encoding="utf-8", newline="") as f:
            source = f.read()
        try:
            template = env.from_string(source)
        except Exception as e:  # noqa: BLE001 - any compile failure is reported, not raised
            results[file] = {"compile_error": f"{type(e).__name__}: {e}"}
            continue
        out = {}
        for conv in spec["conversations"]:
            try:
                # A fresh copy each time: a template can mutate it (jinja2's indent filter
                # appends to a list it is given), which must not leak into the next render.
                text = template.render(messages=copy.deepcopy(conv["messages"]),
                                       tools=None, documents=None,
                                       add_generation_prompt=conv["add_generation_prompt"],
                                       bos_token=spec["bos_token"], eos_token=spec["eos_token"])
                out[conv["name"]] = {"text": text}
            except Raised as e:
                out[conv["name"]] = {"raised": e.message}
            except Exception as e:  # noqa: BLE001
                out[conv["name"]] = {"error": f"{type(e).__name__}: {e}"}
        results[file] = out
    json.dump(results, sys.stdout, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
