"""State written by a gate's changed code, followed to its reads (fixtures/stateflow,
archaudit/callgraph/stateflow.py): a gate is no-gpu-code when every read of what it stores leads
only to Python; otherwise it stays unresolved and its reason names the read that stopped the proof."""
import pytest

from archaudit.pipeline import scan

from conftest import FIXTURES

ROOT = FIXTURES / "stateflow"
NOT_SHOWN = "not shown free of GPU code: "
ONLY_PYTHON = "patching it changes only Python (or Triton, which compiles for the running GPU)"

# (gate path, line) -> (verdict, the end of the reason)
EXPECTED_SM120 = {
    ("sfpkg/wrapper.py", 15): ("unresolved", NOT_SHOWN + "sfpkg/wrapper.py:20: reaches the JIT module scale_{arch}; "
                               "following self._blocks (written at sfpkg/wrapper.py:17) read at sfpkg/wrapper.py:20"),
    ("sfpkg/wrapper.py", 24): ("no-gpu-code", ONLY_PYTHON),
    ("sfpkg/wrapper.py", 43): ("unresolved", NOT_SHOWN + "sfpkg/wrapper.py:51: reaches the JIT module scale_{arch}; "
                               "following self.variant (written at sfpkg/wrapper.py:44) read at sfpkg/wrapper.py:50"),
    ("sfpkg/layers.py", 15): ("no-gpu-code", ONLY_PYTHON),
    ("sfpkg/layers.py", 32): ("no-gpu-code", ONLY_PYTHON),
    ("sfpkg/layers.py", 46): ("unresolved", NOT_SHOWN + "sfpkg/layers.py:52: reaches the JIT module scale_{arch}; "
                              "following _USE_FAST (written at sfpkg/layers.py:47) read at sfpkg/layers.py:51"),
    ("sfpkg/layers.py", 57): ("unresolved", NOT_SHOWN + "sfpkg/layers.py:58: the code the gate changes writes "
                              "hints[\"num_ctas\"], an item of the parameter hints"),
    ("sfpkg/overrides.py", 12): ("no-gpu-code", ONLY_PYTHON),
    ("sfpkg/overrides.py", 24): ("unresolved", NOT_SHOWN + "sfpkg/overrides.py:25: the code the gate changes writes "
                                 "self.mode_name; sfpkg/overrides.py:30: names the attribute mode_name in a string "
                                 "(attrgetter?), not followed"),
    # the gate's value stored into an item of the dict the function returns to callers outside the scan
    ("sfpkg/overrides.py", 45): ("unresolved", NOT_SHOWN + "sfpkg.overrides._backend_overrides returns what the gate "
                                 "decides, and is handed to its decorator @register, which may pass it to callers "
                                 "not followed: they act on that value"),
}


@pytest.fixture(scope="module")
def result(reg):
    return scan(ROOT, [reg.parse("sm_120")])


def test_exact_findings_sm120(result):
    got = {(f.gate.path, f.gate.line): f.verdict for f in result.findings}
    assert got == {k: v for k, (v, _r) in EXPECTED_SM120.items()}
    for f in result.findings:
        assert f.reason.endswith(EXPECTED_SM120[(f.gate.path, f.gate.line)][1]), (f.gate.line, f.reason)


def test_a_read_that_builds_makes_the_writer_unresolved(tmp_path, reg):
    """The same attribute read on an unrelated object (`obj.flag`, not `self.flag`) counts: any
    object may be the one written."""
    pkg = tmp_path / "pkg"
    (pkg / "jit").mkdir(parents=True)
    for rel in ("jit/__init__.py", "jit/core.py", "jit/env.py", "jit/modules.py"):
        (pkg / rel).write_text((ROOT / "sfpkg" / rel).read_text())
    (pkg / "data" / "csrc").mkdir(parents=True)
    (pkg / "data" / "csrc" / "scale.cu").write_text((ROOT / "sfpkg" / "data" / "csrc" / "scale.cu").read_text())
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text(
        "import torch\nfrom .jit.modules import gen_scale_module\n\n\nclass A:\n    def set(self):\n"
        "        if torch.cuda.get_device_capability()[0] == 10:\n            self.flag = 1\n\n\n"
        "def use(obj, x):\n    if obj.flag:\n        gen_scale_module('a').build_and_load().scale(x, 1.0, 1)\n")
    (f,) = scan(tmp_path, [reg.parse("sm_120")]).findings
    assert (f.gate.line, f.verdict) == (7, "unresolved")
    assert f.reason.endswith("pkg/m.py:13: reaches the JIT module scale_{arch}; following self.flag "
                             "(written at pkg/m.py:8) read at pkg/m.py:12")


@pytest.mark.real
def test_072_global_flag_names_its_read(sp072, reg):
    """sglang 0.5.23's HPC bf16xfp32 GEMM: `global _hpc_gemm_enabled` set behind the availability
    probe; its read in hpc_bf16xfp32_gemm_enabled() decides what follows, so the reason names it."""
    from test_real_verdicts import _explain

    f = _explain(sp072, reg, "sglang/kernels/ops/gemm/bf16_fp32.py:95")
    assert f.verdict == "unresolved"
    assert f.reason.endswith("; following _hpc_gemm_enabled (written at sglang/kernels/ops/gemm/bf16_fp32.py:96) "
                             "read at sglang/kernels/ops/gemm/bf16_fp32.py:103")
