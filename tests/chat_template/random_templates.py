#!/usr/bin/env python3
"""Writes random chat templates for the differential test (test_chat_oracle,
RandomTemplatesMatchJinja2): nested if/elif/else, for (with inline if, else, break, continue),
set and namespace assignment, outputs and text with random whitespace control, and expressions
built from every operator, filter, test and method the interpreter supports. Most of them fail
in both renderers (type errors, undefined attributes), which tests the failures too.

It keeps away from the documented differences (docs/CHAT_TEMPLATES.md): no non-ASCII letters
that change case, no lazy iterators printed (filters that return one are followed by |list), no
`safe` strings inside printed lists.

usage: random_templates.py OUT_DIR COUNT SEED
"""
import os
import random
import sys

STRINGS = ["m.role", "m.content", "m['content']", "'ab c'", '"x\\ny"', "bos_token", "m.name",
           "'  pad  '", "'<|im_end|>'", "'ok 😀'", "''", "'A-b c(d'"]
NUMBERS = ["1", "2", "0", "-3", "2.5", "loop.index", "loop.index0", "loop.length",
           "messages|length", "ns.n", "7", "1e3", "0.1"]
LISTS = ["messages", "[1, 2, 3]", "['a', 'b']", "messages[1:]", "messages[::-1]", "[]",
         "(1, 'x')", "messages|map(attribute='role')|list"]
OTHERS = ["none", "true", "false", "undefined_thing", "{'k': 'v', 'n': 1}", "m", "loop.first",
          "loop.last", "add_generation_prompt", "tools", "loop.previtem", "ns"]
ATOMS = STRINGS + NUMBERS + LISTS + OTHERS
OPERATORS = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">", "<=", ">=", "and", "or",
             "in", "not in", "**"]
FILTERS = ["trim", "length", "upper", "lower", "title", "capitalize", "first", "last", "list",
           "string", "int", "float", "tojson", "join(', ')", "default('D')", "default('D', true)",
           "reverse|list", "items|list", "abs", "count", "join", "replace('a', 'Z')",
           "tojson(indent=2)", "selectattr('role', 'equalto', 'user')|list",
           "rejectattr('role', 'defined')|list", "map('upper')|list", "select('odd')|list",
           "indent(2)", "trim('x')", "d", "first|default('F')"]
TESTS = ["defined", "undefined", "none", "string", "number", "mapping", "iterable", "sequence",
         "boolean", "odd", "even", "true", "false", "integer", "float", "divisibleby 2", "eq 1",
         "in [1, 'user']", "lower", "upper", "callable", "sameas none"]
METHODS = [".strip()", ".lstrip()", ".rstrip('x ')", ".split()", ".split(' ')", ".upper()",
           ".lower()", ".title()", ".startswith('a')", ".endswith(('r', 'm'))",
           ".replace('e', 'E')", ".get('role')", ".get('zz', 'G')", ".keys()|list",
           ".values()|list", ".find('e')", ".count('s')", ".capitalize()", "[0]", "[-1]", "[1:3]",
           "[::2]", "['role']", ".role", ".content", "[5]"]
SPACES = ["", "", " ", "\n", "  ", "\n  ", "\t", " \n", "\n\n", "x"]


class Generator:
    def __init__(self, seed):
        self.rng = random.Random(seed)

    def pick(self, options):
        return self.rng.choice(options)

    def expr(self, depth):
        if depth <= 0 or self.rng.random() < 0.25:
            return self.pick(ATOMS)
        sub = lambda: self.expr(depth - 1)  # noqa: E731

        def test():  # draws its negation before its operand, as the generated corpus expects
            negate = "not " if self.rng.random() < 0.3 else ""
            return f"({sub()} is {negate}{self.pick(TESTS)})"

        shapes = [lambda: f"({sub()} {self.pick(OPERATORS)} {sub()})",
                  lambda: f"{sub()} | {self.pick(FILTERS)}",
                  test,
                  lambda: f"({sub()}){self.pick(METHODS)}",
                  lambda: f"({sub()} if {sub()} else {sub()})",
                  lambda: f"({sub()} if {sub()})",
                  lambda: f"(not {sub()})",
                  lambda: f"-{self.pick(NUMBERS)}",
                  lambda: f"[{sub()}, {sub()}]",
                  lambda: f"{self.pick(STRINGS)} ~ {sub()}"]
        return shapes[self.rng.randrange(len(shapes))]()

    def tag(self, body):
        left, right = self.pick(["", "", "-", "+"]), self.pick(["", "", "-", "+"])
        return f"{self.pick(SPACES)}{{%{left} {body} {right}%}}{self.pick(SPACES)}"

    def output(self):
        left, right = self.pick(["", "-"]), self.pick(["", "-"])
        return f"{self.pick(SPACES)}{{{{{left} {self.expr(3)} {right}}}}}{self.pick(SPACES)}"

    def body(self, depth, in_loop):
        return "".join(self.statement(depth, in_loop) for _ in range(self.rng.randint(1, 3)))

    def statement(self, depth, in_loop):
        kind = self.rng.randrange(9)
        if depth <= 0 or kind < 3:
            if self.rng.random() < 0.7:
                return self.output()
            text = self.pick(["text", "a b", "<s>", "{#c#}", "{#- c -#}"])
            return self.pick(SPACES) + text + self.pick(SPACES)
        if kind == 3:
            out = self.tag(f"if {self.expr(2)}") + self.body(depth - 1, in_loop)
            if self.rng.random() < 0.4:
                out += self.tag(f"elif {self.expr(2)}") + self.body(depth - 1, in_loop)
            if self.rng.random() < 0.5:
                out += self.tag("else") + self.body(depth - 1, in_loop)
            return out + self.tag("endif")
        if kind == 4:
            condition = f" if {self.expr(1)}" if self.rng.random() < 0.2 else ""
            out = self.tag(f"for m in {self.pick(LISTS)}{condition}") + self.body(depth - 1, True)
            if self.rng.random() < 0.3:
                out += self.tag("else") + self.body(depth - 1, in_loop)
            return out + self.tag("endfor")
        if kind == 5:
            return self.tag(f"set {self.pick(['x', 'm', 'y'])} = {self.expr(2)}") + self.output()
        if kind == 6:
            return self.tag(f"set ns.n = {self.expr(2)}")
        if kind == 7 and in_loop:
            return self.tag(self.pick(["break", "continue"]))
        return self.tag(f"set x = {self.expr(2)}") + "{{ x }}"

    def template(self):
        prelude = "{% set ns = namespace(n=0) %}{% set m = messages[0] if messages else {} %}"
        return prelude + self.body(3, False)


def main():
    out_dir, count, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    os.makedirs(out_dir, exist_ok=True)
    for name in os.listdir(out_dir):
        os.remove(os.path.join(out_dir, name))
    gen = Generator(seed)
    for i in range(count):
        with open(os.path.join(out_dir, f"random{i:04d}.jinja"), "w", encoding="utf-8") as f:
            f.write(gen.template())


if __name__ == "__main__":
    main()
