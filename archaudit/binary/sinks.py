"""Python calls that load prebuilt device code ("binary sinks"), found statically.

A sink is a call of a loader from rules/binaries.toml (flashinfer's get_artifact, load_cubin,
setup_cubin_loader, cute.runtime.load_module) or a reference to an artifact location (a class
attribute of ArtifactPath) that a JIT module passes on to C++ which fetches cubins by name. For
each sink: where it is, the enclosing function, the artifact it names (resolved through local
assignments, module constants, same-module helper functions and the artifact registry class),
and the architectures of that artifact when the package states them (a sibling *_ARCHS
constant, a literal sm_XY in the path) or when the artifact's files are in the scanned tree
(their bytes are read). Otherwise `archs` is None and `archs_how` says why: the judge must not
guess.

Read-only use of the Index: `.path_of`, `.source_bytes`, `.module(name, full=True)`,
ModuleInfo fields; imports as python/bindings.py reads them. Nothing is imported or run.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from ..model import Link
from ..parsing.python_ir import N, dotted_name
from ..python.bindings import FromImport, imports_of
from ..ruledata import load_rule
from .fatbin import read_binary, runs_on

MAX_DEPTH = 6  # symbolic resolution of an artifact expression


@dataclass(frozen=True)
class Loader:
    name: str
    kind: str
    artifact_arg: int
    defined_in: tuple[str, ...] = ()
    receiver: tuple[str, ...] = ()
    requires_artifact: bool = False  # a sink only when its argument resolves to an artifact location


@dataclass(frozen=True)
class Rules:
    loaders: tuple[Loader, ...]
    registries: tuple[tuple[str, tuple[str, ...], str], ...]  # (class, defined_in, archs suffix)
    arch_re: re.Pattern
    max_store_files: int

    @property
    def needles(self) -> tuple[bytes, ...]:
        return tuple({lo.name.encode() for lo in self.loaders} | {r[0].encode() for r in self.registries})


@lru_cache(maxsize=None)
def load_rules() -> Rules:
    d = load_rule("binaries")
    loaders = tuple(
        Loader(x["name"], x["kind"], int(x.get("artifact_arg", -1)), tuple(x.get("defined_in", ())),
               tuple(x.get("receiver", ())), bool(x.get("requires_artifact", False)))
        for x in d.get("loader", [])
    )
    regs = tuple((x["class"], tuple(x.get("defined_in", ())), x.get("archs_suffix", "_ARCHS")) for x in d.get("artifact_registry", []))
    pat = d.get("arch_in_path", {}).get("pattern", r"(?<![A-Za-z0-9])[Ss][Mm]_?(\d{2,3})([af]?)(?![0-9])")
    return Rules(loaders, regs, re.compile(pat), int(d.get("artifact_store", {}).get("max_files", 400)))


@dataclass(frozen=True)
class BinarySink:
    """A call (or artifact reference) behind which the code is prebuilt."""

    path: str
    line: int
    col: int
    function: str  # "pkg.mod.func" (as Gate.function / interp frames name it) or "pkg.mod"
    loader: str  # loader name, or "<artifact-path>" for a bare artifact reference
    kind: str  # download | load | cubin-callback | load-so | artifact-path
    artifact: str  # resolved artifact text; run-time parts as {name}; "" when none
    artifact_refs: tuple[str, ...] = ()  # registry attributes used: ("ArtifactPath.DSL_FMHA",)
    archs: tuple[str, ...] | None = None  # architecture names ("sm_100a") or None: not known
    archs_how: str = ""  # where archs come from, or why they are unknown
    how: str = ""  # how the loader call was identified: import | definition | receiver | name-only
    evidence: tuple[Link, ...] = field(default_factory=tuple)

    def to_json(self) -> dict:
        return {"path": self.path, "line": self.line, "col": self.col, "function": self.function,
                "loader": self.loader, "kind": self.kind, "artifact": self.artifact,
                "artifact_refs": list(self.artifact_refs), "archs": None if self.archs is None else list(self.archs),
                "archs_how": self.archs_how, "how": self.how, "evidence": [e.to_json() for e in self.evidence]}


# ------------------------------------------------------------------------------------ IR helpers
def _children(n: N):
    for v in n.f.values():
        if isinstance(v, N):
            yield v
        elif isinstance(v, (list, tuple)):
            for x in v:
                if isinstance(x, N):
                    yield x
                elif isinstance(x, (list, tuple)):
                    for y in x:
                        if isinstance(y, N):
                            yield y
                        elif isinstance(y, (list, tuple)):
                            yield from (z for z in y if isinstance(z, N))


def _walk(nodes, into_defs: bool = False):
    """All nodes below `nodes`, not entering nested def/class bodies (they are walked on their own)."""
    stack = list(reversed(list(nodes)))
    while stack:
        n = stack.pop()
        yield n
        if n.k in ("def", "class", "lambda") and not into_defs:
            # decorators and defaults run in the enclosing scope; the body does not
            for d in n.f.get("decorators", []) or []:
                stack.append(d)
            continue
        stack.extend(reversed(list(_children(n))))


def _dotted(n: N | None) -> str | None:
    return dotted_name(n) or None

# ------------------------------------------------------------------------------------ the finder
class _Finder:
    def __init__(self, index, rules: Rules, source=None):
        self.index = index
        self.rules = rules
        self.source = source
        self._imports: dict[str, dict[str, tuple[str, str | None]]] = {}
        self._mod_sinks: dict[str, list[BinarySink]] = {}
        self._func_refs: dict[tuple[str, str], tuple] = {}
        self._store: dict[str, list[str]] | None = None

    # --- imports -------------------------------------------------------------------------
    def imports(self, mod) -> dict[str, tuple[str, str | None]]:
        """local name -> (module, name or None for a module import); lazy imports included."""
        got = self._imports.get(mod.name)
        if got is not None:
            return got
        out: dict[str, tuple[str, str | None]] = {}
        for n in _walk(mod.parsed.body, into_defs=True):
            if n.k not in ("import", "importfrom"):
                continue
            for bd in imports_of(n, mod.name, mod.is_pkg):
                out[bd.local] = (bd.module, bd.name if isinstance(bd, FromImport) else None)
        self._imports[mod.name] = out
        return out

    @staticmethod
    def _from_module(target: str, defined_in: tuple[str, ...]) -> bool:
        # the defining module itself, or a parent package that re-exports the name
        return any(d == target or d.startswith(target + ".") for d in defined_in)

    # --- loader calls ----------------------------------------------------------------------
    def match_loader(self, mod, call: N) -> tuple[Loader, str] | None:
        fn = call.f["func"]
        name = fn.f["id"] if fn.k == "name" else (fn.f["attr"] if fn.k == "attr" else None)
        if name is None:
            return None
        for lo in self.rules.loaders:
            if lo.name != name:
                continue
            if lo.receiver:
                recv = _dotted(fn.f["value"]) if fn.k == "attr" else None
                if recv and any(recv == r or recv.endswith("." + r) or r.endswith("." + recv) for r in lo.receiver):
                    return lo, "receiver"
                continue
            imps = self.imports(mod)
            if fn.k == "name":
                imp = imps.get(name)
                if imp is not None and imp[1] is not None:
                    if self._from_module(imp[0], lo.defined_in):
                        return lo, "import"
                    continue  # a different function of the same name
                if mod.name in lo.defined_in and name in mod.functions:
                    return lo, "definition"
                if imp is None and name not in mod.functions:
                    return lo, "name-only"
            else:
                recv = _dotted(fn.f["value"])
                head = recv.split(".")[0] if recv else None
                imp = imps.get(head) if head else None
                if imp is not None:
                    full = imp[0] if imp[1] is None else f"{imp[0]}.{imp[1]}"
                    full = full + recv[len(head):]
                    if self._from_module(full, lo.defined_in):
                        return lo, "import"
                    continue
                return lo, "name-only"
        return None

    # --- artifact registry -------------------------------------------------------------------
    def registry_ref(self, mod, n: N) -> tuple[str, str, str, str] | None:
        """(class, attribute, defining module, archs suffix) for `ArtifactPath.X`."""
        if n.k != "attr" or n.f["value"].k != "name":
            return None
        cls, attr = n.f["value"].f["id"], n.f["attr"]
        for rcls, defined_in, suffix in self.rules.registries:
            if cls != rcls or attr.startswith("__") or attr.endswith(suffix):
                continue  # class machinery and the architecture lists are not locations
            imp = self.imports(mod).get(cls)
            if imp is not None and imp[1] == rcls and self._from_module(imp[0], defined_in):
                return rcls, n.f["attr"], self._defining(imp[0], defined_in), suffix
            if mod.name in defined_in and rcls in mod.classes:
                return rcls, n.f["attr"], mod.name, suffix
        return None

    @staticmethod
    def _defining(imported_from: str, defined_in: tuple[str, ...]) -> str:
        for d in defined_in:
            if d == imported_from or d.startswith(imported_from + "."):
                return d
        return imported_from

    def class_attr(self, modname: str, cls: str, attr: str) -> N | None:
        m = self.index.module(modname, full=True)
        node = m.classes.get(cls) if m is not None else None
        if node is None:
            return None
        for st in node.f["body"]:
            if st.k == "assign" and len(st.f["targets"]) == 1 and st.f["targets"][0].k == "name" and st.f["targets"][0].f["id"] == attr:
                return st.f["value"]
        return None

    # --- symbolic artifact text ------------------------------------------------------------
    def describe(self, mod, fnode: N | None, e: N | None, before: int, depth: int = 0) -> tuple[str, set, list]:
        """(text with {placeholders}, registry refs, literal chunks) for an artifact expression."""
        if e is None:
            return "", set(), []
        if depth > MAX_DEPTH:
            return "{...}", set(), []
        k = e.k
        if k == "const":
            v = e.f["value"]
            return (v, set(), [v]) if isinstance(v, str) else (str(v), set(), [])
        if k == "fstring":
            return self._concat(mod, fnode, e.f["parts"], before, depth, "")
        if k == "binop" and e.f["op"] in ("+", "/"):
            return self._concat(mod, fnode, [e.f["left"], e.f["right"]], before, depth, "/" if e.f["op"] == "/" else "")
        if k == "call":
            callee = _dotted(e.f["func"]) or ""
            last = callee.rsplit(".", 1)[-1]
            if last in ("join", "safe_urljoin", "urljoin") and e.f["args"]:
                return self._concat(mod, fnode, e.f["args"], before, depth, "/")
            if last in ("str", "Path", "fspath") and len(e.f["args"]) == 1:
                return self.describe(mod, fnode, e.f["args"][0], before, depth + 1)
            if e.f["func"].k == "name" and callee in mod.functions:
                ret = _single_return(mod.functions[callee])
                if ret is not None:
                    return self.describe(mod, mod.functions[callee], ret, ret.line + 1, depth + 1)
            return "{" + (callee or "call") + "()}", set(), []
        if k == "attr":
            ref = self.registry_ref(mod, e)
            if ref is not None:
                rcls, attr, defmod, _ = ref
                val = self.class_attr(defmod, rcls, attr)
                if val is not None and val.k == "const" and isinstance(val.f["value"], str):
                    return val.f["value"], {ref}, [val.f["value"]]
                return "{" + f"{rcls}.{attr}" + "}", {ref}, []
            return "{" + (_dotted(e) or "attr") + "}", set(), []
        if k == "name":
            name = e.f["id"]
            if fnode is not None:
                val = _local_value(fnode, name, before)
                if val is not None:
                    return self.describe(mod, fnode, val, val.line, depth + 1)
                if any(p[0] == name for p in fnode.f.get("params", [])):
                    return "{" + name + "}", set(), []
            val = _module_value(mod, name)
            if val is not None:
                return self.describe(mod, None, val, 1 << 30, depth + 1)
            return "{" + name + "}", set(), []
        return "{" + k + "}", set(), []

    def _concat(self, mod, fnode, parts, before, depth, sep) -> tuple[str, set, list]:
        texts, refs, lits = [], set(), []
        for p in parts:
            t, r, l = self.describe(mod, fnode, p, before, depth + 1)
            texts.append(t)
            refs |= r
            lits += l
        if sep:
            text = sep.join(x.strip("/") if i else x.rstrip("/") for i, x in enumerate(texts))
        else:
            text = "".join(texts)
        return text, refs, lits

    # --- architectures -----------------------------------------------------------------------
    def archs_for(self, refs: set, literals: list, artifact: str) -> tuple[tuple[str, ...] | None, str, list[Link]]:
        links: list[Link] = []
        # 1. the registry states them next to the path (DSL_FMHA_ARCHS)
        for rcls, attr, defmod, suffix in sorted(refs):
            val = self.class_attr(defmod, rcls, attr + suffix)
            if val is not None and val.k in ("tuple", "list"):
                names = [x.f["value"] for x in val.f["elts"] if x.k == "const" and isinstance(x.f["value"], str)]
                archs = _arch_names(self.rules.arch_re, names)
                if archs and len(archs) == len(val.f["elts"]):
                    path = self.index.path_of.get(defmod, defmod)
                    links.append(Link("constant", path, val.line, f"{rcls}.{attr}{suffix}", "archs-constant"))
                    return archs, f"{rcls}.{attr}{suffix} ({path}:{val.line})", links
        # 2. the artifact's files are in the scanned tree: read them
        got = self.archs_from_store(artifact, literals)
        if got is not None:
            return got[0], got[1], links
        # 3. a literal part of the path names the architecture
        archs = _arch_names(self.rules.arch_re, literals)
        if archs:
            return archs, "named in the artifact path", links
        why = "not stated: the artifact is fetched at run time and neither its path nor the package names its architectures"
        return None, why, links

    def archs_from_store(self, artifact: str, literals: list) -> tuple[tuple[str, ...], str] | None:
        if self.source is None:
            return None
        prefix = _literal_prefix(artifact)
        if len(prefix) < 8:
            return None
        if self._store is None:
            self._store = {}
        files = self._store.get(prefix)
        if files is None:
            needle = "/" + prefix.strip("/") + "/"
            files = [f for f in self.source.files() if needle in "/" + f]
            self._store[prefix] = files
        bins = [f for f in files if f.endswith((".cubin", ".so", ".fatbin"))][: self.rules.max_store_files]
        if not bins:
            return None
        names: list[str] = []
        for f in bins:
            data = self.source.read(f)
            if data:
                for a in read_binary(data).archs:
                    if a.name not in names:
                        names.append(a.name)
        if not names:
            return None
        return tuple(names), f"read from {len(bins)} file(s) of the artifact in the scanned tree"

    # --- per module ----------------------------------------------------------------------------
    def module_sinks(self, modname: str) -> list[BinarySink]:
        got = self._mod_sinks.get(modname)
        if got is not None:
            return got
        self._mod_sinks[modname] = []  # recursion guard
        out: list[BinarySink] = []
        data = self.index.source_bytes(modname)
        if data and any(nd in data for nd in self.rules.needles):
            mod = self.index.module(modname, full=True)
            if mod is not None:
                scopes = [(modname, None, mod.parsed.body)]
                own = {lo.name for lo in self.rules.loaders if modname in lo.defined_in}
                for q, fn in mod.all_functions():
                    if q.split(".")[0] in own:
                        continue  # inside a loader's own definition: the loader is the sink
                    scopes.append((f"{modname}.{q}", fn, fn.f["body"]))
                for fname, fnode, body in scopes:
                    out += self._scope_sinks(mod, fname, fnode, body)
        out.sort(key=lambda s: (s.line, s.col, s.kind))
        self._mod_sinks[modname] = out
        return out

    def _scope_sinks(self, mod, fname: str, fnode: N | None, body) -> list[BinarySink]:
        out: list[BinarySink] = []
        call_sites: list[N] = []
        ref_sites: list[tuple[N, tuple]] = []
        for n in _walk(body):
            if n.k == "call":
                call_sites.append(n)
            elif n.k == "attr":
                ref = self.registry_ref(mod, n)
                if ref is not None:
                    ref_sites.append((n, ref))
        loader_spans = []
        for c in call_sites:
            m = self.match_loader(mod, c)
            if m is None:
                continue
            lo, how = m
            loader_spans.append((c.sb, c.eb))
            arg = c.f["args"][lo.artifact_arg] if 0 <= lo.artifact_arg < len(c.f["args"]) else None
            text, refs, lits = self.describe(mod, fnode, arg, c.line)
            evidence: list[Link] = []
            if lo.kind == "cubin-callback":
                # the library's C++ fetches cubins; which ones: the artifacts of the JIT modules
                # this function builds
                for callee, cpath, cline, crefs in self._artifact_callees(mod, call_sites):
                    refs |= crefs
                    evidence.append(Link("jit-module", cpath, cline, callee,
                                         "references " + ", ".join(f"{r[0]}.{r[1]}" for r in sorted(crefs))))
                if refs and not text:
                    texts = []
                    for r in sorted(refs):
                        val = self.class_attr(r[2], r[0], r[1])
                        ok = val is not None and val.k == "const" and isinstance(val.f["value"], str)
                        texts.append(val.f["value"] if ok else "{" + f"{r[0]}.{r[1]}" + "}")
                    text = " ".join(texts)
                    lits = [t for t in texts if not t.startswith("{")]
            elif lo.requires_artifact and not refs:
                continue  # e.g. a CuTe DSL object compiled here, not fetched
            text = _tidy(text)
            archs, archs_how, links = self.archs_for(refs, lits, text)
            out.append(BinarySink(mod.path, c.line, c.col, fname, lo.name, lo.kind, text,
                                  tuple(sorted(f"{r[0]}.{r[1]}" for r in refs)), archs, archs_how, how,
                                  tuple(evidence + links)))
        for n, ref in ref_sites:
            if any(sb <= n.sb and n.eb <= eb for sb, eb in loader_spans):
                continue  # already part of a loader call
            text, refs, lits = self.describe(mod, fnode, n, n.line)
            archs, archs_how, links = self.archs_for(refs, lits, text)
            out.append(BinarySink(mod.path, n.line, n.col, fname, "<artifact-path>", "artifact-path", text,
                                  (f"{ref[0]}.{ref[1]}",), archs, archs_how, "registry", tuple(links)))
        return out

    def _artifact_callees(self, mod, calls: list[N]):
        """Functions called here (resolved through imports) whose bodies use artifact locations."""
        seen = set()
        for c in calls:
            fn = c.f["func"]
            if fn.k != "name":
                continue
            target = self._resolve_function(mod, fn.f["id"])
            if target is None or target in seen:
                continue
            seen.add(target)
            refs = self._function_refs(*target)
            if refs:
                tmod, q = target
                node = self.index.module(tmod, full=True).functions[q]
                yield f"{tmod}.{q}", self.index.path_of.get(tmod, tmod), node.line, refs

    def _resolve_function(self, mod, name: str) -> tuple[str, str] | None:
        if name in mod.functions and "." not in name:
            return mod.name, name
        imp = self.imports(mod).get(name)
        if imp is None or imp[1] is None:
            return None
        target, orig = imp
        for _ in range(4):  # follow re-exports through package __init__ files
            m = self.index.module(target, full=True)
            if m is None:
                return None
            if orig in m.functions:
                return target, orig
            nxt = self.imports(m).get(orig)
            if nxt is None or nxt[1] is None:
                return None
            target, orig = nxt
        return None

    def _function_refs(self, modname: str, qual: str) -> set:
        key = (modname, qual)
        got = self._func_refs.get(key)
        if got is not None:
            return set(got)
        mod = self.index.module(modname, full=True)
        refs = set()
        if mod is not None and qual in mod.functions:
            for n in _walk(mod.functions[qual].f["body"]):
                if n.k == "attr":
                    r = self.registry_ref(mod, n)
                    if r is not None:
                        refs.add(r)
        self._func_refs[key] = tuple(refs)
        return refs


def _tidy(text: str) -> str:
    # "dir/" + "/" + "name" -> "dir/name" (the scheme's "://" stays)
    return re.sub(r"(?<!:)/{2,}", "/", text)


def _single_return(fnode: N) -> N | None:
    rets = [n for n in _walk(fnode.f["body"]) if n.k == "return"]
    return rets[0].f["value"] if len(rets) == 1 else None


def _local_value(fnode: N, name: str, before: int) -> N | None:
    """The value of the last plain assignment `name = ...` above line `before` in the function."""
    best = None
    for n in _walk(fnode.f["body"]):
        if n.k == "assign" and n.line < before and len(n.f["targets"]) == 1:
            t = n.f["targets"][0]
            if t.k == "name" and t.f["id"] == name and (best is None or n.line > best.line):
                best = n
    return best.f["value"] if best is not None else None


def _module_value(mod, name: str) -> N | None:
    val = None
    for st in mod.parsed.body:
        if st.k == "assign" and len(st.f["targets"]) == 1:
            t = st.f["targets"][0]
            if t.k == "name" and t.f["id"] == name:
                val = st.f["value"]
    return val


def _arch_names(rx: re.Pattern, texts) -> tuple[str, ...]:
    out: list[str] = []
    for t in texts:
        for m in rx.finditer(t):
            name = f"sm_{m.group(1)}{m.group(2)}"
            if name not in out:
                out.append(name)
    return tuple(out)


def _literal_prefix(text: str) -> str:
    i = text.find("{")
    return text if i < 0 else text[:i]


# ------------------------------------------------------------------------------------ public API
def binary_sinks(index, source=None, modules=None, rules: Rules | None = None) -> list[BinarySink]:
    """Every binary sink in the indexed modules (or in `modules`), sorted by path and line.

    source: the scan's Source (optional): lets artifacts present in the tree be read.
    """
    f = _Finder(index, rules or load_rules(), source)
    names = sorted(modules if modules is not None else index.path_of)
    out: list[BinarySink] = []
    for name in names:
        out += f.module_sinks(name)
    out.sort(key=lambda s: (s.path, s.line, s.col, s.kind))
    return out


def sink_finder(index, source=None) -> _Finder:
    """A finder to pass to sinks_in_function for many functions: its module answers are kept."""
    return _Finder(index, load_rules(), source)


def sinks_in_function(index, function: str, source=None, finder: _Finder | None = None) -> list[BinarySink]:
    """The sinks whose enclosing function is `function` ("pkg.mod.func"). finder: from
    sink_finder(index, source), to reuse across calls (a module's sinks are found once)."""
    parts = function.split(".")
    # the modules whose dotted name is a prefix of the function's (itself included)
    mods = sorted({m for m in (".".join(parts[:k]) for k in range(1, len(parts) + 1)) if m in index.path_of})
    if finder is None:
        finder = sink_finder(index, source)
    out = [s for m in mods for s in finder.module_sinks(m) if s.function == function]
    out.sort(key=lambda s: (s.path, s.line, s.col, s.kind))
    return out


def runs_target(sink: BinarySink, gpu, reg=None) -> str:
    """"yes" / "no" / "unknown": can the sink's prebuilt code run on this GPU. Names of an artifact
    without PTX are machine code ("sm_100a"), judged by the SASS rules of fatbin.runs_on."""
    if sink.archs is None:
        return "unknown"
    return "no" if runs_on(list(sink.archs), gpu, reg) == "no" else "yes"


def module_binary(sink: BinarySink, gpu, reg=None) -> dict:
    """The sink in the shape judge.ModuleRef.binary takes: {"artifact", "archs", "runs", "reason"}.
    runs is "sass" | "ptx-jit" | "no", or "unknown" when the artifact's architectures are not known."""
    name = getattr(getattr(gpu, "gpu", None), "name", None) or getattr(gpu, "name", None) or str(gpu)
    where = f"{sink.loader} at {sink.path}:{sink.line}"
    what = f"prebuilt code ({sink.kind}) {sink.artifact or '(artifact not named here)'} via {where}"
    if sink.archs is None:
        return {"artifact": sink.artifact, "archs": None, "runs": "unknown",
                "reason": f"{what}; its architectures are unknown: {sink.archs_how}"}
    runs = runs_on(list(sink.archs), name, reg)
    verdict = {"sass": f"has machine code for {name}", "ptx-jit": f"runs on {name} only through PTX JIT",
               "no": f"has no code for {name}"}[runs]
    return {"artifact": sink.artifact, "archs": set(sink.archs), "runs": runs,
            "reason": f"{what}; built for {', '.join(sink.archs)} ({sink.archs_how}): {verdict}"}
