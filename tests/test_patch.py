"""Patches for each kind of software-only gate (fixtures/patches): the exact lines each edit
removes and adds, and the round trip: `archaudit patch`, `patch -p0` on a copy, a scan of the copy."""
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from archaudit.cli import main
from archaudit.pipeline import scan

from conftest import FIXTURES

ROOT = FIXTURES / "patches"
MODULES = "gpukit/jit/modules.py"
BINDING = "gpukit/data/csrc/norm_binding.cu"
GENCODE = '"-gencode=arch=compute_120f,code=sm_120f"'

# (gate path, line) -> [(file, removed or added line)], in diff order
EXPECTED = {
    # a module constant of capability tuples
    ("gpukit/attention.py", 16): [
        ("gpukit/attention.py", "-_SUPPORTED_CAPABILITIES = ((9, 0), (10, 0))"),
        ("gpukit/attention.py", "+_SUPPORTED_CAPABILITIES = ((9, 0), (10, 0), (12, 0))")],
    # a capability-keyed table (the nearest entry's value) and the arch-keyed flag table's build call
    ("gpukit/bmm.py", 20): [
        ("gpukit/bmm.py", '+        (12, 0): "sm103a",'),
        (MODULES, '-        extra_cuda_cflags=_FLAGS[target] + ["--use_fast_math"],'),
        (MODULES, f'+        extra_cuda_cflags=_FLAGS[target] + ["--use_fast_math", {GENCODE}],')],
    # a major test, then a minor test under it: the minor's gate is patched with the major's
    ("gpukit/configs.py", 20): [
        ("gpukit/configs.py", "-    if major == 10:"),
        ("gpukit/configs.py", "+    if major in (10, 12):")],
    ("gpukit/configs.py", 21): [
        ("gpukit/configs.py", "-    if major == 10:"),
        ("gpukit/configs.py", "-        if minor >= 7:"),
        ("gpukit/configs.py", "+    if major in (10, 12):"),
        ("gpukit/configs.py", "+        if minor >= 7 or torch.cuda.get_device_capability()[0] == 12:")],
    # an if/elif chain on the capability: each arm alone; in the combined patch the first serves sm_120
    ("gpukit/configs.py", 34): [
        ("gpukit/configs.py", "-    if capability == (10, 0):"),
        ("gpukit/configs.py", "+    if capability in ((10, 0), (12, 0)):")],
    ("gpukit/configs.py", 36): [
        ("gpukit/configs.py", "-    elif capability == (10, 3):"),
        ("gpukit/configs.py", "+    elif capability in ((10, 3), (12, 0)):")],
    # a predicate named for an architecture is extended where it is used, not redefined
    ("gpukit/configs.py", 27): [
        ("gpukit/configs.py", "-    if not (x.is_cuda and _sm103(x.device)):"),
        ("gpukit/configs.py", "+    if not (x.is_cuda and (_sm103(x.device) or torch.cuda.get_device_capability()[0] == 12)):")],
    # C++ runtime checks: an && condition is wrapped, an || chain extended, a refusal narrowed
    (BINDING, 18): [
        (BINDING, '-  TVM_FFI_ICHECK(major == 10 && (minor == 0 || minor == 3)) << "rms_norm requires SM100 or '
                  'SM103";'),
        (BINDING, '+  TVM_FFI_ICHECK((major == 10 && (minor == 0 || minor == 3)) || major == 12) << "rms_norm requires '
                  'SM100 or SM103";')],
    (BINDING, 24): [
        (BINDING, "-  if (sm < 90 || sm >= 110) {"),
        (BINDING, "+  if ((sm < 90 || sm >= 110) && sm != 120) {")],
    (BINDING, 32): [
        (BINDING, '-  FLASHINFER_CHECK(sm == kSM_100 || sm == kSM_103, "rms_norm_inplace requires SM100 or '
                  'SM103");'),
        (BINDING, '+  FLASHINFER_CHECK(sm == kSM_100 || sm == kSM_103 || sm == kSM_120, "rms_norm_inplace requires SM100 '
                  'or SM103");')],
    # no is_sm120_supported in scope: the torch capability test
    ("gpukit/fusion.py", 15): [
        ("gpukit/fusion.py", "-    if is_sm90_supported() or is_sm100_supported():"),
        ("gpukit/fusion.py",
         "+    if is_sm90_supported() or is_sm100_supported() or torch.cuda.get_device_capability()[0] == 12:")],
    (MODULES, 9): [
        (MODULES, "-    nvcc_flags = current_compilation_context.get_nvcc_flags_list(supported_major_versions=[10])"),
        (MODULES, "+    nvcc_flags = current_compilation_context.get_nvcc_flags_list(supported_major_versions=[10, 12])")],
    # hard-coded -gencode: appended to the list literal at the build call
    (MODULES, 14): [
        (MODULES, '-        extra_cuda_cflags=sm90a_nvcc_flags + _PRECISE_MATH_FLAGS + ["--expt-relaxed-constexpr"],'),
        (MODULES,
         f'+        extra_cuda_cflags=sm90a_nvcc_flags + _PRECISE_MATH_FLAGS + ["--expt-relaxed-constexpr", {GENCODE}],')],
    # the build-flags gate at the generator's def is patched at its build call
    (MODULES, 21): [
        (MODULES, '-        extra_cuda_cflags=_FLAGS[target] + ["--use_fast_math"],'),
        (MODULES, f'+        extra_cuda_cflags=_FLAGS[target] + ["--use_fast_math", {GENCODE}],')],
    # a tuple of minors under a major test: the major test is widened, and the module's arch list
    ("gpukit/softmax.py", 24): [
        ("gpukit/softmax.py", "-    return major == 10 and minor in (0, 3)"),
        ("gpukit/softmax.py", "+    return major in (10, 12) and minor in (0, 3)"),
        (MODULES, "-    nvcc_flags = current_compilation_context.get_nvcc_flags_list(supported_major_versions=[10])"),
        (MODULES, "+    nvcc_flags = current_compilation_context.get_nvcc_flags_list(supported_major_versions=[10, 12])")],
}


# `_arch()` decides both gates of dispatch.py; one of them is hardware-bound: `_arch` is not edited
UNPATCHED = {("gpukit/dispatch.py", 24): "software-only", ("gpukit/dispatch.py", 30): "hardware-bound"}


def edits(patch: str) -> list[tuple[str, str]]:
    out, path = [], None
    for line in patch.splitlines():
        if line.startswith("+++ "):
            path = line[4:]
        elif line[:1] in "+-" and not line.startswith("--- "):
            out.append((path, line))
    return out


@pytest.fixture(scope="module")
def result(reg):
    return scan(ROOT, [reg.parse("sm_120")])


def test_every_gate_is_software_only_with_its_exact_edits(result):
    assert {(f.gate.path, f.gate.line): f.verdict for f in result.findings} == {
        **{k: "software-only" for k in EXPECTED}, **UNPATCHED}
    got = {(f.gate.path, f.gate.line): edits(f.patch or "") for f in result.findings}
    assert got == {**EXPECTED, **{k: [] for k in UNPATCHED}}


def test_a_function_a_blocked_gate_goes_through_is_not_edited(result):
    f = next(f for f in result.findings if (f.gate.path, f.gate.line) == ("gpukit/dispatch.py", 24))
    assert f.patch is None
    assert f.reason.endswith("; not edited, since another gate, which is not to be patched for sm_120, also holds "
                             "or goes through it: gpukit.dispatch._arch (the gate at gpukit/dispatch.py:30, "
                             "hardware-bound for sm_120): an edit there would let sm_120 through that gate too)")
    assert "patch plan, manual for gpukit/dispatch.py:24: " in f.reason


def test_the_plan_names_each_step(result):
    f = next(f for f in result.findings if (f.gate.path, f.gate.line) == ("gpukit/bmm.py", 20))
    assert [(g.path, g.line, g.kind) for g in f.plan] == [("gpukit/bmm.py", 20, "capability-compare"),
                                                          (MODULES, 24, "build-flags")]
    assert ('gpukit/bmm.py:20: add `(12, 0): "sm103a"` to the table at line 15 (the value of (10, 3): sm_120 takes '
            'a path judged for it)') in f.reason
    assert f"{MODULES}:24: add -gencode=arch=compute_120f,code=sm_120f to extra_cuda_cflags" in f.reason


def test_no_safe_edit_says_why_and_that_the_patch_is_manual(tmp_path, reg):
    """fusion.py without torch: no predicate for sm_120 in scope and no capability test to write;
    the finding keeps its verdict, has no patch and says the step is manual."""
    copy = tmp_path / "patches"
    shutil.copytree(ROOT, copy)
    fusion = copy / "gpukit" / "fusion.py"
    fusion.write_text(fusion.read_text().replace("import torch\n", "").replace("torch.add(x, y)", "x + y"))
    r = scan(copy, [reg.parse("sm_120")])
    f = next(f for f in r.findings if (f.gate.path, f.gate.line) == ("gpukit/fusion.py", 14))
    assert (f.verdict, f.patch) == ("software-only", None)
    assert f.reason.endswith(
        "patch plan, manual for gpukit/fusion.py:14: gpukit/fusion.py:14: no patch, edit by hand (no predicate for "
        "sm_120 (or for its major) is in scope at the gate or in the predicates it calls, and no capability "
        "comparison or capability-keyed table in the gate or in the functions its resolution went through could "
        "be spelled for it)")


def test_round_trip(tmp_path, reg):
    """`archaudit patch` on a copy, applied with patch -p0: every patched gate admits sm_120, the
    findings left are the unpatched ones, and the gates no edit touched are as they were."""
    if shutil.which("patch") is None:
        pytest.skip("patch(1) is needed")
    copy = tmp_path / "patches"
    shutil.copytree(ROOT, copy)
    before = scan(copy, [reg.parse("sm_120")])
    diff_file = tmp_path / "p.diff"
    r = CliRunner().invoke(main, ["patch", str(copy), "-t", "sm_120", "-o", str(diff_file)])
    assert r.exit_code == 0, r.output
    assert ("covered: gpukit/configs.py:36: sm_120 takes the arm at line 34, patched above, and no longer reaches "
            "this gate") in r.output  # the messages (stderr)
    assert "NOT patched: gpukit/dispatch.py:24: " in r.output
    diff = diff_file.read_text()
    assert diff.count("+++ ") == 7  # one diff per file, each file once
    subprocess.run(["patch", "-p0", "--quiet"], input=diff, text=True, cwd=copy, check=True)
    again = scan(copy, [reg.parse("sm_120")])
    # left: the gate no edit may touch, the hardware-bound one; configs.py:36 is served by line 34's arm
    assert {(f.gate.path, f.gate.line): f.verdict for f in again.findings} == UNPATCHED
    # gates by what they are (the table entry moves the gate of bmm.py one line down)
    old = {(g.path, g.kind, g.expr): g for g in before.gates}
    new = {(g.path, g.kind, g.expr): g for g in again.gates}
    patched = {(p, ln) for p, ln in EXPECTED} - {("gpukit/configs.py", 36)}  # covered: not edited
    changed = {k for k in old if (k[0], old[k].line) in patched}
    assert len(changed) == len(patched)
    for k in changed:  # the edited expression is no longer found under its old text, or admits sm_120
        assert k not in new or "sm_120" in new[k].admits, k
    untouched = [k for k in old if k not in changed]
    assert untouched and all(k in new and old[k].admits == new[k].admits for k in untouched)


def test_a_two_operand_check_becomes_the_plain_macro(reg):
    """`TVM_FFI_ICHECK_EQ(props.major, 10)` has no condition to extend: it is rewritten to the plain
    macro with the comparison and the target's clause; the check scan then admits sm_12x."""
    from archaudit.cuda.runtime_checks import find_runtime_checks
    from archaudit.verdict.patch import _cpp_check_edits

    text = ("void f(int device) {\n  cudaDeviceProp props;\n  cudaGetDeviceProperties(&props, device);\n"
            "  TVM_FFI_ICHECK_EQ(props.major, 10) << \"needs SM10x\";\n}\n")
    (gate,) = find_runtime_checks("a.cu", text)
    new_text, what = _cpp_check_edits(text, gate, reg, reg.by_name["sm_120"])[0]
    assert what == "widen the check with `props.major == 12`"
    assert new_text.splitlines()[3] == '  TVM_FFI_ICHECK(props.major == 10 || props.major == 12) << "needs SM10x";'
    (after,) = find_runtime_checks("a.cu", new_text)
    assert sorted(after.admits) == ["sm_100", "sm_103", "sm_107", "sm_120", "sm_121"]


def test_an_edit_outside_the_gate_never_sends_the_target_to_an_exit(reg):
    """In a function the gate's resolution goes through, `if cap[0] < 9: return False` may only be
    edited so that sm_120 does not take the exit (the or-form would make it return False there)."""
    import ast

    from archaudit.verdict.patch import _scope_value_edits

    src = ("import torch\n\n\ndef can_use():\n    if torch.cuda.get_device_capability()[0] < 9:\n"
           "        return False\n    return True\n")
    tree = ast.parse(src)
    got = _scope_value_edits(src, tree, tree.body[1], reg, reg.by_name["sm_120"], None)
    assert [what for _t, what in got] == [
        "`torch.cuda.get_device_capability()[0] < 9` -> `(torch.cuda.get_device_capability()[0] < 9 and "
        "torch.cuda.get_device_capability()[0] != 12)`"]


def test_only_a_literal_of_gpus_gets_the_target(reg):
    import ast

    from archaudit.verdict.patch import _seq_edit

    gpu = reg.by_name["sm_120"]
    for src, want in (("(100, 103)", "(100, 103, 120)"), ("[9, 10]", "[9, 10, 12]"), ("(10,)", "(10, 12)"),
                      ("((10, 0), (10, 3))", "((10, 0), (10, 3), (12, 0))"),
                      ('("sm_100a", "sm_103a")', '("sm_100a", "sm_103a", "sm_120a")'),
                      ("(4, 8, 16)", None), ("(0, 3)", None), ("(9, 100)", None)):
        got = _seq_edit(src, ast.parse(src).body[0].value, reg, gpu)
        assert (got[0] if got else None) == want, src


# the pinned pair (flashinfer 0.7.2 + sglang 0.5.23): one gate of each kind that had no patch
def _explain072(root, reg, site):
    from archaudit.verdict.explain import explain
    from archaudit.pipeline import run_with_big_stack
    from archaudit.python.index import Index
    from archaudit.sources import open_source

    src = open_source(root)
    files = src.files()
    idx = Index(src, [f for f in files if f.endswith(".py")], True)
    path, line = site.rsplit(":", 1)
    (e,) = run_with_big_stack(lambda: explain(src, files, idx, reg, path, int(line), [reg.parse("sm_120")], True))
    (f,) = e.findings
    assert f.verdict == "software-only" and f.patch, f.reason
    return f


@pytest.mark.real
def test_072_cpp_check_and_its_hard_coded_flags(sp072, reg):
    f = _explain072(sp072, reg, "flashinfer/data/csrc/tinygemm2_sm100.cu:447")
    assert ("+    TVM_FFI_ICHECK((major == 10 && (minor == 0 || minor == 3 || (minor == 7 && kSupportsSm107))) "
            "|| major == 12)\n") in f.patch
    assert '+        + ["-gencode=arch=compute_103a,code=sm_103a", "-gencode=arch=compute_120f,code=sm_120f"]\n' in f.patch


@pytest.mark.real
def test_072_hard_coded_gencode(sp072, reg):
    f = _explain072(sp072, reg, "flashinfer/jit/eagle_verify_fp8kv_sm90.py:31")
    assert '+        + ["--expt-relaxed-constexpr", "-gencode=arch=compute_120f,code=sm_120f"],\n' in f.patch


@pytest.mark.real
def test_072_capability_table_and_arch_keyed_flags(sp072, reg):
    f = _explain072(sp072, reg, "flashinfer/gemm/gemm_base.py:1700")
    assert '+        ("cake", 12, 0): "sm103a",\n' in f.patch
    assert ('+        extra_cuda_cflags=_FLAGS[target] + ["--use_fast_math", '
            '"-gencode=arch=compute_120f,code=sm_120f"],\n') in f.patch


@pytest.mark.real
def test_072_minors_under_a_major_test(sp072, reg):
    f = _explain072(sp072, reg, "flashinfer/sampling.py:138")
    assert "+    return major in (10, 12) and minor in (0, 3)\n" in f.patch
    assert "+        supported_major_versions=[10, 12]\n" in f.patch
