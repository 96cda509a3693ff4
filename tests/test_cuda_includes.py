"""Include roots and resolution (archaudit.cuda.includes)."""
from __future__ import annotations

from archaudit.cuda.includes import IncludeResolver, discover_include_roots, is_external_header, roots_from_python
from archaudit.cuda.tu import FsReader

ENV_PY = '''
import pathlib
_package_root: pathlib.Path = pathlib.Path(__file__).resolve().parents[1]
DATA = _package_root / "data"
INCLUDE_DIR = _package_root / "data" / "include"
CSRC = _package_root / "data" / "csrc"
LIB_DIRS = [_package_root / "data" / "lib" / "include"]
# OLD = _package_root / "data" / "old"
'''


def make_pkg(tmp_path):
    root = tmp_path / "site"
    for rel, text in {
        "pkg/__init__.py": "",
        "pkg/jit/env.py": ENV_PY,
        "pkg/data/include/pkg/a.cuh": '#include "pkg/b.cuh"\n#include <lib/core.h>\n',
        "pkg/data/include/pkg/b.cuh": "",
        "pkg/data/csrc/k.cu": '#include "pkg/a.cuh"\n#include "local.h"\n#include <vector>\n#include "nowhere.h"\n',
        "pkg/data/csrc/local.h": "",
        "pkg/data/lib/include/lib/core.h": "",
        "pkg/data/vendor/tree/cub/cub.cuh": "",
    }.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def test_roots_from_jit_python_text():
    assert roots_from_python("pkg/jit/env.py", ENV_PY) == [
        "pkg/data", "pkg/data/include", "pkg/data/csrc", "pkg/data/lib/include",
    ]


def test_discovery_orders_and_marks_vendored(tmp_path):
    root = make_pkg(tmp_path)
    r = FsReader(str(root))
    roots = discover_include_roots(r.files("pkg"), r, "pkg")
    assert [(x.path, x.vendored, x.origin) for x in roots] == [
        ("pkg/data/include", False, "jit-env"),
        ("pkg/data/csrc", False, "jit-env"),
        ("pkg/data/lib/include", True, "jit-env"),
    ]


def test_resolution_kinds(tmp_path):
    root = make_pkg(tmp_path)
    r = FsReader(str(root))
    files = r.files("pkg")
    res = IncludeResolver(r, discover_include_roots(files, r, "pkg"), files)
    assert res.resolve("pkg/a.cuh", False, "pkg/data/csrc/k.cu").path == "pkg/data/include/pkg/a.cuh"
    assert res.resolve("local.h", False, "pkg/data/csrc/k.cu").path == "pkg/data/csrc/local.h"
    assert res.resolve("b.cuh", False, "pkg/data/include/pkg/a.cuh").path == "pkg/data/include/pkg/b.cuh"
    assert res.resolve("b.cuh", True, "pkg/data/include/pkg/a.cuh").kind == "unresolved"  # <> skips the includer's dir
    assert res.resolve("vector", True, "pkg/data/csrc/k.cu").kind == "external"
    assert res.resolve("nowhere.h", False, "pkg/data/csrc/k.cu").kind == "unresolved"
    # a prefix directory found from the one file that ends with the spelled path
    got = res.resolve("cub/cub.cuh", True, "pkg/data/csrc/k.cu")
    assert (got.kind, got.path) == ("file", "pkg/data/vendor/tree/cub/cub.cuh")
    assert res.roots[-1].origin == "suffix"


def test_external_header_names():
    for h in ("cuda_runtime.h", "cuda_fp8.h", "vector", "torch/extension.h", "tvm/ffi/function.h", "cuda/std/atomic"):
        assert is_external_header(h), h
    assert not is_external_header("flashinfer/utils.cuh")


def test_inactive_includes_are_not_followed(tmp_path):
    from archaudit.cuda import ruleset
    from archaudit.cuda.tu import CudaProject

    (tmp_path / "hopper.cuh").write_text('asm("x");\n')
    (tmp_path / "t.cu").write_text('#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900\n#include "hopper.cuh"\n#endif\n')
    proj = CudaProject(FsReader(str(tmp_path)), [""])
    assert proj.analyse_tu("t.cu", ruleset.target_by_name("sm_90a")).closure == ["t.cu", "hopper.cuh"]
    assert proj.analyse_tu("t.cu", ruleset.target_by_name("sm_120f")).closure == ["t.cu"]


def test_unique_basename_and_extra_roots(tmp_path):
    from archaudit.cuda import ruleset
    from archaudit.cuda.tu import CudaProject

    root = make_pkg(tmp_path)
    (root / "pkg/data/csrc/mod").mkdir(parents=True)
    (root / "pkg/data/csrc/mod/shim.cuh").write_text("#define SHIM 1\n")
    (root / "pkg/data/csrc/other").mkdir(parents=True)
    (root / "pkg/data/csrc/other/t.cu").write_text('#include "shim.cuh"\n#include "dup.h"\n')
    for d in ("a", "b"):
        (root / f"pkg/data/csrc/{d}").mkdir(parents=True, exist_ok=True)
        (root / f"pkg/data/csrc/{d}/dup.h").write_text("")
    r = FsReader(str(root))
    files = r.files("pkg")
    proj = CudaProject(r, discover_include_roots(files, r, "pkg"), files=files)
    t = ruleset.target_by_name("sm_90a")
    res = proj.analyse_tu("pkg/data/csrc/other/t.cu", t)
    assert "pkg/data/csrc/mod/shim.cuh" in res.closure  # the one file with that name
    assert res.prediction == "unknown" and "dup.h" in res.reason  # two candidates: not guessed
    res = proj.analyse_tu("pkg/data/csrc/other/t.cu", t, extra_include_roots=["pkg/data/csrc/a"])
    assert "pkg/data/csrc/a/dup.h" in res.closure and res.prediction == "builds"


def test_a_tu_resolves_the_same_whatever_was_analysed_before(tmp_path, reg):
    """Resolving <cub/cub.cuh> adds the package directory that ships it as a root; a later TU
    must not see that root (nvcc compiles each TU with its own -I list): TU b's <foo.h> is a
    system header, whether or not TU a was analysed first."""
    from archaudit.cuda.tu import CudaProject

    (tmp_path / "pkg" / "vendor" / "cub").mkdir(parents=True)
    (tmp_path / "pkg" / "vendor" / "cub" / "cub.cuh").write_text("#pragma once\n")
    (tmp_path / "pkg" / "vendor" / "foo.h").write_text("#pragma once\n")
    (tmp_path / "pkg" / "a.cu").write_text("#include <cub/cub.cuh>\n__global__ void a() {}\n")
    (tmp_path / "pkg" / "b.cu").write_text("#include <foo.h>\n__global__ void b() {}\n")
    ct = reg.compile_target(reg.parse("sm_120"))

    def project():
        return CudaProject(FsReader(str(tmp_path)), [], files=FsReader(str(tmp_path)).files())

    alone = project().analyse_tu("pkg/b.cu", ct)
    p = project()
    a = p.analyse_tu("pkg/a.cu", ct)
    after = p.analyse_tu("pkg/b.cu", ct)
    assert a.closure == ["pkg/a.cu", "pkg/vendor/cub/cub.cuh"]
    assert alone.closure == after.closure == ["pkg/b.cu"]
    assert alone.to_json() == after.to_json()


def test_a_package_never_includes_another_packages_bundled_headers(tmp_path):
    """triton ships the CUDA runtime's headers (CUDART_VERSION 13010) under an include/ directory;
    flashinfer's JIT compiles with the toolkit's, so <cuda_runtime_api.h> from flashinfer stays
    external, while each package's own roots and suffix roots still serve it."""
    root = tmp_path / "site"
    for rel, text in {
        "flashinfer/__init__.py": "",
        "flashinfer/data/include/flashinfer/x.cuh": "",
        "flashinfer/data/csrc/k.cu": '#include <cuda_runtime_api.h>\n#include "flashinfer/x.cuh"\n',
        "triton/__init__.py": "",
        "triton/backends/nvidia/include/cuda_runtime_api.h": "#define CUDART_VERSION 13010\n",
        "triton/backends/nvidia/include/cuda/std/version": "",
        "triton/backends/nvidia/lib/t.cu": "#include <cuda_runtime_api.h>\n",
        "flashinfer/data/cccl/cuda/std/version": "",
    }.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    r = FsReader(str(root))
    files = r.files("")
    res = IncludeResolver(r, discover_include_roots(files, r), files)
    assert {x.path for x in res.roots} == {"flashinfer/data/include", "triton/backends/nvidia/include"}
    assert res.resolve("cuda_runtime_api.h", True, "flashinfer/data/csrc/k.cu").kind == "external"
    assert res.resolve("flashinfer/x.cuh", False, "flashinfer/data/csrc/k.cu").path == "flashinfer/data/include/flashinfer/x.cuh"
    # triton's own sources still find its copy
    got = res.resolve("cuda_runtime_api.h", True, "triton/backends/nvidia/lib/t.cu")
    assert (got.kind, got.path) == ("file", "triton/backends/nvidia/include/cuda_runtime_api.h")
    # a suffix root is looked for in the includer's package only (two packages ship cuda/std/version)
    got = res.resolve("cuda/std/version", True, "flashinfer/data/csrc/k.cu")
    assert (got.kind, got.path) == ("file", "flashinfer/data/cccl/cuda/std/version")
