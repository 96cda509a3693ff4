"""The fatbin reader on objects compiled here with nvcc, checked against cuobjdump when present.

cuobjdump is looked up on PATH, in $ARCHAUDIT_CUOBJDUMP, or in the nvidia-cuda-cuobjdump wheel
(nvidia/cu13/bin/cuobjdump). It is only the referee: archaudit never runs it.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from archaudit.binary.fatbin import read_file, runs_on

pytestmark = pytest.mark.nvcc

KERNEL = "__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n"


def _cuobjdump():
    env = os.environ.get("ARCHAUDIT_CUOBJDUMP")
    if env and os.path.isfile(env):
        return env
    found = shutil.which("cuobjdump")
    if found:
        return found
    for d in sys.path:
        for sub in ("cu13", "cu12", "cuda_cuobjdump"):
            p = Path(d) / "nvidia" / sub / "bin" / "cuobjdump"
            if p.is_file() and os.access(p, os.X_OK):
                return str(p)
    return None


def gencode(*codes):
    """gencode("sm_80", "compute_80") -> nvcc flags for those codes of one virtual arch each."""
    out = []
    for c in codes:
        digits = re.search(r"\d+[af]?", c).group(0)
        out += ["-gencode", f"arch=compute_{digits},code={c}"]
    return out


# name -> (nvcc mode, flags, expected SASS, expected PTX)
BUILDS = {
    "sm80_ptx80.fatbin": ("-fatbin", gencode("sm_80", "compute_80"), ["sm_80"], ["compute_80"]),
    "mixed.fatbin": ("-fatbin", gencode("sm_90a", "sm_100a", "sm_120f", "compute_120f"),
                     ["sm_90a", "sm_100a", "sm_120f"], ["compute_120f"]),
    "mixed_lz4.fatbin": ("-fatbin", ["--compress-mode=speed", "-Xfatbin=-compress-all"]
                         + gencode("sm_100f", "compute_100f", "sm_120a", "sm_121a"),
                         ["sm_100f", "sm_120a", "sm_121a"], ["compute_100f"]),
    "host.o": ("-c", gencode("sm_80", "compute_80", "sm_121a"), ["sm_80", "sm_121a"], ["compute_80"]),
    "sm90a.cubin": ("-cubin", gencode("sm_90a"), ["sm_90a"], []),
    "sm100a.cubin": ("-cubin", gencode("sm_100a"), ["sm_100a"], []),
    "sm100f.cubin": ("-cubin", gencode("sm_100f"), ["sm_100f"], []),
    "sm120f.cubin": ("-cubin", gencode("sm_120f"), ["sm_120f"], []),
    "sm120a.cubin": ("-cubin", gencode("sm_120a"), ["sm_120a"], []),
    "sm121a.cubin": ("-cubin", gencode("sm_121a"), ["sm_121a"], []),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH")
    d = tmp_path_factory.mktemp("nvcc_bin")
    src = d / "k.cu"
    src.write_text(KERNEL)
    out = {}
    for name, (mode, flags, _, _) in BUILDS.items():
        dst = d / name
        r = subprocess.run(["nvcc", mode, *flags, "-o", str(dst), str(src)], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        out[name] = dst
    return out


@pytest.mark.parametrize("name", list(BUILDS))
def test_reader_on_nvcc_output(built, name):
    _, _, sass, ptx = BUILDS[name]
    info = read_file(built[name])
    assert info.diagnostics == []
    assert info.names("sass") == sass
    assert info.names("ptx") == ptx


def test_compression_is_reported(built):
    info = read_file(built["mixed_lz4.fatbin"])
    assert {a.name: a.compressed for a in info.archs} == {
        "sm_100f": "lz4", "compute_100f": "lz4", "sm_120a": "lz4", "sm_121a": "lz4"}
    # nvcc 13 compresses PTX with zstd by default, machine code not
    info = read_file(built["sm80_ptx80.fatbin"])
    assert {a.name: a.compressed for a in info.archs} == {"sm_80": "", "compute_80": "zstd"}


def test_runs_on_nvcc_output(built):
    host = read_file(built["host.o"]).archs  # sm_80, compute_80, sm_121a
    assert [runs_on(host, g) for g in ("sm_80", "sm_89", "sm_90", "sm_120", "sm_121")] == [
        "sass", "sass", "ptx-jit", "ptx-jit", "sass"]
    mixed = read_file(built["mixed.fatbin"]).archs  # sm_90a, sm_100a, sm_120f, compute_120f
    assert [runs_on(mixed, g) for g in ("sm_90", "sm_100", "sm_103", "sm_110", "sm_120", "sm_121")] == [
        "sass", "sass", "no", "no", "sass", "sass"]


def _cuobjdump_view(info):
    """Our reading in cuobjdump's naming: ELF entries show sm_XY or sm_XYa (a cubin records no
    "f"), PTX entries sm_XY[a|f]."""
    elf = [f"sm_{a.sm}{a.variant if a.variant == 'a' else ''}" for a in info.archs if a.kind == "sass"]
    ptx = [f"sm_{a.sm}{a.variant}" for a in info.archs if a.kind == "ptx"]
    return elf, ptx


@pytest.mark.parametrize("name", list(BUILDS))
def test_agrees_with_cuobjdump(built, name):
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not found (PATH, $ARCHAUDIT_CUOBJDUMP, nvidia-cuda-cuobjdump wheel)")
    r = subprocess.run([tool, "-all", "--list-elf", "--list-ptx", str(built[name])], capture_output=True, text=True, timeout=60)
    elf = re.findall(r"ELF file\s+\d+: .*?\.(sm_\d+a?)\.cubin", r.stdout)
    ptx = re.findall(r"PTX file\s+\d+: .*?\.(sm_\d+[af]?)\.ptx", r.stdout)
    assert (elf, ptx) == _cuobjdump_view(read_file(built[name]))
