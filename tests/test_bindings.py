"""python/bindings.py: the names each statement binds, in order, and relative imports."""
from archaudit.parsing.python_ir import parse_python
from archaudit.python.bindings import (
    Assignment, AugmentedAssignment, ClassDefinition, Definition, FromImport, LoopBinding, ModuleImport, StarImport,
    WithBinding, last_definitions, names_bound, relative_module, statement_bindings)
from archaudit.python.index import flatten_top

SRC = b"""\
import a.b
import a.b as ab, c
from . import sib
from ..up import x as y, z as z
from .star import *
try:
    from fast import impl
except ImportError:
    def impl(): pass
class K: pass
p, (q, *r) = f()
for i, j in g(): pass
with h() as w, k(): pass
n += 1
def impl(): pass
"""


def _bindings(src: bytes, modname: str, is_pkg: bool) -> list:
    body = parse_python(src).body
    return [bd for st in flatten_top(body) for bd in statement_bindings(st, modname, is_pkg)]


def test_every_binding_in_source_order_with_its_kind():
    got = _bindings(SRC, "pkg.sub.mod", False)
    shown = [(type(bd).__name__, names_bound(bd), bd.node.line) for bd in got]
    assert shown == [
        ("ModuleImport", ["a"], 1), ("ModuleImport", ["ab"], 2), ("ModuleImport", ["c"], 2),
        ("FromImport", ["sib"], 3), ("FromImport", ["y"], 4), ("FromImport", ["z"], 4),
        ("StarImport", [], 5), ("FromImport", ["impl"], 7), ("Definition", ["impl"], 9),
        ("ClassDefinition", ["K"], 10), ("Assignment", ["p", "q", "r"], 11), ("LoopBinding", ["i", "j"], 12),
        ("WithBinding", ["w"], 13), ("AugmentedAssignment", ["n"], 14), ("Definition", ["impl"], 15)]
    imports = [(bd.local, bd.module, getattr(bd, "name", None), bd.aliased) for bd in got
               if isinstance(bd, (ModuleImport, FromImport))]
    assert imports == [("a", "a", None, False), ("ab", "a.b", None, True), ("c", "c", None, False),
                       ("sib", "pkg.sub", "sib", False), ("y", "pkg.up", "x", True), ("z", "pkg.up", "z", False),
                       ("impl", "fast", "impl", False)]
    star = next(bd for bd in got if isinstance(bd, StarImport))
    assert (star.module, star.relative) == ("pkg.sub.star", True)
    assert {type(bd) for bd in got} >= {Assignment, AugmentedAssignment, ClassDefinition, Definition,
                                         LoopBinding, WithBinding}


def test_last_definitions_keeps_the_def_or_class_that_runs_last():
    last = last_definitions(_bindings(SRC, "pkg.sub.mod", False))
    assert sorted(last) == ["K", "impl"]
    assert last["impl"].line == 15


def test_relative_module_in_a_package_and_in_a_module():
    assert relative_module("pkg.sub", True, 1, "m") == "pkg.sub.m"
    assert relative_module("pkg.sub.mod", False, 1, "m") == "pkg.sub.m"
    assert relative_module("pkg.sub.mod", False, 2, "") == "pkg"
    assert relative_module("pkg.sub.mod", False, 0, "abs.m") == "abs.m"
