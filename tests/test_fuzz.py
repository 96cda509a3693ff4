"""Issue 8: property-based tests (hypothesis) for the pieces that take untrusted text: the
preprocessor-condition evaluator, the target-name parser, the Python gate evaluator, the wheel
reader, and the two raw-byte parsers. No exception escapes, and results stay consistent.
Kept small for the normal suite; bench/fuzz.py runs the long sessions."""
from __future__ import annotations

import io
import zipfile

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from archaudit.cuda import ruleset
from archaudit.cuda.preproc import Preprocessor, build_program, pass_macros, t_and, t_not, t_or
from archaudit.model import Diagnostic
from archaudit.parsing import cpp
from archaudit.parsing.python_ir import parse_python
from archaudit.sources import MAX_FILE_BYTES, Source, SourceError, WheelSource, _safe_member
from archaudit.targets import UnknownTarget, registry

FAST = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
REG = registry()
TARGETS = ["sm_80", "sm_90a", "sm_100f", "sm_103a", "sm_120f", "sm_121a"]


# --- preprocessor conditions ----------------------------------------------------------------

def _pp(target):
    pre, fn, arch = pass_macros(ruleset.target_by_name(target))
    return Preprocessor(None, lambda p: None, pre, fn, {"ONE": "1", "TEN": "10"}, target, arch)


def _arch(target: str) -> int:
    digits = "".join(c for c in target if c.isdigit())
    return int(digits[:-1]) * 100 + int(digits[-1]) * 10


def cond(depth: int = 3):
    """(C text, value as a function of __CUDA_ARCH__) pairs of valid #if expressions."""
    atoms = st.one_of(
        st.integers(0, 2000).map(lambda v: (str(v), lambda a, v=v: v)),
        st.just(("__CUDA_ARCH__", lambda a: a)),
        st.just(("ONE", lambda a: 1)),
        st.just(("TEN", lambda a: 10)),
        st.just(("NOT_DEFINED_ANYWHERE", lambda a: 0)),
        st.just(("defined(ONE)", lambda a: 1)),
        st.just(("defined NOPE", lambda a: 0)),
    )
    if depth == 0:
        return atoms
    sub = cond(depth - 1)
    bin_ops = {
        "+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y,
        "<": lambda x, y: int(x < y), "<=": lambda x, y: int(x <= y), ">": lambda x, y: int(x > y),
        ">=": lambda x, y: int(x >= y), "==": lambda x, y: int(x == y), "!=": lambda x, y: int(x != y),
        "&&": lambda x, y: int(bool(x) and bool(y)), "||": lambda x, y: int(bool(x) or bool(y)),
        "&": lambda x, y: x & y, "|": lambda x, y: x | y, "^": lambda x, y: x ^ y,
    }
    binary = st.tuples(sub, st.sampled_from(sorted(bin_ops)), sub).map(
        lambda t: (f"({t[0][0]}) {t[1]} ({t[2][0]})", lambda a, t=t: bin_ops[t[1]](t[0][1](a), t[2][1](a))))
    unary = st.tuples(st.sampled_from(["!", "-", "~"]), sub).map(
        lambda t: (f"{t[0]}({t[1][0]})",
                   lambda a, t=t: {"!": lambda v: int(not v), "-": lambda v: -v, "~": lambda v: ~v}[t[0]](t[1][1](a))))
    ternary = st.tuples(sub, sub, sub).map(
        lambda t: (f"({t[0][0]}) ? ({t[1][0]}) : ({t[2][0]})", lambda a, t=t: t[1][1](a) if t[0][1](a) else t[2][1](a)))
    return st.one_of(atoms, binary, unary, ternary)


@FAST
@given(cond(), st.sampled_from(TARGETS))
def test_preproc_condition_matches_c_semantics(c, target):
    text, fn = c
    value, _taint = _pp(target).evaluate(text)
    assert value == bool(fn(_arch(target)))


@FAST
@given(cond(2), cond(2), st.sampled_from(TARGETS))
def test_preproc_boolean_algebra(a, b, target):
    pp = _pp(target)
    va, vb = pp.evaluate(a[0])[0], pp.evaluate(b[0])[0]
    assert pp.evaluate(f"({a[0]}) || ({b[0]})")[0] == t_or(va, vb)
    assert pp.evaluate(f"({a[0]}) && ({b[0]})")[0] == t_and(va, vb)
    assert pp.evaluate(f"!({a[0]})")[0] == t_not(va)


@FAST
@given(st.text(max_size=200), st.sampled_from(TARGETS))
def test_preproc_condition_never_raises(text, target):
    value, taint = _pp(target).evaluate(text)
    assert value in (True, False, None) and taint in (True, False)


@FAST
@given(st.text(alphabet="()!&|<>=?:+-*/%~^ 0123456789xXuUlL'_ABCDEFdefinedONE", max_size=80), st.sampled_from(TARGETS))
def test_preproc_operator_soup_never_raises(text, target):
    assert _pp(target).evaluate(text)[0] in (True, False, None)


# --- target names ---------------------------------------------------------------------------

@FAST
@given(st.text(max_size=60))
def test_target_parser_never_raises_other_errors(text):
    try:
        req = REG.parse(text)
    except UnknownTarget as e:
        assert e.text == text.strip()
        return
    assert req.gpu in REG.gpus and req.variant in (None, *req.gpu.variants)
    # surrounding blanks do not change the answer
    assert REG.parse(f"  {text}\t").gpu == req.gpu


@FAST
@given(st.sampled_from(registry().gpus), st.sampled_from(["sm_{M}{m}", "sm{M}{m}", "{M}.{m}", "SM_{M}{m}", "compute_{M}{m}"]))
def test_target_parser_round_trip(gpu, form):
    text = form.format(M=gpu.major, m=gpu.minor)
    req = REG.parse(text)
    assert (req.gpu, req.variant) == (gpu, None)
    for v in gpu.variants:
        if v:
            assert REG.parse(text + v).variant == v


# --- Python gate evaluation -----------------------------------------------------------------

class MemSource(Source):
    """An in-memory tree: exercises the Source API the way a wheel or directory does."""

    label = "<memory>"

    def __init__(self, files: dict[str, bytes]):
        super().__init__()
        self._f = files

    def files(self):
        return sorted(self._f)

    def _read_bytes(self, rel):
        return self._f.get(rel)

    def exists(self, rel):
        return rel in self._f

    def is_dir(self, rel):
        return any(p.startswith(rel + "/") for p in self._f)


def arch_cond(depth: int = 2):
    """(Python text, predicate on (major, minor)) pairs."""
    k = st.sampled_from([7, 8, 9, 10, 11, 12])
    mi = st.sampled_from([0, 1, 3, 6, 9])
    cmp = st.sampled_from(["==", "!=", ">=", "<=", ">", "<"])
    ops = {"==": lambda x, y: x == y, "!=": lambda x, y: x != y, ">=": lambda x, y: x >= y,
           "<=": lambda x, y: x <= y, ">": lambda x, y: x > y, "<": lambda x, y: x < y}
    atoms = st.one_of(
        st.tuples(cmp, k).map(lambda t: (f"major {t[0]} {t[1]}", lambda M, m, t=t: ops[t[0]](M, t[1]))),
        st.tuples(cmp, mi).map(lambda t: (f"minor {t[0]} {t[1]}", lambda M, m, t=t: ops[t[0]](m, t[1]))),
        st.tuples(cmp, k, mi).map(lambda t: (f"(major, minor) {t[0]} ({t[1]}, {t[2]})",
                                             lambda M, m, t=t: ops[t[0]]((M, m), (t[1], t[2])))),
        st.tuples(cmp, k, mi).map(lambda t: (f"major * 10 + minor {t[0]} {t[1] * 10 + t[2]}",
                                             lambda M, m, t=t: ops[t[0]](M * 10 + m, t[1] * 10 + t[2]))),
        st.lists(k, min_size=1, max_size=3, unique=True).map(
            lambda ks: (f"major in ({', '.join(map(str, ks))},)", lambda M, m, ks=ks: M in ks)),
    )
    if depth == 0:
        return atoms
    sub = arch_cond(depth - 1)
    return st.one_of(
        atoms,
        st.tuples(sub, st.sampled_from(["and", "or"]), sub).map(
            lambda t: (f"({t[0][0]}) {t[1]} ({t[2][0]})",
                       (lambda M, m, t=t: t[0][1](M, m) and t[2][1](M, m)) if t[1] == "and"
                       else (lambda M, m, t=t: t[0][1](M, m) or t[2][1](M, m)))),
        sub.map(lambda s: (f"not ({s[0]})", lambda M, m, s=s: not s[1](M, m))),
    )


def _gates_of(conds: list[str]) -> dict[int, frozenset]:
    from archaudit.pipeline import package_resolver
    from archaudit.python.gates import find_python_gates
    from archaudit.python.index import Index

    lines = ["import torch", ""]
    where = []
    for i, c in enumerate(conds):
        # a branch that is not an early exit: the gate admits the GPUs where the test holds
        lines += ["", f"def f{i}():", "    major, minor = torch.cuda.get_device_capability()", "    x = 0",
                  f"    if {c}:", "        x = 1", "    return x"]
        where.append(len(lines) - 2)
    src = MemSource({"genpkg/__init__.py": b"", "genpkg/m.py": "\n".join(lines).encode() + b"\n"})
    index = Index(src, ["genpkg/__init__.py", "genpkg/m.py"], path_based=True)
    scan = find_python_gates(src, index, REG, package_resolver(src, []))
    assert src.diagnostics == [] and index.diagnostics == []
    got = {g.line: g.admits for g in scan.gates if g.kind == "capability-compare"}
    return {i: got.get(line) for i, line in enumerate(where)}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arch_cond(), arch_cond())
def test_gate_evaluator_algebra(a, b):
    conds = [a[0], b[0], f"({a[0]}) or ({b[0]})", f"({a[0]}) and ({b[0]})", f"not ({a[0]})"]
    preds = [a[1], b[1], lambda M, m: a[1](M, m) or b[1](M, m), lambda M, m: a[1](M, m) and b[1](M, m),
             lambda M, m: not a[1](M, m)]
    got = _gates_of(conds)
    everyone = frozenset(g.name for g in REG.gpus)
    for i, pred in enumerate(preds):
        want = frozenset(g.name for g in REG.gpus if pred(g.major, g.minor))
        if want in (frozenset(), everyone):
            # the same on every GPU: not a gate (or, if reported, with exactly that set)
            assert got[i] in (None, want), conds[i]
        else:
            assert got[i] == want, conds[i]
    if got[0] is not None and got[1] is not None and got[2] is not None:
        assert got[2] == got[0] | got[1]


# --- wheels ---------------------------------------------------------------------------------

def _wheel() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("w/__init__.py", "")
        z.writestr("w/gate.py", "import torch\nif torch.cuda.get_device_capability()[0] == 9:\n    x = 1\n")
        z.writestr("w/k.cu", "#if __CUDA_ARCH__ >= 900\n#endif\n")
        z.writestr("w-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: w\nVersion: 1.0\n\n")
        z.writestr("w-1.0.dist-info/RECORD", "w/__init__.py,,\nw/gate.py,,\nw/k.cu,,\n")
    return buf.getvalue()


WHEEL = _wheel()


@FAST
@given(st.lists(st.tuples(st.integers(0, len(WHEEL) - 1), st.integers(0, 255)), max_size=8),
       st.integers(len(WHEEL) // 2, len(WHEEL)))
def test_wheel_reader_on_damaged_wheels(tmp_path_factory, flips, cut):
    raw = bytearray(WHEEL[:cut])
    for off, val in flips:
        if off < len(raw):
            raw[off] = val
    p = tmp_path_factory.mktemp("w") / "x-1.0-py3-none-any.whl"
    p.write_bytes(bytes(raw))
    try:
        src = WheelSource(p)
    except SourceError as e:
        assert str(p) in str(e)
        return
    for f in src.files():
        assert _safe_member(f) == f
        first = src.read(f)
        assert first is None or len(first) <= MAX_FILE_BYTES
        assert src.read(f) == first  # reading twice gives the same answer
    src.distributions()
    assert all(isinstance(d, Diagnostic) and d.path for d in src.diagnostics)


@FAST
@given(st.text(max_size=40))
def test_wheel_member_names_never_escape(name):
    safe = _safe_member(name)
    if safe is not None:
        assert not safe.startswith("/") and ".." not in safe.split("/") and "\x00" not in safe
        assert safe == _safe_member(safe)


# --- raw-byte parsers -----------------------------------------------------------------------

PY_SNIPPETS = [b"def f(", b"):\n", b"    ", b"\t", b"if x:\n", b"(", b")", b"[", b"'''", b'"', b"\\\n", b"lambda",
               b"print 'x'\n", b"`x`", b"<>", b"\xff", b"\x00", b"\r\n", b"async ", b"match x:\n case 1:\n", b"@d\n",
               b"f'{x!r:>{w}}'", b"get_device_capability()", b"major >= 9", b"import ", b"from . import *\n"]


@FAST
@given(st.lists(st.one_of(st.sampled_from(PY_SNIPPETS), st.binary(max_size=8)), max_size=40))
def test_python_parser_never_raises(parts):
    data = b"".join(parts)
    pm = parse_python(data)
    nlines = data.count(b"\n") + 1
    assert all(1 <= line <= nlines and isinstance(msg, str) for line, msg in pm.errors)
    parse_python(data, shallow=True)


CU_SNIPPETS = [b"#if ", b"#ifdef X\n", b"#else\n", b"#elif 1\n", b"#endif\n", b"#define F(x) F(x x)\n",
               b"#include \"a.cuh\"\n", b"__CUDA_ARCH__ >= 900\n", b"asm volatile(\"wgmma.fence;\");", b"R\"(", b")\"",
               b"/*", b"*/", b"//", b"\\\n", b"'", b"\"", b"{", b"}", b"__global__ void k() ", b"template <int N>",
               b"\x00", b"\xff", b"\r\n", b"#pragma once\n", b"#error nope\n", b"__trap();"]


@FAST
@given(st.lists(st.one_of(st.sampled_from(CU_SNIPPETS), st.binary(max_size=8)), max_size=40))
def test_cuda_lexer_and_preprocessor_never_raise(parts):
    from archaudit.cuda.tu import CudaProject

    data = b"".join(parts)
    sc = cpp.scan(data)
    assert len(sc.code) == len(sc.text) == len(data)
    prog = build_program(sc)
    assert len(prog.region_parent) == len(prog.region_line) == len(prog.region_cond)

    class Reader:
        problems: dict = {}

        def read(self, rel):
            return {"k.cu": data, "a.cuh": data}.get(rel)

        def exists(self, rel):
            return rel in ("k.cu", "a.cuh")

        def files(self):
            return ["k.cu", "a.cuh"]

    proj = CudaProject(Reader(), [""], {}, ["k.cu", "a.cuh"])
    res = proj.analyse_tu("k.cu", ruleset.target_by_name("sm_120f"))
    assert res.prediction in ("builds", "fails", "stub", "unknown")
    if res.prediction != "unknown":
        assert not [d for d in res.diagnostics if d.kind in ("unbalanced-conditional", "binary-file", "include-cycle")]


@pytest.mark.parametrize("text", ["(" * 900 + "1" + ")" * 900, "!" * 1900 + "1", "1 ? " * 600 + "1" + " : 0" * 600,
                                  "-" * 1900 + "1", "F(" * 900 + "1" + ")" * 900, "1 + " * 5000 + "1"])
def test_preproc_deep_or_long_conditions_are_undecided_not_errors(text):
    # found by bench/fuzz.py: these recursed until RecursionError
    pp = _pp("sm_120f")
    pp.evaluate("1")
    from archaudit.cuda.preproc import Macro, tokenize

    pp.macros["F"] = Macro(("x",), tokenize("x"), True, False, "x")
    assert pp.evaluate(text) == (None, False)
    assert pp._budget_hit


@pytest.mark.parametrize("text,value", [
    ("9007199254740993 / 1 == 9007199254740993", True),  # a float division said False
    ("-7 / 2 == -3", True), ("-7 % 2 == -1", True), ("7 / -2 == -3", True), ("1 / 0", None),
    ("0xFFFFFFFFFFFFFFFF + 1", None),  # beyond 64 bits: not a Python bigint
    ("18446744073709551615ULL == 0xFFFFFFFFFFFFFFFF", True),
])
def test_preproc_arithmetic_is_exact_64_bit(text, value):
    assert _pp("sm_90a").evaluate(text)[0] == value
