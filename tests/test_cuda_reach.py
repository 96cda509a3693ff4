"""Reachability across namespaces (fixtures/cuda/reach): a name reaches only the definitions C++
lookup can find from where it is used, and what nvcc emits stays blocking."""
from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from archaudit.cuda import features as F
from archaudit.cuda import ruleset
from archaudit.cuda import tu as T
from archaudit.cuda.tu import CudaProject, FsReader
from archaudit.parsing import cpp

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "cuda"
NVCC = shutil.which("nvcc")
HOPPER = "reach/hopper_mma.cuh"


@pytest.fixture(scope="module")
def project():
    return CudaProject(FsReader(str(FIX)), [""], {})


# TU -> (prediction on sm_120f, lines of hopper_mma.cuh that must block it); every one builds on
# sm_90a. Each was compiled with nvcc (test_reach_matches_nvcc).
EXPECTED = {
    # the atom is used only by a kernel template nothing instantiates
    "reach/uninstantiated.cu": ("builds", ()),
    # the same template launched from a non-template host function
    "reach/instantiated.cu": ("fails", (7,)),
    # the instantiated gemm names portable::MMA_F32; hopper::MMA_F32 shares only its name
    "reach/namespaces.cu": ("builds", ()),
    # ... names hopper::MMA_F32 by its qualified name
    "reach/namespaces_qualified.cu": ("fails", (7,)),
    # ... finds it through `using namespace hopper;`
    "reach/namespaces_using.cu": ("fails", (7,)),
    # ... from a header included inside `namespace hopper {`
    "reach/scoped_include.cu": ("fails", (7,)),
    # ... from a header whose namespace a macro opens
    "reach/macro_namespace.cu": ("fails", (7,)),
    # ... through a macro that expands to such a macro
    "reach/macro_indirect.cu": ("fails", (7,)),
    # a nested class defined outside its class, named as hopper_nested::Outer::Inner
    "reach/outofline.cu": ("fails", ()),
    # fence() has no parameters: the call in portable finds portable::fence only
    "reach/calls.cu": ("builds", ()),
    # arrive(Op{}) with Op = hopper::MMA_F32: argument-dependent lookup finds hopper::arrive
    "reach/adl.cu": ("fails", (22,)),
}


@pytest.mark.parametrize("tu", sorted(EXPECTED))
def test_reach_prediction(project, tu):
    pred, lines = EXPECTED[tu]
    res = project.analyse_tu(tu, ruleset.target_by_name("sm_120f"))
    assert res.prediction == pred, res.reason
    got = {(b.feature, b.path, b.line) for b in res.blocking}
    for line in lines:
        assert ("ptx.wgmma", HOPPER, line) in got
    if tu == "reach/outofline.cu":
        assert got == {("ptx.wgmma", tu, 9)}
    if pred == "builds":
        assert not res.blocking
    assert project.analyse_tu(tu, ruleset.target_by_name("sm_90a")).prediction == "builds"


def _nvcc_ok(tu: str, target: str, out: Path) -> bool:
    code = target[3:]
    p = subprocess.run([NVCC, "-cubin", f"-gencode=arch=compute_{code},code=sm_{code}", "-o",
                        str(out / f"{Path(tu).stem}.{target}.cubin"), str(FIX / tu)],
                       capture_output=True, text=True, timeout=120)
    return p.returncode == 0


@pytest.mark.nvcc
@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
def test_reach_matches_nvcc(project, tmp_path):
    jobs = [(tu, t) for tu in sorted(EXPECTED) for t in ("sm_90a", "sm_120f")]
    with ThreadPoolExecutor(max_workers=2) as ex:
        ok = dict(zip(jobs, ex.map(lambda j: _nvcc_ok(j[0], j[1], tmp_path), jobs)))
    bad = [f"{tu} {t}: predicted {pred}, nvcc {'builds' if ok[(tu, t)] else 'fails'}"
           for tu, t in jobs
           for pred in [project.analyse_tu(tu, ruleset.target_by_name(t)).prediction]
           if (pred == "builds") != ok[(tu, t)]]
    assert not bad, "\n".join(bad)


def test_owner_namespaces():
    st = cpp.structure(cpp.scan(
        b"namespace a { struct X {}; namespace b::c { void f() {} }\n"
        b"inline namespace v1 { struct Y {}; } namespace { int g() { return 1; } } }\n"
        b'extern "C" { void h() {} }\n'
        b"namespace [[deprecated]] d { using Z = int; }\n"
        b"namespace a::inline e { struct W {}; }\n"
        b"struct T {};\n"))
    assert [(o.name, o.ns) for o in st.owners] == [
        ("X", "a"), ("f", "a::b::c"), ("Y", "a"), ("g", "a"), ("h", ""), ("Z", "d"), ("W", "?"), ("T", "")]


def test_file_facts_for_lookup():
    ff = F.extract("x.cu", (
        b"namespace a { struct X {}; }\n"
        b"using namespace cute;\n"
        b"namespace dg = ::deep_gemm::v1;\n"
        b"struct B : Base { using Base::Base; };\n"
        b"void f() { using std::min; y::z::g(); }\n"
        b"namespace q {\n"
        b'#include "inner.h"\n'
        b"}\n"
        b'#include "outer.h"\n'
        b"__device__ void fence() {}\n"
        b"__device__ void arrive(int) {}\n"))
    assert ff.opened == {"cute", "v1", "Base", "std"}
    assert ff.scoped_includes == {7}
    names = {o.name: i for i, o in enumerate(ff.owners)}
    assert ff.quals[names["f"]] == {"std::min", "y::z", "z::g"}
    assert ff.owners[names["fence"]].nullary and not ff.owners[names["arrive"]].nullary


def test_loose_files(project):
    """The header included inside a namespace, and the one whose namespace a macro opens, are not
    taken at their written namespaces; the others are."""
    ct = ruleset.target_by_name("sm_120f")
    for tu, loose in (("reach/scoped_include.cu", {"reach/scoped_use.cuh"}),
                      ("reach/macro_namespace.cu", {"reach/macro_use.cuh"}),
                      ("reach/macro_indirect.cu", {"reach/macro_indirect_use.cuh"}),
                      ("reach/namespaces.cu", set())):
        pr, _ = project.preprocess(tu, ct)
        facts = {p: project.facts(p) for p in pr.files}
        assert T._scopes(project, pr, facts).loose == loose, tu


@pytest.mark.real
def test_072_fp8_blockscale_builds_without_deep_gemm_atoms(sp072, reg):
    """flashinfer 0.7.2.post1's fp8_blockscale_gemm_90 compiles for sm_120f (nvcc, calibration
    labels): its Fp8MmaSelector names tensorrt_llm's SM90_* atoms, not deep_gemm's homonyms with
    unguarded wgmma. The atoms it does use abort on sm_120f (CUTE_INVALID_CONTROL_PATH)."""
    from test_real_verdicts import _explain

    f = _explain(sp072, reg, "flashinfer/gemm/gemm_base.py:12024")
    (m,) = f.modules
    assert m.name == "fp8_blockscale_gemm_90" and m.prediction == "builds"
    assert "deep_gemm/mma_utils.cuh" not in f.reason
    assert f.verdict == "hardware-bound"
    assert "SM90_64x16x32_F32E4M3E4M3_SS" in f.reason
