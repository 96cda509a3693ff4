"""End-to-end: the gates of the pinned real packages (flashinfer-python 0.7.2.post1 + sglang 0.5.23)."""
import re

import pytest

pytestmark = pytest.mark.real

M9_10 = ["sm_90", "sm_100", "sm_103", "sm_107"]


def _gate(scan, path, line):
    got = [g for g in scan.gates if (g.path, g.line) == (path, line)]
    assert len(got) == 1, f"no single gate at {path}:{line}: {got}"
    return got[0]


def test_trtllm_comm_arch_list(scan072, reg):
    g = _gate(scan072, "flashinfer/jit/comm.py", 197)
    assert g.function == "flashinfer.jit.comm.gen_trtllm_comm_module"
    assert g.kind == "arch-list"
    assert reg.sort_names(g.admits) == ["sm_90", "sm_100", "sm_103", "sm_107", "sm_120", "sm_121"]
    assert "sm_110" not in g.admits and "sm_89" not in g.admits


def test_every_arch_list_call_is_a_gate(scan072, sp072):
    """At least what a careful grep finds: each get_nvcc_flags_list(...) call passing a
    supported_major_versions other than None."""
    root = sp072 / "flashinfer"
    calls = set()
    for p in root.rglob("*.py"):
        text = p.read_text(encoding="utf-8", errors="replace")
        for m in re.finditer(r"get_nvcc_flags_list\(\s*supported_major_versions\s*=\s*(None)?", text):
            if not m.group(1):
                calls.add((p.relative_to(sp072).as_posix(), text.count("\n", 0, m.start()) + 1))
    gates = {(g.path, g.line) for g in scan072.gates if g.kind == "arch-list"}
    assert len(calls) >= 55
    assert calls <= gates
    # the ones whose list is a module constant are resolved too
    unresolved = [g for g in scan072.gates if g.kind == "arch-list" and not g.resolved]
    assert unresolved == []


def test_sglang_fusion_gate_by_inference(scan072, reg):
    g = _gate(scan072, "sglang/srt/layers/flashinfer_comm_fusion.py", 48)
    assert g.expr == "not (get_platform().is_sm90 or get_platform().is_sm100)"
    assert g.function == "sglang.srt.layers.flashinfer_comm_fusion._resolve_backend"
    majors_9_10 = reg.sort_names(x.name for x in reg.gpus if x.major in (9, 10))
    assert reg.sort_names(g.admits) == majors_9_10 == M9_10
    assert g.resolution.startswith("inferred: sglang.srt.runtime_context.PlatformContext.__getattr__")
    assert "inferred sglang.srt.utils.common._check_cuda_device_version" in g.via
    assert g.region == "after-early-exit"


@pytest.mark.parametrize("path,line,admits", [
    ("flashinfer/utils.py", 616, ["sm_90"]),  # is_sm90a_supported(device) and ...
    ("flashinfer/mla/_core.py", 414, ["sm_120", "sm_121"]),  # not is_sm12x_supported(...): raise
    ("flashinfer/mla/_batch_mla/_auto_policy.py", 54, ["sm_120", "sm_121"]),  # is_sm120a or is_sm121a
])
def test_flashinfer_predicates_inferred_at_call_sites(scan072, reg, path, line, admits):
    g = _gate(scan072, path, line)
    assert reg.sort_names(g.admits) == admits
    assert g.resolution.startswith("inferred:")
    assert any(v.startswith("inferred flashinfer.utils.is_sm") for v in g.via)


def test_fp8_exit_under_a_condition_excludes_sm12x(scan072, reg):
    # `if is_e4m3: if is_sm12x_supported(dev): raise` - the CUDA-version part of the predicate
    # must not hide that the test singles out SM12x
    g = _gate(scan072, "flashinfer/prefill.py", 8536)
    assert "sm_120" not in g.admits and "sm_121" not in g.admits and "sm_90" in g.admits


def test_cpp_runtime_checks_are_gates(scan072, reg):
    g = _gate(scan072, "flashinfer/data/csrc/alphamoe_fused_router.cu", 185)
    assert g.kind == "cpp-runtime-check"
    assert reg.sort_names(g.admits) == ["sm_100", "sm_103"]
