"""Lazy function bodies (issue 7): parse_python(lazy=True) converts a def's body on first read,
and must then give exactly the IR of an eager parse (kinds, positions, fields, field order),
except where tree-sitter's grammar is ambiguous: a lazy body is the def's parse alone."""
from __future__ import annotations

import pickle
import re
from pathlib import Path

import pytest

from archaudit.parsing import python_ir
from archaudit.parsing.python_ir import LazyFields, N, parse_python

REPO = Path(__file__).resolve().parent.parent


def _plain(x):
    """The IR as nested tuples, without forcing anything (dict.items sees only what is there)."""
    if isinstance(x, N):
        return ("N", x.k, x.line, x.col, x.sb, x.eb, tuple((k, _plain(v)) for k, v in dict.items(x.f)))
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, tuple(_plain(v) for v in x))
    return x


def _force_all(body) -> int:
    n, stack = 0, [body]
    while stack:
        v = stack.pop()
        if isinstance(v, N):
            if isinstance(v.f, LazyFields) and v.f.is_pending:
                v.f["body"]
                n += 1
            stack.extend(dict.values(v.f))
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return n


def _defs(body):
    return [st for st in body if st.k == "def"]


def fixture_python_files() -> list[Path]:
    files = sorted(p for d in ("fixtures", "tests") for p in (REPO / d).rglob("*.py"))
    assert len(files) > 40
    return files


def test_every_fixture_file_lazy_equals_eager():
    lazy_bodies = 0
    for p in fixture_python_files():
        data = p.read_bytes()
        eager = parse_python(data)
        lazy = parse_python(data, lazy=True)
        lazy_bodies += _force_all(lazy.body)
        assert _plain(lazy.body) == _plain(eager.body), p
        assert lazy.errors == eager.errors, p
    assert lazy_bodies > 300  # the fixtures do exercise the lazy path


SRC = b'''import os


def plain(a, b=1):
    if a:
        return os.path.join(a, "x")
    return b


@decorated
def with_nested(x):
    def inner():
        return x
    return inner


class C:
    def method(self, y) -> int:
        return y + 1
'''


def test_lazy_bodies_behave_like_dicts():
    lazy = parse_python(SRC, lazy=True)
    eager = parse_python(SRC)
    plain, nested = _defs(lazy.body)
    method = lazy.body[-1].f["body"][0]
    # bodies with nested defs or classes are converted at once (their definitions are indexed)
    assert isinstance(plain.f, LazyFields) and plain.f.is_pending
    assert not isinstance(nested.f, LazyFields)
    assert isinstance(method.f, LazyFields) and method.f.is_pending
    # reading other fields, or asking whether there is a body, does not convert it
    assert plain.f.get("decorators") == [] and plain.f["name"] == "plain" and "body" in plain.f
    assert method.f.get("returns") is not None
    assert plain.f.is_pending and method.f.is_pending
    # any way of reading the body, or the whole dict, converts it, in the eager key order
    assert list(plain.f.keys()) == ["name", "params", "body", "decorators", "returns"]
    assert not plain.f.is_pending
    assert [st.k for st in method.f.get("body")] == ["return"]
    assert _force_all(lazy.body) == 1  # `inner`, lazy inside the eager with_nested
    assert _plain(lazy.body) == _plain(eager.body)
    # a pickled IR holds plain dicts, equal to the eager IR's
    back = pickle.loads(pickle.dumps(lazy.body))
    assert _plain(back) == _plain(eager.body) and type(_defs(back)[0].f) is dict


def test_values_walk_converts_pending_bodies():
    def walk(body):
        seen, stack = [], [body]
        while stack:  # as the generic walkers of the call graph do: through f.values()
            v = stack.pop()
            if isinstance(v, N):
                seen.append((v.k, v.sb))
                stack.extend(v.f.values())
            elif isinstance(v, (list, tuple)):
                stack.extend(v)
        return seen

    got = walk(parse_python(SRC, lazy=True).body)
    assert got == walk(parse_python(SRC).body)
    assert [k for k, _ in got].count("return") == 5


def test_an_ambiguous_body_is_the_parse_of_the_def_alone():
    # tree-sitter resolves this ambiguity by what follows the def: alone, the third element is
    # starred(subscript), as Python reads it; in a file with anything after it,
    # subscript(starred). A lazy body is the def's parse alone, so it does not depend on what
    # follows (and no def is checked against the file's tree: that cost a third of a parse).
    head = (b"def _modify_tuple(t, index, modifier):\n"
            b"    return *t[:index], modifier(t[index]), *t[index + 1 :]\n")
    def third(body):
        e = body[0].f["body"][0].f["value"].f["elts"][2]
        return e.k, e.f["value"].k

    assert third(parse_python(head + b"\nx = 1\n").body) == ("subscript", "starred")  # the file's tree
    assert third(parse_python(head).body) == ("starred", "subscript")
    before = python_ir.LAZY_STATS["reparsed"]
    for tail in (b"", b"\nx = 1\n", b"\n\ndef g():\n    return 2\n"):
        lazy = parse_python(head + tail, lazy=True)
        assert lazy.body[0].f.is_pending
        assert third(lazy.body) == ("starred", "subscript"), tail
    assert python_ir.LAZY_STATS["reparsed"] == before  # parsed alone, never the whole file again


@pytest.mark.parametrize("src", [
    # the converter's nesting limits are reported while converting: such files stay eager
    b"def f():\n    return " + b"(" * 210 + b"1" + b")" * 210 + b"\n",
    # error recovery depends on the context: a file with syntax errors stays eager
    b"def f():\n    return g(\n\ndef h():\n    return 1\n",
])
def test_files_the_lazy_path_could_change_stay_eager(src):
    lazy = parse_python(src, lazy=True)
    eager = parse_python(src)
    assert not any(isinstance(st.f, LazyFields) for st in lazy.body)
    assert _plain(lazy.body) == _plain(eager.body) and lazy.errors == eager.errors
    assert eager.errors  # both cases do report something


def test_names_and_constants_share_their_fields():
    """A name or constant node's fields dict is shared by every node of that value (memory: they
    are almost half the IR), across modules; floats (0.0 == -0.0) and long strings are not
    shared, and a decorated def's fields, which the converter writes, are its own."""
    long = b"'" + b"d" * 100 + b"'"
    a = parse_python(b"x = 1\nz = 'short'\nw = 0.0\ny = " + long + b"\n")
    b = parse_python(b"@x\ndef f():\n    return x, 1, 'short', 0.0, " + long + b"\n")
    x1, one1, short1, zero1, long1 = [st.f["targets"][0] for st in a.body[:1]] + [st.f["value"] for st in a.body]
    (ret,) = b.body[0].f["body"]
    x2, one2, short2, zero2, long2 = ret.f["value"].f["elts"]
    assert x1.f == {"id": "x"} and x2.f is x1.f and b.body[0].f["decorators"][0].f is x1.f
    assert one2.f is one1.f and short2.f is short1.f
    assert zero2.f == zero1.f == {"value": 0.0} and zero2.f is not zero1.f
    assert long2.f == long1.f == {"value": "d" * 100} and long2.f is not long1.f
    assert "decorators" not in x1.f


def test_a_released_body_reads_again_as_before():
    """LazyFields.release drops a converted body (memory between the gate scan and the
    verdicts); reading it again converts it again, to the same IR."""
    src = b"def f(x):\n    if x > 1:\n        return g(x)\n    return 0\n"
    (d,) = parse_python(src, lazy=True).body
    first = _plain(d.f["body"])
    assert not d.f.is_pending
    d.f.release()
    assert d.f.is_pending and "body" not in dict.keys(d.f)
    assert _plain(d.f["body"]) == first and list(d.f) == ["name", "params", "body", "decorators", "returns"]
    eager = parse_python(src).body[0]
    assert d.f.origin is not None and not isinstance(eager.f, LazyFields)


# the specification of python_ir._py2_hint, tried at every offset
_PY2_ANCHORED = re.compile(rb"^[ \t]*(?:print|exec)[ \t]+[^\s(=.,)\[\]:;]|`|<>", re.M)


@pytest.mark.parametrize("src", [
    b"print 'x'\n", b"  print x\n", b"x = 1\n\tprint  y\n", b"a\n\fprint x\n", b"exec code\n",
    b"print(x)\n", b"print (x)\n", b"print = 1\n", b"print.x\n", b"printx y\n", b"y = 1; print x\n",
    b"# we print the value\n", b"    # print the value\n", b"s = '''\nprint the value\n'''\n",
    b"x = `y`\n", b"if a <> b: pass\n", b"", b"print", b"print x", b"\nexec\tfoo\n", b"xprint y\n",
    b"f(x)\nprint\n x\n", "print \u00e9\n".encode(),
])
def test_py2_hint_is_the_anchored_pattern(src):
    """The hint that decides whether to look for Python 2 syntax tests the literals first and
    the print/exec shape where it is: the same answer as the `^`-anchored pattern."""
    assert python_ir._py2_hint(src) == (_PY2_ANCHORED.search(src) is not None)


# the specification of python_ir.may_nest_def
_NESTED_DEF = re.compile(rb"\b(?:def|class)\b")


@pytest.mark.parametrize("src, start, end", [
    (b"    def f(): pass", 0, 17), (b"    return default", 0, 18), (b"x = klass()", 0, 11),
    (b"x.def_ = 1", 0, 10), (b"_class = 1", 0, 10), (b"class", 0, 5), (b"classy", 0, 5),
    (b"xdef y", 1, 6), (b"x def", 2, 5), (b"defx", 0, 3), (b"a.class_ def", 0, 12),
    (b"undef; redefine; classes", 0, 24), (b"(def)", 1, 4), (b"9def", 1, 4), (b"", 0, 0),
    ("\u00e9def".encode(), 2, 5),
])
def test_may_nest_def_is_the_word_pattern(src, start, end):
    """Whether a body may define something is tested by substring search, with the answers of
    the word-boundary pattern on the same span (the byte before the span counts, the one after
    it does not)."""
    assert python_ir.may_nest_def(src, start, end) == (_NESTED_DEF.search(src, start, end) is not None)
