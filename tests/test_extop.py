"""A gate whose path builds a JIT module fine for the target and also calls an op of a prebuilt
extension in another package of the scan (fixtures/extop, the shape of sglang's mega-MoE gates
calling DeepGEMM): the op is GPU code outside what the JIT module proves, so the gate is judged
through the extension (here: no device code of its own, unknown) or left unresolved naming it,
never software-only on the strength of the JIT module alone."""
import pytest

from archaudit.callgraph import Analysis
from archaudit.callgraph.resolve import COMPUTED_OP, looked_up_name
from archaudit.pipeline import scan

from conftest import FIXTURES

ROOT = FIXTURES / "extop"


@pytest.fixture(scope="module")
def result(reg):
    return scan(ROOT, [reg.parse("sm_120")])


def test_verdicts(result):
    got = {(f.gate.path, f.gate.line): (f.verdict, f.reason) for f in result.findings}
    assert {k: v[0] for k, v in got.items()} == {
        ("modelpkg/moe.py", 16): "software-only",  # the JIT module alone
        ("modelpkg/moe.py", 22): "unresolved",  # and _C.mega_moe, an op of opspkg's _C
        ("modelpkg/moe.py", 29): "unresolved",  # and getattr(torch.ops.opspkg, name)
        ("modelpkg/moe.py", 36): "unresolved",  # and opspkg.fused_gather, from its __getattr__
        # MpiComm's __getattr__ hands names to mpi4py's communicator (or one its caller sets): host code
        ("modelpkg/moe.py", 43): "software-only",
        # OpsProxy's hands them to opspkg._C, assigned on first use: the op torch.ops.opspkg.gather
        ("modelpkg/moe.py", 52): "unresolved",
    }
    assert "torch.ops.opspkg.gather: registered by opspkg/_C.abi3.so" in got[("modelpkg/moe.py", 52)][1]
    assert got[("modelpkg/moe.py", 22)][1].startswith(
        "prep: every source builds for sm_120f; torch.ops.opspkg.mega_moe: registered by opspkg/_C.abi3.so "
        "(TORCH_LIBRARY_init_opspkg)")
    assert "the file has no device code of its own" in got[("modelpkg/moe.py", 22)][1]
    assert got[("modelpkg/moe.py", 29)][1].endswith(f"torch.ops.opspkg.{COMPUTED_OP}")
    assert got[("modelpkg/moe.py", 36)][1].endswith("opspkg.fused_gather (looked up at run time)")
    # the package with the extension is analysed, not only read: its .so registers torch ops
    assert result.stats["packages_read"] == []


def test_getattr_forwarding_to_torch_ops_resolves_to_the_op():
    a = Analysis.open(ROOT)
    calls = {c.callee for c in a.graph.expand("opspkg.mega_moe")}
    assert calls == {"torch.ops.opspkg.mega_moe"}
    assert {c.callee for c in a.graph.expand("opspkg.run_op")} == {"<builtin>.getattr", f"torch.ops.opspkg.{COMPUTED_OP}"}


def test_getattr_forwarding_to_a_class_attribute_set_in_methods():
    a = Analysis.open(ROOT)
    assert {c.callee for c in a.graph.expand("modelpkg.moe.comm_forward")} >= {
        "mpi4py.MPI.COMM_WORLD.Barrier", "<unresolved:unknown-receiver>"}
    assert "torch.ops.opspkg.gather" in {c.callee for c in a.graph.expand("modelpkg.moe.proxy_forward")}


def test_looked_up_name():
    assert looked_up_name("dynamic-attribute", "opspkg._TorchOps.gemm via __getattr__") == "opspkg._TorchOps.gemm"
    assert looked_up_name("module-getattr", "opspkg.gemm comes from a module __getattr__") == "opspkg.gemm"
    assert looked_up_name("missing-attribute", "opspkg.ext has no gemm") == "opspkg.ext.gemm"
    assert looked_up_name("dynamic-attribute", "getattr with a computed name") is None
    assert looked_up_name("unknown-receiver", "parameter fn") is None
