"""The nvcc command line flashinfer's JIT builds for one CUDA source, reconstructed for benchmarks.

Shared by bench/validate_cuda.py and bench/kernel_census.py. Nothing here imports flashinfer:
the flags are transcribed from its JIT code, and `check_against_source` verifies that every
literal flag still appears in that code, so a flashinfer bump that changes them is reported.

Where each part comes from (flashinfer 0.6.15 / 0.7.2, same structure):
- `jit/cpp_ext.py` build_common_cflags: -DPy_LIMITED_API, -D_GLIBCXX_USE_CXX11_ABI (torch's
  value, 1 for current wheels), -I for each module extra include dir, -I for the vendored CCCL,
  -isystem for Python, $cuda_home/include, tvm-ffi and dlpack, data/include, data/csrc, the two
  CUTLASS dirs and spdlog (`get_system_includes`, `jit/env.py`).
- `jit/cpp_ext.py` build_cuda_cflags: --compiler-options=-fPIC, --expt-relaxed-constexpr,
  -static-global-template-stub=false (CUDA >= 12.8), then the global non-arch flags of
  `CompilationContext.COMMON_NVCC_FLAGS` (compilation_context.py), then the module's flags.
- `jit/core.py` gen_jit_spec: -std=c++17, --threads=1, -use_fast_math, -Xfatbin=-compress-all,
  --compress-mode=size, -DFLASHINFER_ENABLE_{F16,BF16,FP8_E4M3,FP8_E5M2}, -DNDEBUG, -O3.
- the target: `-gencode=arch=compute_X,code=sm_X` exactly as `get_nvcc_flags_list` spells it.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus  # noqa: E402

from archaudit.verify import nvcc_version  # noqa: E402,F401  (the benchmarks' reports name the toolkit)

# flashinfer 0.7.2.post1 requires apache-tvm-ffi<0.2,>=0.1.11 and 0.6.15.post1
# apache-tvm-ffi<0.2,>=0.1.6 (!=0.1.8*) (their METADATA); this one satisfies both.
TVM_FFI_SPEC = "apache-tvm-ffi==0.1.15.post2"
# The toolkit here has no curand.h (sampling.cuh needs it); the pip wheel carries the headers a
# full toolkit has in $cuda_home/include.
CURAND_SPEC = "nvidia-curand==10.4.4.72"
# pip takes --platform literally: nvidia-curand 10.4.4.72 is tagged manylinux_2_27 only
PLATFORMS = [a for p in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64") for a in ("--platform", p)]

VENDORED_INCLUDES = (  # relative to the flashinfer package directory, in the JIT's order
    "data/include", "data/csrc", "data/cutlass/include", "data/cutlass/tools/util/include", "data/spdlog/include",
)
CCCL_INCLUDES = ("data/cccl/cub", "data/cccl/libcudacxx/include", "data/cccl/thrust")

COMMON_DEFINES = ["-DPy_LIMITED_API=0x03090000", "-D_GLIBCXX_USE_CXX11_ABI=1"]
CUDA_CFLAGS = ["--compiler-options=-fPIC", "--expt-relaxed-constexpr", "-static-global-template-stub=false"]
GLOBAL_NON_ARCH = ["-DFLASHINFER_ENABLE_FP8_E8M0", "-DFLASHINFER_ENABLE_FP4_E2M1"]
SPEC_CFLAGS = [
    "-std=c++17", "--threads=1", "-use_fast_math", "-Xfatbin=-compress-all", "--compress-mode=size",
    "-DFLASHINFER_ENABLE_F16", "-DFLASHINFER_ENABLE_BF16", "-DFLASHINFER_ENABLE_FP8_E4M3",
    "-DFLASHINFER_ENABLE_FP8_E5M2", "-DNDEBUG", "-O3",
]
# files of the flashinfer package each literal flag above must still appear in
_SOURCE_OF = {
    "jit/cpp_ext.py": CUDA_CFLAGS,
    "compilation_context.py": GLOBAL_NON_ARCH,
    "jit/core.py": [f for f in SPEC_CFLAGS if f != "--threads=1"],
}


def gencode(target: str) -> str:
    """sm_120f -> -gencode=arch=compute_120f,code=sm_120f (the JIT's spelling)."""
    m = re.fullmatch(r"sm_(\d+[af]?)", target)
    if not m:
        raise ValueError(f"not a compile target: {target!r}")
    return f"-gencode=arch=compute_{m.group(1)},code=sm_{m.group(1)}"


def _wheel_dir(spec: str, sub: str) -> Path:
    """Unpack `sub` of a pinned wheel into the corpus cache once; return the unpack dir."""
    root = corpus.cache_root()
    name, version = spec.split("==")
    dest = root / "toolheaders" / f"{name}-{version}"
    marker = dest / ".complete"
    if marker.exists():
        return dest
    wheels = root / "wheels"
    w = None
    stem = name.replace("-", "_").lower()
    for cand in sorted(wheels.glob("*.whl")) if wheels.exists() else []:
        parts = cand.name.split("-")
        if parts[0].lower() == stem and parts[1] == version:
            w = cand
    if w is None:
        wheels.mkdir(parents=True, exist_ok=True)
        print(f"downloading {spec} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels),
                        "--python-version", "3.11", *PLATFORMS, "--only-binary=:all:", spec],
                       check=True)
        return _wheel_dir(spec, sub)
    with zipfile.ZipFile(w) as zf:
        for n in zf.namelist():
            if n.startswith(sub):
                zf.extract(n, dest)
    marker.write_text(spec + "\n")
    return dest


def tvm_ffi_includes() -> list[Path]:
    d = _wheel_dir(TVM_FFI_SPEC, "tvm_ffi/")
    return [d / "tvm_ffi" / "include", d / "tvm_ffi" / "3rdparty" / "dlpack" / "include"]


def curand_include() -> Path:
    return _wheel_dir(CURAND_SPEC, "nvidia/cu13/include/") / "nvidia" / "cu13" / "include"


def cuda_home() -> Path:
    env = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if env:
        return Path(env)
    nvcc = shutil.which("nvcc")
    if nvcc:
        real = Path(nvcc).resolve()
        # /usr/local/bin/nvcc may be a wrapper script; look for the toolkit it execs
        if real.parent.name == "bin" and (real.parent.parent / "include" / "cuda_runtime.h").exists():
            return real.parent.parent
        try:
            m = re.search(r"(/\S+)/bin/nvcc", real.read_text(errors="replace")[:4000])
        except OSError:
            m = None
        if m:
            return Path(m.group(1))
    return Path("/usr/local/cuda")


def jit_command(fi_dir: Path, src: Path, target: str, module_flags=(), module_includes=(), out: str = "out.o",
                mode: str = "-c") -> list[str]:
    """nvcc argv for `src` as flashinfer's JIT compiles it (module flags without -gencode)."""
    cmd = ["nvcc"]
    cmd += COMMON_DEFINES
    for inc in module_includes:
        cmd.append(f"-I{Path(inc) if os.path.isabs(str(inc)) else fi_dir / inc}")
    for inc in CCCL_INCLUDES:
        cmd.append(f"-I{fi_dir / inc}")
    py_inc = sysconfig.get_path("include")
    system = [Path(py_inc), cuda_home() / "include", *tvm_ffi_includes()]
    system += [fi_dir / d for d in VENDORED_INCLUDES]
    system.append(curand_include())
    for d in system:
        cmd += ["-isystem", str(d)]
    cmd += CUDA_CFLAGS + GLOBAL_NON_ARCH + SPEC_CFLAGS
    cmd += [f for f in module_flags if not f.startswith("-gencode")]
    cmd.append(gencode(target))
    cmd += [mode, str(src), "-o", out]
    return cmd


def defines_of(cmd: list[str]) -> dict[str, str]:
    """The -D macros of an nvcc argv, for archaudit's analysis of the same TU."""
    from archaudit.cuda.preproc import parse_define_flags

    return parse_define_flags([a for a in cmd if a.startswith(("-D", "-U"))])


def check_against_source(fi_dir: Path, module_flags: dict[str, list[str]]) -> list[str]:
    """Literal flags not found in the flashinfer source they were transcribed from."""
    problems = []
    texts: dict[str, str] = {}

    def text(rel: str) -> str:
        if rel not in texts:
            try:
                texts[rel] = (fi_dir / rel).read_text(errors="replace")
            except OSError:
                texts[rel] = ""
        return texts[rel]

    for rel, flags in list(_SOURCE_OF.items()) + list(module_flags.items()):
        t = text(rel)
        if not t:
            problems.append(f"{rel}: not found in {fi_dir}")
            continue
        for f in flags:
            if f.startswith("-gencode"):
                continue
            if f'"{f}"' not in t and f"'{f}'" not in t:
                problems.append(f"{rel}: flag {f} no longer appears there")
    return problems
