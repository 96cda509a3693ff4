"""Translation-unit analysis: for a `.cu` file and a compile target, what nvcc would compile and
whether the target can build and run it.

`CudaProject` holds the include roots, a byte reader and per-file caches of the
target-independent extraction (`features.FileFacts`), so another target or another TU costs
only the preprocessor walk and the set operations below.

How a TU is judged for a target (device pass):

1. The preprocessor walk (`preproc.Preprocessor`) gives every region of every reached file a
   state: YES, NO or MAYBE.
2. Reachability by name approximates C++ instantiation and device-code emission: starting from
   the TU's own code, non-template host/host-device functions and non-template kernels anywhere
   in the closure, every definition whose name is used by reached code is reached. This
   over-approximates (names collide, every specialisation of a template counts) but it keeps the
   many unused atoms of CuTe/CUTLASS headers out; nvcc itself emits only what is instantiated
   and reachable from kernels, and unguarded asm in unused code does not break a build. A class
   name (or the name of a function without parameters) reaches only the definitions C++ lookup
   can find from the namespace of the code using it (see _reach): an atom of another namespace
   with the same name is not taken for the one used.
3. Inline PTX and intrinsics in reached, active code that the target lacks are blocking
   ("fails"); CuTe/CUTLASS atoms and arch tags named by the package's own reached code that the
   target lacks, traps under arch conditions in the package's own reached code, kernels whose
   body is excluded or reduced to a trap/print for the target, and constant shared-memory
   requests over the target's limit are stubs ("stub": builds, does not work). Traps inside
   vendored libraries (CUTLASS, CCCL) are not counted: they guard every unsupported atom of the
   library and only the atoms the package names decide which are used.
4. Whatever depends on a MAYBE region, an unresolved include, or an asm template assembled from
   an unknown macro makes the prediction "unknown" with the reason, never a guess.
"""
from __future__ import annotations

import os
import posixpath
import re
import stat
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..callgraph.rules import jit_rules
from ..model import Diagnostic
from ..parsing.screen import binary_problem
from ..sources import MAX_FILE_BYTES
from ..targets import CompileTarget, registry
from . import features as F
from . import ruleset
from .includes import IncludeResolver, IncludeRoot, as_root, discover_include_roots as _discover
from .preproc import OP_UNDEF, ExprParser, Macro, PreprocResult, Preprocessor, Program, pass_macros, tokenize
from .template_view import render_view


@dataclass
class FeatureUse:
    path: str
    line: int
    feature: str  # rule id ("ptx.wgmma"), "smem.dynamic", "#error" ...
    kind: str  # "ptx" | "intrinsic" | "atom" | "smem" | "error"
    text: str
    supported_on: list[str]  # compile-target names
    certain: bool = True  # False: in a region whose condition could not be decided

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "feature": self.feature, "kind": self.kind,
                "text": self.text, "supported_on": list(self.supported_on), "certain": self.certain}


@dataclass
class StubSite:
    path: str
    line: int
    kind: str  # "__trap" | "asm-trap" | "CUTLASS_NOT_IMPLEMENTED" | "CUTE_INVALID_CONTROL_PATH" | "empty-kernel" | "atom" | "arch-tag" | "smem"
    text: str
    function: str = ""
    guard_line: int | None = None

    def to_json(self) -> dict[str, Any]:
        d = {"path": self.path, "line": self.line, "kind": self.kind, "text": self.text, "function": self.function}
        if self.guard_line is not None:
            d["guard_line"] = self.guard_line
        return d


@dataclass
class KernelStatus:
    name: str
    path: str
    line: int
    status: str  # "real" | "empty" | "trap" | "unknown"
    guard_line: int | None = None
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "line": self.line, "status": self.status,
                "guard_line": self.guard_line, "reason": self.reason}


@dataclass
class Guard:
    path: str
    line: int
    directive: str
    condition: str
    value: bool | None
    state: bool | None

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "directive": self.directive, "condition": self.condition,
                "value": self.value, "active": self.state}


@dataclass
class Export:
    function: str  # the C++ function behind the exported name
    line: int
    kernels: list[str] = field(default_factory=list)
    reached: list[str] = field(default_factory=list)  # every function/kernel name reached from it

    def to_json(self) -> dict[str, Any]:
        return {"function": self.function, "line": self.line, "kernels": list(self.kernels)}


# exported name -> C++ function, for the binding styles JIT modules use
_EXPORT_RES = (
    re.compile(r"\bTVM_FFI_DLL_EXPORT_TYPED_FUNC\s*\(\s*(\w+)\s*,\s*&?\s*([\w:]+)"),
    re.compile(r"\b(?:m|module)\s*\.\s*(?:def|impl)\s*\(\s*\"(\w+)\"\s*,\s*(?:torch::dispatch\s*\([^,]*,\s*)?&?\s*([\w:]+)"),
)


def _exports(text: str) -> dict[str, tuple[str, int]]:
    out: dict[str, tuple[str, int]] = {}
    for rx in _EXPORT_RES:
        for m in rx.finditer(text):
            out.setdefault(m.group(1), (m.group(2).split("::")[-1], text.count("\n", 0, m.start()) + 1))
    return out


@dataclass
class TuResult:
    file: str
    target: str
    prediction: str  # "builds" | "fails" | "stub" | "unknown"
    blocking: list[FeatureUse] = field(default_factory=list)
    stubs: list[StubSite] = field(default_factory=list)
    kernels: list[KernelStatus] = field(default_factory=list)
    features: list[FeatureUse] = field(default_factory=list)
    active_guards: list[Guard] = field(default_factory=list)
    reason: str = ""
    diagnostics: list[Diagnostic] = field(default_factory=list)
    closure: list[str] = field(default_factory=list)
    unknowns: list[str] = field(default_factory=list)  # every reason that could make it unknown
    # functions the TU exports to Python (TVM-FFI, pybind11, torch ops): exported name ->
    # (C++ function, line, kernels reached from it by name through the active code)
    exports: dict[str, Export] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "target": self.target,
            "prediction": self.prediction,
            "reason": self.reason,
            "blocking": [b.to_json() for b in self.blocking],
            "stubs": [s.to_json() for s in self.stubs],
            "kernels": [k.to_json() for k in self.kernels],
            "features": [f.to_json() for f in self.features],
            "active_guards": [g.to_json() for g in self.active_guards],
            "unknowns": list(self.unknowns),
            "diagnostics": [d.to_json() for d in self.diagnostics],
            "closure_size": len(self.closure),
            "exports": {k: v.to_json() for k, v in sorted(self.exports.items())},
        }


# Input problems that make any prediction for the TU meaningless: nvcc would reject the file or
# never finish, or we could not read it as source (see docs/architecture.md "Untrusted input").
INPUT_PROBLEMS = frozenset(("unbalanced-conditional", "include-cycle", "expansion-limit", "expression-depth",
                            "binary-file", "too-large", "not-a-file"))


class FsReader:
    """Reader over a directory (paths relative to it). Reads only regular files of bounded size
    (a symlink to /dev/zero or a FIFO must not hang the analysis); `problems` says why not."""

    def __init__(self, root: str):
        self.root = root
        self.problems: dict[str, tuple[str, str]] = {}  # rel -> (diagnostic kind, message)

    def _p(self, rel: str) -> str:
        return os.path.join(self.root, *rel.split("/")) if rel else self.root

    def read(self, rel: str) -> bytes | None:
        try:
            fd = os.open(self._p(rel), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            try:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode):
                    self.problems[rel] = ("not-a-file", f"{rel} is not a regular file; not read")
                    return None
                data = f.read(MAX_FILE_BYTES + 1)
            except OSError:
                return None
        if len(data) > MAX_FILE_BYTES:
            self.problems[rel] = ("too-large", f"{rel} exceeds the {MAX_FILE_BYTES} byte limit; not read")
            return None
        return data

    def exists(self, rel: str) -> bool:
        return os.path.isfile(self._p(rel))

    def files(self, under: str = "") -> list[str]:
        out = []
        base = self._p(under)
        for dp, dn, fn in os.walk(base):
            dn[:] = [d for d in dn if not d.startswith(".") and d != "__pycache__"]
            rel = os.path.relpath(dp, self.root).replace(os.sep, "/")
            rel = "" if rel == "." else rel
            for f in fn:
                out.append(f"{rel}/{f}" if rel else f)
        return out


class CudaProject:
    """One per scan: include roots, a reader, and caches of per-file facts."""

    def __init__(self, reader, include_roots: Iterable[IncludeRoot | str], defines: dict[str, str | int] | None = None,
                 files: Iterable[str] | None = None):
        self.reader = reader
        self.roots: list[IncludeRoot] = [as_root(r) for r in include_roots]
        self.defines = dict(defines or {})
        if files is None and hasattr(reader, "files"):
            try:
                files = reader.files()
            except TypeError:
                files = None
        self.resolver = IncludeResolver(reader, self.roots, files)
        self._facts: dict[str, F.FileFacts | None] = {}
        self._by_owner: dict[str, dict[int, list[tuple[int, frozenset]]]] = {}
        self._names: dict[str, dict[str, list[int]]] = {}
        self._scoping: dict[str, tuple[frozenset, frozenset]] = {}  # path -> (#undef'd names, namespace names)
        self._eval_cache: dict = {}  # #if text -> [(macro lookups, result)], shared by all walks
        self.problems: dict[str, tuple[str, str]] = {}  # path -> (kind, message): read but not source
        # jinja templates (a JIT generator renders them into sources): read through template_view,
        # with what the view cannot stand for (line, message)
        self.view_notes: dict[str, list[tuple[int, str]]] = {}
        # sources a JIT generator writes from text built in Python (callgraph.jit.written_text_path):
        # no file of the scan, read from here
        self.written: dict[str, bytes] = {}

    # -- roots
    @classmethod
    def discover_include_roots(cls, files: Iterable[str], reader=None, within: str = "") -> list[IncludeRoot]:
        return _discover(files, reader, within)

    def is_vendored(self, path: str, resolver=None) -> bool:
        """Is path in a bundled third-party tree, by the roots of `resolver` (a TU's; default
        the project's)?"""
        best = None
        for r in (resolver or self.resolver).roots:
            if r.path and (path == r.path or path.startswith(r.path + "/")):
                if best is None or len(r.path) > len(best.path):
                    best = r
        return bool(best and best.vendored)

    # -- per-file facts
    def read(self, path: str) -> bytes | None:
        """A file's bytes as the compiler would see them: a jinja template as its rendered view."""
        if path in self.written:
            return self.written[path]
        data = self.reader.read(path)
        if data is not None and path.endswith(_template_suffixes()):
            data, self.view_notes[path] = render_view(data)
        return data

    def facts(self, path: str) -> F.FileFacts | None:
        if path in self._facts:
            return self._facts[path]
        data = self.read(path)
        ff = None
        if data is not None:
            why = binary_problem(data)
            if why is None:
                ff = F.extract(path, data)
            else:
                self.problems[path] = ("binary-file", f"{path}: {why}; not C/C++ source")
        self._facts[path] = ff
        return ff

    def problem(self, path: str) -> tuple[str, str] | None:
        """Why a file could not be analysed, if it was read or refused for a known reason."""
        return self.problems.get(path) or getattr(self.reader, "problems", {}).get(path)

    def set_facts(self, ff: F.FileFacts) -> None:
        """Install facts from an external cache (e.g. on disk by content hash)."""
        self._facts[ff.path] = ff

    def program(self, path: str) -> Program | None:
        ff = self.facts(path)
        return ff.program if ff is not None else None

    def _owner_tokens(self, ff: F.FileFacts) -> dict[int, list[tuple[int, frozenset]]]:
        got = self._by_owner.get(ff.path)
        if got is None:
            got = {}
            for (idx, rid), toks in ff.tokens.items():
                if toks:
                    got.setdefault(idx, []).append((rid, toks))
            self._by_owner[ff.path] = got
        return got

    def _file_scoping(self, ff: F.FileFacts) -> tuple[frozenset, frozenset]:
        """The names a file #undefs and the names of the namespaces it writes (for _scopes)."""
        got = self._scoping.get(ff.path)
        if got is None:
            got = (frozenset(op[2] for op in ff.program.ops if op[0] == OP_UNDEF),
                   frozenset(c for o in ff.owners if o.ns for c in o.ns.split("::")))
            self._scoping[ff.path] = got
        return got

    def _owner_names(self, ff: F.FileFacts) -> dict[str, list[int]]:
        got = self._names.get(ff.path)
        if got is None:
            got = ff.owner_names()
            self._names[ff.path] = got
        return got

    # -- preprocessing
    def preprocess(self, relpath: str, target: CompileTarget | None, extra_include_roots=None,
                   extra_defines: dict[str, str | int] | None = None) -> tuple[PreprocResult, Preprocessor]:
        """The preprocessor walk of one TU: device pass for `target`, host pass for None."""
        pre, fn, arch = pass_macros(target)
        resolver = self.resolver.for_tu(extra_include_roots)
        defines = {**self.defines, **extra_defines} if extra_defines else self.defines
        pp = Preprocessor(resolver, self.program, pre, fn, defines,
                          target.name if target is not None else "host", arch, self._eval_cache)
        return pp.run(relpath), pp

    # -- analysis
    def analyse_tu(self, relpath: str, target: CompileTarget, extra_include_roots=None,
                   extra_defines: dict[str, str | int] | None = None, text: str | None = None) -> TuResult:
        """Judge one TU for one compile target. extra_include_roots / extra_defines: what a JIT
        module adds for this source (flashinfer's extra_include_paths, -D flags); text: the
        source's text when a generator builds it in Python (relpath then names that text)."""
        relpath = posixpath.normpath(relpath)
        if text is not None:
            self.written[relpath] = text.encode("utf-8", "surrogateescape")
        if self.facts(relpath) is None:
            kind, msg = self.problem(relpath) or ("unreadable", f"cannot read {relpath}")
            return TuResult(relpath, target.name, "unknown", reason=msg,
                            diagnostics=[Diagnostic(relpath, kind, msg, severity="error")])
        pr, pp = self.preprocess(relpath, target, extra_include_roots, extra_defines)
        res = _judge(self, relpath, target, pr, pp)
        notes = [f"{p}:{line}: {msg}" for p in res.closure for line, msg in self.view_notes.get(p, ())]
        if notes:
            # template text given at render time may insert or change code: a build or a stub is
            # not shown; an instruction the target lacks in the template's certain code still is
            res.unknowns.extend(notes)
            if res.prediction in ("builds", "stub"):
                res.prediction, res.reason = "unknown", notes[0]
        # an included file that is binary or too large: say why, not only "cannot read"
        for d in list(res.diagnostics):
            if d.kind == "unreadable" and self.problem(d.path):
                kind, msg = self.problem(d.path)
                res.diagnostics.append(Diagnostic(d.path, kind, msg, d.line))
        problems = [d for d in res.diagnostics if d.kind in INPUT_PROBLEMS]
        if problems:
            # nvcc would reject or never finish this TU: no architecture verdict stands
            d = problems[0]
            res.prediction = "unknown"
            res.reason = f"{d.kind} at {d.path}" + (f":{d.line}" if d.line else "") + f": {d.message}"
            res.unknowns.insert(0, res.reason)
        return res


def _template_suffixes() -> tuple[str, ...]:
    return jit_rules().template_suffixes


# --- judging -----------------------------------------------------------------------------------


def _kernel_macro(words, macros: dict[str, Macro]) -> bool:
    for w in words:
        m = macros.get(w)
        if m is not None and "__global__" in m.text:
            return True
    return False


@dataclass
class _Scopes:
    """What name lookup across namespaces may rely on in one TU (see _reach)."""

    loose: set[str]  # files whose namespaces as written may not be the real ones
    opened: set[str]  # last names of namespaces named by a using-directive/-declaration or an alias
    macros: set[str]  # every name #defined in the TU (a qualifier that is one may name any namespace)


def _scopes(proj: CudaProject, pr: PreprocResult, facts: dict[str, F.FileFacts]) -> _Scopes:
    """A file's namespaces are taken as written unless a macro may open or close one (its body
    holds `namespace` or unbalanced braces, and the file names it), a namespace is named by a
    macro or could not be read, or the file is included inside a namespace, class or function
    (or by such a file)."""
    # the macros of the TU: defined at its end, or #undef'd on the way (defined for a while)
    defined: set[str] = set(pr.macros)
    macro_words: dict[str, set] = {}
    opened: set[str] = set()
    for ff in facts.values():
        for name, words in ff.program.define_idents.items():
            macro_words.setdefault(name, set()).update(words)
        defined |= proj._file_scoping(ff)[0]
        opened |= ff.opened
    ns_macros = {n for n, w in macro_words.items() if "namespace" in w and n in defined}
    ns_macros |= {n for n, m in pr.macros.items() if m.text.count("{") != m.text.count("}")}
    grown = True
    while grown:  # a macro that expands to one of those (`#define MY_BEGIN CUB_NAMESPACE_BEGIN`)
        more = {n for n, w in macro_words.items() if n in defined and n not in ns_macros and not ns_macros.isdisjoint(w)}
        ns_macros |= more
        grown = bool(more)
    by_macro = {path for path, ff in facts.items() if any(not ns_macros.isdisjoint(t) for t in ff.tokens.values())}
    loose = set(by_macro)
    for path, ff in facts.items():
        parts = proj._file_scoping(ff)[1]
        if "?" in parts or not parts.isdisjoint(defined):
            loose.add(path)
    # what an #include in a scope brings in is loose, and so is every file that one brings in or
    # that a file whose scopes macros may open does (its #includes may be inside them)
    edges = [(r.path, r.line, r.resolution.path) for r in pr.includes if r.resolution.path in facts]
    inside = set(by_macro)
    changed = True
    while changed:
        changed = False
        for src, line, dst in edges:
            if dst not in inside and (src in inside or line in facts[src].scoped_includes):
                inside.add(dst)
                changed = True
    return _Scopes(loose | inside, opened, defined)


def _reach(proj: CudaProject, relpath: str, pr: PreprocResult, facts: dict[str, F.FileFacts],
           only_from: frozenset[str] | None = None, scopes: _Scopes | None = None) -> set[tuple[str, int]]:
    """(path, top-level owner) pairs reached by name from the TU's roots (see module doc).
    only_from: start from the functions of these names instead (an exported entry point).

    A class or alias name used by reached code reaches the definitions of that name that C++
    lookup may find from where it is used: in the using code's namespace or an enclosing one, in
    the namespace the using code qualifies that name with (`deep_gemm::X`; a qualifier that is a
    macro may be any), or in one opened anywhere by a using-directive, a using-declaration or an
    alias. So does the name of a function without parameters (`warpgroup_arrive()`: a call
    without arguments has no argument-dependent lookup). Other function names reach every
    definition (argument-dependent lookup finds functions in the namespaces of the arguments'
    types), and so do names used outside top-level definitions, names from macro bodies, and
    names used in or defined in files whose namespaces are not known (_scopes)."""
    scopes = scopes or _scopes(proj, pr, facts)
    name_index, roots, seeds = _name_index(proj, relpath, pr, facts, scopes, only_from)
    return _walk_names(proj, relpath, pr, facts, scopes, name_index, roots, seeds)


def _lookup_scope(scopes: _Scopes, path: str, o: F.OwnerFacts) -> tuple[str, str, str] | None:
    """The namespace a definition's name is looked up in (ns, "ns::", its last part), or None
    when it is found from anywhere."""
    if not o.ns or path in scopes.loose:
        return None
    last = o.ns.rsplit("::", 1)[-1]
    if last in scopes.opened or last in F.STOP_WORDS:  # STOP_WORDS words are not kept as tokens
        return None
    return o.ns, o.ns + "::", last


def _name_index(proj: CudaProject, relpath: str, pr: PreprocResult, facts: dict[str, F.FileFacts],
                scopes: _Scopes, only_from: frozenset[str] | None):
    """For _reach: every active definition by name (with where it is looked up), the roots (the
    TU's non-template host functions and kernels, or the functions named in only_from) and the
    names each owner of the TU's own file uses (-1: outside every owner)."""
    # name -> [((path, owner), namespace it is looked up in or None when found from anywhere)]
    name_index: dict[str, list[tuple[tuple[str, int], tuple[str, str, str] | None]]] = {}
    roots: list[tuple[str, int]] = []
    seeds: dict[int, set[str]] = {}
    for path, ff in facts.items():
        states = pr.states[path]
        for name, idxs in proj._owner_names(ff).items():
            for i in idxs:
                o = ff.owners[i]
                if states[o.region] is False:
                    continue
                # an out-of-line definition (A::f) is in A's scope, not where written
                ns = _lookup_scope(scopes, path, o) if not o.qual and (o.kind != "func" or o.nullary) else None
                name_index.setdefault(name, []).append(((path, i), ns))
                if o.qual:  # out-of-line member definition: reached with its class
                    name_index.setdefault(o.qual.split("::")[-1], []).append(((path, i), None))
                if only_from is not None:
                    if name in only_from and path == relpath:
                        roots.append((path, i))
                elif not o.template and o.kind == "func" and (not o.device_only or o.kernel):
                    roots.append((path, i))
        if path == relpath and only_from is None:
            for (idx, rid), toks in ff.tokens.items():
                if states[rid] is False:
                    continue
                if idx >= 0 and ff.owners[idx].template:
                    continue  # a template in the TU itself is instantiated only if used
                if idx >= 0 and ff.owners[idx].device_only and not ff.owners[idx].template:
                    continue  # non-template __device__ code is emitted only if called
                seeds.setdefault(idx, set()).update(toks)
    return name_index, roots, seeds


def _walk_names(proj: CudaProject, relpath: str, pr: PreprocResult, facts: dict[str, F.FileFacts],
                scopes: _Scopes, name_index: dict, roots: list[tuple[str, int]],
                seeds: dict[int, set[str]]) -> set[tuple[str, int]]:
    """For _reach: the owners reached from the roots and seeds, name by name."""
    macro_idents: dict[str, set] = {}
    for ff in facts.values():
        for name, words in ff.program.define_idents.items():
            macro_idents.setdefault(name, set()).update(words)
    reached: set[tuple[str, int]] = set()
    stack = list(roots)
    done: set[str] = set()  # names whose every definition is on the stack or reached
    expanded: set[str] = set()  # macros whose body's names were taken
    anywhere: set[str] = set()  # names to take as used from every namespace

    def take(names: set[str], ns: str | None, quals: frozenset = frozenset()) -> None:
        """Names used by code in namespace ns (None: from anywhere) that writes these qualified
        names ("q::name")."""
        if ns is not None and quals and any(q.split("::", 1)[0] in scopes.macros for q in quals):
            ns = None
        for name in names - done:
            mw = macro_idents.get(name)
            if mw and name not in expanded:
                expanded.add(name)
                anywhere.update(mw)
            waiting = False
            for key, at in name_index.get(name, ()):
                if key in reached:
                    continue
                if at is not None and ns is not None and not (
                        ns == at[0] or ns.startswith(at[1]) or f"{at[2]}::{name}" in quals):
                    waiting = True  # not found from here; maybe from other code
                    continue
                stack.append(key)
            if not waiting:
                done.add(name)

    own = facts.get(relpath)
    for idx, names in seeds.items():
        if idx < 0 or relpath in scopes.loose:
            take(names, None)
        else:
            take(names, own.owners[idx].ns, own.quals.get(idx, frozenset()))
    while stack or anywhere:
        if not stack:
            got = anywhere - done
            anywhere.clear()
            take(got, None)
            continue
        key = stack.pop()
        if key in reached:
            continue
        reached.add(key)
        path, idx = key
        ff = facts[path]
        states = pr.states[path]
        names: set[str] = set()
        for rid, toks in proj._owner_tokens(ff).get(idx, ()):
            if states[rid] is not False:
                names |= toks
        if path in scopes.loose:
            take(names, None)
        else:
            take(names, ff.owners[idx].ns, ff.quals.get(idx, frozenset()))
    return reached


def _expanded_macros(proj: CudaProject, relpath: str, pr: PreprocResult, facts: dict[str, F.FileFacts],
                     reached: set[tuple[str, int]]) -> set[str]:
    """Names used by the TU's reached code (its own top-level code and the reached definitions,
    in regions not excluded), closed over the macro bodies they name: the macros it expands."""
    names: set[str] = set()
    for path, ff in facts.items():
        states = pr.states[path]
        for (idx, rid), toks in ff.tokens.items():
            if states[rid] is not False and ((path, idx) in reached or (path == relpath and idx < 0)):
                names |= toks
    bodies: dict[str, set] = {}
    for ff in facts.values():
        for name, words in ff.program.define_idents.items():
            bodies.setdefault(name, set()).update(words)
    todo = [n for n in names if n in bodies]
    while todo:
        for w in bodies.pop(todo.pop(), ()):
            if w not in names:
                names.add(w)
                if w in bodies:
                    todo.append(w)
    return names


def _region_guard_line(ff: F.FileFacts, pr: PreprocResult, rid: int) -> int | None:
    """Line of the outermost directive, in rid's chain, whose region is not YES."""
    prog = ff.program
    states = pr.states[ff.path]
    line = None
    r = rid
    while r > 0:
        if states[r] is not True:
            line = prog.region_line[r]
        r = prog.region_parent[r]
    return line


def _asm_text(pieces, macros: dict[str, Macro], depth: int = 0) -> tuple[str, list[tuple[int, int]]] | None:
    """Concatenate an asm template, expanding object-like macros whose bodies are string literals."""
    parts: list[str] = []
    marks: list[tuple[int, int]] = []
    off = 0
    for kind, val, line in pieces:
        if kind == "s":
            marks.append((off, line))
            parts.append(val)
            off += len(val)
            continue
        m = macros.get(val)
        if m is None or m.params is not None or not m.certain or depth > 8:
            return None
        sub = []
        for t in tokenize(m.text):
            if isinstance(t, str) and t.startswith('"'):
                sub.append(("s", F.cpp.string_value(t), line))
            elif isinstance(t, str) and (t[0].isalpha() or t[0] == "_"):
                sub.append(("m", t, line))
            else:
                return None
        got = _asm_text(sub, macros, depth + 1)
        if got is None:
            return None
        marks.append((off, line))
        parts.append(got[0])
        off += len(got[0])
    return "".join(parts), marks


def smem_limit(kind: str, target: CompileTarget) -> int:
    """Bytes of shared memory a block may use on `target`: a dynamic request up to the GPU's opt-in
    limit; a static array up to that limit on an `a` target and up to the portable static limit on
    plain and `f` targets, where ptxas rejects more (rules/targets.toml)."""
    reg = registry()
    g = reg.by_name.get(target.gpu_name)
    if g is None:
        return 0
    if kind == "static" and target.variant != "a":
        return reg.static_smem_kib * 1024
    return g.smem_per_block_kib * 1024


def _supported_smem(kind: str, nbytes: int) -> list[str]:
    return [t.name for t in ruleset.all_compile_targets() if smem_limit(kind, t) >= nbytes]


_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")
_INT_TYPE = r"(?:(?:static|const|inline)\s+)*(?:(?:unsigned|signed|long|short)\s+)*(?:int|int32_t|int64_t|uint32_t|uint64_t|size_t|long|unsigned|auto)?"


def _size_value(pp: Preprocessor, data: bytes, expr: str, depth: int = 0) -> int | None:
    """A shared-memory size: `expr` evaluated by the preprocessor, its identifiers that are no
    macro replaced by the value of the file's integer `constexpr` of that name (each definition of
    the name must give the same value); None when anything is left unknown."""
    names = [n for n in dict.fromkeys(_IDENT.findall(expr)) if n not in pp.macros]
    if not names:
        return _eval_int(pp, expr)
    if depth >= 6:
        return None
    text = data.decode("latin-1")
    for n in names:
        defs = re.findall(rf"\bconstexpr\s+{_INT_TYPE}\s*\b{re.escape(n)}\s*=\s*([^;{{}}]+);", text)
        vals = {_size_value(pp, data, d, depth + 1) for d in defs}
        if len(vals) != 1 or None in vals:
            return None  # a run-time value, or a name defined with different values
        expr = re.sub(rf"\b{re.escape(n)}\b", f"({vals.pop()})", expr)
    return _eval_int(pp, expr)


def _eval_int(pp: Preprocessor, expr: str) -> int | None:
    toks = pp.expand_untracked(tokenize(expr))
    if toks is None:
        return None
    p = ExprParser(toks)
    v = p.parse()
    return v if p.ok and isinstance(v, int) else None


def _judge(proj: CudaProject, relpath: str, target: CompileTarget, pr: PreprocResult, pp: Preprocessor) -> TuResult:
    j = _TuJudge(proj, relpath, target, pr, pp)
    for path, ff in j.facts.items():
        j.file_features(path, ff)
    j.errors()
    j.stub_callers()
    j.exports()
    j.order_evidence()
    j.guards()
    j.res.unknowns = j.unknowns()
    j.predict()
    return j.res


class _TuJudge:
    """One translation unit judged for one compile target: the features its reached, active code
    needs, its kernels and entry points, and from them the prediction (TuResult)."""

    def __init__(self, proj: CudaProject, relpath: str, target: CompileTarget, pr: PreprocResult, pp: Preprocessor):
        self.proj, self.relpath, self.target, self.pr, self.pp = proj, relpath, target, pr, pp
        self.rules = F.rules_by_id()
        facts = {p: proj.facts(p) for p in pr.files}
        self.facts = {p: ff for p, ff in facts.items() if ff is not None}
        self.order = {p: i for i, p in enumerate(pr.files)}
        self.scopes = _scopes(proj, pr, self.facts)
        self.reached = _reach(proj, relpath, pr, self.facts, scopes=self.scopes)
        self.res = TuResult(relpath, target.name, "builds", diagnostics=list(pr.diagnostics), closure=list(pr.files))
        self.maybe_blocking: list[FeatureUse] = []
        self.expanded: set[str] | None = None  # macros reached code uses (lazily: few files define atoms in macros)

    def is_reached(self, path: str, top: int) -> bool:
        return (path, top) in self.reached or (path == self.relpath and top < 0)

    def atom_reached(self, path: str, h: F.IdentHit) -> bool:
        if not h.macro:
            return self.is_reached(path, h.top)
        if self.expanded is None:
            self.expanded = _expanded_macros(self.proj, self.relpath, self.pr, self.facts, self.reached)
        return h.macro in self.expanded

    def add_feature(self, fu: FeatureUse, supported: bool, state) -> None:
        self.res.features.append(fu)
        if supported:
            return
        if state is True:
            self.res.blocking.append(fu)
        else:
            fu.certain = False
            self.maybe_blocking.append(fu)

    def file_features(self, path: str, ff: F.FileFacts) -> None:
        """What one file of the closure contributes: inline PTX, intrinsics and atoms, traps,
        shared memory, kernels."""
        states = self.pr.states[path]
        vendored = self.proj.is_vendored(path, self.pp.resolver)
        self.asm(path, ff, states)
        self.idents(path, ff, states, vendored)
        if not vendored:
            self.traps(path, ff, states)
        self.smem(path, ff, states)
        self.kernels(path, ff, states, vendored)

    def asm(self, path: str, ff: F.FileFacts, states) -> None:
        for a in ff.asm:
            st = states[a.region]
            if st is False or not self.is_reached(path, a.top):
                continue
            hits = list(a.hits)
            if any(k == "m" for k, _, _ in a.pieces):
                got = _asm_text(a.pieces, self.pr.macros)
                if got is None:
                    names = [v for k, v, _ in a.pieces if k == "m"]
                    msg = f"asm template at {path}:{a.line} uses macro(s) {', '.join(names)} that are not string literals here"
                    self.res.diagnostics.append(Diagnostic(path, "asm-macro", msg, a.line, "note"))
                    continue
                text, marks = got
                hits = [(rid, F.line_at(marks, off, a.line), mt) for rid, off, mt in F.ptx_hits(text)]
            for rule_id, line, matched in hits:
                r = self.rules.get(rule_id)
                if r is None:
                    continue
                self.add_feature(FeatureUse(path, line, r.id, r.kind, matched, sorted(r.supported_on)),
                                 r.supports(self.target), st)

    def idents(self, path: str, ff: F.FileFacts, states, vendored: bool) -> None:
        """Intrinsics and atoms."""
        res = self.res
        for h in ff.idents:
            st = states[h.region]
            if st is False:
                continue
            r = self.rules.get(h.rule)
            if r is None:
                continue
            if r.kind == "atom":
                # atoms count where the package's own reached code names them (or expands a macro
                # of the package naming them)
                if vendored or not self.atom_reached(path, h):
                    continue
                fu = FeatureUse(path, h.line, r.id, r.kind, h.text, sorted(r.supported_on))
                res.features.append(fu)
                if not r.supports(self.target):
                    if st is True:
                        res.blocking.append(fu)
                        res.stubs.append(StubSite(path, h.line, "arch-tag" if r.selection_tag else "atom", h.text,
                                                  _owner_name(ff, h.top)))
                    else:
                        fu.certain = False
                        self.maybe_blocking.append(fu)
                continue
            if not self.is_reached(path, h.top):
                continue
            self.add_feature(FeatureUse(path, h.line, r.id, r.kind, h.text, sorted(r.supported_on)),
                             r.supports(self.target), st)

    def traps(self, path: str, ff: F.FileFacts, states) -> None:
        """Traps under arch conditions in the package's own reached code."""
        for t in ff.traps:
            st = states[t.region]
            if st is not True or not self.pr.region_tainted(path, t.region) or not self.is_reached(path, t.top):
                continue
            self.res.stubs.append(StubSite(path, t.line, t.kind, t.text, _owner_name(ff, t.top),
                                           ff.program.region_line[t.region] or None))

    def smem(self, path: str, ff: F.FileFacts, states) -> None:
        """Shared memory over the target's limit per block (smem_limit)."""
        for sm in ff.smem:
            st = states[sm.region]
            if st is False or not (self.is_reached(path, sm.top)):
                continue
            v = _size_value(self.pp, self.proj.read(path) or b"", sm.expr)
            if v is None:
                continue
            nbytes = v * sm.elem_bytes
            limit = smem_limit(sm.kind, self.target)
            fu = FeatureUse(path, sm.line, f"smem.{sm.kind}", "smem", f"{sm.text} = {nbytes} bytes",
                            _supported_smem(sm.kind, nbytes), st is True)
            if limit and nbytes > limit:
                self.res.features.append(fu)
                if st is True:
                    self.res.blocking.append(fu)
                    if sm.kind == "dynamic":
                        # the build succeeds; the request fails when the kernel is configured
                        self.res.stubs.append(StubSite(path, sm.line, "smem", f"{nbytes} bytes requested, {limit} the "
                                                       f"most per block: {sm.text}", _owner_name(ff, sm.top)))
                else:
                    self.maybe_blocking.append(fu)

    def kernels(self, path: str, ff: F.FileFacts, states, vendored: bool) -> None:
        for k in ff.kernels:
            o = ff.owners[k.owner]
            if states[o.region] is False:
                continue
            if not (o.kernel or _kernel_macro(k.head_words, self.pr.macros)):
                continue
            emitted = (not k.template) or self.is_reached(path, k.top)
            if not emitted or vendored:
                continue
            self.res.kernels.append(_kernel_status(ff, self.pr, k, path))

    def errors(self) -> None:
        """#error directives reached. One under an undecided condition that does not depend on the
        architecture is an environment question (host compiler, toolkit version): noted, not judged."""
        res = self.res
        for path, line, text, st, tainted in self.pr.errors:
            fu = FeatureUse(path, line, "#error", "error", f"#error {text}"[:200], [], st is True)
            if st is True and not tainted:
                # fires whatever the target: the build needs a define this analysis was not given
                # (sglang's load_jit injects -DSGL_CUDA_ARCH), not an instruction the GPU lacks
                res.features.append(fu)
                self.maybe_blocking.append(fu)
                fu.certain = False
                res.diagnostics.append(Diagnostic(path, "error-not-arch", f"#error that does not depend on the "
                                                  f"architecture is active: {text[:120]}", line, "note"))
            elif st is True:
                res.features.append(fu)
                res.blocking.append(fu)
            elif tainted:
                res.features.append(fu)
                self.maybe_blocking.append(fu)
            else:
                res.diagnostics.append(Diagnostic(path, "maybe-error", f"#error under an undecided non-architecture "
                                                  f"condition: {text[:120]}", line, "note"))

    def stub_callers(self) -> None:
        """A kernel whose own code is real but that calls a function that stops at run time (a CuTe
        atom on the wrong target, CUTLASS_NOT_IMPLEMENTED, a trap) is a stub too."""
        res = self.res
        stub_fns = {st.function: st for st in res.stubs
                    if st.function and st.kind not in ("empty-kernel", "trap-kernel")}
        if not stub_fns:
            return
        for i, k in enumerate(res.kernels):
            if k.status != "real":
                continue
            got = _reach(self.proj, self.relpath, self.pr, self.facts, only_from=frozenset({k.name}), scopes=self.scopes)
            hit = sorted(({self.facts[p].owners[j].name for p, j in got} & set(stub_fns)) - {k.name})
            if hit:
                st = stub_fns[hit[0]]
                res.kernels[i] = KernelStatus(k.name, k.path, k.line, "trap", st.guard_line,
                                              f"calls {hit[0]}, which stops at run time on {self.target.name}: "
                                              f"{st.kind} at {st.path}:{st.line}")

    def exports(self) -> None:
        """Entry points: which kernels each exported function reaches."""
        own = self.proj.read(self.relpath) or b""
        kernel_names = {k.name for k in self.res.kernels}
        for name, (fn, line) in _exports(own.decode("utf-8", "replace")).items():
            got = _reach(self.proj, self.relpath, self.pr, self.facts, only_from=frozenset({fn}), scopes=self.scopes)
            names = {self.facts[p].owners[i].name for p, i in got}
            self.res.exports[name] = Export(fn, line, sorted(names & kernel_names), sorted(names))

    def order_evidence(self) -> None:
        """The TU's own file first, then the closure's order; stub kernels join the stubs last."""
        res, order, relpath = self.res, self.order, self.relpath
        key = lambda f: (0 if f.path == relpath else 1, order.get(f.path, 1 << 30), f.line)
        res.blocking.sort(key=key)
        # concrete evidence first: an ArchTag only says what a kernel was written for
        res.stubs.sort(key=lambda s: (s.kind == "arch-tag", 0 if s.path == relpath else 1, order.get(s.path, 1 << 30), s.line))
        self.maybe_blocking.sort(key=key)
        for k in res.kernels:
            if k.status in ("empty", "trap"):
                res.stubs.append(StubSite(k.path, k.line, "empty-kernel" if k.status == "empty" else "trap-kernel",
                                          f"{k.name}: {k.reason}", k.name, k.guard_line))

    def guards(self) -> None:
        """Arch conditions of the TU's own file, and those above reported evidence."""
        res = self.res
        seen = set()
        ev_paths = {self.relpath} | {b.path for b in res.blocking} | {s.path for s in res.stubs}
        for c in self.pr.conds:
            if c.tainted and c.path in ev_paths and (c.path, c.line) not in seen:
                seen.add((c.path, c.line))
                res.active_guards.append(Guard(c.path, c.line, c.directive, c.text, c.value, c.state))

    def unknowns(self) -> list[str]:
        """Why the prediction could be unknown, first reason first."""
        res = self.res
        unknowns: list[str] = []
        env_errors = {(d.path, d.line) for d in res.diagnostics if d.kind == "error-not-arch"}
        for fu in self.maybe_blocking:
            if (fu.path, fu.line) in env_errors:
                unknowns.append(f"{fu.text[:120]} at {fu.path}:{fu.line} fires on every target: the build needs a "
                                "define or flag this analysis was not given")
            else:
                unknowns.append(f"{fu.feature} at {fu.path}:{fu.line} is under a condition that could not be decided")
        for spelled in dict.fromkeys(self.pr.unresolved_seen):
            unknowns.append(f"cannot resolve #include {spelled!r}")
        for d in res.diagnostics:
            if d.kind == "asm-macro" and not self.proj.is_vendored(d.path, self.pp.resolver):
                unknowns.append(d.message)
        for k in res.kernels:
            if k.status == "unknown":
                unknowns.append(f"kernel {k.name} at {k.path}:{k.line}: {k.reason}")
        return unknowns

    def predict(self) -> None:
        """fails (first missing feature), unknown, stub or builds, with the reason."""
        res, target, unknowns = self.res, self.target, self.res.unknowns
        real_blocking = [b for b in res.blocking if b.kind in ("ptx", "intrinsic", "error") or b.feature == "smem.static"]
        if real_blocking:
            b = real_blocking[0]
            res.prediction = "fails"
            what = b.text if b.kind == "error" else f"{b.feature} ({b.text!r})"
            res.reason = f"{what} at {b.path}:{b.line} is not supported on {target.name}" + (
                f" (supported on: {', '.join(b.supported_on)})" if b.supported_on else "")
        elif self.maybe_blocking:
            res.prediction = "unknown"
            res.reason = unknowns[0]
            if self.pr.unresolved_seen:
                # the unread header is why conditions could not be decided: name it first
                res.reason = f"cannot resolve #include {self.pr.unresolved_seen[0]!r}; then {unknowns[0]}"
        elif res.stubs:
            s = res.stubs[0]
            res.prediction = "stub"
            res.reason = f"{s.kind} at {s.path}:{s.line}" + (f" in {s.function}" if s.function else "") + f": {s.text}"
        elif unknowns:
            res.prediction = "unknown"
            res.reason = unknowns[0]
        else:
            res.prediction = "builds"
            res.reason = f"no feature missing on {target.name} in the active code of {len(self.pr.files)} file(s)"


def _owner_name(ff: F.FileFacts, top: int) -> str:
    return ff.owners[top].name if top >= 0 else ""


def _kernel_status(ff: F.FileFacts, pr: PreprocResult, k: F.KernelFacts, path: str) -> KernelStatus:
    states = pr.states[path]
    real_yes = real_maybe = trap_yes = print_yes = False
    excluded: list[int] = []
    arch_excluded = False
    for rid, real, trap, prt in k.segments:
        st = states[rid]
        if real:
            if st is True:
                real_yes = True
            elif st is None:
                real_maybe = True
            else:
                excluded.append(rid)
                if pr.region_tainted(path, rid):
                    arch_excluded = True
        if st is True:
            trap_yes |= trap
            print_yes |= prt
    guard = None
    if excluded:
        guard = _region_guard_line(ff, pr, excluded[0])
    if real_yes:
        return KernelStatus(k.name, path, k.line, "real", None, "active code for this target")
    if real_maybe:
        g = None
        for rid, real, _, _ in k.segments:
            if real and states[rid] is None:
                g = _region_guard_line(ff, pr, rid)
                break
        return KernelStatus(k.name, path, k.line, "unknown", g, f"body is under a condition that could not be decided (line {g})")
    if trap_yes:
        return KernelStatus(k.name, path, k.line, "trap", guard, "the active body only traps" + (f"; code excluded at line {guard}" if guard else ""))
    if excluded:
        why = "by an architecture condition" if arch_excluded else "by a non-architecture condition"
        extra = " (only prints an error)" if print_yes else ""
        return KernelStatus(k.name, path, k.line, "empty", guard, f"body excluded {why} at line {guard}{extra}")
    return KernelStatus(k.name, path, k.line, "real", None, "no code excluded")
