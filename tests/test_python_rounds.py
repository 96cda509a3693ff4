"""Which functions the gate scan evaluates once a name carries an architecture dependence
(fixtures/pyrounds): uses of the name count, definitions and bindings of it do not, and a name
reaches another module only through an import, an attribute or a string, and not through an
attribute of a package outside the scan (receiver_roots, receiver_chain). Also the second
reading of a gate test with GPU-independent unknowns kept (fixtures/pyunknown)."""
import os
import re
import shutil
import time

import pytest

from archaudit.cache import Cache
from archaudit.pipeline import scan
from archaudit.python import gates as G
from archaudit.python import pybytes as B

from conftest import FIXTURES


@pytest.mark.parametrize("text, use", [
    (b"if block_size() == 128:", True),
    (b"x = block_size", True),
    (b"return f(block_size=3)", False),
    (b"def g(block_size=3):", False),
    (b"    block_size = n", False),
    (b"block_size == 3", True),
    (b"block_size: int = 3", True),  # annotated: conservatively a use
    (b"block_size += 1", True),
    (b"def block_size(self):", False),
    (b"async def block_size():", False),
    (b"class block_size:", False),
    (b"undef block_size", True),  # "def" only as a whole word
    (b'f"{block_size=}"', True),
    (b'f"{block_size = !r}"', True),
    (b"block_size", True),
    (b"def f(x: block_size = None):", True),  # an annotation
    (b"x: block_size = make()", True),
    (b"{k: block_size}", True),
])
def test_is_use(text, use):
    p = text.index(b"block_size")
    assert G._is_use(text, p, len(b"block_size")) is use


def _reported(monkeypatch):
    got = []
    orig = G.Interp.report_function

    def record(self, mod, qual, node):
        got.append((mod.name, qual))
        return orig(self, mod, qual, node)

    monkeypatch.setattr(G.Interp, "report_function", record)
    return got, scan(FIXTURES / "pyrounds")


def test_functions_evaluated_and_gates(monkeypatch):
    reported, r = _reported(monkeypatch)
    assert [(g.path, g.line, g.function) for g in r.gates] == [
        ("roundpkg/aliased.py", 5, "roundpkg.aliased.via_alias"),  # `block_size as bs`: bs() is a use
        ("roundpkg/arch.py", 7, "roundpkg.arch.block_size"),  # found only by its own name (round 2)
        ("roundpkg/arch.py", 13, "roundpkg.arch.launch"),
        ("roundpkg/flags.py", 7, "roundpkg.flags.pick"),  # WIDE: a global nothing else reads
        ("roundpkg/others.py", 5, "roundpkg.others.via_module"),  # arch.block_size: an attribute
        ("roundpkg/rebound.py", 8, "roundpkg.rebound.rebinds"),  # its receiver is not only an import
        ("roundpkg/starred.py", 5, "roundpkg.starred.starred"),  # a star import: any bare name may be it
        ("roundpkg/users.py", 5, "roundpkg.users.reads"),
    ]
    # not evaluated: binds_only (a keyword) and Layer.other (a local of that name) do not use
    # block_size; Layer.block_size only shares the name, in a module that does not define the
    # function; others.py does not import the name, so its local of that name and a comment
    # naming it are not uses (the code before this rule evaluated all of them, and not via_alias);
    # outside.py's attributes have receivers bound to packages outside the scan (unittest,
    # cutlass), so they are no uses either
    assert sorted(reported) == [
        ("roundpkg.aliased", "via_alias"),
        ("roundpkg.arch", "block_size"), ("roundpkg.arch", "launch"),
        ("roundpkg.flags", "pick"),
        ("roundpkg.others", "by_string"), ("roundpkg.others", "via_module"),
        ("roundpkg.rebound", "rebinds"),
        ("roundpkg.starred", "starred"),
        ("roundpkg.users", "formats"), ("roundpkg.users", "reads"),
    ]
    assert r.stats["python_functions_evaluated"] == 10


def test_a_global_computed_from_the_capability_carries_it_unread(monkeypatch):
    """flags.WIDE is read only by pick(), which uses no other such name: the global is known to
    depend on the GPU from the module's top-level run, not from a reader evaluated by chance."""
    orig = G.Interp.report_module

    def forget(self, modname):
        orig(self, modname)
        self.arch_module_globals.clear()

    monkeypatch.setattr(G.Interp, "report_module", forget)
    assert "roundpkg.flags.pick" not in {g.function for g in scan(FIXTURES / "pyrounds").gates}


@pytest.mark.parametrize("text, names, aliases", [
    (b"from a.b import c, d as e\nx = f\n", {b"c", b"d", b"as", b"e"}, {b"d": {b"e"}}),
    (b"from a import (\n    c,  # see (x)\n    d as\n  k,\n)\ny = z\n",
     {b"c", b"see", b"x", b"d", b"as", b"k"}, {b"d": {b"k"}}),
    (b"import a.b, \\\n    c\nq = r\n", {b"a", b"b", b"c"}, {}),
    (b"import a.b, \\\r\n    c\r\nq = r\r\n", {b"a", b"b", b"c"}, {}),
    (b"    from .m import k  # in a function\n", {b"k", b"in", b"a", b"function"}, {}),
    (b"from m import *\n", None, None),
    (b"x = important\n", set(), {}),
])
def test_module_imports(text, names, aliases):
    got = B.module_imports(text)
    assert got == (None if names is None else (frozenset(names), aliases))


@pytest.mark.parametrize("text, qualified", [
    (b"arch.block_size()", True),
    (b"self.block_size", True),
    (b"(x\n    .block_size)", True),
    (b'getattr(o, "block_size")', True),
    (b"getattr(o, 'block_size')", True),
    (b"block_size()", False),
    (b"# block_size", False),
    (b"f(block_size)", False),
])
def test_qualified(text, qualified):
    assert B.qualified(text, text.index(b"block_size")) is qualified


@pytest.mark.parametrize("text, roots", [
    (b"import unittest\nunittest.main()\n", {b"unittest": {b"unittest"}}),
    (b"import a.b.c\nimport d.e as f\nfrom g.h import (i,  # (see)\n  j as k)\n",
     {b"a": {b"a"}, b"f": {b"d"}, b"i": {b"g"}, b"k": {b"g"}}),
    (b"import a\nimport b as a\n", {b"a": {b"a", b"b"}}),
    (b"from . import a\n", {}),  # relative: in the scan
    (b"import a\nfrom . import a\n", {}),
    (b"import a\ndef f(a):\n    a.x\n", {}),  # a parameter
    (b"import a\na = 1\n", {}),
    (b"import a\nx = 'a'\n", {}),  # a short string may bind it (globals()['a'] = ...)
    (b"import a\n# a comment: a\n\"\"\"a docstring: a\"\"\"\nx = y.a + a.b\n", {b"a": {b"a"}}),
    (b"import a\nfrom b import *\n", {}),  # a star import may bind any name
    (b"try: import a\nexcept ImportError: pass\n", {}),  # an import not understood
    (b'x = "import a"\na.b\n', {}),
])
def test_receiver_roots(text, roots):
    assert B.receiver_roots(text) == {k: frozenset(v) for k, v in roots.items()}


@pytest.mark.parametrize("text, chain", [
    (b"pipeline.PipelineAsync.create(x)", (b"pipeline", b"PipelineAsync")),
    (b"unittest . create()", (b"unittest",)),
    (b"f().create()", None),
    (b"x[0].create", None),
    (b"(a\n .create)", None),  # across a line: not followed
    (b'"create"', None),
])
def test_receiver_chain(text, chain):
    assert B.receiver_chain(text, text.index(b"create")) == chain


@pytest.mark.parametrize("word", [b"create", b"f", b"_x1", b"\xc3\xa9t\xc3\xa9"])
def test_word_pattern_finds_what_the_plain_word_boundary_pattern_finds(word):
    text = b"create fcreate create_ _create create1 (create) f ff _x1 a_x1 \xc3\xa9t\xc3\xa9 x\xc3\xa9t\xc3\xa9y " * 2
    plain = re.compile(rb"\b" + re.escape(word) + rb"\b")
    got = [m.start() for m in B.word_pattern(word).finditer(text)]
    assert got == [m.start() for m in plain.finditer(text)] and got


@pytest.mark.parametrize("text,held", [
    (b"def f():\n    global x\n    x = 1\n", True),
    (b"def f():\n\tglobal x, y\n", True),
    (b"def f():\n    \x0cglobal x\n", True),  # a form feed in the indentation
    (b"def f():\n    y = 1; global x\n", True),
    (b"def f():\n    if y: global x\n", True),
    (b"def f():\n    y = 1; \\\n  global x\n", True),  # after a backslash continuation
    (b"def f():\n    y = 1; \\\r\n  global x\r\n", True),
    (b"def f():\r\n    global x\r\n", True),
    (b"def f():\r    global x\r", True),  # old Mac line ends
    (b"global x", True),
    (b"def f():\n    return global_rank\n", False),
    (b"def f():\n    return self.global_x + _global\n", False),
    (b"def f():\n    return g(global_=1)\n", False),
    (b"def f():\n    x = y.global\n", False),
    (b"def f():\n    x = 1 \\\n  global\n", False),  # continued, but not after a statement start
    (b"def f():\n    return 1\n", False),
    (b"def f():\n    # global x\n", False),
    (b"def f():\n    s = '''\n    global x'''\n", True),  # a string shaped like one counts
])
def test_may_hold_global_statement(text, held):
    assert B.may_hold_global_statement(text) is held


def test_an_attribute_of_a_package_outside_the_scan_reaches_only_a_meaningful_name():
    """`torch.cuda.get_device_capability` means the capability whatever `torch` is: attributes
    the interpreter reads by their name alone are uses whatever their receiver."""
    from archaudit.python.interp import Rules
    from archaudit.targets import registry

    src = b"import torch\nimport unittest\nx = torch.cuda.get_device_capability()\nunittest.main()\n"
    names = {b"get_device_capability", b"main"}
    got = G.reaching_occurrences(src, names, set(), lambda r: True, Rules(registry()).meaningful)
    assert [src[p:p + n] for p, n in got] == [b"get_device_capability"]
    assert len(G.reaching_occurrences(src, names, set())) == 2


def test_cache_cutoff_sees_a_comment_become_a_use(tmp_path):
    """quiet.py names block_size only as a parameter. A comment appended to it with words it
    already has, `# obj.block_size`, is a use (an attribute): the module becomes relevant, so the
    early cutoff must not reuse the previous result (a view of which names occur where, not of
    which occurrences are uses, would)."""
    _append_and_rescan(tmp_path, "quiet.py", b"# obj.block_size\n")


def test_a_uniform_unknown_term_does_not_hide_the_gate():
    """fixtures/pyunknown: `cap != (10, 3) or not _fast_available()`, where _fast_available()
    is `False or unknown` on every GPU (a call into a module not evaluated). Reading that term
    without its unknown makes the test True everywhere; it is a gate that only sm_103 passes."""
    r = scan(FIXTURES / "pyunknown")
    assert [(g.path, g.line, g.region, sorted(g.admits)) for g in r.gates] == [
        ("unkpkg/fast.py", 13, "after-early-exit", ["sm_103"]),
    ]


def test_cache_cutoff_sees_a_comment_make_a_receiver_not_only_an_import(tmp_path):
    """outside.py's `pipeline` is bound only by an import of a package outside the scan, so its
    attributes reach nothing. A trailing comment `# import pipeline`, with words the file already
    has, is an import statement not understood: the name may now be bound to anything, the
    module becomes relevant, and the early cutoff must not reuse the previous result."""
    _append_and_rescan(tmp_path, "outside.py", b"# import pipeline\n")


def _append_and_rescan(tmp_path, name: str, comment: bytes) -> None:
    """Scan a copy of fixtures/pyrounds with a cache, append `comment` to roundpkg/<name>, and
    check the cached scan is redone (not cut off) and evaluates one more module, as a scan
    without the cache does."""
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "pyrounds", tree)
    t = time.time() - 10
    for d, _, fs in os.walk(tree):
        for f in fs:
            os.utime(os.path.join(d, f), (t, t))
    c = tmp_path / "c"
    assert scan(tree, cache=Cache(c)).stats["python_modules_evaluated"] == 7
    f = tree / "roundpkg" / name
    f.write_bytes(f.read_bytes() + comment)
    r = scan(tree, cache=Cache(c))
    assert r.cache["mode"] == "miss"
    assert r.stats["python_modules_evaluated"] == 8 == scan(tree).stats["python_modules_evaluated"]
