"""The code after a refusal is the gate's only on the paths that decided it (fixtures/guardscope):
past an enclosing branch, or after `if other and not ok: raise`, it also runs untested, and what
it reaches leaves the gate unresolved instead of deciding its verdict."""
import pytest

from archaudit.pipeline import scan

from conftest import FIXTURES

ROOT = FIXTURES / "guardscope"
PARTLY = "what was reached lies after the refusal on a path that also runs without deciding the gate"
MMA = [("scopepkg/data/csrc/mma.cu", 4, "ptx.tcgen05")]


@pytest.fixture(scope="module")
def result(reg):
    return scan(ROOT, [reg.parse("sm_120")])


def test_exact_findings_sm120(result):
    got = {(f.gate.path, f.gate.line): (f.verdict, [(e.path, e.line, e.feature) for e in f.evidence])
           for f in result.findings}
    assert got == {
        ("scopepkg/ops.py", 13): ("unresolved", []),
        ("scopepkg/ops.py", 28): ("unresolved", []),
        ("scopepkg/ops.py", 37): ("hardware-bound", MMA),
        ("scopepkg/ops.py", 44): ("hardware-bound", MMA),
        ("scopepkg/ops.py", 52): ("unresolved", []),
        ("scopepkg/ops.py", 76): ("hardware-bound", MMA),
    }


def test_reasons_say_why(result):
    by_line = {f.gate.line: f.reason for f in result.findings}
    assert by_line[13].startswith(PARTLY) and by_line[13].endswith(": mma_{arch}")
    assert by_line[28].startswith(PARTLY) and by_line[28].endswith(": mma_{arch}")
    assert f"{PARTLY} (past an enclosing branch, or after `if other and not gate: raise`); it is not shown to be " \
           "what the gate enables (CuTe DSL calls)" in by_line[52]


def test_the_regions_say_which_part_is_the_gates(result):
    # the chain of the pinned refusal runs through a plain after-exit; the others' through the partly arm
    hows = {f.gate.line: {ln.how for ln in f.chain} for f in result.findings}
    assert "after-exit" in hows[37] and "after-exit-partly" not in hows[37]
    # `if not ok: raise`: the gate is the whole negated test, which decides `ok`
    assert "after-exit" in hows[76] and "after-exit-partly" not in hows[76]
