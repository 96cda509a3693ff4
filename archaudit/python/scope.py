"""Which top-level packages of a site-packages hold nothing architecture-dependent, by their bytes.

Such a package (fastapi, pydantic, requests, numpy beside a serving stack) is read as outside the
scan from every other package, as the GPU runtimes are (Index.hidden): another package's imports
of it resolve to external names, as they do when it is not installed, so the verdicts of the
packages that call it are those they get alone, and its modules are never parsed. It qualifies
when no `.py` file of it holds a gate trigger or names GPU code at all (CUDA, nvcc, PTX, Triton,
a C++ extension builder ...), it ships no CUDA source, and none of its shared objects holds
NVIDIA GPU code or links the CUDA runtime. A package the rules list as GPU code never qualifies.
"""
from __future__ import annotations

import re
from collections import defaultdict

from ..binary.fatbin import FATBIN_MAGIC
from ..ruledata import load_rule

# words of GPU code in a .py file's bytes: any of them and the package is analysed as before
_GPU_WORDS = re.compile(rb"(?i)cuda|nvcc|nvrtc|ptx|cubin|fatbin|triton|cutlass|cpp_extension|load_inline|tvm_ffi"
                        rb"|__global__|sm_?[0-9]{2}")
# in a shared object: a fatbin, its ELF section, or the CUDA runtime/driver it would call
_GPU_BINARY = re.compile(re.escape(FATBIN_MAGIC.to_bytes(4, "little")) + rb"|\.nv_fatbin|libcudart|libcuda\.so")
_WORD = re.compile(rb"\w+")
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
            out |= set(fact[1].split(b"\n")) if fact is not None else set(_WORD.findall(source.read_quietly(f) or b""))
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
