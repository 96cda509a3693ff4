"""The Python IR's schema (python_ir.NODE_FIELDS): every node the converter makes, from
archaudit's own sources, every fixture package and a snippet with each construct, eager, lazy
and shallow, has exactly its kind's fields, in the table's order, each holding what the table
says. A field the analyses do not expect (or one the table forgets) fails here."""
from __future__ import annotations

from pathlib import Path

import pytest

from archaudit.parsing.python_ir import FIELD_VALUES, NODE_FIELDS, N, parse_python

REPO = Path(__file__).resolve().parent.parent

# every statement and expression kind, "block" (a syntax error's recognisable part) included
EVERY_KIND = b'''
import os.path, numpy as np
from . import sibling
from ..pkg import a as b, c
from m import *
from __future__ import annotations
x: int = 1
y: "T"
a = b = [1, 2.5, "s", None, True, False, {3}, {"k": 4, **d}]
a += 1
del a
(f"v{x!r}" "w", b"raw", -x, not x, x if y else z, x < y is not z, x and y, x | y)
s = o.attr[1, 2][k]
s = o[1:n][::-1][a:]
g(*args, p, key=v, **kw)
xs = [*ys]
h(t for t in ts if t)
[e for e in es]; {e for e in es}; {k: v for k, v in kv}
(w := 5)
l = lambda p, *r, q=1, **kw: p
assert x, "message"
global G
def outer(p: int, q=2, *args, k, **kw) -> int:
    nonlocal z
    for i, j in pairs:
        continue
    else:
        pass
    while x:
        break
    else:
        pass
    try:
        raise ValueError()
    except ValueError:
        pass
    except* TypeError:
        pass
    else:
        pass
    finally:
        pass
    with open(p) as fh, lock:
        return fh
    if x:
        return
    elif y:
        pass
    else:
        pass
@decorator(arg)
class K(Base, metaclass=M):
    async def m(self):
        await self.n()
match x:
    case 1:
        pass
'''
BROKEN = b"if x\n  y = 1\n"


def _value_problems(value, holds: str, where: str, nodes: list) -> list[str]:
    """What is wrong with a field's value for its FIELD_VALUES kind; the nodes in it go to nodes."""
    def node(v, at):
        if isinstance(v, N):
            nodes.append(v)
            return []
        return [f"{at}: {v!r} is not a node"]

    def each(kind, check):
        return ([f"{where}: {value!r} is not a {kind}"] if not isinstance(value, list)
                else [p for i, v in enumerate(value) for p in check(v, f"{where}[{i}]")])

    def pair(v, at, first, second):
        if not isinstance(v, tuple) or len(v) != 2:
            return [f"{at}: {v!r} is not a pair"]
        return first(v[0], at + "[0]") + second(v[1], at + "[1]")

    def opt_node(v, at):
        return [] if v is None else node(v, at)

    def typed(*types):
        return lambda v, at: [] if type(v) in types else [f"{at}: {v!r} is not {types}"]

    if holds == "N":
        return node(value, where)
    if holds == "[N]":
        return each("list", node)
    if holds == "[[N]]":
        return each("list", lambda blk, at: [f"{at}: not a list"] if not isinstance(blk, list)
                    else [p for i, v in enumerate(blk) for p in node(v, f"{at}[{i}]")])
    if holds in ("str", "int", "bool"):
        return typed({"str": str, "int": int, "bool": bool}[holds])(value, where)
    if holds == "[str]":
        return each("list", typed(str))
    if holds == "const":
        return typed(int, float, str, bool, type(None))(value, where)
    if holds == "params":
        def param(v, at):
            if not isinstance(v, tuple) or len(v) != 3 or v[2] not in ("", "*", "**", "kwonly"):
                return [f"{at}: {v!r} is not a parameter"]
            return typed(str)(v[0], at) + opt_node(v[1], at)
        return each("list", param)
    if holds == "imported":
        return each("list", lambda v, at: pair(v, at, typed(str), typed(str, type(None))))
    if holds == "with-items":
        return each("list", lambda v, at: pair(v, at, opt_node, opt_node))
    if holds == "kwargs":
        return each("list", lambda v, at: pair(v, at, typed(str), node))
    if holds == "pairs":
        return each("list", lambda v, at: pair(v, at, opt_node, node))
    if holds == "gens":
        def gen(v, at):
            if not isinstance(v, tuple) or len(v) != 3 or v[0] not in ("for", "if"):
                return [f"{at}: {v!r} is not a clause"]
            return node(v[1], at) + (node(v[2], at) if v[0] == "for" else [] if v[2] is None else [f"{at}: an if with {v[2]!r}"])
        return each("list", gen)
    return [f"{where}: unknown value kind {holds!r}"]


def schema_problems(body: list[N], label: str) -> tuple[list[str], set[str]]:
    """Every departure from NODE_FIELDS among the nodes reachable from body (a lazy body is
    converted: LazyFields.keys() reads it), and the kinds seen."""
    problems: list[str] = []
    seen: set[str] = set()
    stack = list(body)
    while stack:
        n = stack.pop()
        where = f"{label}:{n.line}:{n.col} {n.k}"
        fields = NODE_FIELDS.get(n.k)
        if fields is None:
            problems.append(f"{where}: kind not in NODE_FIELDS")
            continue
        seen.add(n.k)
        keys = list(n.f.keys())
        if keys != [fd.name for fd in fields]:
            problems.append(f"{where}: fields {keys}, NODE_FIELDS says {[fd.name for fd in fields]}")
            continue
        for fd in fields:
            value = n.f[fd.name]
            if value is None and fd.optional:
                continue
            problems.extend(_value_problems(value, fd.value, f"{where}.{fd.name}", stack))
    return problems, seen


def _sources() -> list[Path]:
    return sorted((REPO / "archaudit").rglob("*.py")) + sorted((REPO / "fixtures").rglob("*.py"))


def test_every_field_value_kind_is_described():
    used = {fd.value for fields in NODE_FIELDS.values() for fd in fields}
    assert used == set(FIELD_VALUES)
    for kind, fields in NODE_FIELDS.items():
        names = [fd.name for fd in fields]
        assert len(names) == len(set(names)), kind
        assert all(fd.about for fd in fields), kind


@pytest.mark.parametrize("mode", ["eager", "lazy", "shallow"])
def test_real_files_match_the_schema(mode):
    paths = _sources()
    assert len(paths) > 300  # archaudit's sources and the fixture packages
    problems, seen = [], set()
    for p in paths:
        pm = parse_python(p.read_bytes(), shallow=mode == "shallow", lazy=mode == "lazy")
        got, kinds = schema_problems(pm.body, str(p.relative_to(REPO)))
        problems += got
        seen |= kinds
    assert problems == []
    # the common kinds appear in real code whatever the mode
    assert {"def", "class", "if", "assign", "call", "attr", "name", "const", "importfrom"} <= seen


@pytest.mark.parametrize("lazy", [False, True])
def test_every_kind_appears_and_matches(lazy):
    problems, seen = schema_problems(parse_python(EVERY_KIND, lazy=lazy).body, "EVERY_KIND")
    broken, seen_broken = schema_problems(parse_python(BROKEN).body, "BROKEN")
    assert problems + broken == []
    assert seen | seen_broken == set(NODE_FIELDS)


def test_a_field_the_schema_does_not_list_is_reported():
    (st,) = parse_python(b"x = 1\n").body
    st.f = dict(st.f, extra=1)
    assert schema_problems([st], "m") == (
        ["m:1:1 assign: fields ['targets', 'value', 'annotation', 'extra'], NODE_FIELDS says "
         "['targets', 'value', 'annotation']"], {"assign"})
    (st,) = parse_python(b"x = 1\n").body
    st.f = dict(st.f, value="1")
    assert schema_problems([st], "m")[0] == ["m:1:1 assign.value: '1' is not a node"]


def test_the_architecture_notes_list_every_kind_and_field():
    doc = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = doc.split("## The Python IR", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if line.startswith("| `"):
            kinds, fields = line.split("|")[1:3]
            for k in kinds.replace(" (also `del`, `from __future__ import`)", "").split(","):
                rows[k.strip().strip("`")] = fields
    assert set(rows) == set(NODE_FIELDS)
    for kind, fields in NODE_FIELDS.items():
        for fd in fields:
            assert f"`{fd.name}{'?' if fd.optional else ''}`" in rows[kind], (kind, fd.name)
