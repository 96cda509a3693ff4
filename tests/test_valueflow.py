"""A gate's decision followed through values (fixtures/valueflow): a refusal inside a helper
guards its callers' code after the call, a selection's returned value reaches the module built
with it, a helper's returned flags reach the spec that receives them, and predicates kept in
module constants (also imported into another module) are tested as such."""
import pytest

from archaudit.callgraph import Analysis
from archaudit.pipeline import scan

from conftest import FIXTURES

ROOT = FIXTURES / "valueflow"

# (gate path, line) -> (verdict, modules, [(evidence path, line, feature)])
EXPECTED_SM120 = {
    ("vflib/refusal.py", 11): ("hardware-bound", ["mma_{arch}"], [("vflib/data/csrc/mma.cu", 4, "ptx.tcgen05")]),
    ("vflib/refusal.py", 24): ("software-only", ["check", "copy_{suffix}"], []),
    ("vflib/refusal.py", 43): ("unresolved", [], []),
    ("vflib/select.py", 11): ("software-only", ["scale_{arch}"], []),
    ("vflib/select.py", 30): ("software-only", ["copy_{suffix}"], []),
    ("vflib/select.py", 43): ("unresolved", ["copy_{suffix}", "scale_{arch}"], []),
    ("vflib/jit/modules.py", 23): ("software-only", ["router"], []),
    ("vflib/consts.py", 16): ("hardware-bound", ["mma_{arch}"], [("vflib/data/csrc/mma.cu", 4, "ptx.tcgen05")]),
    ("vflib/imported.py", 6): ("hardware-bound", ["mma_{arch}"], [("vflib/data/csrc/mma.cu", 4, "ptx.tcgen05")]),
}


@pytest.fixture(scope="module")
def result(reg):
    return scan(ROOT, [reg.parse("sm_120")])


def test_exact_findings_sm120(result):
    got = {(f.gate.path, f.gate.line): (f.verdict, sorted(m.name for m in f.modules),
                                        [(e.path, e.line, e.feature) for e in f.evidence])
           for f in result.findings}
    assert got == EXPECTED_SM120


def test_module_constant_predicates(result):
    # `_is_sm100 = _is_cuda and is_sm100_supported()` combined with unknowns in a predicate
    # function, and a constant imported from another module: both tests admit the sm_100 family
    gates = {(g.path, g.line): g for g in result.gates}
    assert gates[("vflib/consts.py", 16)].admits == {"sm_100", "sm_103", "sm_107"}
    assert gates[("vflib/imported.py", 6)].admits == {"sm_100", "sm_103", "sm_107"}
    # the module constants themselves are values, not decisions
    assert not any(g.path == "vflib/consts.py" and g.line in (6, 7, 8, 12) for g in result.gates)


def test_value_into_a_function_that_branches_on_it(result):
    f = next(f for f in result.findings if (f.gate.path, f.gate.line) == ("vflib/select.py", 43))
    assert f.reason.endswith("the gate selects a value, and the modules were reached only through functions it is "
                             "passed to that branch on it; which value leads to them is not followed")


def test_refusal_without_a_module_says_so(result):
    f = next(f for f in result.findings if (f.gate.path, f.gate.line) == ("vflib/refusal.py", 43))
    assert f.reason.startswith("no JIT module is reached from the region this gate guards")


def test_flag_helper_patch(result):
    f = next(f for f in result.findings if (f.gate.path, f.gate.line) == ("vflib/jit/modules.py", 23))
    assert "supported_major_versions=[10, 12]" in f.patch


@pytest.fixture(scope="module")
def analysis():
    return Analysis.open(ROOT)


def _chain(analysis, path, line):
    site = analysis.site_at(path, line)
    return {bm.module.name: [(x.kind, x.line, x.how) for x in bm.chain] for bm in analysis.modules_behind(site)}


def test_refusal_chains(analysis):
    # the helper's caller, then (the call in checked_scale is always passed) the caller's caller
    assert _chain(analysis, "vflib/refusal.py", 24) == {
        "check": [("region", 24, ""), ("call", 29, "caller-after-raise"), ("jit-module", 30, "return-value+entry-point")],
        "copy_{suffix}": [("region", 24, ""), ("call", 29, "caller-after-raise"), ("call", 35, "caller-after-raise"),
                          ("jit-module", 36, "return-value+entry-point")],
    }
    assert _chain(analysis, "vflib/refusal.py", 11) == {
        "mma_{arch}": [("region", 11, ""), ("call", 18, "caller-after-raise"), ("jit-module", 19, "return-value+entry-point")],
    }
    assert _chain(analysis, "vflib/refusal.py", 43) == {}


def test_value_chains(analysis):
    assert _chain(analysis, "vflib/select.py", 11) == {
        # the value's consumer is the call of the module getter, whose result's `.scale` is called
        "scale_{arch}": [("region", 11, ""), ("call", 23, "caller-value"), ("jit-module", 23, "return-value+entry-point")],
    }
    assert _chain(analysis, "vflib/select.py", 30) == {
        "copy_{suffix}": [("region", 30, ""), ("call", 37, "caller-value"), ("jit-module", 39, "return-value+entry-point")],
    }
    # the flag helper's value reaches the spec built with it (followed as a value into the
    # caller, and by the JIT model's flag sources where those follow the helper)
    got = {bm.arm: [(x.kind, x.line) for x in bm.chain]
           for bm in analysis.modules_behind(analysis.site_at("vflib/jit/modules.py", 23))}
    assert got.get("caller:value") == [("region", 23), ("call", 27), ("jit-module", 27)]
    assert set(got) <= {"caller:value", "flags"}


def test_falsy_unknown_in_the_value_domain():
    """`x and y` stopped by an unknown x is FALSY: falsy, GPU-independent, unknown otherwise."""
    from archaudit.python.interp import _not
    from archaudit.python.values import AV, ENV, FALSY, OPAQUE, Domain, informative_sets, truth

    dom = Domain(2)
    assert truth(FALSY) is False
    assert _not(FALSY) is ENV  # `not _is_cuda` stays an environment unknown
    assert dom.map1(dom.const(FALSY), lambda v: v + 1).sets == (frozenset({OPAQUE}),) * 2
    assert dom.map2(dom.const(FALSY), dom.const(0), lambda a, b: a == b).sets == (frozenset({OPAQUE}),) * 2
    # present on every GPU it says nothing about the architecture, like OPAQUE
    av = AV((frozenset({FALSY, False}), frozenset({FALSY, True})))
    assert informative_sets(av, [0, 1]) == [frozenset({False}), frozenset({True})]


def test_a_lambda_scope_has_no_statements():
    # a lambda's body is one expression: what a search finds at an offset inside it is in no
    # statement (vllm 0.33.0: callers inside lambdas ended the scan of their gates in a TypeError)
    from archaudit.callgraph.behind import _statements
    from archaudit.parsing.python_ir import parse_python

    mod = parse_python(b"def f():\n    return 1\n\ng = lambda x: f(x)\n")
    lam = mod.body[1].f["value"]
    assert lam.k == "lambda" and _statements(lam) == []
    assert [s.k for s in _statements(mod.body[0])] == ["return"]
