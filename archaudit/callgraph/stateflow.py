"""State that the code a gate changes writes, and where the scan reads it (for callgraph/confine.py).

A write in the changed code is a way out of the gate's statement: whatever reads the stored state
later acts on what the gate decided. `state_of` says what a written target is:
- an attribute X (`self.X = v`, `layer.X = v`, `a.b.X[k] = v`, `self.X.append(v)`): read by every
  load of an attribute named X anywhere in the scan, whatever the object (an alias cannot hide a
  read); when the write was on `self`, `s.X` in a method of a class that is neither a base nor a
  subclass of the writer's class reads another object and is left out;
- a module global G (`global G; G = v`, `_CACHE[k] = v` where `_CACHE` is no local): read by the
  loads of G in its module; another module that imports G or reads `<module>.G` stops;
- a local bound only to a new container (`d = {}; d[k] = v`): no state, the function's own flow
  of the name covers it;
- anything else (an item of a parameter, of a local that may alias another object, of a closure's
  name) is a reason to stop.
`StateReads` lists the places that read a state: (scope, byte offset of the read). Reads it does
not see: reflection with a computed name (`getattr(o, name)`, `__dict__`, `vars()`,
`dataclasses.asdict`). `getattr(o, "X")` and `hasattr(o, "X")` are reads (the call is the read),
`setattr`/`delattr` with the name are stores; the name in any other string handed to one of them
(`attrgetter("X")`), or a read inside a lambda, a class body or a def's header, is a reason to
stop instead."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..parsing.python_ir import N, iter_stmts
from ..python.bindings import flat_targets
from ..python.pybytes import word_pattern
from .resolve import Ctx, walk_exprs

MAX_STATE_MODULES = 24  # modules naming the state: more, and the state is too common to follow
MAX_READS = 48  # read sites of one state
MAX_OCCURRENCES = 300  # occurrences of the name in one module, each looked at
MUTATORS = frozenset(("append", "extend", "insert", "update", "add", "setdefault", "pop", "popitem", "clear",
                      "remove", "discard", "appendleft", "extendleft", "__setitem__"))
_FRESH_CALLS = frozenset(("dict", "list", "set", "OrderedDict", "defaultdict", "deque", "Counter"))
_BODY_KEYS = ("body", "orelse", "handlers", "final")
_REFLECTIVE = frozenset(("getattr", "hasattr", "setattr", "delattr", "attrgetter"))


@dataclass(frozen=True)
class State:
    kind: str  # "attr" | "global" | "local"
    name: str
    module: str = ""  # the module of a global
    cls: str | None = None  # the writer's class, for an attribute written on `self`
    text: str = ""  # the written target as the source has it
    where: str = ""  # path:line of the write

    @property
    def key(self) -> tuple:
        return self.kind, self.module, self.name, self.cls


def written_targets(stmts: list[N]) -> list[tuple[N, N]]:
    """(statement, target) for what the statements store: assignment targets other than plain
    names (names too, for the caller to match against `global` declarations), and the receiver of
    a mutating method call (`self.cache.append(x)` stores into `self.cache`)."""
    out = []
    for s in iter_stmts(stmts):
        if s.k in ("assign", "augassign"):
            for t in (s.f["targets"] if s.k == "assign" else [s.f["target"]]):
                out.extend((s, x) for x in flat_targets(t))
        for e in walk_exprs([v for k, v in s.f.items() if k not in _BODY_KEYS]):
            if e.k == "call" and e.f["func"].k == "attr" and e.f["func"].f["attr"] in MUTATORS:
                recv = e.f["func"].f["value"]
                if recv.k in ("attr", "subscript"):
                    out.append((s, recv))
    return out


def state_of(ctx: Ctx, x: N, local: dict, where: str, text: str) -> State | str | None:
    """The state a store into `x` writes (None: a plain local name; str: why it is not followed)."""
    if x.k == "name":
        if ctx.kind == "function" and x.f["id"] in ctx.globals_decl:
            return State("global", x.f["id"], ctx.mod.name, text=text, where=where)
        return None
    node = x
    while node.k == "subscript":
        node = node.f["value"]
    if node.k == "attr":
        base = node.f["value"]
        self_name = (ctx.self_name or "").removeprefix("@cls:")
        on_self = base.k == "name" and self_name and base.f["id"] == self_name and ctx.cls
        return State("attr", node.f["attr"], cls=ctx.cls if on_self else None, text=text, where=where)
    if node.k != "name":
        return f"{where}: the code the gate changes writes {text}, an item of a value it computes"
    n = node.f["id"]
    if ctx.kind == "function" and n in local and n not in ctx.globals_decl:
        binds = local[n]
        if any(b[0] == "param" for b in binds):
            return f"{where}: the code the gate changes writes {text}, an item of the parameter {n}"
        if all(b[0] == "assign" and _fresh(b[1]) for b in binds):
            return State("local", n, text=text, where=where)
        return f"{where}: the code the gate changes writes {text}, and {n} may be another object's"
    if ctx.kind == "function" and ctx.parent is not None and ctx.parent.kind == "function":
        return f"{where}: the code the gate changes writes {text}, a name of an enclosing function"
    return State("global", n, ctx.mod.name, text=text, where=where)


def _fresh(v: N | None) -> bool:
    """Whether an expression makes a new container (a display, a comprehension, dict(...))."""
    if v is None:
        return False
    if v.k in ("dict", "list", "set", "comp", "const"):
        return True
    if v.k == "call":
        f = v.f["func"]
        return (f.k == "name" and f.f["id"] in _FRESH_CALLS) or (f.k == "attr" and f.f["attr"] in _FRESH_CALLS)
    return False


def store_chain(st: N) -> set[int]:
    """ids of the nodes a statement stores into and of the objects it stores into (`a.b[k] = v`:
    the subscript, `a.b` and `a`): a name or attribute there is written, not read."""
    out: set[int] = set()
    if st.k in ("assign", "augassign", "for", "with"):
        if st.k == "assign":
            ts = st.f["targets"]
        elif st.k == "augassign":
            ts = [st.f["target"]]
        elif st.k == "for":
            ts = [st.f["target"]]
        else:
            ts = [t for _v, t in st.f["items"] if t is not None]
        for t in ts:
            for x in flat_targets(t):
                while x.k in ("attr", "subscript"):
                    out.add(id(x))
                    x = x.f["value"]
                out.add(id(x))
    return out


def attr_occurrences(data: bytes, name: str):
    """Offsets of `name` where it can be an attribute: after a dot (spaces and line continuations
    allowed between), or alone inside quotes (`getattr(o, "name")`)."""
    for x in word_pattern(name.encode()).finditer(data):
        i = x.start() - 1
        while i >= 0 and data[i] in b" \t\\\r\n":
            i -= 1
        if i >= 0 and (data[i] == 0x2E or (data[i] in b"\"'" and data[x.end():x.end() + 1] == data[i:i + 1])):
            yield x.start()


def in_comment(data: bytes, pos: int) -> bool:
    start = data.rfind(b"\n", 0, pos) + 1
    return b"#" in data[start:pos]


class StateReads:
    """Where the scan reads a state. behind: the scan's Behind (its resolver, call graph and
    statement lookup)."""

    def __init__(self, behind):
        self.b = behind
        self.r = behind.r
        self.g = behind.g
        self._known: dict[tuple, tuple[list, str]] = {}  # state key -> reads(state)

    def reads(self, st: State) -> tuple[list[tuple[Ctx, int]], str]:
        """(read sites, "") or ([], why the reads are not all known); once per state and scan."""
        got = self._known.get(st.key)
        if got is None:
            got = self._known[st.key] = self._find(st)
        return got

    def _find(self, st: State) -> tuple[list[tuple[Ctx, int]], str]:
        name = re.escape(st.name.encode())
        if st.kind == "attr":
            # only `.X` or the string "X" can read the attribute
            mods = [m for m in self.g.modules_naming(st.name)
                    if next(attr_occurrences(self.g.index.peek_bytes(m), st.name), None) is not None]
        else:
            mods = [st.module] + [m for m in self.g.modules_naming(st.name) if m != st.module]
        if len(mods) > MAX_STATE_MODULES:
            return [], f"{st.name} is named in {len(mods)} modules, too many to follow its reads"
        sites: list[tuple[Ctx, int]] = []
        for m in mods:
            if st.kind == "global" and m != st.module:
                why = self._imported(m, st.name)
            else:
                why = self._reads_in(m, st, sites)
            if why:
                return [], why
            if len(sites) > MAX_READS:
                return [], f"{st.name} is read at more than {MAX_READS} places"
        return sites, ""

    def _imported(self, m: str, name: str) -> str:
        """Why another module may read the global: its bytes import the name or read `.name`."""
        data = self.g.index.peek_bytes(m)
        w = re.escape(name.encode())
        path = self.g.index.path_of.get(m, m)
        for pat, what in ((rb"\bimport\b[^\n]*\b" + w + rb"\b|\bimport\s*\([^)]*\b" + w + rb"\b", "imports"),
                          (rb"\.\s*" + w + rb"\b", "reads the attribute")):
            x = re.search(pat, data)
            if x:
                line = data.count(b"\n", 0, x.start()) + 1
                return f"{path}:{line}: {what} {name}, which may be the global the gate's code writes"
        return ""

    def _reads_in(self, m: str, st: State, sites: list) -> str:
        mod = self.r.module(m)
        path = self.g.index.path_of.get(m, m)
        if mod is None:
            return f"{path}: names {st.name} and could not be read"
        data = mod.parsed.src
        funcs = list(mod.all_functions())
        self.g.work += len(funcs)
        n = len(st.name)
        found = attr_occurrences(data, st.name) if st.kind == "attr" else \
            (x.start() for x in word_pattern(st.name.encode()).finditer(data))
        for i, pos in enumerate(found):
            if i >= MAX_OCCURRENCES:
                return f"{path}: names {st.name} more than {MAX_OCCURRENCES} times, too many to follow its reads"
            self.g.work += 1
            if in_comment(data, pos):
                continue
            why = self._occurrence(m, mod, path, funcs, pos, pos + n, st, sites)
            if why:
                return why
        return ""

    def _occurrence(self, m: str, mod, path: str, funcs: list, pos: int, end: int, st: State, sites: list) -> str:
        best = None
        for q, node in funcs:
            if node.sb <= pos < node.eb and (best is None or node.sb >= best[1].sb):
                best = (q, node)
        ctx = self.r.ctx(f"{m}.{best[0]}") if best else self.r.ctx(m)
        if ctx is None:
            return f"{path}: the scope around a use of {st.name} could not be read"
        chain = self.b._chain_at(self.b._body_at(ctx, pos), pos)
        line = mod.parsed.src.count(b"\n", 0, pos) + 1
        if not chain:
            return ""  # a def's own name or parameters
        s = chain[-1][2]
        node, in_lambda, string = _node_at(s, pos, end, st)
        if node is None:
            if string:
                return f"{path}:{line}: names the attribute {st.name} in a string (attrgetter?), not followed"
            return ""
        if id(node) in store_chain(s):
            return ""
        if st.kind == "global" and ctx.kind == "function" and st.name in self.r.locals_of(ctx):
            return ""  # a local of the same name
        if st.cls and self._other_class(ctx, node, st.cls):
            return ""
        if in_lambda or s.k in ("def", "class"):
            return f"{path}:{line}: reads {st.name} inside a lambda, a class body or a def's header, not followed"
        sites.append((ctx, node.sb))
        return ""

    def _other_class(self, ctx: Ctx, node: N, writer: str) -> bool:
        """Whether `s.X` (or `getattr(s, "X")`) in a method reads `self` of a class unrelated to
        the writer's class."""
        base = node.f["value"] if node.k == "attr" else node.f["args"][0]
        own = (ctx.self_name or "").removeprefix("@cls:")
        if not (own and base.k == "name" and base.f["id"] == own and ctx.cls):
            return False
        return not self._related(ctx.cls, writer)

    def _related(self, a: str, b: str) -> bool:
        return a == b or b in self.r.mro(a) or a in self.r.mro(b)


def _node_at(s: N, pos: int, end: int, st: State) -> tuple[N | None, bool, bool]:
    """The node of statement `s` that reads the state at `pos`: (node, inside a lambda, named in a
    string instead)."""
    header = [v for k, v in s.f.items() if k not in _BODY_KEYS] if s.k not in ("def", "class") else \
        list(s.f.get("decorators", [])) + list(s.f.get("bases", [])) + [d for _n, d, _k in s.f.get("params", []) if d is not None]
    stack = [(header, False)]
    string = False
    while stack:
        v, lam = stack.pop()
        if isinstance(v, N):
            if st.kind == "attr" and v.k == "attr" and v.f["attr"] == st.name and v.eb == end:
                return v, lam, False
            if st.kind != "attr" and v.k == "name" and v.f["id"] == st.name and v.sb == pos:
                return v, lam, False
            if v.k == "call" and _reflective(v) and any(
                    a.k == "const" and a.f["value"] == st.name and a.sb <= pos < a.eb for a in v.f["args"]):
                how = _reflective(v)
                if how in ("getattr", "hasattr") and len(v.f["args"]) >= 2 and v.f["args"][1].sb <= pos:
                    return v, lam, False  # `getattr(o, "X", d)` reads o.X: the call's value is the read
                if how in ("setattr", "delattr") and len(v.f["args"]) >= 2 and v.f["args"][1].sb <= pos:
                    continue  # a store, not a read
                string = True
            if v.k in ("def", "class"):
                continue
            stack.extend((c, lam or v.k == "lambda") for c in v.f.values())
        elif isinstance(v, (list, tuple)):
            stack.extend((c, lam) for c in v)
    return None, False, string



def _reflective(call: N) -> str:
    """getattr/hasattr/setattr/delattr/attrgetter (which of them, or ""): a call that names an
    attribute in a string."""
    f = call.f["func"]
    name = f.f["id"] if f.k == "name" else f.f["attr"] if f.k == "attr" else ""
    return name if name in _REFLECTIVE else ""
