"""Include roots judged per package (fixtures/pkgroots): which roots are a bundled project is
decided among the roots of one Python package, so kern's own header with the CUTLASS arch tag
counts whether or not another package with a shallower include directory sits beside it."""
import shutil

from archaudit.cuda.tu import CudaProject, FsReader
from archaudit.pipeline import scan

from conftest import FIXTURES

TREE = FIXTURES / "pkgroots"
GATE = ("kern/jit/modules.py", 6, 18, "arch-list")


def _findings(root, reg):
    res = scan(root, [reg.parse("sm_120")])
    return {((f.gate.path, f.gate.line, f.gate.col, f.gate.kind), f.verdict, f.reason) for f in res.findings}


def test_roots_vendored_within_their_package():
    r = FsReader(str(TREE))
    files = [f for f in r.files() if not f.endswith(".md")]
    roots = CudaProject.discover_include_roots(files, r)
    assert [(x.path, x.vendored) for x in roots] == [
        ("kern/data/csrc", False),  # named by kern/jit/env.py
        ("aaa/include", False),
        ("kern/data/cutlass/include", True),  # bundled: one directory further down in kern/data
        ("kern/data/include", False),  # kern's own (was marked bundled beside aaa/include)
    ]


def test_tu_verdict_does_not_depend_on_the_package_beside(reg, tmp_path):
    alone = tmp_path / "alone"
    shutil.copytree(TREE / "kern", alone / "kern")
    want = {(GATE, "hardware-bound", "gemm: every kernel the module reaches is a stub on sm_120f")}
    assert _findings(alone, reg) == want
    assert _findings(TREE, reg) == want  # beside aaa: was software-only (the arch tag not counted)
    ct = reg.compile_target(reg.parse("sm_120"))
    r = FsReader(str(TREE))
    files = [f for f in r.files() if not f.endswith(".md")]
    res = CudaProject(r, CudaProject.discover_include_roots(files, r), files=files).analyse_tu("kern/data/csrc/gemm.cu", ct)
    assert (res.prediction, res.reason) == (
        "stub", "arch-tag at kern/data/include/kern/gemm.cuh:8 in gemm_kernel: cutlass::arch::Sm100")
