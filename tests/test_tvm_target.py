"""Architectures carried by TVM Target objects, as tilelang uses them (fixtures/tvmtarget,
rules/gates.toml [tvm_target]): a target built from the device, one TVM completes from the
device, and tilelang's C++ target predicates make gates; a target the code spells does not."""
from archaudit.pipeline import scan

from conftest import FIXTURES

GEMM = "tlkit/gemm.py"
FROM_90 = ["sm_90", "sm_100", "sm_103", "sm_107", "sm_110", "sm_120", "sm_121"]


def _scan(reg):
    return scan(FIXTURES / "tvmtarget", [reg.parse("sm_120")])


def test_target_gates(reg):
    res = _scan(reg)
    got = [(g.path, g.line, g.kind, g.region, reg.sort_names(g.admits), g.resolution) for g in res.gates]
    assert got == [
        (GEMM, 7, "predicate-call", "branch", ["sm_90"],
         "name-rule: name-rule TargetIsHopper: the GPU's own target"),
        (GEMM, 9, "predicate-call", "branch", ["sm_120", "sm_121"],
         "name-rule: name-rule TargetIsSM120: the GPU's own target"),
        (GEMM, 16, "capability-compare", "branch", ["sm_90"],
         "inferred: tlkit.target._detect_cuda_arch -> tlkit.target.determine_target -> tlkit.target.get_target_arch"),
        (GEMM, 18, "predicate-call", "after-early-exit", FROM_90,
         "inferred: tlkit.target._detect_cuda_arch -> tlkit.target.determine_target -> tlkit.target.get_target_arch"
         " -> tlkit.target.get_target_compute_version -> tlkit.target.have_tma -> tlkit.target.parse_compute_version"),
        (GEMM, 25, "capability-compare", "branch", ["sm_100"],
         "evaluated: tvm-target Target(\"cuda\") given no arch: the device's"),
    ]
    # `Target("cuda -arch=sm_80")` is the same target on every GPU: its tests (gemm.py:32, :34) are no gates
    assert not {g.line for g in res.gates} & {32, 34}
    g18 = next(g for g in res.gates if g.line == 18)
    # the target in scope when none is given is the device's; tvm.cuda(0) is the device
    assert "tvm-target tvm.target.Target.current(): the target the device gives" in g18.via
    assert "capability-source tvm.cuda" in g18.via
    # the CPU-only branch of determine_target (Target("llvm")) is the run-time dependence
    assert "environment-dependent on sm_90, sm_100, sm_103, sm_107, sm_110, sm_120, sm_121" in g18.via


def test_target_findings(reg):
    res = _scan(reg)
    assert [(f.gate.line, f.verdict) for f in res.findings] == [(7, "unresolved"), (16, "unresolved"), (25, "unresolved")]
    by_line = {f.gate.line: f.reason for f in res.findings}
    # tilelang's predicates are C++ reached through tvm_ffi; TVM itself is code that can hold GPU code
    assert "missing-attribute: tlkit._ffi_api has no TargetIsHopper" in by_line[7]
    assert "calls tvm.target.Target, code outside the scan that can hold GPU code" in by_line[16]
