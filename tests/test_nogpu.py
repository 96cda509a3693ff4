"""The no-gpu-code verdict (fixtures/nogpu): a gate that reaches no JIT module is no-gpu-code only
when every way its decision leaves its statement (names read later, state written, a raise or a
returned value reaching the callers, functions handed to other calls) was followed and none
reaches GPU code; otherwise it stays unresolved and names the first thing that stopped the proof."""
import pytest

from archaudit.pipeline import scan

from conftest import FIXTURES

ROOT = FIXTURES / "nogpu"
NOT_SHOWN = "not shown free of GPU code: "

# (gate path, line) -> (verdict, the end of the reason)
EXPECTED_SM120 = {
    ("ngpkg/jit/modules.py", 23): ("software-only", None),
    # a tile size its caller only logs
    ("ngpkg/ops.py", 17): ("no-gpu-code", "patching it changes only Python (or Triton, which compiles for the running GPU)"),
    # a refusal in an API function followed by torch only
    ("ngpkg/ops.py", 31): ("no-gpu-code", "patching it changes only Python (or Triton, which compiles for the running GPU)"),
    # a warning
    ("ngpkg/ops.py", 37): ("no-gpu-code", "patching it changes only Python (or Triton, which compiles for the running GPU)"),
    # a name bound in the branch, read by the JIT build below it
    ("ngpkg/ops.py", 43): ("unresolved", NOT_SHOWN + "ngpkg/ops.py:47: reaches the JIT module scale_{arch}"),
    # state nothing reads (tests/test_stateflow.py follows state that is read)
    ("ngpkg/ops.py", 53): ("no-gpu-code", "patching it changes only Python (or Triton, which compiles for the running GPU)"),
    # a function handed to map() is called there (an edge of the call graph): the module it
    # builds decides
    ("ngpkg/ops.py", 68): ("software-only", "`_capability()[0] == 10` -> `_capability()[0] in (10, 12)`"),
    ("ngpkg/ops.py", 75): ("no-gpu-code", "patching it changes only Python (or Triton, which compiles for the running GPU)"),
    # pytest.skip does not return: the rest of the test is what the gate decides
    ("ngpkg/tests/test_ops.py", 9): ("unresolved", NOT_SHOWN + "ngpkg/tests/test_ops.py:11: reaches the JIT module scale_{arch}"),
}


@pytest.fixture(scope="module")
def result(reg):
    return scan(ROOT, [reg.parse("sm_120")])


def test_exact_findings_sm120(result):
    got = {(f.gate.path, f.gate.line): f.verdict for f in result.findings}
    assert got == {k: v for k, (v, _r) in EXPECTED_SM120.items()}
    for f in result.findings:
        tail = EXPECTED_SM120[(f.gate.path, f.gate.line)][1]
        if tail is not None:
            assert f.reason.endswith(tail), (f.gate.line, f.reason)


def test_no_gpu_code_has_no_module_and_no_patch(result):
    for f in result.findings:
        if f.verdict == "no-gpu-code":
            assert not f.modules and not f.evidence and f.patch is None


def test_predicate_returned_to_callers_outside_stays_unresolved(tmp_path, reg):
    """A selection whose value leaves the scan (an API predicate) is not confined."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text(
        "import torch\n\n\ndef backend():\n    if torch.cuda.get_device_capability()[0] == 10:\n"
        "        return 'fast'\n    return 'plain'\n")
    (f,) = scan(tmp_path, [reg.parse("sm_120")]).findings
    assert (f.gate.line, f.verdict) == (5, "unresolved")
    assert f.reason.endswith("pkg.m.backend returns what the gate decides, and nothing in the scan calls it: its "
                             "callers outside the scan act on that value")
