"""Binary sinks: Python calls behind which the device code is prebuilt (rules/binaries.toml)."""
import sys
import textwrap

import pytest

from archaudit.binary.sinks import binary_sinks, runs_target, sinks_in_function
from archaudit.python.index import Index
from archaudit.sources import open_source

from conftest import FIXTURES

sys.path.insert(0, str(FIXTURES / "binary"))
import make_fixtures as mk  # noqa: E402

# A package shaped like flashinfer: a loader module, an artifact registry, JIT generators that
# reference artifacts, wrappers that register the cubin callback, and look-alikes that are not sinks.
PKG = {
    "flashinfer/__init__.py": "",
    "flashinfer/artifacts.py": """
        class ArtifactPath:
            FMHA: str = "abc123def456/fmha/gen/"
            DSL: str = (
                "fff000111222/dsl/"
            )
            DSL_ARCHS: tuple[str, ...] = ("sm_100a", "sm_120f")
            CUDNN: str = "ccc999ccc999/cudnn_sm90a_kernels/"
    """,
    "flashinfer/jit/__init__.py": "from .cubin_loader import setup_cubin_loader, get_artifact\n",
    "flashinfer/jit/cubin_loader.py": """
        def load_cubin(path, sha):
            return b""

        def get_artifact(name, sha):
            return load_cubin("/cache/" + name, sha)

        def setup_cubin_loader(lib):
            def cb(name):
                get_artifact(name, "")
            return cb
    """,
    "flashinfer/jit/modules.py": """
        from .cubin_loader import get_artifact
        from ..artifacts import ArtifactPath

        def gen_fmha_module():
            checksum = get_artifact(f"{ArtifactPath.FMHA}/checksums.txt", "h")
            return build(["-DPATH=" + ArtifactPath.FMHA])

        def gen_plain_module():
            return build([])
    """,
    "flashinfer/ops.py": """
        import os
        import cutlass.cute as cute
        from otherlib import load_cubin
        from .jit import setup_cubin_loader
        from .jit.cubin_loader import get_artifact
        from .jit.modules import gen_fmha_module, gen_plain_module
        from .artifacts import ArtifactPath

        DSL_PATH = ArtifactPath.DSL

        def get_mod():
            mod = gen_fmha_module()
            for p in mod.paths():
                setup_cubin_loader(p)

        def get_plain():
            mod = gen_plain_module()
            setup_cubin_loader(mod.path)

        def load_dsl(gpu_arch):
            path = os.path.join(DSL_PATH, gpu_arch, "k.so")
            data = get_artifact(path, "x")
            return cute.runtime.load_module(str(path))

        def load_local(d):
            load_cubin(d, "")  # otherlib's load_cubin: not ours
            return cute.runtime.load_module(d + "/k.o")  # built here, not fetched

        def cudnn():
            return get_artifact(ArtifactPath.CUDNN + "k.cubin", "y")
    """,
}


def make_pkg(root, files):
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip("\n"))
    src = open_source(root)
    py = [f for f in src.files() if f.endswith(".py")]
    return src, Index(src, py)


@pytest.fixture
def pkg(tmp_path):
    return make_pkg(tmp_path, PKG)


def rows(sinks):
    return [(s.path, s.line, s.function, s.loader, s.kind, s.artifact, s.artifact_refs, s.archs, s.how) for s in sinks]


def test_sinks_of_fixture_package(pkg):
    src, index = pkg
    got = rows(binary_sinks(index, src))
    fm, dsl, cud = "ArtifactPath.FMHA", "ArtifactPath.DSL", "ArtifactPath.CUDNN"
    assert got == [
        ("flashinfer/jit/modules.py", 5, "flashinfer.jit.modules.gen_fmha_module", "get_artifact", "download",
         "abc123def456/fmha/gen/checksums.txt", (fm,), None, "import"),
        ("flashinfer/jit/modules.py", 6, "flashinfer.jit.modules.gen_fmha_module", "<artifact-path>", "artifact-path",
         "abc123def456/fmha/gen/", (fm,), None, "registry"),
        ("flashinfer/ops.py", 9, "flashinfer.ops", "<artifact-path>", "artifact-path",
         "fff000111222/dsl/", (dsl,), ("sm_100a", "sm_120f"), "registry"),
        ("flashinfer/ops.py", 14, "flashinfer.ops.get_mod", "setup_cubin_loader", "cubin-callback",
         "abc123def456/fmha/gen/", (fm,), None, "import"),
        ("flashinfer/ops.py", 18, "flashinfer.ops.get_plain", "setup_cubin_loader", "cubin-callback",
         "", (), None, "import"),
        ("flashinfer/ops.py", 22, "flashinfer.ops.load_dsl", "get_artifact", "download",
         "fff000111222/dsl/{gpu_arch}/k.so", (dsl,), ("sm_100a", "sm_120f"), "import"),
        ("flashinfer/ops.py", 23, "flashinfer.ops.load_dsl", "load_module", "load-so",
         "fff000111222/dsl/{gpu_arch}/k.so", (dsl,), ("sm_100a", "sm_120f"), "receiver"),
        ("flashinfer/ops.py", 30, "flashinfer.ops.cudnn", "get_artifact", "download",
         "ccc999ccc999/cudnn_sm90a_kernels/k.cubin", (cud,), ("sm_90a",), "import"),
    ]


def test_evidence_and_reasons(pkg):
    src, index = pkg
    by_line = {(s.path, s.line): s for s in binary_sinks(index, src)}
    cb = by_line[("flashinfer/ops.py", 14)]
    assert [(e.kind, e.path, e.line, e.text) for e in cb.evidence] == [
        ("jit-module", "flashinfer/jit/modules.py", 4, "flashinfer.jit.modules.gen_fmha_module")]
    assert cb.archs_how.startswith("not stated")
    dsl = by_line[("flashinfer/ops.py", 22)]
    assert dsl.archs_how == "ArtifactPath.DSL_ARCHS (flashinfer/artifacts.py:6)"
    assert [(e.kind, e.line, e.text) for e in dsl.evidence] == [("constant", 6, "ArtifactPath.DSL_ARCHS")]
    assert by_line[("flashinfer/ops.py", 30)].archs_how == "named in the artifact path"


def test_runs_target(pkg, reg):
    src, index = pkg
    by_line = {(s.path, s.line): s for s in binary_sinks(index, src)}
    dsl = by_line[("flashinfer/ops.py", 22)]  # sm_100a, sm_120f
    assert [runs_target(dsl, g, reg) for g in ("sm_100", "sm_103", "sm_120", "sm_121", "sm_90")] == [
        "yes", "no", "yes", "yes", "no"]
    assert runs_target(by_line[("flashinfer/ops.py", 14)], "sm_120", reg) == "unknown"


def test_sinks_in_function(pkg):
    src, index = pkg
    assert [(s.line, s.loader) for s in sinks_in_function(index, "flashinfer.ops.load_dsl", src)] == [
        (22, "get_artifact"), (23, "load_module")]
    assert sinks_in_function(index, "flashinfer.ops.load_local", src) == []


def test_artifact_files_in_tree_are_read(tmp_path):
    files = dict(PKG)
    src, index = make_pkg(tmp_path, files)
    store = tmp_path / "store" / "abc123def456" / "fmha" / "gen"
    store.mkdir(parents=True)
    (store / "k1.cubin").write_bytes(mk.cubin(100, "a"))
    (store / "k2.cubin").write_bytes(mk.cubin(103, "a"))
    src = open_source(tmp_path)
    index = Index(src, [f for f in src.files() if f.endswith(".py")])
    s = {(x.path, x.line): x for x in binary_sinks(index, src)}[("flashinfer/ops.py", 14)]
    assert s.archs == ("sm_100a", "sm_103a")
    assert s.archs_how == "read from 2 file(s) of the artifact in the scanned tree"
    assert runs_target(s, "sm_120") == "no" and runs_target(s, "sm_103") == "yes"


def test_star_import_is_name_only(tmp_path):
    src, index = make_pkg(tmp_path, {
        "p/__init__.py": "",
        "p/m.py": "from flashinfer.jit.cubin_loader import *\n\ndef f():\n    return get_artifact('x/sm_90a/k.cubin', 's')\n",
    })
    assert rows(binary_sinks(index, src)) == [
        ("p/m.py", 4, "p.m.f", "get_artifact", "download", "x/sm_90a/k.cubin", (), ("sm_90a",), "name-only")]


def test_broken_source_is_no_crash(tmp_path):
    src, index = make_pkg(tmp_path, {
        "p/__init__.py": "",
        "p/m.py": "from .jit.cubin_loader import get_artifact\ndef f(:\n    get_artifact(\n",
        "p/bin.py": "\x00\x01get_artifact",
    })
    assert binary_sinks(index, src) == []


# ------------------------------------------------------------------------- real packages
@pytest.mark.real
def test_flashinfer_072_prebuilt_paths(sp072):
    src = open_source(sp072)
    index = Index(src, [f for f in src.files() if f.endswith(".py")], path_based=True)
    mods = [m for m in index.path_of if m.startswith("flashinfer.") and not m.startswith("flashinfer.data.")]
    sinks = binary_sinks(index, src, modules=mods)
    loaders = {(s.path, s.line): s for s in sinks if s.kind != "artifact-path"}
    fmha = "2d6a5a029eefcc388ec0ceb87efb55d8bcce5c3c/fmha/trtllm-gen/"
    for where in [("flashinfer/prefill.py", 298), ("flashinfer/prefill.py", 6700), ("flashinfer/decode.py", 639),
                  ("flashinfer/decode.py", 3460), ("flashinfer/mla/_core.py", 2827),
                  ("flashinfer/mla/_batch_mla/_backends/trtllm_gen_backend.py", 42)]:
        s = loaders[where]
        assert (s.loader, s.artifact, s.artifact_refs, s.archs) == (
            "setup_cubin_loader", fmha, ("ArtifactPath.TRTLLM_GEN_FMHA",), None), where
    assert loaders[("flashinfer/prefill.py", 298)].function == "flashinfer.prefill.get_trtllm_gen_prefill_module"
    assert [(e.path, e.line) for e in loaders[("flashinfer/prefill.py", 298)].evidence] == [
        ("flashinfer/jit/attention/modules.py", 2308)]
    gemm = loaders[("flashinfer/gemm/gemm_base.py", 10313)]
    assert gemm.artifact_refs == ("ArtifactPath.TRTLLM_GEN_GEMM",) and gemm.archs is None
    moe = loaders[("flashinfer/fused_moe/core.py", 1815)]
    assert moe.artifact_refs == ("ArtifactPath.TRTLLM_GEN_BMM",)
    assert loaders[("flashinfer/cudnn/utils.py", 55)].artifact_refs == ("ArtifactPath.CUDNN_SDPA",)
    assert loaders[("flashinfer/trtllm_low_latency_gemm.py", 77)].artifact_refs == ("ArtifactPath.TRTLLM_GEN_GEMM",)
    dsl = loaders[("flashinfer/attention/cute_dsl/fmha.py", 197)]
    assert (dsl.loader, dsl.archs) == ("get_artifact", ("sm_100a", "sm_103a", "sm_107a", "sm_110a"))
    assert dsl.artifact == "6efb974aae4c012d9fb317c2ef360210b3f352e4/fmha/cute-dsl/{_get_cpu_arch()}/{gpu_arch}/{variant_name}.so"
    assert dsl.archs_how == "ArtifactPath.DSL_FMHA_ARCHS (flashinfer/artifacts.py:154)"
    assert loaders[("flashinfer/attention/cute_dsl/fmha.py", 202)].kind == "load-so"
    dg = loaders[("flashinfer/deep_gemm.py", 974)]
    assert (dg.artifact, dg.archs) == ("7ec7ac40b9fd48172651b77ff2ebe20d79decc39/deep-gemm/kernel.{name}.{subscript}.cubin", None)
    # CuTe DSL objects compiled here are not prebuilt: no load-so sink without an artifact
    assert not any(s.kind == "load-so" and not s.artifact_refs for s in sinks)
    assert len(loaders) == 30


@pytest.mark.real
def test_flashinfer_0615_prebuilt_paths(sp0615):
    src = open_source(sp0615)
    index = Index(src, [f for f in src.files() if f.endswith(".py")], path_based=True)
    mods = [m for m in index.path_of if m.startswith("flashinfer.") and not m.startswith("flashinfer.data.")]
    loaders = {(s.path, s.line): s for s in binary_sinks(index, src, modules=mods) if s.kind != "artifact-path"}
    s = loaders[("flashinfer/prefill.py", 222)]
    assert (s.function, s.loader, s.artifact) == (
        "flashinfer.prefill.get_trtllm_gen_prefill_module", "setup_cubin_loader",
        "158f6fa11ef139a098cfddcdddce73ca99d164ad/fmha/trtllm-gen/")
    dsl = loaders[("flashinfer/attention/cute_dsl/fmha.py", 188)]
    assert dsl.archs == ("sm_100a", "sm_103a", "sm_110a")
    assert loaders[("flashinfer/gemm/gemm_base.py", 7054)].artifact_refs == ("ArtifactPath.TRTLLM_GEN_GEMM",)


def test_module_binary_for_the_judge(pkg, reg):
    from archaudit.binary.sinks import module_binary

    src, index = pkg
    by_line = {(s.path, s.line): s for s in binary_sinks(index, src)}
    d = module_binary(by_line[("flashinfer/ops.py", 22)], "sm_103", reg)
    assert (d["archs"], d["runs"]) == ({"sm_100a", "sm_120f"}, "no")
    assert d["reason"] == ("prebuilt code (download) fff000111222/dsl/{gpu_arch}/k.so via get_artifact at "
                           "flashinfer/ops.py:22; built for sm_100a, sm_120f (ArtifactPath.DSL_ARCHS "
                           "(flashinfer/artifacts.py:6)): has no code for sm_103")
    assert module_binary(by_line[("flashinfer/ops.py", 22)], reg.parse("DGX Spark"), reg)["runs"] == "sass"
    u = module_binary(by_line[("flashinfer/ops.py", 14)], "sm_120", reg)
    assert (u["archs"], u["runs"]) == (None, "unknown")
    assert u["reason"].endswith("its architectures are unknown: not stated: the artifact is fetched at run time "
                                "and neither its path nor the package names its architectures")
