"""Include resolution: include roots of a package, and `#include` lookup against them.

Roots are discovered, not listed: directories named `include/`, the paths a JIT's Python code
builds from its package root (`_package_root / "data" / "cutlass" / "include"` in flashinfer's
jit/env.py, read as text), and, lazily, the directory that makes an otherwise unresolved
`#include <a/b.h>` resolve when exactly one such prefix exists in the package.

Lookup follows gcc/nvcc: a quoted include is looked up next to the including file first, then
in the roots in order; an angled include only in the roots. What the roots do not hold is either
a system/toolkit header (recognised by name: the C/C++ library, the CUDA toolkit, torch, tvm-ffi,
...) or unresolved, which the caller reports as a diagnostic.
"""
from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Iterable, Protocol


class Reader(Protocol):
    def read(self, relpath: str) -> bytes | None: ...

    def exists(self, relpath: str) -> bool: ...


@dataclass(frozen=True)
class IncludeRoot:
    path: str  # POSIX, relative to the scan root ("" is the scan root itself)
    vendored: bool = False  # a bundled third-party project (CUTLASS, CCCL, spdlog ...)
    origin: str = ""  # how it was found: "cli", "jit-env", "layout", "suffix", "file-dir", "generated"
    # a file a JIT generator writes beside the module's sources at build time (`config.inc`): the
    # quoted include `alias` reads `path`, the file of the scan it is rendered or copied from
    alias: str = ""

    def __str__(self) -> str:
        return self.path or "."


def as_root(r: "IncludeRoot | str") -> IncludeRoot:
    return r if isinstance(r, IncludeRoot) else IncludeRoot(norm(r), False, "given")


def norm(p: str) -> str:
    p = posixpath.normpath(p.replace("\\", "/")) if p else ""
    return "" if p == "." else p


def join(a: str, b: str) -> str:
    return norm(posixpath.join(a, b)) if a else norm(b)


# --- external (system / toolkit) headers --------------------------------------------------------

# C and C++ standard library headers (no extension), and POSIX/Linux headers.
_STD_HEADERS = frozenset(
    """algorithm any array atomic barrier bit bitset cassert ccomplex cctype cerrno cfenv cfloat
    charconv chrono cinttypes ciso646 climits clocale cmath codecvt compare complex concepts
    condition_variable coroutine csetjmp csignal cstdarg cstddef cstdint cstdio cstdlib cstring
    ctime cuchar cwchar cwctype deque exception execution expected filesystem format forward_list
    fstream functional future initializer_list iomanip ios iosfwd iostream istream iterator latch
    limits list locale map memory memory_resource mutex new numbers numeric optional ostream queue
    random ranges ratio regex scoped_allocator semaphore set shared_mutex source_location span
    sstream stack stdexcept stop_token streambuf string string_view syncstream system_error thread
    tuple type_traits typeindex typeinfo unordered_map unordered_set utility valarray variant
    vector version assert.h ctype.h errno.h fenv.h float.h inttypes.h limits.h locale.h math.h
    setjmp.h signal.h stdarg.h stdbool.h stddef.h stdint.h stdio.h stdlib.h string.h time.h
    uchar.h wchar.h wctype.h unistd.h dlfcn.h fcntl.h pthread.h sched.h execinfo.h cxxabi.h
    malloc.h alloca.h strings.h poll.h netdb.h numa.h numaif.h mpi.h""".split()
)
_EXTERNAL_PREFIXES = (
    "sys/", "linux/", "arpa/", "netinet/", "bits/", "ext/", "asm/",
    "torch/", "ATen/", "c10/", "caffe2/", "pybind11/", "tvm/ffi/", "dlpack/", "Python.h",
    "crt/", "cuda/", "cooperative_groups", "thrust/", "cub/", "nv/", "nvtx3/", "cuda_",
    "cuda.h", "cudaTypedefs.h", "cudart", "cublas", "cublasLt", "cudnn", "cufft", "curand",
    "cusparse", "cusolver", "nccl", "nvml", "nvrtc", "nvtx", "nvshmem", "mma.h", "vector_types.h",
    "vector_functions", "device_", "driver_", "host_", "builtin_types.h", "math_constants.h",
    "math_functions.h", "sm_", "texture_", "surface_", "library_types.h", "channel_descriptor.h",
    "common_functions.h", "cupti", "nvPTXCompiler.h", "nvJitLink.h", "fatbinary", "cufile",
    "gdrapi.h", "infiniband/", "rdma/", "mpi", "omp.h", "spdlog/", "fmt/",
)


def is_external_header(spelled: str) -> bool:
    """Recognised as a system, CUDA-toolkit or framework header (looked up outside the package)."""
    s = spelled.strip()
    if s in _STD_HEADERS:
        return True
    return s.startswith(_EXTERNAL_PREFIXES)


# --- resolution ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resolution:
    spelled: str
    angled: bool
    path: str | None  # resolved file (relative to the scan root), None if not a package file
    kind: str  # "file" | "external" | "unresolved" | "absolute" (a path outside the scan, never read)
    root: int = -1  # index of the root it was found in (-1: next to the includer or not found;
    # -2: by a unique file name in the package, i.e. a directory the JIT adds per module)


class IncludeResolver:
    """Resolution of `#include`s against a list of roots. Resolving can add a root (a package's
    own copy of a header tree, `_suffix_root`), so each TU is walked with its own resolver
    (`for_tu`): what one TU's walk added must not change how another TU resolves, or a TU's
    analysis would depend on which were analysed before it. Resolvers derived from one share
    the file indexes and a cache keyed by their current roots."""

    def __init__(self, reader: Reader, roots: Iterable[IncludeRoot | str], files: Iterable[str] | None = None):
        self.reader = reader
        self.roots: list[IncludeRoot] = [as_root(r) for r in roots]
        self._files = list(files) if files is not None else None
        # file indexes (built on first use) and {roots: {include: Resolution}}, shared when derived
        self._shared: dict = {"suffix": None, "by_name": None, "caches": {}, "package": {}}
        self._set_cache()

    def _set_cache(self) -> None:
        self._cache: dict[tuple, Resolution] = self._shared["caches"].setdefault(
            tuple((r.path, r.vendored, r.origin, r.alias) for r in self.roots), {})

    def with_extra_roots(self, extra: Iterable["IncludeRoot | str"]) -> "IncludeResolver":
        """A resolver that searches `extra` first (a JIT module's extra include paths), then this
        one's roots; roots it adds are its own. It shares this one's reader and indexes."""
        r = IncludeResolver.__new__(IncludeResolver)
        r.reader, r._files, r._shared = self.reader, self._files, self._shared
        r.roots = [as_root(x) for x in extra] + self.roots
        r._set_cache()
        return r

    def for_tu(self, extra: Iterable["IncludeRoot | str"] | None = None) -> "IncludeResolver":
        """The resolver one TU's walk uses (with a JIT module's extra include paths first)."""
        return self.with_extra_roots(extra or ())

    def add_root(self, root: IncludeRoot) -> None:
        if all(r.path != root.path for r in self.roots):
            self.roots.append(root)
            self._set_cache()

    def resolve(self, spelled: str, angled: bool, includer: str, after_root: int | None = None) -> Resolution:
        """Resolve one `#include` (after_root: for `#include_next`, continue after that root)."""
        # a quoted name is looked up beside its includer first; either kind only on the search
        # path of the includer's package
        key = (spelled, angled, posixpath.dirname(includer) if not angled else self._package(includer), after_root)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        cache = self._cache  # resolving may add a root: the answer belongs to the roots before
        res = self._resolve(spelled, angled, includer, after_root)
        cache[key] = res
        return res

    def _resolve(self, spelled: str, angled: bool, includer: str, after_root: int | None) -> Resolution:
        spelled = spelled.strip()
        if not spelled:
            return Resolution(spelled, angled, None, "unresolved")
        if spelled.startswith("/"):
            return Resolution(spelled, angled, None, "absolute")
        if not angled and after_root is None:
            for i, root in enumerate(self.roots):
                if root.alias and root.alias == spelled:
                    return Resolution(spelled, angled, root.path, "file", i)
            cand = join(posixpath.dirname(includer), spelled)
            if not cand.startswith("..") and self.reader.exists(cand):
                return Resolution(spelled, angled, cand, "file")
        start = 0 if after_root is None else after_root + 1
        for i in range(start, len(self.roots)):
            if self.roots[i].alias or not self._applies(self.roots[i], includer):
                continue
            cand = join(self.roots[i].path, spelled)
            if not cand.startswith("..") and self.reader.exists(cand):
                return Resolution(spelled, angled, cand, "file", i)
        # a directory of the package that ships the header (CCCL's cub/, thrust/) wins over the
        # toolkit's copy, as the JIT's -I order makes it
        root = self._suffix_root(spelled, includer)
        if root is not None:
            self.add_root(root)
            return Resolution(spelled, angled, join(root.path, spelled), "file", len(self.roots) - 1)
        if is_external_header(spelled):
            return Resolution(spelled, angled, None, "external")
        if not angled:
            # A JIT often adds a module's own source directory with -I (flashinfer's
            # extra_include_paths): a quoted name that exactly one package file carries is that file.
            unique = self._unique_basename(spelled, includer)
            if unique is not None:
                return Resolution(spelled, angled, unique, "file", -2)
        return Resolution(spelled, angled, None, "unresolved")

    def _applies(self, root: IncludeRoot, includer: str) -> bool:
        """Whether a root found in the tree (not one the TU's build names) is on the includer's
        search path: a package's include directories serve that package's sources, never another
        package's (triton's bundled cuda_runtime_api.h is not what flashinfer's JIT compiles with)."""
        if root.origin in ("given", "cli"):
            return True
        own = self._package(root.path + "/_")
        return own is None or own == self._package(includer)

    def _package(self, path: str) -> str | None:
        """The outermost directory above `path` that is a Python package, cached per directory."""
        d = posixpath.dirname(path)
        memo = self._shared["package"]
        if d not in memo:
            memo[d] = package_dir_of(path, self.reader)
        return memo[d]

    def _unique_basename(self, spelled: str, includer: str) -> str | None:
        if self._files is None or "/" in spelled:
            return None
        by_name = self._shared["by_name"]
        if by_name is None:
            by_name = self._shared["by_name"] = {}
            for f in self._files:
                by_name.setdefault(posixpath.basename(f), []).append(f)
        # only within the includer's top-level package, so one package never borrows another's file
        top = includer.split("/")[0]
        cands = [f for f in by_name.get(spelled, ()) if f.split("/")[0] == top]
        return cands[0] if len(cands) == 1 else None

    def _suffix_root(self, spelled: str, includer: str) -> IncludeRoot | None:
        """The one directory D in the includer's package such that D/spelled exists
        (multi-component names only)."""
        if self._files is None or "/" not in spelled:
            return None
        index = self._shared["suffix"]
        if index is None:
            index = self._shared["suffix"] = {}
            for f in self._files:
                parts = f.split("/")
                if len(parts) >= 2:
                    index.setdefault("/".join(parts[-2:]), []).append(f)
        tail2 = "/".join(spelled.split("/")[-2:])
        roots = set()
        for f in index.get(tail2, ()):
            if f.endswith("/" + spelled):
                roots.add(f[: -len(spelled) - 1])
        own = self._package(includer)
        roots = {r for r in roots if self._package(r + "/_") in (None, own)}
        if len(roots) != 1:
            return None
        r = roots.pop()
        # judged against the roots of its own package only (see mark_vendored_by_package)
        mine = self._package(r + "/_")
        peers = [x.path for x in self.roots if self._package(x.path + "/_") == mine]
        return IncludeRoot(r, _looks_vendored(r, peers), "suffix")


# --- discovery -----------------------------------------------------------------------------------

_PATH_CHAIN = re.compile(r"(\b[A-Za-z_]\w*)((?:\s*/\s*[\"'][^\"'\n]+[\"'])+)")
_BASE_ASSIGN = re.compile(
    r"^([A-Za-z_]\w*)\s*(?::\s*[\w.\[\]]+\s*)?=\s*(?:pathlib\.)?Path\(\s*__file__\s*\)((?:\.parents\[\d+\]|\.parent\b|\.resolve\(\))*)",
    re.M,
)


def roots_from_python(py_relpath: str, source: str) -> list[str]:
    """Directories a Python module builds as `BASE / "a" / "b"` from `BASE = Path(__file__)...`.

    This reads flashinfer's jit/env.py (FLASHINFER_INCLUDE_DIR, CUTLASS_INCLUDE_DIRS, ...) as
    text. Only chains of string literals hanging off a base bound to this file's location are
    understood; anything else is ignored.
    """
    source = re.sub(r"(?m)^\s*#.*$", "", source)  # commented-out assignments are not paths
    bases: dict[str, str] = {}
    for m in _BASE_ASSIGN.finditer(source):
        ups = 0  # Path(__file__).parent is the file's directory: one step up from the file
        for pm in re.finditer(r"\.parent\b|\.parents\[(\d+)\]", m.group(2)):
            ups += 1 if pm.group(1) is None else int(pm.group(1)) + 1
        if ups == 0:
            continue
        d = py_relpath
        for _ in range(ups):
            d = posixpath.dirname(d)
        bases[m.group(1)] = d
    out = []
    for m in _PATH_CHAIN.finditer(source):
        base = bases.get(m.group(1))
        if base is None:
            continue
        parts = re.findall(r"[\"']([^\"'\n]+)[\"']", m.group(2))
        out.append(join(base, "/".join(parts)))
    return out


def mark_vendored(paths: list[str]) -> list[bool]:
    """Which roots belong to a bundled project (data/cutlass/include next to data/include).

    Layout rule, no names: the shallowest parent directory among the roots is the package's own
    source directory (flashinfer/data); roots directly in it (data/include, data/csrc) and roots
    nested inside those are the package's own; roots further down in a directory of their own
    (data/cutlass/include, data/cccl/cub) are vendored.
    """
    if not paths:
        return []
    parents = [posixpath.dirname(p) for p in paths]
    common = min(parents, key=lambda p: (p.count("/"), p))
    own = [p for p, par in zip(paths, parents) if par == common]
    out = []
    for p, par in zip(paths, parents):
        inside_own = any(p == o or p.startswith(o + "/") for o in own)
        out.append(not inside_own)
    return out


def _looks_vendored(root: str, all_roots: list[str]) -> bool:
    return mark_vendored(all_roots + [root])[-1]


def mark_vendored_by_package(paths: list[str], package_of) -> list[bool]:
    """mark_vendored within each Python package: package_of(root) names the package a root
    belongs to (None: in none). The layout rule compares a root with the other roots of the same
    package only; across packages, the shallowest include directory of another package (deep_ep/
    include beside flashinfer/data/include in one site-packages) would make every root of this
    one look bundled, and the atoms in its own headers would stop counting."""
    groups: dict = {}
    for i, p in enumerate(paths):
        groups.setdefault(package_of(p), []).append(i)
    out = [False] * len(paths)
    for idx in groups.values():
        for i, v in zip(idx, mark_vendored([paths[i] for i in idx])):
            out[i] = v
    return out


def discover_include_roots(files: Iterable[str], reader: Reader | None = None, within: str = "") -> list[IncludeRoot]:
    """Include roots of the package(s) under `within`, from the layout and the JIT's Python code.

    files: every file path (POSIX, relative to the scan root) of the tree; reader: to read the
    JIT's Python files. Order: roots the JIT names (its order), then directories named include/.
    """
    files = [f for f in files if not within or f == within or f.startswith(within.rstrip("/") + "/")]
    dirs: set[str] = set()
    for f in files:
        d = posixpath.dirname(f)
        while d and d not in dirs:
            dirs.add(d)
            d = posixpath.dirname(d)
    ordered: list[tuple[str, str]] = []
    if reader is not None:
        for f in files:
            if f.endswith(".py") and "/jit/" in "/" + f and posixpath.basename(f) in ("env.py", "cpp_ext.py", "core.py"):
                data = reader.read(f)
                if not data:
                    continue
                found = [r for r in roots_from_python(f, data.decode("utf-8", "replace")) if r in dirs]
                for r in found:
                    # A directory holding other named directories is a data dir, not an include root.
                    if any(o != r and o.startswith(r + "/") for o in found):
                        continue
                    if r not in {x for x, _ in ordered}:
                        ordered.append((r, "jit-env"))
    seen = {x for x, _ in ordered}
    for d in sorted(dirs):
        if posixpath.basename(d) == "include" and d not in seen:
            ordered.append((d, "layout"))
            seen.add(d)
    paths = [p for p, _ in ordered]
    if reader is not None:
        vendored = mark_vendored_by_package(paths, lambda p: package_dir_of(join(p, "_"), reader))
    else:
        vendored = mark_vendored(paths)
    return [IncludeRoot(p, v, origin) for (p, origin), v in zip(ordered, vendored)]


def package_dir_of(path: str, reader: Reader) -> str | None:
    """The outermost directory above `path` that is a Python package (has __init__.py)."""
    d = posixpath.dirname(path)
    best = None
    while d:
        if reader.exists(join(d, "__init__.py")):
            best = d
        d = posixpath.dirname(d)
    return best
