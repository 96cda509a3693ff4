"""The Python module index: which file is which module, parsed lazily, with its top-level names.

Module names come from the package structure (directories with __init__.py), so site-packages,
src/ layouts and wheels all map the same way. Parsing happens on first use; a parse problem is a
Diagnostic and the module still exists (with whatever the tolerant parser recovered).
"""
from __future__ import annotations

import ast

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

from ..model import Diagnostic
from ..ruledata import load_rule
from ..parsing.python_ir import LazyFields, N, ParsedModule, parse_python
from ..sources import Source
from .bindings import last_definitions, relative_module, statement_bindings
from .pybytes import literal_all, star_imports


@dataclass
class ModuleInfo:
    name: str
    path: str
    is_pkg: bool
    parsed: ParsedModule
    # top-level statements that bind names, by name (last binding wins at runtime; we keep all)
    defs: dict[str, N] = field(default_factory=dict)  # def/class nodes
    classes: dict[str, N] = field(default_factory=dict)  # qualname -> class node (nested too)
    # qualname -> def node (nested too): the last def of the name in its scope, the one running
    # the scope binds (an @overload stub's implementation, a redefinition)
    functions: dict[str, N] = field(default_factory=dict)
    # qualname -> every def of a qualname defined more than once, in source order (overload
    # stubs, redefinitions, a def in each branch of an if): each is scanned for gates
    redefined: dict[str, list[N]] = field(default_factory=dict)
    # start bytes of the redefined defs that a later def of the name in the same statement list
    # rebinds: never the binding once the scope has run (an overload stub, a replaced def)
    shadowed: set[int] = field(default_factory=set)
    _bindings: tuple | None = field(default=None, repr=False)

    def bindings(self) -> tuple:
        """Every binding of the module's top level (python/bindings.py), looking through
        if/try/with blocks, in source order; collected once per parse."""
        if self._bindings is None:
            self._bindings = tuple(bd for st in flatten_top(self.parsed.body)
                                   for bd in statement_bindings(st, self.name, self.is_pkg))
        return self._bindings

    def defs_of(self, qual: str) -> list[N]:
        """Every def of the qualname, in source order."""
        alts = self.redefined.get(qual)
        if alts:
            return alts
        node = self.functions.get(qual)
        return [] if node is None else [node]

    def bound_defs(self, qual: str) -> list[N]:
        """The defs of the qualname that may be its binding once its scope has run: the last,
        or one per branch when they are defined in different branches of an if or try."""
        alts = self.redefined.get(qual)
        if alts:
            return [n for n in alts if n.sb not in self.shadowed]
        return self.defs_of(qual)

    def all_functions(self):
        """(qualname, def node) of every def, redefinitions included."""
        for qual in self.functions:
            for node in self.defs_of(qual):
                yield qual, node

    def function_node(self, qual: str, key: int) -> N | None:
        """The def a FuncRef names: `key` (its start byte) tells redefinitions apart."""
        return next((n for n in self.defs_of(qual) if n.sb == key), self.functions.get(qual))


def function_at_line(mod: ModuleInfo, line: int) -> tuple[str, N] | None:
    """The innermost function of `mod` whose lines hold `line`: (qualname in the module, node)."""
    src = mod.parsed.src
    best = None
    for qual, node in mod.all_functions():
        end = node.line + src.count(b"\n", node.sb, node.eb)
        if node.line <= line <= end and (best is None or node.sb >= best[1].sb):
            best = (qual, node)
    return best


_MISSING = object()


def decode_check(data: bytes) -> str | None:
    """Why these bytes are not Python source we can read, or None if they look fine."""
    if b"\x00" in data[:65536] or b"\x00" in data[-4096:]:
        return "binary data (NUL bytes)"
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "UTF-16 encoded; only UTF-8 sources are analysed"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        head = data[:200]
        if b"coding" in head and b"utf-8" not in head.lower() and b"utf8" not in head.lower():
            return None  # declared legacy encoding: tree-sitter reads the ASCII structure fine
        return f"not valid UTF-8 at byte {e.start}"
    return None


class Index:
    def __init__(self, source: Source, py_files: list[str], path_based: bool = False):
        """path_based: module names are the file paths (site-packages, wheels), which also covers
        namespace packages without __init__.py; otherwise they come from the package structure."""
        self.source = source
        self.diagnostics: list[Diagnostic] = []
        self.path_of: dict[str, str] = {}  # module name -> path
        self.module_of_path: dict[str, str] = {}
        self._mods: dict[str, ModuleInfo | None] = {}
        self._bytes: dict[str, bytes] = {}
        self._reported: set[str] = set()
        # modules for which function bodies are needed; others are parsed shallow
        self.full_filter = None
        # Memory bound: the IR is ~20x its source, so keep the IR of at most `ir_budget` source
        # bytes (None: no bound), least recently used first out. An evicted module is parsed
        # again when asked for, in the same mode, giving equal IR. Listeners in `on_evict` drop
        # what they derived from it. Function spans stay (the prefilter asks for them each round).
        self.ir_budget: int | None = None
        self.on_evict: list[Callable[[str], None]] = []
        self._lru: OrderedDict[str, int] = OrderedDict()
        self._lru_bytes = 0
        self._was_full: set[str] = set()
        self._loaded: set[str] = set()  # modules parsed successfully at least once
        self._spans: dict[str, list[tuple[str, int, int]]] = {}
        self.parses = 0  # parse_python calls (reloads included)
        # module -> its literal __all__ and the modules its bytes star-import (see may_bind)
        self._star_bases: dict[str, tuple] = {}
        # parses modules ahead in another process (pipeline.ParsePool); None: all parsed here
        self.parse_pool = None
        # path -> python.gates.byte_facts of the file, when the prefilter computed them
        self.byte_facts: dict | None = None
        # top-level packages other packages read as outside the scan (rules/externals.toml runtimes)
        self.path_based = path_based
        self.runtimes: frozenset[str] = frozenset(load_rule("externals").get("runtimes", []))
        # top-level packages with nothing architecture-dependent in their bytes (python/scope.py),
        # read as outside the scan from other packages like the runtimes; set by the pipeline
        # before the gates are looked for (pipeline.scope_packages)
        self.outside: frozenset[str] = frozenset()
        # top-level packages holding GPU code of their own (python/scope.py gpu_packages): a name
        # they look up at run time is code the call graph cannot follow; set with `outside`
        self.gpu_packages: frozenset[str] = frozenset()
        dirs_with_init = {p.rsplit("/", 1)[0] for p in py_files if p.endswith("/__init__.py")}
        # a directory reached through a symlink is a package under the link's path too
        dirs_with_init |= {a.rsplit("/", 1)[0] for a in getattr(source, "aliases", {}) if a.endswith("/__init__.py")}
        for p in py_files:
            name = _dotted(p) if path_based else self._module_name(p, dirs_with_init)
            if name is None:
                continue
            # a package __init__ and a same-named module: prefer the package (as Python does)
            if name in self.path_of and not p.endswith("__init__.py"):
                continue
            self.path_of[name] = p
            self.module_of_path[p] = name
        # A .py file no import reaches (`my-script.py`, `sp ace.py`, `40_examples/run.py`, a second
        # `m.py` in another directory that is not a package) still runs as a script: it is
        # analysed as the module named by its path with dots, which no other file has, so no
        # import of another module resolves to it.
        for p in py_files:
            if self.path_of.get(self.module_of_path.get(p)) == p:
                continue
            self.module_of_path.pop(p, None)
            name = p[: -len("/__init__.py")] if p.endswith("/__init__.py") else p[:-3]
            name = name.replace("/", ".")
            if not name or name in self.path_of:
                self.diagnostics.append(Diagnostic(p, "not-a-module", f"shadowed by {self.path_of.get(name, name)} "
                                                   f"(both are module {name}); not analysed", severity="note"))
                continue
            self.path_of[name] = p
            self.module_of_path[p] = name
        # a .py reached through symlinks under several paths is listed once (Source.aliases):
        # the module each other path would be is that file's module (an import of it resolves)
        self.aliases: dict[str, str] = {}
        for a, c in sorted(getattr(source, "aliases", {}).items()):
            name = (_dotted(a) if path_based else self._module_name(a, dirs_with_init)) if a.endswith(".py") else None
            if name and name not in self.path_of and c in self.module_of_path:
                self.aliases[name] = self.module_of_path[c]

    @staticmethod
    def _module_name(path: str, pkg_dirs: set[str]) -> str | None:
        if not path.endswith(".py"):
            return None
        parts = path[:-3].split("/")
        is_init = parts[-1] == "__init__"
        d = path.rsplit("/", 1)[0] if "/" in path else ""
        # walk up while the directory is a package
        mod_parts = [] if is_init else [parts[-1]]
        while d and d in pkg_dirs:
            mod_parts.insert(0, d.rsplit("/", 1)[-1])
            d = d.rsplit("/", 1)[0] if "/" in d else ""
        if not mod_parts or not all(x.isidentifier() for x in mod_parts):
            return None
        return ".".join(mod_parts)

    def package_dirs(self) -> dict[str, str]:
        """Each top-level package's directory ("sglang/", "python/sglang/"), from the path of one
        of its modules; single-module top-levels (`six.py`) have none."""
        out: dict[str, str] = {}
        for name, path in sorted(self.path_of.items()):
            top = name.split(".", 1)[0]
            if top in out or "/" not in path:
                continue
            comps = path[:-len("/__init__.py")].split("/") if path.endswith("/__init__.py") else path[:-3].split("/")
            depth = name.count(".") + 1
            if len(comps) < depth or comps[-depth] != top:
                continue
            out[top] = "/".join(comps[:len(comps) - depth + 1]) + "/"
        return out

    def has_module(self, name: str) -> bool:
        return name in self.path_of or name in self.aliases

    def hidden(self, frm: str, target: str) -> bool:
        """Is `target` (a module or a dotted name in one) read as outside the scan from module
        `frm`? Yes for a runtime's (rules/externals.toml runtimes) or a package without anything
        architecture-dependent (`outside`) seen from another package: the
        verdicts of the package that calls it must be those it gets with the runtime not
        scanned, whatever sits beside it in the site-packages."""
        top = target.split(".", 1)[0]
        return (top in self.runtimes or top in self.outside) and top != frm.split(".", 1)[0]

    def source_bytes(self, name: str) -> bytes:
        """The module's bytes (read once), b"" when unreadable."""
        path = self.path_of.get(self.aliases.get(name, name))
        if path is None:
            return b""
        b = self._bytes.get(path)
        if b is None:
            b = self.source.read(path) or b""
            self._bytes[path] = b
        return b

    def holds_bytes(self, path: str) -> bool:
        """Whether the bytes of the file at path were read through the Source and are held."""
        return path in self._bytes

    def module(self, name: str, full: bool = False) -> ModuleInfo | None:
        """The parsed module. full=False may give a shallow parse (no function bodies) unless the
        module is one whose code is analysed (see `wants_full`)."""
        name = self.aliases.get(name, name)
        shallow = self._parse_mode(name, full)
        if shallow is None:
            info = self._mods[name]
            if info is not None and self.ir_budget is not None:
                self._lru.move_to_end(name)
            return info
        path = self.path_of.get(name)
        info = None
        if path is not None:
            info = self._load(name, path, shallow)
        self._mods[name] = info
        if info is not None:
            self._loaded.add(name)
            if not info.parsed.shallow:
                self._was_full.add(name)
            if name not in self._spans or not info.parsed.shallow:
                self._spans[name] = [(q, n.sb, n.eb) for q, n in info.all_functions()]
            if self.ir_budget is not None:
                self._account(name, len(info.parsed.src))
        return info

    def _parse_mode(self, name: str, full: bool) -> bool | None:
        """How module(name, full) parses the module: shallow (True) or in full (False); None when
        it returns what is held."""
        info = self._mods.get(name, _MISSING)
        if info is not _MISSING and (info is None or not info.parsed.shallow or not (full or self.wants_full(name))):
            return None
        # a module once parsed in full is parsed in full again after an eviction
        return not (full or self.wants_full(name) or name in self._was_full)

    def prefetch(self, names: list[str]) -> None:
        """Have the parse pool parse those of `names` that module(name) would parse, in this
        order (see ParsePool.take)."""
        if self.parse_pool is None:
            return
        for name in names:
            shallow = self._parse_mode(name, False)
            data = self.source_bytes(name) if shallow is not None else b""
            if data:
                self.parse_pool.want(self.path_of[name], data, shallow)
        self.parse_pool.flush()

    def _account(self, name: str, size: int) -> None:
        old = self._lru.pop(name, None)
        if old is not None:
            self._lru_bytes -= old
        self._lru[name] = size
        self._lru_bytes += size
        while self._lru_bytes > self.ir_budget and len(self._lru) > 1:
            victim, vsize = self._lru.popitem(last=False)
            self._lru_bytes -= vsize
            del self._mods[victim]
            for f in self.on_evict:
                f(victim)

    def release_bodies(self, keep=frozenset()) -> None:
        """Drop every converted lazy function body (LazyFields.release) of the modules held but
        those in `keep`: a body read again is converted again. The memory goes to the next
        phase, which reads few of them."""
        for name, info in self._mods.items():
            if name in keep or info is None:
                continue
            for _q, node in info.all_functions():
                if isinstance(node.f, LazyFields):
                    node.f.release()  # a no-op unless converted

    def release_shallow(self) -> None:
        """Drop the IR of the modules held as a shallow parse (the call graph parses what it
        reads in full, so it would parse them again anyway) and the bytes of every module whose
        IR is not held: what the gate scan read to decide that most modules need no analysis
        is not kept for the rest of the scan."""
        for name in [n for n, info in self._mods.items() if info is not None and info.parsed.shallow]:
            del self._mods[name]
        held = {info.path for info in self._mods.values() if info is not None}
        for p in [p for p in self._bytes if p not in held]:
            del self._bytes[p]

    def function_spans(self, name: str) -> list[tuple[str, int, int]]:
        """(qualname, start byte, end byte) of every function of a module, from its last parse
        (loading it if it was never parsed); survives eviction of the IR."""
        spans = self._spans.get(name)
        if spans is None:
            self.module(name)
            spans = self._spans.get(name, [])
        return spans

    def was_parsed(self, name: str) -> bool:
        """Was the module parsed successfully at least once (evicted since or not)?"""
        return name in self._loaded

    def spans_without_parse(self, name: str) -> bool:
        """Are the module's function spans known while its IR is not held (it was parsed in
        full, then evicted), so that listing its functions needs no parse?"""
        return name not in self._mods and name in self._was_full

    def loaded_modules(self) -> list[str]:
        """The modules parsed successfully at least once, sorted."""
        return sorted(self._loaded)

    @property
    def parsed_count(self) -> int:
        """Modules parsed successfully (each counted once, evicted or not)."""
        return len(self._loaded)

    def wants_full(self, name: str) -> bool:
        return self.full_filter is None or self.full_filter(name)

    def _load(self, name: str, path: str, shallow: bool) -> ModuleInfo | None:
        data = self.source_bytes(name)
        if not data and self.source.read(path) is None:
            return None
        why = decode_check(data)
        if why is not None:
            if path not in self._reported:
                self._reported.add(path)
                self.diagnostics.append(Diagnostic(path, "unreadable-source", f"skipped: {why}"))
            return None
        self.parses += 1
        parsed = self.parse_pool.take(path, data, shallow) if self.parse_pool is not None else None
        if parsed is None:
            try:
                parsed = parse_python(data, shallow=shallow, lazy=True)
            except (RecursionError, MemoryError, ValueError) as e:
                self.diagnostics.append(Diagnostic(path, "parse-failed", f"could not parse: {type(e).__name__}"))
                return None
        if path not in self._reported:
            self._reported.add(path)
            if parsed.errors and python_accepts(data):
                line, _msg = parsed.errors[0]
                self.diagnostics.append(Diagnostic(
                    path, "reader-limit", "valid Python that archaudit's reader (the tree-sitter grammar) cannot "
                    "read here; analysed what could be recovered", line=line))
            else:
                for line, msg in parsed.errors:
                    self.diagnostics.append(
                        Diagnostic(path, "syntax-error", f"{msg} (analysed what could be recovered)", line=line)
                    )
        info = ModuleInfo(name=name, path=path, is_pkg=path.endswith("__init__.py"), parsed=parsed)
        info.defs = last_definitions(info.bindings())
        collect_defs(parsed.body, "", info)
        return info

    def may_bind(self, modname: str, name: str) -> bool:
        """Can `from modname import *` bind `name`: is it in the module's `__all__`, or, without
        one, can the module bind it at its top level, itself or through the modules it
        star-imports in turn, or have a submodule of that name? Decided from the bytes, without
        a parse: every binding a module makes (def, class, import, assignment) spells the name,
        and an `__all__` read from the bytes (pybytes.literal_all) is the one the analyses
        evaluate. True when unsure (a star import not understood)."""
        nb = name.encode("utf-8", "surrogatepass")
        todo, seen = [modname], {modname}
        while todo:
            m = todo.pop()
            m = self.aliases.get(m, m)
            listed, bases = self._star_facts(m)
            if listed is not None:
                if name in listed:
                    return True
                continue  # the star import of m gives only what __all__ lists
            if bases is None or nb in self.source_bytes(m) or self.has_module(f"{m}.{name}"):
                return True
            for b in bases:
                if b not in seen and self.has_module(b):
                    seen.add(b)
                    todo.append(b)
        return False

    def _star_facts(self, modname: str) -> tuple[frozenset | None, list[str] | None]:
        """(literal __all__ or None, the modules `modname` star-imports or None when not
        understood), read from its bytes (pybytes.literal_all, pybytes.star_imports)."""
        got = self._star_bases.get(modname)
        if got is not None:
            return got
        path = self.path_of.get(modname)
        data = self.peek_bytes(modname)
        stars = star_imports(data) if path is not None else []
        bases = None if stars is None else [
            relative_module(modname, path.endswith("__init__.py"), level, m.decode("utf-8", "surrogateescape"))
            for level, m in stars]
        got = self._star_bases[modname] = (literal_all(data), bases)
        return got

    def peek_bytes(self, name: str) -> bytes:
        """source_bytes without keeping what was not held already (scans of many modules that
        parse few of them)."""
        path = self.path_of.get(self.aliases.get(name, name))
        if path is None:
            return b""
        b = self._bytes.get(path)
        return b if b is not None else (self.source.read(path) or b"")


def _dotted(path: str) -> str | None:
    parts = path[:-3].split("/") if path.endswith(".py") else []
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts or not all(x.isidentifier() for x in parts):
        return None
    return ".".join(parts)


def _blocks(st: N) -> tuple:
    """The statement lists of a compound statement that run in the scope around it: the
    branches of an if, the parts of a try, the body of a with."""
    k = st.k
    if k == "if":
        return (st.f["body"], st.f["orelse"])
    if k == "try":
        return (st.f["body"], *st.f["handlers"], st.f["orelse"], st.f["final"])
    if k in ("with", "block"):
        return (st.f["body"],)
    return ()


# Python's own parser is asked only about files up to this size (its memory is not bounded like
# the reader's): a larger file's syntax errors are reported as the reader found them
PYTHON_CHECK_MAX_BYTES = 1 << 20


def python_accepts(data: bytes) -> bool:
    """Whether this interpreter's parser accepts the source (parsed to a tree, never compiled
    further or run): where the tree-sitter grammar stops short of the language, the code is not
    the user's error."""
    if len(data) > PYTHON_CHECK_MAX_BYTES:
        return False
    try:
        ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def flatten_top(body: list[N]):
    """Top-level statements, looking through if/try/with blocks (conditional definitions), in
    source order. Iterative: an `elif` is an `if` in its predecessor's orelse, so a chain of
    thousands of branches nests that deep."""
    stack = [iter(body)]
    while stack:
        st = next(stack[-1], None)
        if st is None:
            stack.pop()
            continue
        yield st
        blocks = _blocks(st)
        if blocks:
            stack.append(x for block in blocks for x in block)


def _statement_lists(body: list[N]):
    """The statement lists flatten_top walks: the body and its if/try/with blocks (iteratively,
    as flatten_top)."""
    todo = [body]
    while todo:
        stmts = todo.pop()
        yield stmts
        todo.extend(reversed([block for st in stmts for block in _blocks(st)]))


def is_accessor(node: N) -> bool:
    """Is this def a property's `@name.setter` or `@name.deleter` (which keeps its getter bound
    to the name)?"""
    name = node.f["name"]
    return any(d.k == "attr" and d.f["attr"] in ("setter", "deleter")
               and d.f["value"].k == "name" and d.f["value"].f["id"] == name
               for d in node.f.get("decorators") or ())


def collect_defs(body: list[N], prefix: str, info: ModuleInfo) -> None:
    redefined = False
    for st in flatten_top(body):
        if st.k == "def":
            q = prefix + st.f["name"]
            old = info.functions.get(q)
            if old is not None:
                info.redefined.setdefault(q, [old]).append(st)
                redefined = True
            if old is None or not is_accessor(st):
                info.functions[q] = st
            if not getattr(st.f, "is_pending", False):  # a body left to convert defines nothing
                collect_defs(st.f["body"], q + ".<locals>.", info)
        elif st.k == "class":
            q = prefix + st.f["name"]
            info.classes[q] = st  # the last, as for functions
            collect_defs(st.f["body"], q + ".", info)
    if redefined:
        for stmts in _statement_lists(body):
            last: dict[str, N] = {}
            for st in stmts:
                if st.k == "class" or (st.k == "def" and not is_accessor(st)):
                    prev = last.get(st.f["name"])
                    if prev is not None and prev.k == "def":
                        info.shadowed.add(prev.sb)
                    last[st.f["name"]] = st
