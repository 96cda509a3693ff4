"""Which top-level packages of a site-packages hold nothing architecture-dependent, by their bytes.

Such a package (fastapi, pydantic, requests, numpy beside a serving stack) is read as outside the
scan from every other package, as the GPU runtimes are (Index.hidden): another package's imports
of it resolve to external names, as they do when it is not installed, so the verdicts of the
packages that call it are those they get alone, and its modules are never parsed. It qualifies
when no `.py` file of it holds a gate trigger or names GPU code at all (CUDA, nvcc, PTX, Triton,
a C++ extension builder ...), it ships no CUDA source, and none of its shared objects holds
NVIDIA GPU code, links the CUDA runtime or registers torch ops (an extension without device code
of its own, as DeepGEMM's, builds the kernels its ops launch at run time). A package the rules
list as GPU code never qualifies.
"""
from __future__ import annotations

import re
from collections import defaultdict

from ..binary.fatbin import FATBIN_MAGIC
from ..parsing.words import words_of
from ..ruledata import load_rule

# words of GPU code in a .py file's bytes: any of them and the package is analysed as before
_GPU_WORDS = re.compile(rb"(?i)cuda|nvcc|nvrtc|ptx|cubin|fatbin|triton|cutlass|cpp_extension|load_inline|tvm_ffi"
                        rb"|__global__|sm_?[0-9]{2}")
# in a shared object: a fatbin, its ELF section, the CUDA runtime/driver it would call, or the
# registration of torch ops (TORCH_LIBRARY_init_<ns>, TORCH_LIBRARY_IMPL's), whose kernels may be
# built at run time
_GPU_BINARY = re.compile(re.escape(FATBIN_MAGIC.to_bytes(4, "little"))
                         + rb"|\.nv_fatbin|libcudart|libcuda\.so|TORCH_LIBRARY_(?:init|IMPL)")
_CUDA_SOURCES = (".cu", ".cuh", ".ptx", ".cubin", ".fatbin")
_BINARIES = (".so", ".pyd", ".dylib", ".dll")


def _top(path: str) -> str | None:
    first, sep, _rest = path.partition("/")
    if not sep:
        return first[:-3] if first.endswith(".py") else None
    return None if first.endswith((".dist-info", ".data", ".egg-info")) else first


def passive_packages(source, files: list[str], facts: dict | None, exclude: frozenset[str],
                     dist_of, trigger) -> frozenset[str]:
    """The top-level packages of `files` that hold nothing architecture-dependent (see the module
    docstring); `exclude`: names never to return (the runtimes). facts: the prefilter's byte_facts
    per .py path when it ran (its words stand for the bytes). dist_of: a file's distribution;
    a package qualifies only if every top-level package of its distribution does (a wheel's alias
    package that imports the wheel's GPU code by a computed name is not passed over), and only if
    its bytes name no top-level package that does not qualify (what it imports is passed over
    with it), the runtimes aside. trigger(bytes): does a file hold a gate trigger (gates.holds_trigger)."""
    by_top: dict[str, list[str]] = defaultdict(list)
    for f in files:
        t = _top(f)
        if t and t.isidentifier():
            by_top[t].append(f)
    gpu = set(load_rule("externals").get("gpu_code", []))
    facts = facts or {}
    ok = {t for t, fs in by_top.items() if t not in exclude and t not in gpu and _passive(source, fs, facts, trigger)}
    dists: dict[str, set[str]] = defaultdict(set)
    for t, fs in by_top.items():
        dists[dist_of(fs[0]) or t].add(t)
    ok = {t for ts in dists.values() if ts <= ok for t in ts}
    words = {t: _words(source, by_top[t], facts) for t in ok}
    while True:
        others = {t.encode() for t in by_top if t not in ok and t not in exclude}
        keep = {t for t in ok if not words[t] & others}
        if keep == ok:
            return frozenset(ok)
        ok = keep


def _words(source, files: list[str], facts: dict) -> set[bytes]:
    out: set[bytes] = set()
    for f in files:
        if f.endswith(".py"):
            fact = facts.get(f)
            out |= set(fact[1].split(b"\n")) if fact is not None else words_of(source.read_quietly(f) or b"")
    return out


def _passive(source, files: list[str], facts: dict, trigger) -> bool:
    if not any(f.endswith(".py") for f in files) or any(f.endswith(_CUDA_SOURCES) for f in files):
        return False
    for f in files:
        if f.endswith(".py") and not _py_passive(source, f, facts.get(f), trigger):
            return False
    for f in files:
        if f.endswith(_BINARIES):
            data = source.read_quietly(f)  # too large to read: not shown free of GPU code
            if data is None or _GPU_BINARY.search(data):
                return False
    return True


def _py_passive(source, path: str, fact, trigger) -> bool:
    if fact is not None:
        # the words of the file: every needle of _GPU_WORDS is made of word bytes
        return not fact[0] and _GPU_WORDS.search(fact[1]) is None
    data = source.read_quietly(path)
    return data is not None and not trigger(data) and _GPU_WORDS.search(data) is None


def gpu_packages(source, files: list[str], tops: dict[str, str], exclude: frozenset[str]) -> frozenset[str]:
    """The top-level packages that hold NVIDIA GPU code of their own: listed as such by the rules
    (rules/externals.toml gpu_code), shipping CUDA sources, or a shared object with device code,
    the CUDA runtime or torch ops registered (what `_passive` rejects a binary for). tops: each
    top-level package's directory ("sglang/" or "python/sglang/"); exclude: the runtimes."""
    gpu = set(load_rule("externals").get("gpu_code", []))
    out = {t for t in tops if t in gpu and t not in exclude}
    by_dir = {d: t for t, d in tops.items() if t not in exclude}
    for f in files:
        if not f.endswith(_CUDA_SOURCES + _BINARIES) and ".so." not in f.rsplit("/", 1)[-1]:
            continue
        t = _owner(f, by_dir)
        if t is None or t in out:
            continue
        if f.endswith(_CUDA_SOURCES):
            out.add(t)
            continue
        data = source.read_quietly(f)
        if data is None or _GPU_BINARY.search(data):  # too large to read: may hold GPU code
            out.add(t)
    return frozenset(out)


def _owner(path: str, by_dir: dict[str, str]) -> str | None:
    """The top-level package whose directory holds `path`."""
    i = path.find("/")
    while i >= 0:
        t = by_dir.get(path[:i + 1])
        if t is not None:
            return t
        i = path.find("/", i + 1)
    return None

