"""The Python module index: which file is which module, parsed lazily, with its top-level names.

Module names come from the package structure (directories with __init__.py), so site-packages,
src/ layouts and wheels all map the same way. Parsing happens on first use; a parse problem is a
Diagnostic and the module still exists (with whatever the tolerant parser recovered).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..model import Diagnostic
from ..parsing.python_ir import N, ParsedModule, parse_python
from ..sources import Source


@dataclass
class ModuleInfo:
    name: str
    path: str
    is_pkg: bool
    parsed: ParsedModule
    # top-level statements that bind names, by name (last binding wins at runtime; we keep all)
    defs: dict[str, N] = field(default_factory=dict)  # def/class nodes
    classes: dict[str, N] = field(default_factory=dict)  # qualname -> class node (nested too)
    functions: dict[str, N] = field(default_factory=dict)  # qualname -> def node (nested too)


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
        dirs_with_init = {p.rsplit("/", 1)[0] for p in py_files if p.endswith("/__init__.py")}
        for p in py_files:
            name = _dotted(p) if path_based else self._module_name(p, dirs_with_init)
            if name is None:
                continue
            # a package __init__ and a same-named module: prefer the package (as Python does)
            if name in self.path_of and not p.endswith("__init__.py"):
                continue
            self.path_of[name] = p
            self.module_of_path[p] = name

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

    def has_module(self, name: str) -> bool:
        return name in self.path_of

    def source_bytes(self, name: str) -> bytes:
        """The module's bytes (read once), b"" when unreadable."""
        path = self.path_of.get(name)
        if path is None:
            return b""
        b = self._bytes.get(path)
        if b is None:
            b = self.source.read(path) or b""
            self._bytes[path] = b
        return b

    def module(self, name: str, full: bool = False) -> ModuleInfo | None:
        """The parsed module. full=False may give a shallow parse (no function bodies) unless the
        module is one whose code is analysed (see `wants_full`)."""
        info = self._mods.get(name, _MISSING)
        if info is not _MISSING and (info is None or not info.parsed.shallow or not (full or self.wants_full(name))):
            return info
        path = self.path_of.get(name)
        info = None
        if path is not None:
            info = self._load(name, path, shallow=not (full or self.wants_full(name)))
        self._mods[name] = info
        return info

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
        try:
            parsed = parse_python(data, shallow=shallow)
        except (RecursionError, MemoryError, ValueError) as e:
            self.diagnostics.append(Diagnostic(path, "parse-failed", f"could not parse: {type(e).__name__}"))
            return None
        if path not in self._reported:
            self._reported.add(path)
            for line, msg in parsed.errors:
                self.diagnostics.append(
                    Diagnostic(path, "syntax-error", f"{msg} (analysed what could be recovered)", line=line)
                )
        info = ModuleInfo(name=name, path=path, is_pkg=path.endswith("__init__.py"), parsed=parsed)
        for st in flatten_top(parsed.body):
            if st.k in ("def", "class"):
                info.defs[st.f["name"]] = st
        _collect_defs(parsed.body, "", info)
        return info

    def resolve_relative(self, mod: ModuleInfo, level: int, name: str) -> str:
        """Absolute module name for `from <level dots><name> import ...` inside `mod`."""
        if level == 0:
            return name
        base = mod.name.split(".")
        if not mod.is_pkg:
            base = base[:-1]
        if level > 1:
            base = base[: len(base) - (level - 1)]
        return ".".join([*base, name] if name else base)


def _dotted(path: str) -> str | None:
    parts = path[:-3].split("/") if path.endswith(".py") else []
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts or not all(x.isidentifier() for x in parts):
        return None
    return ".".join(parts)


def flatten_top(body: list[N]):
    """Top-level statements, looking through if/try/with blocks (conditional definitions)."""
    for st in body:
        yield st
        if st.k == "if":
            yield from flatten_top(st.f["body"])
            yield from flatten_top(st.f["orelse"])
        elif st.k == "try":
            yield from flatten_top(st.f["body"])
            for h in st.f["handlers"]:
                yield from flatten_top(h)
            yield from flatten_top(st.f["orelse"])
            yield from flatten_top(st.f["final"])
        elif st.k in ("with", "block"):
            yield from flatten_top(st.f["body"])


def _collect_defs(body: list[N], prefix: str, info: ModuleInfo) -> None:
    for st in flatten_top(body):
        if st.k == "def":
            q = prefix + st.f["name"]
            info.functions.setdefault(q, st)
            _collect_defs(st.f["body"], q + ".<locals>.", info)
        elif st.k == "class":
            q = prefix + st.f["name"]
            info.classes.setdefault(q, st)
            _collect_defs(st.f["body"], q + ".", info)
