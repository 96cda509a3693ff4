"""Verdicts on the fixture packages: exact findings, evidence and patches, and a patch round trip."""
import shutil
import subprocess

import pytest

from archaudit.pipeline import scan

from conftest import FIXTURES

ROOT = FIXTURES / "verdicts"

# (gate path, line) -> (verdict, [(evidence path, line, feature)])
EXPECTED_SM120 = {
    ("kernlib/gemm.py", 6): ("hardware-bound", [("kernlib/data/csrc/hopper_gemm.cu", 4, "ptx.wgmma")]),
    ("kernlib/data/csrc/fused_binding.cu", 10): ("hardware-bound", [("kernlib/data/include/kernlib/comm.cuh", 7, "empty-stub")]),
    ("kernlib/data/csrc/norm_binding.cu", 11): ("software-only", []),
    ("kernlib/data/csrc/orphan_binding.cu", 10): ("unresolved", []),
    ("kernlib/jit/modules.py", 6): ("partial", [("kernlib/data/include/kernlib/comm.cuh", 7, "empty-stub")]),
    ("kernlib/jit/modules.py", 18): ("hardware-bound", [("kernlib/data/csrc/hopper_gemm.cu", 4, "ptx.wgmma")]),
    ("kernlib/jit/modules.py", 23): ("software-only", []),
    ("kernlib/jit/modules.py", 28): ("hardware-bound", [("kernlib/data/csrc/blackwell.cu", 4, "trap-stub")]),
    ("kernlib/jit/modules.py", 33): ("hardware-bound", [("kernlib/data/csrc/cute_gemm.cu", 9, "trap-stub"),
                                                        ("kernlib/data/csrc/cute_gemm.cu", 22, "trap-stub")]),
    ("servelib/attn_patch.py", 23): ("unresolved", []),
    ("servelib/attn_patch.py", 45): ("software-only", []),
    ("servelib/auto_enable.py", 14): ("software-only", []),
    ("servelib/communicator.py", 15): ("software-only", []),
    ("servelib/selectors.py", 11): ("unresolved", []),
    ("servelib/selectors.py", 19): ("hardware-bound", [("kernlib/data/csrc/hopper_gemm.cu", 4, "ptx.wgmma")]),
    ("servelib/selectors.py", 27): ("software-only", []),
    ("servelib/selectors.py", 35): ("unresolved", []),
    ("servelib/selectors.py", 41): ("software-only", []),
    ("servelib/selectors.py", 49): ("software-only", []),
    ("servelib/fusion.py", 9): ("software-only", []),
    # reach.py:11, :47 and :56 (`is_sm90` after an arm that serves sm_120) are not evaluated on sm_120
    ("servelib/reach.py", 17): ("software-only", []),
    ("servelib/reach.py", 19): ("software-only", []),
    ("servelib/reach.py", 25): ("software-only", []),
    ("servelib/reach.py", 28): ("unresolved", []),
    ("servelib/reach.py", 43): ("unresolved", []),
    # the arm before it also tests `fast`: sm_120 may reach it, so it is judged, not dropped
    ("servelib/reach.py", 65): ("hardware-bound", [("kernlib/data/csrc/hopper_gemm.cu", 4, "ptx.wgmma")]),
    ("servelib/moe.py", 11): ("software-only", []),
    ("servelib/moe.py", 18): ("software-only", []),
    ("servelib/moe.py", 33): ("hardware-bound", [("kernlib/data/csrc/hopper_gemm.cu", 4, "ptx.wgmma")]),
}


@pytest.fixture(scope="module")
def result(reg):
    return scan(ROOT, [reg.parse("sm_120")])


def test_exact_findings_sm120(result):
    got = {(f.gate.path, f.gate.line): (f.verdict, [(e.path, e.line, e.feature) for e in f.evidence])
           for f in result.findings}
    assert got == EXPECTED_SM120
    assert {f.target for f in result.findings} == {"sm_120"}


def test_partial_names_the_empty_kernel_and_the_safe_entry_points(result):
    f = next(f for f in result.findings if (f.gate.path, f.gate.line) == ("kernlib/jit/modules.py", 6))
    (m,) = f.modules
    assert (m.name, m.compile_target, m.prediction) == ("comm", "sm_120f", "builds")
    assert m.sources == ["kernlib/data/csrc/comm.cu", "kernlib/data/csrc/comm_fusion.cu"]
    assert [(k.name, k.status, k.guard_line) for k in m.kernels] == [
        ("allreduce_fusion_kernel", "real", None),
        ("lamport_norm_kernel", "empty-stub", 7),
        ("two_shot_kernel", "real", None),
    ]
    assert m.entry_points == {"allreduce_fusion": "real", "custom_all_reduce": "partial"}
    assert "entry points real on sm_120f: allreduce_fusion" in f.reason
    assert "supported_major_versions=[9, 10, 12]" in f.patch


def test_chained_gate_patch_plan(result):
    """servelib's gate leads to kernlib's arch list: the plan patches both."""
    f = next(f for f in result.findings if (f.gate.path, f.gate.line) == ("servelib/fusion.py", 9))
    assert [m.name for m in f.modules] == ["comm"]
    assert "entry point(s) allreduce_fusion reaches only real kernels" in f.reason
    assert "+    if not (get_platform().is_sm90 or get_platform().is_sm100 or get_platform().is_sm120):" in f.patch
    assert "+    nvcc_flags = current_compilation_context.get_nvcc_flags_list(supported_major_versions=[9, 10, 12])" in f.patch
    kinds = [link.kind for link in f.chain]
    assert "jit-module" in kinds


def test_no_patch_for_hardware_bound(result):
    for f in result.findings:
        if f.verdict == "hardware-bound":
            assert f.patch is None


def test_targets_that_are_admitted_give_no_finding(reg):
    r = scan(ROOT, [reg.parse("sm_90")])
    assert [(f.gate.path, f.gate.line, f.verdict) for f in r.findings] == [
        ("kernlib/jit/modules.py", 28, "hardware-bound"), ("kernlib/jit/modules.py", 33, "hardware-bound"),
        # the tests that exclude sm_90 in reach.py (sm_120 first, then sm_100 only, then the
        # returned `chosen is None`, a value the gates decide)
        ("servelib/reach.py", 9, "software-only"), ("servelib/reach.py", 19, "software-only"),
        ("servelib/reach.py", 28, "unresolved"), ("servelib/reach.py", 36, "unresolved"),
        ("servelib/reach.py", 43, "unresolved"), ("servelib/reach.py", 45, "unresolved"),
        ("servelib/reach.py", 54, "software-only"), ("servelib/reach.py", 63, "software-only"),
        # pick_dtype's test is on sm_100 alone
        ("servelib/selectors.py", 35, "unresolved"), ("servelib/selectors.py", 41, "software-only")]


def test_patch_round_trip(tmp_path, reg, result):
    """Apply the software-only patches to a copy and scan again: those gates now admit sm_120."""
    if shutil.which("git") is None:
        pytest.skip("git is needed to apply the patch")
    copy = tmp_path / "verdicts"
    shutil.copytree(ROOT, copy)
    f = next(f for f in result.findings if (f.gate.path, f.gate.line) == ("servelib/fusion.py", 9))
    (tmp_path / "p.diff").write_text(f.patch)
    subprocess.run(["git", "apply", "-p0", str(tmp_path / "p.diff")], cwd=copy, check=True)
    again = scan(copy, [reg.parse("sm_120")])
    gates = {(g.path, g.line): g for g in again.gates}
    assert "sm_120" in gates[("servelib/fusion.py", 9)].admits
    assert "sm_120" in gates[("kernlib/jit/modules.py", 6)].admits
    left = {(x.gate.path, x.gate.line) for x in again.findings}
    assert ("servelib/fusion.py", 9) not in left and ("kernlib/jit/modules.py", 6) not in left


def test_gate_on_a_predicate_only_its_callers_test(result):
    """apply_fusion() is tested only by its caller: the call site is the gate; no predicate for
    sm_120 is in scope, so its own edit is refused with the reason, the chain's is still planned."""
    f = next(f for f in result.findings if (f.gate.path, f.gate.line) == ("servelib/communicator.py", 15))
    assert f.gate.resolution.startswith("inferred:")
    assert "servelib/communicator.py:15: no patch, edit by hand (no predicate for sm_120" in f.reason
    assert "supported_major_versions=[9, 10, 12]" in f.patch


def test_patch_goes_into_the_predicate_definition(result):
    f = next(f for f in result.findings if (f.gate.path, f.gate.line) == ("servelib/moe.py", 11))
    assert "in servelib.moe.use_fused_norm: extend `is_sm100_supported()` with `is_sm120_supported()`" in f.reason
    assert "+    return is_sm90_supported() or is_sm100_supported() or is_sm120_supported()" in f.patch


def test_patch_of_a_long_condition_imports_the_targets_predicate(result):
    """The condition is longer than the report's 240 characters, names is_sm100_supported twice,
    and its module does not import is_sm120_supported: the edit extends the test that excludes
    sm_120 (not the multi-node one) and adds the import to the statement the others come from."""
    f = next(f for f in result.findings if (f.gate.path, f.gate.line) == ("servelib/auto_enable.py", 14))
    assert f.gate.expr.endswith("...")
    assert ("servelib/auto_enable.py:14: extend `is_sm100_supported()` with `is_sm120_supported()`, "
            "imported from where `is_sm100_supported` is") in f.reason
    assert "     is_sm100_supported,\n+    is_sm120_supported,\n )\n" in f.patch
    assert "+        and (is_sm90_supported() or is_sm100_supported() or is_sm120_supported())\n" in f.patch
    assert "-        and (nnodes == 1 or is_sm100_supported())" not in f.patch


def test_setting_turned_on_by_a_gate_is_followed_to_its_readers(result):
    f = next(f for f in result.findings if (f.gate.path, f.gate.line) == ("servelib/moe.py", 18))
    assert [(x.kind, x.path, x.line, x.how) for x in f.chain[:3]] == [
        ("region", "servelib/moe.py", 18, "sets a setting"),
        ("config", "servelib/moe.py", 19, "config-key"),
        ("region", "servelib/moe.py", 24, "then")]
    assert [m.name for m in f.modules] == ["comm"]


def test_a_setting_read_in_unrelated_classes_is_not_followed(result):
    """`block.attn.<key> = True` on an object of unknown class, read as `self.<key>` by two
    unrelated classes: following either reader by name could judge the wrong kernels."""
    f = _finding(result, "servelib/attn_patch.py", 23)
    assert f.modules == [] and f.patch is None
    assert ("setting `_use_fused_attention_kernel` (line 26) is read as `self._use_fused_attention_kernel` in 2 "
            "unrelated classes (servelib.attn_patch.DenseAttention, servelib.attn_patch.SparseAttention)") in f.reason
    # a class and its subclass are one family: that setting is followed
    g = _finding(result, "servelib/attn_patch.py", 45)
    assert [m.name for m in g.modules] == ["norm"]
    assert ("config", "servelib/attn_patch.py", 47, "config-key") in [(x.kind, x.path, x.line, x.how) for x in g.chain]


def test_an_elif_after_an_arm_that_admits_the_target_is_not_judged(result):
    # :47 is the third arm of a chain: it sits inside the second (elif spans nest as in ast), whose
    # test admits sm_120; judged as its own region, it would be a wrong hardware-bound (wgmma)
    # :56 follows `if is_sm120(): return ...`, which serves sm_120 (not a gate that stops it: its
    # plan must not try to make that earlier test admit sm_120, it already does)
    assert result.stats["not_evaluated"] == 3
    assert result.stats["not_evaluated_gates"] == ["sm_120 servelib/reach.py:11 (earlier arm at line 9)",
                                                   "sm_120 servelib/reach.py:47 (earlier arm at line 45)",
                                                   "sm_120 servelib/reach.py:56 (earlier arm at line 54)"]
    judged = {(f.gate.path, f.gate.line) for f in result.findings}
    assert not judged & {("servelib/reach.py", 11), ("servelib/reach.py", 47), ("servelib/reach.py", 56)}


def test_a_refusal_after_an_earlier_one_is_patched_with_it(result):
    """sm_120 leaves at line 17 before line 19 tests it: the finding says so, and the plan patches
    line 17 first; line 19's edit is verified on the text that carries line 17's."""
    f = _finding(result, "servelib/reach.py", 19)
    assert ("sm_120 does not get this far unless the gate at servelib/reach.py:17 "
            "(`not (is_sm90_supported() or is_sm100_supported())`) lets it through") in f.reason
    assert [(g.path, g.line) for g in f.plan] == [("servelib/reach.py", 17), ("servelib/reach.py", 19),
                                                  ("kernlib/jit/modules.py", 23)]
    assert "+    if not (is_sm90_supported() or is_sm100_supported() or is_sm120_supported()):\n" in f.patch
    assert "+    if not (is_sm100_supported() or is_sm120_supported()):\n" in f.patch
    assert f.patch.count("+++ servelib/reach.py") == 1


def test_a_refusal_for_one_returned_case_is_not_credited_with_every_case(result):
    f = _finding(result, "servelib/reach.py", 28)
    assert "the refusal sits inside `if backend == \"fast\":` (line 27), one case of what its function returns" in f.reason
    assert _finding(result, "servelib/reach.py", 25).verdict == "software-only"  # the unconditional one


def test_a_runtime_check_in_a_binding_is_judged_with_its_jit_module(result):
    """The check in norm_binding.cu guards the module that compiles it with norm.cu (where the
    kernel is); orphan_binding.cu defines no kernel and no module compiles it: unresolved."""
    f = _finding(result, "kernlib/data/csrc/norm_binding.cu", 11)
    (m,) = f.modules
    assert (m.name, m.sources) == ("norm_binding", ["kernlib/data/csrc/norm.cu", "kernlib/data/csrc/norm_binding.cu"])
    assert [k.name for k in m.kernels] == ["rms_norm_kernel"]
    assert [(x.kind, x.how) for x in f.chain] == [("region", "runtime-check"), ("jit-module", "compiles-source")]
    assert "+  if (major != 9 && major != 12) throw std::runtime_error(\"verified on Hopper only\");\n" in f.patch
    g = _finding(result, "kernlib/data/csrc/orphan_binding.cu", 10)
    assert g.reason == ("orphan_binding.cu: the check guards host code that defines no kernel, and no JIT module in "
                        "the scan is known to compile this file with the sources that define the kernels it launches")


def test_a_runtime_check_guards_the_exports_that_reach_its_function(result):
    """The check sits in fused_norm: only that export counts, and its kernel is an empty stub on
    sm_120 (the module's other export, plain_sum, is real): hardware-bound, not partial."""
    f = _finding(result, "kernlib/data/csrc/fused_binding.cu", 10)
    assert f.reason == "fused_binding: every kernel entry point(s) fused_norm reaches is a stub on sm_120f"
    assert f.modules[0].entry_points == {"fused_norm": "stub", "plain_sum": "real"}


def test_else_branch_is_not_what_the_gate_admits(result):
    f = next(f for f in result.findings if (f.gate.path, f.gate.line) == ("servelib/moe.py", 33))
    assert [m.name for m in f.modules] == ["hopper_gemm"]  # not `norm` from the else branch


def _finding(result, path, line):
    return next(f for f in result.findings if (f.gate.path, f.gate.line) == (path, line))


def test_a_call_outside_the_scan_leaves_the_verdict_unresolved(result):
    f = _finding(result, "servelib/selectors.py", 11)
    assert [m.name for m in f.modules] == ["comm"]  # judged, real on sm_120f, but not the whole path
    assert f.reason.endswith("the guarded path also calls code outside the scan whose GPU support is not analysed: "
                             "deep_gemm.fp8_gemm")
    assert f.patch is None


def test_code_after_a_selection_is_not_what_the_gate_enables(result):
    # `if is_sm90(): return hopper(...)` then `return norm(...)`: norm is what sm_120 already runs
    assert [m.name for m in _finding(result, "servelib/selectors.py", 19).modules] == ["hopper_gemm"]


def test_a_refusal_guards_only_the_rest_of_its_block(result):
    f = _finding(result, "servelib/selectors.py", 27)
    assert [m.name for m in f.modules] == ["norm"]  # not hopper_gemm, after the block that returns


class _FakeTus:
    """TU analyses handed to the judge as given (classify's rules, without CUDA sources)."""

    def __init__(self, kernels, exports):
        from archaudit.cuda.tu import Export, KernelStatus, TuResult

        self.result = TuResult("m.cu", "sm_120f", "builds",
                               kernels=[KernelStatus(n, "m.cu", i + 1, st, 10 if st != "real" else None)
                                        for i, (n, st) in enumerate(kernels)],
                               exports={e: Export(e, 1, list(ks), list(ks)) for e, ks in exports.items()})

    def analyse(self, *a, **k):
        return self.result


@pytest.mark.parametrize("exports, verdict", [
    ({}, "hardware-bound"),  # no entry point known: the stub may be what the path runs
    ({"fast": ["real_k"], "slow": ["stub_k"]}, "partial"),  # `fast` is known safe
    ({"slow": ["stub_k", "real_k"]}, "hardware-bound"),  # no entry point reaches only real kernels
])
def test_partial_needs_an_entry_point_known_to_be_real(reg, exports, verdict):
    from archaudit.verdict.judge import Behind, ModuleRef, classify

    from archaudit.model import Gate

    gate = Gate("p.py", 1, 1, "p.f", "predicate-call", "is_sm90()", frozenset({"sm_90"}), "evaluated")
    t = reg.parse("sm_120")
    f = classify(gate, t.gpu, reg.compile_target(t), Behind([ModuleRef("m", ["m.cu"])]),
                 _FakeTus([("real_k", "real"), ("stub_k", "empty")], exports))
    assert f.verdict == verdict


def test_a_selection_in_a_resolver_is_not_judged_by_its_callers_branches(result):
    # pick_dtype's `if is_sm100(): return "bf16"`: the caller's test on the value is its own gate
    # (line 41, software-only); the selection itself is unresolved, not software-only
    f = _finding(result, "servelib/selectors.py", 35)
    assert f.reason.endswith("the gate selects a value its function returns, and the modules were reached only "
                             "through its callers' branches; which returned value leads to them is not followed")
    assert f.patch is None


def test_calls_into_packages_without_gpu_code_leave_the_verdict_standing(result):
    """boto3 and amdsmi are outside the scan but hold no NVIDIA GPU code (rules/externals.toml
    lists the packages that do): the verdict stands on kernlib's module."""
    f = _finding(result, "servelib/selectors.py", 49)
    assert f.verdict == "software-only"
    assert "outside the scan" not in f.reason
