"""Verdicts on the pinned real packages (the canonical allreduce-fusion case), through `explain`:
the gate's own function is evaluated, the call graph followed, the CUDA sources judged."""
import pytest

from archaudit.verdict.explain import explain
from archaudit.pipeline import package_resolver, run_with_big_stack, scope_packages
from archaudit.python.index import Index
from archaudit.sources import open_source

pytestmark = pytest.mark.real


def _explain(root, reg, site, target="sm_120"):
    src = open_source(root)
    files = src.files()
    idx = Index(src, [f for f in files if f.endswith(".py")], True)
    # as the scan does: which packages hold GPU code, which are only read
    scope_packages(src, files, idx, package_resolver(src, src.distributions()), None)
    path, line = site.rsplit(":", 1)
    (e,) = run_with_big_stack(lambda: explain(src, files, idx, reg, path, int(line), [reg.parse(target)], True))
    (f,) = e.findings
    return f


def test_0615_comm_arch_list_is_partial(sp0615, reg):
    """flashinfer 0.6.15.post1 lists [9, 10] for trtllm_comm; one kernel family of the module has
    its whole body under `__CUDA_ARCH__ >= 900 && < 1200`: an empty kernel on sm_120."""
    f = _explain(sp0615, reg, "flashinfer/jit/comm.py:191")
    assert f.verdict == "partial"
    (m,) = f.modules
    assert m.name == "trtllm_comm" and m.compile_target == "sm_120f"
    assert m.sources == ["flashinfer/data/csrc/trtllm_allreduce.cu", "flashinfer/data/csrc/trtllm_allreduce_fusion.cu",
                         "flashinfer/data/csrc/trtllm_moe_allreduce_fusion.cu"]
    stubs = [(k.name, k.path, k.line, k.status, k.guard_line) for k in m.kernels if k.status != "real"]
    assert stubs == [("lamport_style_one_shot_all_reduce_norm_kernel",
                      "flashinfer/data/include/flashinfer/comm/trtllm_allreduce.cuh", 708, "empty-stub", 711)]
    assert m.entry_points["trtllm_custom_all_reduce"] == "partial"
    assert m.entry_points["trtllm_allreduce_fusion"] == "real"
    assert "entry points real on sm_120f: trtllm_allreduce_fusion" in f.reason
    assert "+        supported_major_versions=[9, 10, 12]" in f.patch


def test_0615_sglang_fusion_gate_is_software_only(sp0615, reg):
    f = _explain(sp0615, reg, "sglang/srt/layers/flashinfer_comm_fusion.py:48")
    assert f.verdict == "software-only"
    assert [m.name for m in f.modules] == ["trtllm_comm"]
    # the guarded path only calls entry points whose kernels are real on sm_120
    assert "reaches only real kernels" in f.reason
    # the plan also patches flashinfer's arch list down the chain
    assert "flashinfer/jit/comm.py:191: add 12 to [9, 10]" in f.reason
    assert "+        supported_major_versions=[9, 10, 12]" in f.patch


def test_072_sglang_fusion_gate_is_software_only(sp072, reg):
    """flashinfer 0.7.2 lists [9, 10, 12]: only sglang's gate is left to patch, with the
    platform's own is_sm120 probe."""
    f = _explain(sp072, reg, "sglang/srt/layers/flashinfer_comm_fusion.py:48")
    assert f.verdict == "software-only"
    assert "+    if not (get_platform().is_sm90 or get_platform().is_sm100 or get_platform().is_sm120):" in f.patch
    assert "flashinfer/jit/comm.py" not in f.patch


def test_0615_overrides_auto_enable_is_partial(sp0615, reg):
    """sglang 0.5.17's auto-enable of allreduce fusion (arg_groups/overrides.py) only sets a
    setting: followed to the code that reads it (a config-key link) and on to flashinfer's
    trtllm_comm, whose fusion entry points are real on sm_120, and to the MNNVL backend
    (trtllm_mnnvl_comm), whose workspace needs an NVLink multicast object no sm_120 system has:
    partial, and the plan (for --include-partial) extends the test that excludes sm_120 (not the
    multi-node one) and trtllm_comm's arch list, never the MNNVL one at comm.py:40."""
    f = _explain(sp0615, reg, "sglang/srt/arg_groups/overrides.py:1895")
    assert f.gate.function == "sglang.srt.arg_groups.overrides._flashinfer_allreduce_fusion_auto_enable"
    assert f.verdict == "partial"
    assert ("config", "config-key") in {(x.kind, x.how) for x in f.chain}
    assert [m.name for m in f.modules] == ["trtllm_comm", "trtllm_mnnvl_comm"]
    assert ("flashinfer/comm/mnnvl.py", 1383, "platform.nvlink_multicast") in {
        (e.path, e.line, e.feature) for e in f.evidence}
    assert "+        and (is_sm90_supported() or is_sm100_supported() or is_sm120_supported())" in f.patch
    assert "-        and (view.nnodes == 1 or is_sm100_supported())" not in f.patch
    assert "flashinfer/jit/comm.py:191: add 12 to [9, 10]" in f.reason
    assert "flashinfer/jit/comm.py:40" not in f.reason
