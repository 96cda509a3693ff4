"""A C++ runtime check in a header (fixtures/hdrcheck) is judged through the JIT modules that
compile the .cu files including it, directly or through other headers of its directory."""
from archaudit.pipeline import scan

from conftest import FIXTURES

KDA = "hdrkit/data/csrc/kda/"


def test_header_check_judged_through_its_includers(reg):
    res = scan(FIXTURES / "hdrcheck", [reg.parse("sm_120")])
    got = {(f.gate.path, f.gate.line): f for f in res.findings}
    assert {k: f.verdict for k, f in got.items()} == {
        (KDA + "check.cuh", 8): "hardware-bound", (KDA + "orphan.cuh", 7): "unresolved"}
    check = got[(KDA + "check.cuh", 8)]
    assert [(e.path, e.line, e.feature) for e in check.evidence] == [(KDA + "mma_binding.cu", 4, "ptx.tcgen05")]
    assert sorted(m.name for m in check.modules) == ["mma", "scale"]
    includes = sorted((ln.path, ln.text) for ln in check.chain if ln.kind == "include")
    assert includes == [(KDA + "mma_binding.cu", KDA + "check.cuh"), (KDA + "scale_binding.cu", KDA + "check.cuh")]
    assert got[(KDA + "orphan.cuh", 7)].reason == (
        "a runtime check in a header: no translation unit that includes it in its directory is compiled by a "
        "JIT module found in the scan")
