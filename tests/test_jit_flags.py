"""Compile flags of JIT modules, evaluated: extra_cuda_cflags, -D defines (conditional ones kept
and marked), hard-coded -gencode targets, extra_include_paths, and flags passed down as parameters
bound at the call on a gate's chain (fixtures/callgraph/jitpkg/jit/flagged.py)."""
import pytest

from archaudit.callgraph import Analysis
from archaudit.callgraph.flags import defines_of, hard_coded_archs
from archaudit.cuda.preproc import UNKNOWN_VALUE
from archaudit.verdict.judge import behind_from_callgraph
from archaudit.model import Gate
from conftest import FIXTURES

ROOT = FIXTURES / "callgraph"
F = "jitpkg/jit/flagged.py"
# what jitpkg's gen_jit_spec passes to every module itself (rules/jit.toml own_flags); its
# -DJITPKG_DEBUG_DEFAULT is conditional and not counted
DEFAULTS = {"JITPKG_ENABLE_F16": "1", "JITPKG_ENABLE_FP8": "1"}


@pytest.fixture(scope="module")
def fx():
    a = Analysis.open(ROOT)
    a.jit.find_all_sinks(a.graph)
    return a


def mod(a, name):
    (m,) = [a.jit.module(k) for k in a.graph.r.sinks if a.jit.module(k).name == name]
    return m


def test_hopper_flags_defines_and_include_paths(fx):
    m = mod(fx, "hopper_flags")
    # module constants through imports and `+`, a starred conditional, `-D NAME` in two elements,
    # an `if` that grows the list
    assert m.cuda_cflags == [
        "-gencode=arch=compute_90a,code=sm_90a", "-DJITPKG_SM90", "-DJITPKG_COMMON", "-DJITPKG_LEVEL=2",
        "-DJITPKG_HOPPER_PATH", "-DJITPKG_NEW_CUDA", "-D", "JITPKG_SPLIT=1", "-DJITPKG_DEBUG_TRACE=2"]
    assert [(f.text, f.path, f.line) for f in m.flag_items][:2] == [
        ("-gencode=arch=compute_90a,code=sm_90a", "jitpkg/jit/core.py", 21), ("-DJITPKG_SM90", "jitpkg/jit/core.py", 33)]
    # conditional flags count as passed (the code *can* be built so), marked with the condition
    assert m.conditional_flags == {"-DJITPKG_NEW_CUDA": 'cuda_version_at_least("12.8")',
                                   "-DJITPKG_DEBUG_TRACE=2": 'os.environ.get("JITPKG_DEBUG") == "1"'}
    # extra_cflags go to the host compiler only: -DJITPKG_HOST_ONLY is not a device define
    assert m.defines == {**DEFAULTS, "JITPKG_SM90": "1", "JITPKG_COMMON": "1", "JITPKG_LEVEL": "2", "JITPKG_HOPPER_PATH": "1",
                         "JITPKG_NEW_CUDA": "1", "JITPKG_SPLIT": "1", "JITPKG_DEBUG_TRACE": "2"}
    assert m.hard_coded_archs == ["sm_90a"]
    assert m.include_paths == ["jitpkg/data/csrc", "jitpkg/data/include"]
    assert m.unresolved == [
        ("include-path", "jitpkg/data/csrc/no_such_dir: no such directory in the scan"),
        ("include-path", "{JITPKG_WORKSPACE}/generated: environment: JITPKG_WORKSPACE"),
        ("include-path", "/usr/local/cuda/include: absolute path outside the scan")]


def test_arch_list_flags_and_define_values_from_parameters(fx):
    m = mod(fx, "arch_list_flags")
    assert [(f.kind, f.text) for f in m.flag_items] == [
        ("arch-list", "current_compilation_context.get_nvcc_flags_list(supported_major_versions=[9, 10])"),
        ("flag", "-DJITPKG_ARCH_LIST"), ("unknown", "-DJITPKG_TILE={tile}"), ("flag", "-DJITPKG_TILED"),
        ("unknown", "-DJITPKG_HEAD={tile * 2}")]
    assert m.hard_coded_archs is None  # the architectures come from the arch list
    # defined, value not constant: the preprocessor's unknown value
    assert m.defines == {**DEFAULTS, "JITPKG_TILE": UNKNOWN_VALUE, "JITPKG_HEAD": UNKNOWN_VALUE, "JITPKG_ARCH_LIST": "1",
                         "JITPKG_TILED": "1"}
    assert m.unresolved == [("flags-define-value", "-DJITPKG_TILE={tile}: parameter: tile"),
                            ("flags-define-value", "-DJITPKG_HEAD={tile * 2}: parameter: tile")]


def test_flags_from_a_parameter_bound_at_the_gates_call(fx):
    m = mod(fx, "param_flags_{name}")
    assert m.defines == {**DEFAULTS, "JITPKG_COMMON": "1", "JITPKG_LEVEL": "2"}
    assert ("flags-unknown", "{extra_flags}: parameter extra_flags of jitpkg.jit.flagged.gen_param_module") in m.unresolved
    behind = behind_from_callgraph(fx)
    got = {}
    for line, fn in ((52, "run_hopper"), (58, "run_blackwell")):
        g = Gate(F, line, 8, f"jitpkg.jit.flagged.{fn}", "flag", "x", frozenset(), "test")
        (ref,) = behind(g).modules
        got[fn] = (ref.defines, ref.hard_flags, [u for u in ref.unresolved if u.startswith("flags")])
    assert got == {
        # gen_jit_spec's own defaults stay when the flags are re-evaluated for the call on the chain
        "run_hopper": ({**DEFAULTS, "JITPKG_VIA_HOPPER": "1", "JITPKG_COMMON": "1", "JITPKG_LEVEL": "2"}, ["sm_90a"], []),
        "run_blackwell": ({**DEFAULTS, "JITPKG_VIA_BLACKWELL": "1", "JITPKG_COMMON": "1", "JITPKG_LEVEL": "2"}, ["sm_100a"], []),
    }


def test_module_ref_carries_defines_and_include_roots(fx):
    behind = behind_from_callgraph(fx)
    refs = behind(Gate(F, 64, 8, "jitpkg.jit.flagged.run_hopper_flags", "flag", "x", frozenset(), "test")).modules
    assert [(r.name, r.include_roots, r.hard_flags) for r in refs] == [
        ("hopper_flags", ["jitpkg/data/csrc", "jitpkg/data/include"], ["sm_90a"])]
    (r,) = refs
    assert r.defines["JITPKG_HOPPER_PATH"] == "1" and r.unresolved == []
    # include paths that cannot be followed do not block the judgement: they are notes
    assert r.notes == ["include-path: /usr/local/cuda/include: absolute path outside the scan",
                       "include-path: jitpkg/data/csrc/no_such_dir: no such directory in the scan",
                       "include-path: {JITPKG_WORKSPACE}/generated: environment: JITPKG_WORKSPACE"]


def test_comprehension_and_arch_flags_with_holes(fx):
    m = mod(fx, "comp_flags")
    # `list(dict.fromkeys(arch + [f.replace(..) for f in base if f[1] == "D"]))`
    assert m.cuda_cflags == ["-gencode=arch=compute_{major}{minor},code=sm_{major}{minor}", "-DJITPKG_X_A", "-DJITPKG_X_B"]
    assert m.defines == {**DEFAULTS, "JITPKG_X_A": "1", "JITPKG_X_B": "1"}
    # an architecture flag with holes selects targets, it cannot define a macro: a note, not a block;
    # the targets are not known, so no hard-coded list is claimed
    assert m.hard_coded_archs is None
    assert m.unresolved == [("flags-arch", "-gencode=arch=compute_{major}{minor},code=sm_{major}{minor}: loop-variable: "
                                           "over {targets} (parameter targets of jitpkg.jit.flagged.gen_comp_module)")]


def test_flag_parsing_units():
    assert defines_of(["-DA", "-D", "B=2", "--define-macro=C=x y", "-DE={v}", "-UF", "-DA=3"]) == {
        "A": "3", "B": "2", "C": "x y"}
    assert hard_coded_archs(["-gencode=arch=compute_90a,code=sm_90a", "-gencode", "arch=compute_120f,code=[sm_120f,compute_120f]",
                             "-arch=sm_80", "--gpu-architecture=sm_75", "-DX", "-gencode=arch=compute_{cc}a,code=sm_{cc}a"]) == [
        "sm_90a", "sm_120f", "compute_120f", "sm_80", "sm_75"]


# ---------------------------------------------------------------- real packages
@pytest.mark.real
def test_0615_fp8_blockscale_judged_with_its_defines(sp0615, reg):
    """flashinfer 0.6.15.post1 gen_fp8_blockscale_gemm_sm90_module: without its -D flags
    fp8_blockscale_gemm.cu compiles to almost nothing; with them the Hopper wgmma code is active."""
    from archaudit.verdict.explain import explain
    from archaudit.pipeline import run_with_big_stack
    from archaudit.python.index import Index
    from archaudit.sources import open_source

    a = Analysis.open(sp0615)
    site = a.site_at("flashinfer/gemm/gemm_base.py", 8449)
    (b,) = run_with_big_stack(lambda: a.modules_behind(site))
    m = b.module
    assert (m.name, m.path, m.line) == ("fp8_blockscale_gemm_90", "flashinfer/jit/gemm/fp8_blockscale.py", 20)
    # gen_jit_spec's own defaults first (its cuda_cflags list), then the module's flags
    assert m.defines == {"FLASHINFER_ENABLE_F16": "1", "FLASHINFER_ENABLE_BF16": "1", "FLASHINFER_ENABLE_FP8_E4M3": "1",
                         "FLASHINFER_ENABLE_FP8_E5M2": "1",
                         "CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED": "1", "FLASHINFER_ENABLE_FP8_E8M0": "1",
                         "FLASHINFER_ENABLE_FP4_E2M1": "1", "COMPILE_HOPPER_TMA_GEMMS": "1", "ENABLE_BF16": "1",
                         "ENABLE_FP8": "1", "ENABLE_FP8_BLOCK_SCALE": "1", "CUTLASS_ENABLE_GDC_FOR_SM90": "1"}
    assert m.conditional_flags == {"-DENABLE_FP8_BLOCK_SCALE": 'is_cuda_version_at_least("12.8")'}
    assert m.hard_coded_archs == ["sm_90a"]
    nv = "flashinfer/data/csrc/nv_internal"
    assert m.include_paths == [nv, f"{nv}/include", f"{nv}/tensorrt_llm/cutlass_extensions/include",
                               f"{nv}/tensorrt_llm/kernels/cutlass_kernels/include", f"{nv}/tensorrt_llm/kernels/cutlass_kernels"]
    src = open_source(sp0615)
    files = src.files()
    idx = Index(src, [f for f in files if f.endswith(".py")], True)
    (e,) = run_with_big_stack(lambda: explain(src, files, idx, reg, "flashinfer/gemm/gemm_base.py", 8449,
                                              [reg.parse("sm_120")], True))
    (f,) = e.findings
    assert f.verdict == "hardware-bound"
    # the kernels call the wgmma of their own namespace (fp8_blockscale_mma_utils.cuh), not deep_gemm's:
    # on sm_120 its `#ifdef CUTLASS_ARCH_MMA_SM90A_ENABLED` takes the `#else` CUTE_INVALID_CONTROL_PATH
    assert (f.evidence[0].path, f.evidence[0].line, f.evidence[0].feature) == (
        "flashinfer/data/csrc/nv_internal/tensorrt_llm/kernels/cutlass_kernels/fp8_blockscale_gemm/"
        "fp8_blockscale_mma_utils.cuh", 41, "trap-stub")
