"""Gates in front of CuTe DSL kernels (fixtures/cutedsl): a function or callable object handed to
`cutlass.cute.compile` is traced, so the call graph follows it, and a DSL call in it that emits an
instruction the target lacks (rules/cute_dsl.toml -> rules/instructions.toml) makes the gate
hardware-bound, unless the call sits under a test that may depend on the GPU."""
import pytest

from archaudit.callgraph.dsl import dsl_call_rules, dsl_rule_for
from archaudit.pipeline import scan

from conftest import FIXTURES

ROOT = FIXTURES / "cutedsl"
TCGEN05 = "ptx.tcgen05"


@pytest.fixture(scope="module")
def result(reg):
    return scan(ROOT, [reg.parse("sm_120")])


def test_exact_findings_sm120(result):
    got = {(f.gate.path, f.gate.line): (f.verdict, [(e.path, e.line, e.feature) for e in f.evidence])
           for f in result.findings}
    assert got == {
        ("dslpkg/ops.py", 12): ("hardware-bound", [("dslpkg/kernels/sm100_gemm.py", 13, TCGEN05)]),
        ("dslpkg/ops.py", 18): ("hardware-bound", [("dslpkg/ops.py", 23, TCGEN05)]),
        ("dslpkg/ops.py", 29): ("unresolved", []),
        ("dslpkg/ops.py", 36): ("unresolved", []),
        # the kernel is on the path of the GPUs the gate refuses, through its caller's `is None`
        ("dslpkg/select.py", 8): ("unresolved", []),
    }


def test_reasons_name_the_traced_call(result):
    by_line = {f.gate.line: f for f in result.findings}
    assert by_line[12].reason == (
        "a function traced by cutlass.cute.compile calls cutlass.utils.blackwell_helpers.make_trivial_tiled_mma "
        "(dslpkg/kernels/sm100_gemm.py:13), which needs ptx.tcgen05: not on sm_120f")
    # the chain runs from the gate through the traced __call__ to the DSL call
    hows = [ln.how for ln in by_line[12].chain]
    assert "traced-by:cutlass.cute.compile+__call__" in hows
    assert by_line[12].chain[-1].text == "cutlass.utils.blackwell_helpers.make_trivial_tiled_mma"
    # warp-level MMA needs nothing sm_120 lacks; the DSL itself is not analysed
    assert "cutlass.cute.compile" in by_line[29].reason
    # the tcgen05 call of MultiGemm is under `if cutlass.const_expr(self.major >= 10)`
    assert "cutlass.cute.nvgpu.tcgen05.MmaF16BF16Op" not in by_line[36].reason


def test_a_target_with_tcgen05_is_not_hardware_bound(reg):
    res = scan(ROOT, [reg.parse("sm_103")])
    # sm_103 is excluded by the gates at 12 (major != 10 admits it: no finding) and 18, 29, 36
    got = {f.gate.line: f.verdict for f in res.findings}
    assert got.get(18) == "unresolved" and 12 not in got


@pytest.mark.parametrize("name,feature", [
    ("cutlass.cute.nvgpu.tcgen05.MmaF16BF16Op", TCGEN05),
    ("cutlass.cute.nvgpu.tcgen05.commit", TCGEN05),
    ("cutlass.experimental.primitives.tcgen05_alloc", TCGEN05),
    ("cutlass.utils.blackwell_helpers.make_blockscaled_trivial_tiled_mma", TCGEN05),
    ("cutlass.cute.nvgpu.warpgroup.MmaF16BF16Op", "ptx.wgmma"),
    ("cutlass.utils.hopper_helpers.make_trivial_tiled_mma", "ptx.wgmma"),
    # layouts, enums and host queries are used by kernels for other GPUs too
    ("cutlass.cute.nvgpu.tcgen05.OperandMajorMode", None),
    ("cutlass.utils.blackwell_helpers.make_smem_layout_a", None),
    ("cutlass.cute.arch.get_max_tmem_alloc_cols", None),
    ("cutlass.cute.nvgpu.warp.MmaF16BF16Op", None),
    ("cutlass.cute.compile", None),
])
def test_rule_for_a_dsl_call(name, feature):
    rule = dsl_rule_for(name)
    assert (rule.requires[0].id if rule else None) == feature


def test_every_rule_requires_known_features():
    assert dsl_call_rules() and all(r.requires for r in dsl_call_rules())
