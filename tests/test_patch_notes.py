"""What `archaudit patch` tells beside its edits (fixtures/patchnotes): a comment at the edit that
says the target is left out on purpose is shown as a warning (with the edit, in the command's
messages and in the finding's plan), and a gate whose outcome on the target is not decided by the
architecture alone is unresolved, with that reason, rather than software-only with no edit to make."""
import pytest
from click.testing import CliRunner

from archaudit.cli import main
from archaudit.verdict.patch_warnings import excluding_comments
from archaudit.pipeline import scan

from conftest import FIXTURES

ROOT = FIXTURES / "patchnotes"
MODULES = "commkit/jit/modules.py"
BINDING = "commkit/data/csrc/scale_binding.cu"

W_ALLREDUCE = (f'the comment at {MODULES}:7 may exclude sm_120 on purpose: "Thor (SM11x) and RTX/consumer (SM12x) '
               'are intentionally excluded here."')
W_SCALE = f'the comment at {MODULES}:21 may exclude sm_120 on purpose: "no RTX 5090 yet: it does not work there"'
W_CHECK = (f'the comment at {BINDING}:9 may exclude sm_120 on purpose: "Consumer Blackwell (sm_120) is deliberately '
           'left out: its shared memory is too small for the tile this launch picks."')
def mixed(others: str) -> str:
    return ("on sm_120 the test's outcome is not decided by the architecture alone: it may be true or false there, "
            f"as on {others} (a run-time value, or one the evaluation could not follow), so sm_120 is not shown to be "
            "refused here and no edit of an architecture test is shown to decide it; the patch is manual (what the "
            "path reaches: quant: every source builds for sm_120f; entry point(s) quant reaches only real kernels)")


# the command's messages on stderr, in order
MESSAGES = [
    f"patched: {BINDING}:11: widen the check with `major == 12` (warning: {W_CHECK})",
    f"patched: {BINDING}:19: widen the check with `major == 12`",
    f"patched: {MODULES}:8: add 12 to [9, 10] (warning: {W_ALLREDUCE})",
    # "Thor (SM11x) is not supported." names no sm_120; "SM12x was tuned in 0.7." excludes nothing
    f"patched: {MODULES}:16: add 12 to [9, 10]",
    f"patched: {MODULES}:21: add 12 to [10] (warning: {W_SCALE})",
]


@pytest.fixture(scope="module")
def result(reg):
    return scan(ROOT, [reg.parse("sm_120")])


def test_findings_and_the_warnings_in_their_plans(result):
    got = {(f.gate.path, f.gate.line): (f.verdict, f.reason) for f in sorted(
        result.findings, key=lambda f: (f.gate.path, f.gate.line))}
    assert {k: v for k, (v, _r) in got.items()} == {
        (BINDING, 11): "software-only", (BINDING, 19): "software-only", (MODULES, 8): "software-only",
        (MODULES, 16): "software-only", (MODULES, 21): "software-only", ("commkit/quant.py", 48): "unresolved",
        # device_arch's refusal itself: what its raise stops is not followed (x.numel is not resolved)
        ("commkit/split.py", 9): "unresolved", ("commkit/split.py", 18): "unresolved"}
    assert got[(MODULES, 8)][1] == ("allreduce: every source builds for sm_120f; patch plan: "
                                    f"{MODULES}:8: add 12 to [9, 10] (warning: {W_ALLREDUCE})")
    assert got[(MODULES, 16)][1] == (f"gather: every source builds for sm_120f; patch plan: {MODULES}:16: add 12 "
                                     "to [9, 10]")
    assert got[(BINDING, 11)][1] == ("scale: every source builds for sm_120f; patch plan: "
                                     f"{BINDING}:11: widen the check with `major == 12` (warning: {W_CHECK}); "
                                     f"{MODULES}:21: add 12 to [10] (warning: {W_SCALE})")
    assert got[(BINDING, 19)][1] == ("scale: every source builds for sm_120f; patch plan: "
                                     f"{BINDING}:19: widen the check with `major == 12`; "
                                     f"{MODULES}:21: add 12 to [10] (warning: {W_SCALE})")
    # sm_90 and later may or may not take the fused path: `out is None` does not refuse sm_120
    assert got[("commkit/quant.py", 48)][1] == mixed("sm_90, sm_100, sm_103, sm_107, sm_110, sm_121")
    # device_arch raises on sm_120; the evaluation reads the raise as an unknown value, so the
    # tuple test is undecided there, as on every GPU but sm_100 and sm_103
    assert got[("commkit/split.py", 18)][1] == mixed("sm_75, sm_80, sm_86, sm_87, sm_88, sm_89 and 4 more")


def test_the_patch_command_shows_the_warnings(tmp_path):
    out = tmp_path / "p.diff"
    r = CliRunner().invoke(main, ["patch", str(ROOT), "-t", "sm_120", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert [ln for ln in r.output.splitlines() if ln.startswith(("patched", "covered", "NOT"))] == MESSAGES
    # the edits are made all the same: the warning is for the reader
    assert "+        supported_major_versions=[9, 10, 12]\n" in out.read_text()
    assert '+  TVM_FFI_ICHECK(major == 10 || major == 12) << "scale requires SM10x";\n' in out.read_text()


def _edit(old, a, b):
    assert a in old
    return old.replace(a, b, 1)


def test_which_comments_count(reg):
    sm120, sm121, sm110, sm89 = (reg.by_name[n] for n in ("sm_120", "sm_121", "sm_110", "sm_89"))
    src = (FIXTURES / "patchnotes" / MODULES).read_text()
    new = _edit(src, "supported_major_versions=[9, 10]\n", "supported_major_versions=[9, 10, 12]\n")
    w = 'may exclude {} on purpose: "Thor (SM11x) and RTX/consumer (SM12x) are intentionally excluded here."'
    # SM12x names the family: sm_121 too; SM11x: Thor; sm_89 is named by none of it
    assert excluding_comments(MODULES, src, new, sm120) == [f"the comment at {MODULES}:7 " + w.format("sm_120")]
    assert excluding_comments(MODULES, src, new, sm121) == [f"the comment at {MODULES}:7 " + w.format("sm_121")]
    assert excluding_comments(MODULES, src, new, sm110) == [f"the comment at {MODULES}:7 " + w.format("sm_110")]
    assert excluding_comments(MODULES, src, new, sm89) == []
    # only the statement the edit changes and the comments right above it: an `if` test's edit
    # does not read the comments in its body, nor those above a blank line
    py = ("import torch\n\n# RTX 5090 is not supported.\n\ndef f():\n"
          "    major = torch.cuda.get_device_capability()[0]\n    if major == 10:\n"
          "        # sm_120 is excluded here\n        return 1\n    return 0\n")
    assert excluding_comments("m.py", py, _edit(py, "major == 10:", "major in (10, 12):"), sm120) == []
    py2 = _edit(py, "    if major == 10:\n", "    # capability (12, 0) is not supported yet.\n    if major == 10:\n")
    assert excluding_comments("m.py", py2, _edit(py2, "major == 10:", "major in (10, 12):"), sm120) == [
        'the comment at m.py:7 may exclude sm_120 on purpose: "capability (12, 0) is not supported yet."']
    # a '#' inside a string is no comment; a file that does not tokenize gives no warning
    py3 = 'x = f("# sm_120 excluded", [9, 10])\n'
    assert excluding_comments("m.py", py3, _edit(py3, "[9, 10]", "[9, 10, 12]"), sm120) == []
    assert excluding_comments("m.py", 'x = """\n', 'y = """\n', sm120) == []
    # C++: the statement's lines up to the edit and the comment block above it (// and /* */)
    cu = ("int f(int major) {\n  /* SM12x parts\n     are not supported. */\n  TVM_FFI_ICHECK(\n"
          "      major == 10) << \"needs SM10x\";\n  return 0;\n}\n")
    assert excluding_comments("a.cu", cu, _edit(cu, "major == 10)", "major == 10 || major == 12)"), sm120) == [
        'the comment at a.cu:2 may exclude sm_120 on purpose: "SM12x parts are not supported."']
