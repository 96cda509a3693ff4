"""A small constant evaluator for strings, paths and lists (JIT module names and source files).

Separate from the gate interpreter: it only folds what is constant in the source (literals,
f-strings, `pathlib.Path(__file__).parent`, `/`, `os.path.join`, `+`, list comprehensions and
loops over constant lists, module constants reached through imports, calls of scanned functions
with constant arguments, tuple unpacking). Anything else is `Unknown(reason)`. Paths are kept
root-relative (`PathV`), so `Path(__file__).parents[1] / "data" / "csrc"` in flashinfer/jit/env.py
becomes `flashinfer/data/csrc`, which is then looked up in the scan.

JSON manifests shipped in the scanned tree are data: `json.loads(path.read_text())` and
`json.load(open(path))` of a file in the scan read its bytes through the scan's Source and parse
them (never anything executed), so `record["sources"]`, `.get()`, `.items()` and comprehensions over
the records fold like literals.

A value that is one of several (`Alt`) comes from a name bound on several paths, a parameter
annotated `Literal[...]`, a dict subscripted with a key that is not known, or a function with several
returns; operations apply to each option, and an option on which the operation fails at run time
(a missing key, subscripting None or a str with a str) is dropped, as that path builds nothing.
A comprehension whose filter is not known gives `Some`: some of its items, which ones not known.
"""
from __future__ import annotations

import ast
import itertools
import json
import posixpath
import re
from dataclasses import dataclass

from ..parsing.python_ir import N, dotted_name, iter_stmts
from ..safeio import MAX_JSON_DEPTH, json_depth_ok
from .resolve import Ctx, Resolver, walk_exprs

MAX_DEPTH = 40  # expression nesting within one function
MAX_FRAMES = 12  # calls of scanned functions nested in one evaluation
MAX_ITEMS = 512
# more alternatives than this for one value: Unknown ("too-many-alternatives"), never a cut list
MAX_ALT = 256


@dataclass(frozen=True)
class Unknown:
    reason: str  # short kind: "parameter", "environment", "runtime-call", "several-bindings", ...
    detail: str = ""
    pattern: str = ""  # best-effort text with {holes}, for names built from f-strings

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}" if self.detail else self.reason


@dataclass(frozen=True)
class PathV:
    """A path: root-relative when `rooted`, else an absolute/outside path (cannot be in the scan)."""

    path: str
    rooted: bool = True

    def join(self, *parts: str) -> "PathV":
        p = self.path
        for x in parts:
            if x.startswith("/"):
                return PathV(posixpath.normpath(x), False)
            p = posixpath.join(p, x) if p else x
        return PathV(posixpath.normpath(p) if p else p, self.rooted)

    @property
    def parent(self) -> "PathV":
        return PathV(posixpath.dirname(self.path), self.rooted)


@dataclass(frozen=True)
class ModV:
    name: str


@dataclass(frozen=True)
class FuncV:
    qualname: str


@dataclass(frozen=True)
class ClassV:
    qualname: str


@dataclass(frozen=True, eq=False)
class ObjV:
    """An instance of a scanned dataclass or NamedTuple made with known arguments: its class and
    its fields in declaration order (a field `__post_init__` may set is Unknown)."""

    cls: str
    fields: tuple  # ((name, value), ...)
    truth: bool | None = True  # None where the class defines __bool__ or __len__
    is_tuple: bool = False  # a NamedTuple: indexable and iterable as well

    def field(self, name: str):
        for k, v in self.fields:
            if k == name:
                return v
        return None


@dataclass(frozen=True)
class Alt:
    """One of several values (a name bound differently on different paths)."""

    options: tuple


@dataclass(frozen=True, eq=False)
class Some:
    """Some of these items, in this order; which ones is not known (a comprehension whose
    filter depends on what is not constant). As sources or flags: each may be there."""

    items: tuple


# Unknown reasons that stand for an error the code raises at run time on that value: an option of
# an Alt that raises is dropped (that path builds nothing)
RAISES = frozenset({"missing-key", "index-error", "type-error", "value-error", "missing-file"})


_NO_DEFAULT = Unknown("no-default")


def _set_in_post_init(mctx, post: N) -> set | None:
    """The field names a `__post_init__` sets (`object.__setattr__(self, "x", ..)`, `self.x = ..`);
    None when it sets one whose name is not a constant."""
    out: set = set()
    for st in iter_stmts(post.f["body"]):
        for e in walk_exprs([st]):
            if e.k == "call" and _dotted(e.f["func"]).endswith("setattr"):
                a = e.f["args"]  # setattr(self, "x", v) and object.__setattr__(self, "x", v)
                name = a[1] if len(a) >= 2 else None
                if name is None or name.k != "const" or not isinstance(name.f["value"], str):
                    return None
                out.add(name.f["value"])
        if st.k in ("assign", "augassign"):
            for t in (st.f["targets"] if st.k == "assign" else [st.f["target"]]):
                if t.k == "attr" and t.f["value"].k == "name":
                    out.add(t.f["attr"])
    return out


def _raises(v) -> bool:
    """Whether computing the value raises at run time: an error, or a list or tuple display with one."""
    if isinstance(v, (list, tuple)):
        return any(isinstance(x, Unknown) and x.reason in RAISES for x in v)
    return isinstance(v, Unknown) and v.reason in RAISES


def as_str(v):
    if isinstance(v, PathV):
        return v.path if v.rooted else v.path
    return v


class ConstEval:
    def __init__(self, resolver: Resolver):
        self.r = resolver
        self._gmemo: dict = {}
        self._busy: set = set()
        self._texts: dict[str, object] = {}  # scan path -> its text, or Unknown
        self._json: dict[str, object] = {}  # JSON text -> the parsed value, or Unknown
        self._literals: dict = {}  # (module, annotation) -> Literal options or None
        self._within: dict = {}  # (scope node id, name) -> index of the binding being evaluated
        self._frames = 0  # scanned functions being evaluated
        self._calls: dict = {}  # (function, arguments) -> its value
        # (function, parameter) -> the one value a variant gives it (JitAnalysis.literal_variants):
        # read wherever that parameter is, by the flag evaluation as well
        self.fixed: dict = {}
        # (function, parameter) -> (ctx, argument node, condition) along the call chain being
        # evaluated (set by FlagEval.bound)
        self.arg_nodes: dict = {}
        self._shapes: dict = {}  # class -> its record shape (see _record_shape), or Unknown
        self._cut = 0  # results cut short (a limit, a cycle): what depends on them is not memoized

    # -------------------------------------------------------------- names
    def name(self, ctx: Ctx, name: str, env: dict, depth: int):
        if name in env:
            return env[name]
        c = ctx
        while c is not None and c.kind != "module":
            if c.kind == "function" or c is ctx:
                loc = self.r.locals_of(c)
                if name in loc:
                    binds = loc[name]
                    upto = self._within.get((id(c.node), name))
                    if upto is not None:
                        # read inside its own binding (`x = {**x, ..}`): the bindings before it
                        binds = binds[:upto]
                        if not binds:
                            self._cut += 1
                            return Unknown("cycle", name)
                    return self._binds(c, name, binds, env if c is ctx else {}, depth)
            c = c.parent
        return self.global_(ctx.mod.name, name, depth)

    def global_(self, modname: str, name: str, depth: int):
        key = (modname, name)
        if key in self._gmemo:
            return self._gmemo[key]
        if key in self._busy:
            self._cut += 1
            return Unknown("cycle", f"{modname}.{name}")
        if name == "__file__":
            mod = self.r.module(modname)
            return PathV(mod.path) if mod else Unknown("unknown-module", modname)
        self._busy.add(key)
        try:
            b = self.r.gbind(modname).get(name)
            mctx = self.r.ctx(modname)
            if not b or mctx is None:
                if self.r.index.has_module(f"{modname}.{name}"):
                    v = ModV(f"{modname}.{name}")
                else:
                    v = Unknown("undefined", f"{modname}.{name}")
            else:
                v = self._binds(mctx, name, b, {}, depth)
        finally:
            self._busy.discard(key)
        self._gmemo[key] = v
        return v

    def _binds(self, ctx: Ctx, name: str, binds: list, env: dict, depth: int):
        vals = []
        key = (id(ctx.node), name)
        outer = self._within.get(key)
        try:
            for i, bd in enumerate(binds):
                self._within[key] = i
                vals.append(self._bind(ctx, name, bd, env, depth))
        finally:
            if outer is None:
                self._within.pop(key, None)
            else:
                self._within[key] = outer
        # `x = None` placeholders rebound later, and augmented assignments: keep the real values;
        # a binding whose value raises at run time never binds (while another does)
        real = [v for v in vals if v is not None and v is not _AUG]
        if len(real) > 1 and any(_raises(v) for v in real):
            real = [v for v in real if not _raises(v)] or real
        if not real:
            return None if any(v is None for v in vals) else Unknown("no-value", name)
        aug = [bd for bd in binds if bd[0] == "aug"]
        base = alt(real)
        for bd in aug:
            add = self.eval(ctx, bd[1], env, depth + 1)
            base = self._binop("+", base, add)
        # changed in place in the same scope: lists grow by x.append(..) / x.extend(..) / x.insert(..),
        # dicts by x[KEY] = v / x.update(..) outside loops (under a condition: with and without it);
        # any other change (pop, remove, del, a key not known, in a loop) makes the value unknown
        if ctx.kind == "function":
            muts = self._changes(ctx).get(name)
            if muts:
                base = self._changed(ctx, name, base, muts, env, depth)
        return base

    def _changes(self, ctx: Ctx) -> dict:
        """name -> [(statement, how, in a loop, under a condition)] for the statements of a
        function that change a local value in place (`x[k] = v`, `x.update(..)`, `del x[k]`, ...)."""
        got = ctx._memo.get("consteval-changes")
        if got is not None:
            return got
        got = {}
        src = ctx.mod.parsed

        def visit(stmts, loop: bool, cond: bool):
            for st in stmts:
                k = st.k
                if k in ("def", "class"):
                    continue
                tgt = None
                if k in ("assign", "augassign"):
                    for t in (st.f["targets"] if k == "assign" else [st.f["target"]]):
                        if t.k == "subscript" and t.f["value"].k == "name":
                            tgt = (t.f["value"].f["id"], "setitem" if k == "assign" else "augitem")
                elif k == "expr" and st.f["value"].k == "call":
                    f = st.f["value"].f["func"]
                    if f.k == "attr" and f.f["value"].k == "name" and f.f["attr"] in _MUTATORS:
                        tgt = (f.f["value"].f["id"], f.f["attr"])
                elif k == "pass" and st.eb > st.sb:
                    m = _DEL.match(src.text(st))
                    if m:
                        tgt = (m.group(1), "del")
                if tgt is not None:
                    got.setdefault(tgt[0], []).append((st, tgt[1], loop, cond))
                if k == "if":
                    visit(st.f["body"], loop, True)
                    visit(st.f["orelse"], loop, True)
                elif k in ("for", "while"):
                    visit(st.f["body"], True, cond)
                    visit(st.f["orelse"], loop, True)
                elif k == "try":
                    visit(st.f["body"], loop, cond)
                    for h in st.f["handlers"]:
                        visit(h, loop, True)
                    visit(st.f["orelse"], loop, True)
                    visit(st.f["final"], loop, cond)
                elif k in ("with", "block"):
                    visit(st.f["body"], loop, cond)

        visit(ctx.node.f["body"], False, False)
        ctx._memo["consteval-changes"] = got
        return got

    def _changed(self, ctx: Ctx, name: str, base, muts: list, env: dict, depth: int):
        """`base` after the in-place changes `muts` of the name (see _changes)."""
        hows = {how for _, how, _, _ in muts}
        if hows <= {"append", "extend", "insert"} and isinstance(base, (list, Some, Alt)):
            def grow(b):
                if isinstance(b, Some):
                    return Some(tuple(self._mutations(ctx, name, list(b.items), env, depth)))
                if isinstance(b, (list, tuple)):
                    return self._mutations(ctx, name, list(b), env, depth)
                return b if isinstance(b, Unknown) else Unknown("changed-in-place", f"{name}: {', '.join(sorted(hows))}")
            return self._spread(grow, base)
        if not isinstance(base, dict):
            if isinstance(base, (Unknown, str, int, float, bool, PathV)) or base is None:
                return base  # not a value changed in place (a str has no setitem; Unknown stays)
            return Unknown("changed-in-place", f"{name}: {', '.join(sorted(hows))}")
        out = base
        for st, how, loop, cond in muts:
            if loop or how not in ("setitem", "update"):
                return Unknown("changed-in-place", f"{name}: {how} at line {st.line}")
            if how == "setitem":
                t = next(t for t in st.f["targets"] if t.k == "subscript")
                key = self.eval(ctx, t.f["index"], env, depth + 1)
                if not _hashable(key) or isinstance(key, (Unknown, Alt, PathV)):
                    return Unknown("changed-in-place", f"{name}[{_short(ctx, t.f['index'])}]")
                val = self.eval(ctx, st.f["value"], env, depth + 1)
                new = self._spread(lambda d: {**d, key: val}, out)
            else:
                call = st.f["value"]
                arg = self.eval(ctx, call.f["args"][0], env, depth + 1) if len(call.f["args"]) == 1 and not call.f["kwargs"] else None
                if not isinstance(arg, dict):
                    return Unknown("changed-in-place", f"{name}.update()")
                new = self._spread(lambda d: {**d, **arg}, out)
            out = alt((out, new)) if cond else new
        return out

    def _bind(self, ctx: Ctx, name: str, bd: tuple, env: dict, depth: int):
        k = bd[0]
        if k == "assign":
            _, value, _ann, bctx = bd
            if value is None:
                return Unknown("annotation-only", name)
            return self.eval(bctx or ctx, value, env if bctx is None else {}, depth + 1)
        idx = self.r.index
        if k in ("import", "import-as"):
            # a runtime imported by another package is outside the scan to it (Index.hidden)
            return ModV(bd[1]) if idx.has_module(bd[1]) and not idx.hidden(ctx.mod.name, bd[1]) \
                else Unknown("external", bd[1])
        if k == "from":
            _, absmod, nm, _al, _rel, _st = bd
            if idx.hidden(ctx.mod.name, absmod):
                return Unknown("external", f"{absmod}.{nm}")
            if self.r.index.has_module(f"{absmod}.{nm}"):
                return ModV(f"{absmod}.{nm}")  # `from . import env as jit_env`
            if self.r.index.has_module(absmod):
                return self.global_(absmod, nm, depth + 1)
            return Unknown("external", f"{absmod}.{nm}")
        if k == "def":
            return FuncV(f"{ctx.mod.name}.{bd[1]}")
        if k == "class":
            return ClassV(f"{ctx.mod.name}.{bd[1]}")
        if k == "param":
            return self.param(ctx, bd)
        if k == "aug":
            return _AUG
        if k == "iter":
            # a loop variable: any item of the iterable (`for d in (installed, checkout): if
            # d.exists(): return d`); of a tuple target, not known here (its parts go together)
            st = bd[2]
            if st.f["target"].k != "name":
                return Unknown("loop-variable", name)
            items = self._iterable(self.eval(ctx, bd[1], env, depth + 1))
            if not items:
                return Unknown("loop-variable", f"{name} over {_short(ctx, bd[1])}")
            return alt(items)
        if k == "unpack":
            return self._unpack(ctx, name, bd, env, depth)
        if k == "with":
            # `with open(path) as f`: the open file (any other context manager: not known)
            v = self.eval(ctx, bd[1], env, depth + 1)
            return self._spread(lambda x: x if isinstance(x, (_OpenFile, Unknown)) else Unknown("unsupported-binding", "with"), v)
        return Unknown("unsupported-binding", k)

    def param(self, ctx: Ctx, bd: tuple):
        """A parameter not bound to an argument: the values of its `Literal[...]` annotation (an
        alias of one included) when it has one, else Unknown."""
        _, pname, ann, _default, _self = bd
        if (ctx.qualname, pname) in self.fixed:
            return self.fixed[(ctx.qualname, pname)]
        arg = self.arg_nodes.get((ctx.qualname, pname))
        if arg is not None and arg[1] is not None and (ctx.qualname, pname) not in self._busy:
            # bound to a caller's argument on the chain being evaluated (FlagEval.bound)
            self._busy.add((ctx.qualname, pname))
            try:
                return self.eval(arg[0], arg[1], {}, 1)
            finally:
                self._busy.discard((ctx.qualname, pname))
        opts = self._literal(ctx.mod.name, ann, 0) if ann else None
        if opts:
            return alt(opts)
        return Unknown("parameter", pname)

    def literal_options(self, modname: str, ann: str):
        """The options of a `Literal[...]` annotation (see _literal); None for anything else."""
        return self._literal(modname, ann, 0)

    def _literal(self, modname: str, ann: str, depth: int):
        """The options of an annotation that is `Literal[a, b, ...]` or a name bound to one
        (`Target = Literal["sm100a", "sm103a"]`, through imports too); None for anything else."""
        key = (modname, ann)
        if key in self._literals:
            return self._literals[key]
        self._literals[key] = None  # a cycle of aliases
        text = ann.strip()
        if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
            text = text[1:-1].strip()
        got = None
        m = _LITERAL.fullmatch(text)
        if m and depth < 8 and self._is_typing_literal(modname, m.group(1)):
            got = _literal_items(m.group(2))
        elif text.isidentifier() and depth < 8:
            for bd in self.r.gbind(modname).get(text, ()):
                if got is not None:
                    got = None  # bound more than once: not one type
                    break
                if bd[0] == "assign" and bd[1] is not None and bd[3] is None:
                    mod = self.r.module(modname)
                    if mod is not None:
                        got = self._literal(modname, mod.parsed.text(bd[1]), depth + 1)
                elif bd[0] == "from" and self.r.index.has_module(bd[1]):
                    got = self._literal(bd[1], bd[2], depth + 1)
                if got is None:
                    break
        self._literals[key] = got
        return got

    def _is_typing_literal(self, modname: str, qual: str | None) -> bool:
        """Whether `Literal` (or `typing.Literal`, `t.Literal`) is typing's in this module."""
        v = self.global_(modname, (qual or "Literal").rstrip("."), 0)
        want = ("typing", "typing_extensions") if qual else ("typing.Literal", "typing_extensions.Literal")
        return isinstance(v, Unknown) and v.reason == "external" and v.detail in want

    def _unpack(self, ctx: Ctx, name: str, bd: tuple, env: dict, depth: int):
        """`a, b = value`: the element of `value` at this name's place, for each of its options."""
        _, value, i, st = bd
        target = next((t for t in st.f.get("targets", ()) if t.k in ("tuple", "list") and i < len(t.f["elts"])
                       and t.f["elts"][i].k == "name" and t.f["elts"][i].f["id"] == name), None)
        if target is None or any(e.k == "starred" for e in target.f["elts"]):
            return Unknown("unpack", f"{name}: starred or nested target")
        n = len(target.f["elts"])
        v = self.eval(ctx, value, env, depth + 1)

        def take(x):
            if isinstance(x, (list, tuple)):
                return x[i] if len(x) == n else Unknown("value-error", f"{n} names for {len(x)} values")
            if isinstance(x, Unknown):
                return Unknown(x.reason, x.detail)
            if isinstance(x, (str, int, float, bool, dict)) or x is None:
                return Unknown("type-error" if not isinstance(x, (str, dict)) else "unpack", name)
            return Unknown("unpack", name)

        return self._spread(take, v)

    def _mutations(self, ctx: Ctx, name: str, base: list, env: dict, depth: int):
        out = list(base)
        for st, loops in stmts_with_loops(ctx.node.f["body"], ()):
            if st.k != "expr":
                continue
            e = st.f["value"]
            if e.k != "call" or e.f["func"].k != "attr":
                continue
            recv = e.f["func"].f["value"]
            meth = e.f["func"].f["attr"]
            if recv.k != "name" or recv.f["id"] != name or meth not in ("append", "extend", "insert") or not e.f["args"]:
                continue
            arg = e.f["args"][-1]
            for lenv in self._loop_envs(ctx, loops, env, depth):
                v = self.eval(ctx, arg, lenv, depth + 1)
                if meth == "extend":
                    out.extend(v if isinstance(v, (list, tuple)) else [Unknown("extend", _short(ctx, arg))])
                else:
                    out.append(v)
                if len(out) > MAX_ITEMS:
                    return out
        return out

    def _loop_envs(self, ctx: Ctx, loops: tuple, env: dict, depth: int = 0):
        """Variable bindings for each iteration of the enclosing for-loops (constant iterables only)."""
        envs = [dict(env)]
        for lp in loops:
            nxt = []
            for e in envs:
                it = self.eval(ctx, lp.f["iter"], e, depth + 1)
                items = self._iterable(it)
                if items is None:
                    # unknown iteration: the loop variables stay unknown
                    e2 = dict(e)
                    for t in _names(lp.f["target"]):
                        e2[t] = Unknown("loop-variable", f"{t} over {_short(ctx, lp.f['iter'])}")
                    nxt.append(e2)
                    continue
                for item in items:
                    e2 = dict(e)
                    assign_target(lp.f["target"], item, e2)
                    nxt.append(e2)
                    if len(nxt) > MAX_ITEMS:
                        break
            envs = nxt[:MAX_ITEMS]
        return envs

    def _iterable(self, v):
        """The items of an iterable value; of one of several (Alt), the items of every option."""
        if isinstance(v, Alt):
            out = []
            for o in v.options:
                got = self._iterable(o)
                if got is None:
                    return None
                out += got
            return out
        if isinstance(v, Some):
            return list(v.items)
        if isinstance(v, (list, tuple)):
            return list(v)
        if isinstance(v, ObjV) and v.is_tuple:
            return [x for _k, x in v.fields]
        if isinstance(v, dict):
            return list(v)
        if isinstance(v, _DictItems):
            return [tuple(x) for x in v.items]
        if isinstance(v, str):
            return list(v)
        return None

    # -------------------------------------------------------------- expressions
    def eval(self, ctx: Ctx, n: N | None, env: dict | None = None, depth: int = 0):
        """The value of expression n in module ctx with locals env (Unknown when not known)."""
        env = env or {}
        if n is None:
            return None
        if depth > MAX_DEPTH:
            self._cut += 1
            return Unknown("depth-limit")
        k = n.k
        if k == "const":
            return n.f["value"]
        if k == "name":
            if n.f["id"] == "__file__":
                return PathV(ctx.mod.path)
            return self.name(ctx, n.f["id"], env, depth + 1)
        if k == "fstring":
            return self._fstring(ctx, n, env, depth)
        if k in ("list", "tuple", "set"):
            return self._sequence(ctx, n, env, depth)
        if k == "dict":
            return self._dict(ctx, n, env, depth)
        if k == "comp":
            return self._comp(ctx, n, env, depth)
        if k == "attr":
            return self._attr(ctx, self.eval(ctx, n.f["value"], env, depth + 1), n.f["attr"], n, depth)
        if k == "binop":
            return self._binop(n.f["op"], self.eval(ctx, n.f["left"], env, depth + 1), self.eval(ctx, n.f["right"], env, depth + 1))
        if k == "subscript":
            return self._subscript_expr(ctx, n, env, depth)
        if k == "call":
            return self._call(ctx, n, env, depth)
        if k == "compare":
            return self._compare(ctx, n, env, depth)
        if k == "ifexp":
            return self._ifexp(ctx, n, env, depth)
        if k == "boolop":
            return self._boolop(ctx, n, env, depth)
        if k == "not":
            t = self.truth(ctx, n.f["value"], env, depth + 1)
            return Unknown("condition", _short(ctx, n)) if t is None else not t
        return Unknown("unsupported-expression", _short(ctx, n))

    def _sequence(self, ctx: Ctx, n: N, env: dict, depth: int):
        """A list, tuple or set display (a set as a list); starred lists spread into it."""
        out = []
        for e in n.f["elts"]:
            e = unstar(e)
            if e.k == "starred":
                v = self.eval(ctx, e.f["value"], env, depth + 1)
                if isinstance(v, (list, tuple)):
                    out.extend(v)
                elif isinstance(v, (Alt, Some)):
                    out.append(v)  # spread later by the caller (one of several lists, some items)
                else:
                    out.append(v if isinstance(v, Unknown) else Unknown("starred", _short(ctx, e)))
            else:
                out.append(self.eval(ctx, e, env, depth + 1))
        return tuple(out) if n.k == "tuple" else out

    def _dict(self, ctx: Ctx, n: N, env: dict, depth: int):
        """A dict display; `**` entries merged in order (an Alt of dicts when one is one of several)."""
        d = {}
        for kk, vv in n.f["pairs"]:
            if kk is None:
                # `{**a, **b}`: merged in order, for each option of a splatted Alt
                sv = self.eval(ctx, vv, env, depth + 1)
                d = self._spread(lambda base, x: {**base, **x} if isinstance(x, dict) else x if isinstance(x, Unknown) else
                                 Unknown("type-error", "** of a non-mapping") if _plain(x) or isinstance(x, (list, tuple))
                                 else Unknown("dict-splat", _short(ctx, n)), d, sv)
                if not isinstance(d, (dict, Alt)):
                    return d
                continue
            kv = self.eval(ctx, kk, env, depth + 1)
            if isinstance(kv, (Unknown, Alt, list, dict)):
                return Unknown("dict-key", _short(ctx, kk))
            key = kv if not isinstance(kv, PathV) else kv.path
            val = self.eval(ctx, vv, env, depth + 1)
            if isinstance(d, Alt):  # keys after a splat of one of several dicts
                d = self._spread(lambda x: {**x, key: val}, d)
            else:
                d[key] = val
        return d

    def _subscript_expr(self, ctx: Ctx, n: N, env: dict, depth: int):
        """`value[index]`, or `value[a:b]` with constant integer bounds."""
        base = self.eval(ctx, n.f["value"], env, depth + 1)
        if n.f["index"].k in ("slice", "other"):
            # a slice: constant integer bounds only
            m = _SLICE.fullmatch(_short(ctx, n.f["index"]))
            if m is None:
                return Unknown("unsupported-subscript", _short(ctx, n))
            sl = slice(*(int(x) if x else None for x in m.groups()))
            return self._spread(lambda b: b[sl] if isinstance(b, (str, list, tuple)) else
                                b if isinstance(b, Unknown) else Unknown("unsupported-subscript", _short(ctx, n)), base)
        idx = self.eval(ctx, n.f["index"], env, depth + 1)
        return self._spread(lambda b, i: self._subscript(b, i, ctx, n), base, idx)

    def _ifexp(self, ctx: Ctx, n: N, env: dict, depth: int):
        """`body if test else orelse`: one side when the test is known, else either."""
        t = self.truth(ctx, n.f["test"], env, depth + 1)
        if t is not None:
            return self.eval(ctx, n.f["body" if t else "orelse"], env, depth + 1)
        a = self.eval(ctx, n.f["body"], env, depth + 1)
        b = self.eval(ctx, n.f["orelse"], env, depth + 1)
        return alt((a, b))

    def _boolop(self, ctx: Ctx, n: N, env: dict, depth: int):
        """`x or default`, `x and y`: the value Python gives when the left side's truth is known."""
        left = self.eval(ctx, n.f["left"], env, depth + 1)
        keep = n.f["op"] == "or"  # an `or` keeps a true left side, an `and` a false one
        right: list = []

        def pick(x):
            t = _truth(x)
            if t is None:
                return Unknown("condition", _short(ctx, n))
            if t == keep:
                return x
            if not right:
                right.append(self.eval(ctx, n.f["right"], env, depth + 1))
            return right[0]

        return self._spread(pick, left)

    def truth(self, ctx: Ctx, n: N, env: dict, depth: int):
        """Whether a condition holds: True, False, or None when that is not known (`and`/`or`
        decided by one known side, `not`)."""
        if n.k == "boolop":
            a = self.truth(ctx, n.f["left"], env, depth + 1)
            stop = n.f["op"] == "or"  # the value that decides an `or` (True) or an `and` (False)
            if a is stop:
                return stop
            b = self.truth(ctx, n.f["right"], env, depth + 1)
            if b is stop:
                return stop
            return None if a is None or b is None else not stop
        if n.k == "not":
            t = self.truth(ctx, n.f["value"], env, depth + 1)
            return None if t is None else not t
        return _truth(self.eval(ctx, n, env, depth))

    def _fstring(self, ctx: Ctx, n: N, env: dict, depth: int):
        """An f-string: a str; one of several (Alt) when a part is, each part's options taken once
        per distinct expression (`f"{x}_{x}"` gives "a_a" and "b_b", never "a_b")."""
        parts, pat, unknown, alts = [], [], None, {}
        for p in n.f["parts"]:
            if p.k == "const":
                parts.append(str(p.f["value"]))
                pat.append(str(p.f["value"]))
                continue
            v = self.eval(ctx, p, env, depth + 1)
            txt = _short(ctx, p)
            if isinstance(v, Alt) and all(_formattable(o) for o in v.options):
                alts[txt] = v.options
                parts.append((txt,))
                pat.append("{" + txt + "}")
            elif not _formattable(v):
                u = v if isinstance(v, Unknown) else Unknown("several-bindings" if isinstance(v, Alt) else "not-a-string", txt)
                unknown = unknown or u
                pat.append("{" + txt + "}")
            else:
                s = _fmt(v)
                parts.append(s)
                pat.append(s)
        if unknown is not None:
            return Unknown(unknown.reason, unknown.detail, "".join(pat))
        if not alts:
            return "".join(parts)
        names = list(alts)
        if _product_size(alts.values()) > MAX_ALT:
            return Unknown("too-many-alternatives", "".join(pat), "".join(pat))
        outs = []
        for combo in itertools.product(*alts.values()):
            chosen = dict(zip(names, combo))
            outs.append("".join(_fmt(chosen[x[0]]) if isinstance(x, tuple) else x for x in parts))
        return alt(outs)

    def _compare(self, ctx: Ctx, n: N, env: dict, depth: int):
        """`a == b`, `x in (..)`, `a is None`, `<` on constants (chains too, each option of an Alt):
        True or False, or Unknown when that is not known."""
        vals = [self.eval(ctx, o, env, depth + 1) for o in n.f["operands"]]
        known = True
        for op, a, b in zip(n.f["ops"], vals, vals[1:]):
            op = " ".join(op.split())
            r = self._spread(lambda x, y: _compare1(op, x, y), a, b)
            t = _truth(r) if isinstance(r, (bool, Alt)) else None
            if t is False:
                return False
            if t is None:
                known = False
        return True if known else Unknown("comparison", _short(ctx, n))

    def _comp(self, ctx: Ctx, n: N, env: dict, depth: int, first=None):
        """A list/set/generator comprehension: a list; `Some` of the items when a filter is not
        known; over one of several iterables (Alt), one of several lists."""
        if n.f.get("kind") == "dict" or n.f.get("body") is None:
            return Unknown("unsupported-comprehension", _short(ctx, n))
        gens = n.f["gens"]
        if first is None and gens and gens[0][0] == "for":
            first = self.eval(ctx, gens[0][2], env, depth + 1)
            if isinstance(first, Alt):
                return self._spread(lambda o: self._comp(ctx, n, env, depth, o), first)
        envs = [(dict(env), True)]
        for gi, (kind, a, b) in enumerate(gens):
            nxt = []
            for e, sure in envs:
                if kind == "for":
                    it = first if gi == 0 else self.eval(ctx, b, e, depth + 1)
                    items = self._iterable(it)
                    if items is None:
                        why = f" ({it})" if isinstance(it, Unknown) and it.reason != "comprehension-over-unknown" else ""
                        return Unknown("comprehension-over-unknown", _short(ctx, b) + why)
                    # the items of several options, or of Some: each may be there
                    isure = sure and not isinstance(it, (Alt, Some))
                    for item in items:
                        e2 = dict(e)
                        assign_target(a, item, e2)
                        nxt.append((e2, isure))
                else:
                    t = self.truth(ctx, a, e, depth + 1)
                    if t is not False:
                        nxt.append((e, sure and t is True))
                if len(nxt) > MAX_ITEMS:
                    return Unknown("too-many-items", _short(ctx, n))
            envs = nxt
        vals = [self.eval(ctx, n.f["body"], e, depth + 1) for e, _ in envs]
        return vals if all(sure for _, sure in envs) else Some(tuple(vals))

    def _attr(self, ctx: Ctx, base, attr: str, n: N, depth: int):
        if isinstance(base, ModV):
            return self.global_(base.name, attr, depth + 1)
        if isinstance(base, PathV):
            if attr == "parent":
                return base.parent
            if attr == "name":
                return posixpath.basename(base.path)
            if attr == "stem":
                return posixpath.splitext(posixpath.basename(base.path))[0]
            if attr == "suffix":
                return posixpath.splitext(base.path)[1]
            if attr == "parents":
                return _Parents(base)
            if attr == "parts" and base.rooted:
                return tuple(x for x in base.path.split("/") if x)
            return _Method(base, attr)
        if isinstance(base, (str, list, dict)):
            return _Method(base, attr)
        if isinstance(base, Unknown):
            if base.reason == "external":
                return Unknown("external", f"{base.detail}.{attr}")
            return Unknown(base.reason, base.detail, base.pattern + "." + attr if base.pattern else "")
        if isinstance(base, Alt):
            return self._spread(lambda b: self._attr(ctx, b, attr, n, depth), base)
        if isinstance(base, ObjV):
            v = base.field(attr)
            return v if v is not None or any(k == attr for k, _v in base.fields) else \
                Unknown("unsupported-attribute", f"{base.cls}.{attr}")
        return Unknown("unsupported-attribute", _short(ctx, n))

    def _subscript(self, base, idx, ctx, n):
        """base[idx] for one option of each (the caller spreads Alt)."""
        if isinstance(base, _Parents) and isinstance(idx, int):
            p = base.path
            for _ in range(idx + 1):
                p = p.parent
            return p
        if isinstance(base, dict):
            if isinstance(idx, Unknown):
                # any value of the dict: one of all of them
                vals = list(base.values())
                return alt(vals) if vals else Unknown("empty-dict")
            key = idx.path if isinstance(idx, PathV) else idx
            if isinstance(key, (str, int, bool, tuple)) and key in base:
                return base[key]
            if isinstance(key, (str, int, float, bool, tuple)) or key is None:
                return Unknown("missing-key", repr(idx)[:80])
            return Unknown("unsupported-subscript", _short(ctx, n))
        if isinstance(base, (list, tuple, str, Some)):
            items = base.items if isinstance(base, Some) else base
            if isinstance(idx, int) and not isinstance(idx, bool):
                if isinstance(base, Some):
                    # some of the items are there: the one at idx is any from there on
                    cand = items[idx:] if idx >= 0 else items[: len(items) + idx + 1]
                    return alt(cand) if cand else Unknown("index-error", _short(ctx, n))
                try:
                    return base[idx]
                except IndexError:
                    return Unknown("index-error", _short(ctx, n))
            if isinstance(idx, Unknown) and not isinstance(base, str):
                return alt(items) if items else Unknown("index-error", _short(ctx, n))
            if isinstance(idx, (str, float)) or idx is None:
                return Unknown("type-error", _short(ctx, n))  # a list or str indexed by a str
        if isinstance(base, ObjV) and base.is_tuple and isinstance(idx, int) and not isinstance(idx, bool):
            try:
                return base.fields[idx][1]
            except IndexError:
                return Unknown("index-error", _short(ctx, n))
        if isinstance(base, Unknown):
            return base
        if base is None or isinstance(base, (int, float, bool)):
            return Unknown("type-error", _short(ctx, n))  # not subscriptable
        return Unknown("unsupported-subscript", _short(ctx, n))

    def _spread(self, f, *vals):
        """f over the options of its arguments (every combination when several are Alt). Options
        on which f raises at run time are dropped while another remains (that path builds nothing)."""
        if not any(isinstance(v, Alt) for v in vals):
            return f(*vals)
        choices = [v.options if isinstance(v, Alt) else (v,) for v in vals]
        if _product_size(choices) > MAX_ALT:
            return Unknown("too-many-alternatives", str(_product_size(choices)))
        outs = [f(*combo) for combo in itertools.product(*choices)]
        ok = [o for o in outs if not (isinstance(o, Unknown) and o.reason in RAISES)]
        return alt(ok) if ok else outs[0]

    def _binop(self, op: str, a, b):
        if isinstance(a, Unknown) or isinstance(b, Unknown):
            # keep a readable pattern: {GEN_DIR}/gen/inst_{dtype}.cu
            if op in ("/", "+") and all(isinstance(x, (Unknown, str, PathV)) or _texts(x) for x in (a, b)):
                sep = "/" if op == "/" else ""
                u = a if isinstance(a, Unknown) else b
                return Unknown(u.reason, u.detail, _pat(a) + sep + _pat(b))
            return a if isinstance(a, Unknown) else b
        if isinstance(a, Alt) or isinstance(b, Alt):
            return self._spread(lambda x, y: self._binop(op, x, y), a, b)
        if op == "+" and (isinstance(a, Some) or isinstance(b, Some)) and all(
                isinstance(x, (list, tuple, Some)) for x in (a, b)):
            return Some(tuple(a.items if isinstance(a, Some) else a) + tuple(b.items if isinstance(b, Some) else b))
        if op == "/" and isinstance(a, PathV) and isinstance(b, (str, PathV)):
            return a.join(b.path if isinstance(b, PathV) else b)
        if op == "/" and isinstance(a, str) and isinstance(b, PathV):
            return PathV(a).join(b.path)
        if op == "+":
            if isinstance(a, str) and isinstance(b, str):
                return a + b
            if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
                return list(a) + list(b)
        if op == "%" and isinstance(a, str):
            try:
                return a % b
            except (TypeError, ValueError):
                return Unknown("format-error")
        if op == "*" and isinstance(a, (list, str)) and isinstance(b, int):
            return a * b if b < 64 else Unknown("too-large")
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
            try:
                return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "//": lambda: a // b}[op]()
            except (KeyError, ZeroDivisionError):
                pass
        if a is None or b is None:
            return Unknown("type-error", f"None {op} ...")  # no operator takes None: TypeError at run time
        return Unknown("unsupported-operation", op)

    def _call(self, ctx: Ctx, n: N, env: dict, depth: int):
        fn = n.f["func"]
        args = [self.eval(ctx, a, env, depth + 1) for a in n.f["args"]]
        kwargs = {k: self.eval(ctx, v, env, depth + 1) for k, v in n.f["kwargs"]}
        dotted = _dotted(fn)
        last = dotted.rsplit(".", 1)[-1] if dotted else ""
        if n.f["star"]:
            # `f(*xs)` / `f(**kw)`: the splatted arguments are not in the IR, so the call is not folded
            return Unknown("runtime-call", f"{dotted or _short(ctx, fn)}(*...)")
        # methods on values we hold
        if fn.k == "attr":
            recv = self.eval(ctx, fn.f["value"], env, depth + 1)
            m = fn.f["attr"]
            opts = recv.options if isinstance(recv, Alt) else (recv,)
            if all(_holds_methods(o) for o in opts):
                return self._spread(lambda r: self._method(ctx, n, r, m, args, kwargs), recv)
            if isinstance(recv, ModV):
                target = self.global_(recv.name, m, depth + 1)
                if isinstance(target, FuncV):
                    return self._call_func(target, n, args, kwargs, depth)
                if isinstance(target, ClassV):
                    return self._construct(target, n, args, kwargs, depth)
                if isinstance(target, Unknown) and target.reason == "external":
                    dotted = target.detail
                    last = dotted.rsplit(".", 1)[-1]
            elif isinstance(recv, Unknown) and recv.reason == "external":
                dotted = f"{recv.detail}.{m}"
                last = m
        elif fn.k == "name":
            v = self.name(ctx, fn.f["id"], env, depth + 1)
            if isinstance(v, FuncV):
                return self._call_func(v, n, args, kwargs, depth)
            if isinstance(v, ClassV):
                return self._construct(v, n, args, kwargs, depth)
            if isinstance(v, Unknown) and v.reason == "external":
                dotted, last = v.detail, v.detail.rsplit(".", 1)[-1]
        if not dotted:
            return Unknown("runtime-call", _short(ctx, n))
        # well-known pure functions, for each option of their arguments
        if not (dotted in _BUILTINS or last == "Path" or (last == "join" and dotted.endswith("path.join"))):
            return Unknown("runtime-call", f"{dotted}()")
        keys = list(kwargs)
        return self._spread(lambda *a: self._builtin(ctx, n, dotted, last, list(a[:len(args)]),
                                                     dict(zip(keys, a[len(args):]))), *args, *kwargs.values())

    def _method(self, ctx: Ctx, n: N, recv, m: str, args: list, kwargs: dict):
        """A method of a value we hold (a path, str, dict, list, open file)."""
        if isinstance(recv, Unknown):
            return recv
        if recv is None:
            return Unknown("type-error", f"None.{m}()")  # AttributeError at run time
        if isinstance(recv, PathV):
            if m in ("resolve", "absolute", "expanduser"):
                return recv
            if m == "joinpath":
                return _join(recv, args)
            if m == "as_posix":
                return recv.path
            if m == "with_suffix" and args and isinstance(args[0], str):
                return PathV(posixpath.splitext(recv.path)[0] + args[0], recv.rooted)
            if m == "with_name" and len(args) == 1 and isinstance(args[0], str) and "/" not in args[0]:
                return recv.parent.join(args[0])
            if m == "relative_to" and len(args) == 1 and isinstance(args[0], (str, PathV)):
                base = _as_path(args[0])
                if base.rooted != recv.rooted:
                    return Unknown("value-error", f"Path.relative_to({base.path})")
                if recv.path == base.path:
                    return PathV("", recv.rooted)
                if base.path == "" or recv.path.startswith(base.path + "/"):
                    return PathV(recv.path[len(base.path) + 1 if base.path else 0:])
                return Unknown("value-error", f"{recv.path} is not under {base.path}")
            if m in ("read_text", "read_bytes"):
                return self._read(recv)
            if m == "open" and all(isinstance(a, str) and "r" in a for a in args[:1]):
                return _OpenFile(recv)
            return Unknown("runtime-call", f"Path.{m}()")
        if isinstance(recv, _OpenFile):
            return self._read(recv.path) if m == "read" and not args else Unknown("runtime-call", f"file.{m}()")
        if isinstance(recv, str):
            if m == "format":
                if any(isinstance(a, (Unknown, Alt)) for a in args + list(kwargs.values())):
                    return Unknown("format-argument", _short(ctx, n))
                try:
                    return recv.format(*[as_str(a) for a in args], **{k: as_str(v) for k, v in kwargs.items()})
                except (IndexError, KeyError, ValueError):
                    return Unknown("format-error", _short(ctx, n))
            if m == "join" and args and isinstance(args[0], (list, tuple)) and all(isinstance(x, str) for x in args[0]):
                return recv.join(args[0])
            if m in ("lower", "upper", "strip", "lstrip", "rstrip") and not args:
                return getattr(recv, m)()
            if m in _STR_METHODS and all(isinstance(a, (str, int)) and not isinstance(a, bool) for a in args) and not kwargs:
                try:
                    return getattr(recv, m)(*args)
                except (TypeError, ValueError):
                    return Unknown("runtime-call", f"str.{m}()")
            return Unknown("runtime-call", f"str.{m}()")
        if isinstance(recv, dict):
            if m in ("items", "keys", "values") and not args:
                return {"keys": lambda: list(recv), "values": lambda: list(recv.values()),
                        "items": lambda: _DictItems(list(recv.items()))}[m]()
            if m == "get" and 1 <= len(args) <= 2 and not kwargs:
                default = args[1] if len(args) == 2 else None
                return self._spread(lambda k: _dict_get(recv, k, default), args[0])
            if m == "copy" and not args:
                return dict(recv)
            return Unknown("runtime-call", f"dict.{m}()")
        if isinstance(recv, (list, tuple)) and m in ("index", "count") and len(args) == 1 and _plain(args[0]):
            try:
                return getattr(recv, m)(args[0])
            except ValueError:
                return Unknown("value-error", f"{m}()")
        return Unknown("runtime-call", f"{type(recv).__name__}.{m}()")

    def _read(self, path):
        """The text of a file of the scan (str), read as bytes through the scan's Source."""
        if isinstance(path, str):
            path = _as_path(path)
        if not isinstance(path, PathV):
            return path if isinstance(path, Unknown) else Unknown("runtime-call", "read()")
        if not path.rooted:
            return Unknown("outside", f"{path.path}: outside the scan")
        got = self._texts.get(path.path)
        if got is None:
            src = self.r.index.source
            data = src.read(path.path) if path.path and src.exists(path.path) else None
            if data is None:
                got = Unknown("missing-file", f"{path.path}: not in the scan")
            else:
                try:
                    got = data.decode("utf-8-sig")
                except UnicodeDecodeError:
                    got = Unknown("unreadable", f"{path.path}: not UTF-8")
            self._texts[path.path] = got
        return got

    def _json_of(self, v, what: str):
        """json.loads / json.load of text read from the scan: the parsed value (shared between
        callers, so never changed here)."""
        if isinstance(v, (_OpenFile, PathV)):
            v = self._read(v.path if isinstance(v, _OpenFile) else v)
        if isinstance(v, bytes):
            try:
                v = v.decode("utf-8-sig")
            except UnicodeDecodeError:
                return Unknown("bad-json", "not UTF-8")
        if not isinstance(v, str):
            return v if isinstance(v, Unknown) else Unknown("runtime-call", what)
        got = self._json.get(v)
        if got is None:
            try:
                if text_nests(v) and not json_depth_ok(v):
                    got = Unknown("bad-json", f"nested deeper than {MAX_JSON_DEPTH} levels")
                else:
                    got = json.loads(v)
            except (ValueError, RecursionError) as e:
                got = Unknown("bad-json", str(e)[:80])
            self._json[v] = got
        return got

    def _builtin(self, ctx: Ctx, n: N, dotted: str, last: str, args: list, kwargs: dict):
        """Well-known pure functions (and reading JSON from the scan), on one option of each argument."""
        if dotted in ("pathlib.Path", "Path", "pathlib.PurePath", "pathlib.PosixPath", "PurePosixPath", "pathlib.PurePosixPath") or last == "Path":
            if not args:
                return Unknown("runtime-call", "Path()")
            return _join(_as_path(args[0]), args[1:]) if not isinstance(args[0], Unknown) else args[0]
        if dotted in ("os.path.join", "posixpath.join") or (last == "join" and dotted.endswith("path.join")):
            if not args:
                return Unknown("runtime-call", "join()")
            first = args[0]
            if isinstance(first, Unknown):
                return first
            res = _join(_as_path(first), args[1:])
            return res if isinstance(first, PathV) or isinstance(res, Unknown) else res.path
        if dotted in ("os.path.dirname",) and args:
            a = args[0]
            if isinstance(a, PathV):
                return a.parent.path
            if isinstance(a, str):
                return posixpath.dirname(a)
            return a if isinstance(a, Unknown) else Unknown("runtime-call", "dirname")
        if dotted in ("os.path.abspath", "os.path.realpath", "os.path.normpath") and args:
            return args[0]
        if dotted == "str" and len(args) == 1:
            a = args[0]
            if isinstance(a, PathV):
                return a  # a path kept as a path: where it points is what matters
            if isinstance(a, (str, int, float, bool)):
                return str(a)
            return a if isinstance(a, Unknown) else Unknown("runtime-call", "str()")
        if dotted == "int" and len(args) == 1 and not kwargs:
            a = args[0]
            if isinstance(a, (int, bool)) or (isinstance(a, str) and a.strip().lstrip("+-").isdigit()):
                return int(a)
            return a if isinstance(a, Unknown) else Unknown("runtime-call", "int()")
        if dotted in ("list", "tuple", "sorted", "set", "frozenset", "dict", "len") and len(args) <= 1 and not kwargs:
            a = args[0] if args else ()
            if isinstance(a, Unknown):
                return a
            if dotted == "dict":
                return _as_dict(a)
            if dotted == "len":
                return len(a) if isinstance(a, (str, list, tuple, dict)) else Unknown("runtime-call", "len()")
            if isinstance(a, Some) and dotted != "len":
                return Some(tuple(_sorted(a.items))) if dotted == "sorted" else a
            items = self._iterable(a) if not isinstance(a, (Alt, Some, str)) else None
            if items is None:
                return Unknown("runtime-call", f"{dotted}()")
            if dotted == "sorted":
                return _sorted(items)
            if dotted in ("set", "frozenset"):
                return list(dict.fromkeys(items)) if all(_hashable(x) for x in items) else Unknown("runtime-call", f"{dotted}()")
            return list(items)
        if dotted == "dict.fromkeys" and len(args) == 1 and not kwargs:
            items = self._iterable(args[0]) if not isinstance(args[0], (Alt, Some, str)) else None
            if items is None or not all(_hashable(x) for x in items):
                return args[0] if isinstance(args[0], Unknown) else Unknown("runtime-call", "dict.fromkeys()")
            return dict.fromkeys(items)
        if dotted in ("json.loads", "json.load") and len(args) == 1:
            return self._json_of(args[0], f"{dotted}()")
        if dotted in ("open", "io.open", "builtins.open") and args and all(isinstance(a, str) and "r" in a for a in args[1:2]):
            p = _as_path(args[0]) if isinstance(args[0], (str, PathV)) else args[0]
            return _OpenFile(p) if isinstance(p, PathV) else p if isinstance(p, Unknown) else Unknown("runtime-call", "open()")
        if dotted in ("os.getenv", "os.environ.get", "getenv"):
            return Unknown("environment", f"{args[0] if args and isinstance(args[0], str) else '?'}")
        return Unknown("runtime-call", f"{dotted}()")

    def _call_func(self, f: FuncV, call: N, args: list, kwargs: dict, depth: int):
        """A scanned function called with constant arguments: fold its return expression(s).
        Its body is evaluated with a fresh expression depth (recursion cannot happen: a function
        being evaluated is not entered again); the value is kept per arguments, like a pure call."""
        c = self.r.ctx(f.qualname)
        if c is None or c.kind != "function":
            return Unknown("runtime-call", f"{f.qualname}()")
        if f.qualname in self._busy:
            self._cut += 1
            return Unknown("recursion", f.qualname)
        if self._frames >= MAX_FRAMES:
            self._cut += 1
            return Unknown("depth-limit", f"{f.qualname}(): calls nested deeper than {MAX_FRAMES}")
        key = None
        try:
            key = (f.qualname, tuple(_akey(a) for a in args), tuple(sorted((k, _akey(v)) for k, v in kwargs.items())),
                   tuple(sorted((k, _akey(v)) for k, v in self.fixed.items())))
            hash(key)
        except TypeError:
            key = None
        if key is not None and key in self._calls:
            return self._calls[key]
        env: dict = {}
        params = c.node.f["params"]
        pos = [p for p in params if p[2] == ""]
        for (pname, _d, _k), a in zip(pos, args):
            env[pname] = a
        cut = self._cut
        self._busy.add(f.qualname)
        self._frames += 1
        try:
            for pname, default, _kind in params:
                if pname in kwargs:
                    env[pname] = kwargs[pname]
                elif pname not in env and default is not None:
                    env[pname] = self.eval(self.r.ctx(c.mod.name) or c, default, {}, 1)
            rets: list = []
            self._live_returns(c, c.node.f["body"], env, rets)
            if not rets:
                return Unknown("no-return", f.qualname)
            vals = [self.eval(c, r, renv, 1) for r, renv in rets]
        finally:
            self._busy.discard(f.qualname)
            self._frames -= 1
        v = alt(vals)
        if key is not None and self._cut == cut:
            self._calls[key] = v
        return v


    def _construct(self, cls: ClassV, call: N, args: list, kwargs: dict, depth: int):
        """`Spec(a, b=c)` of a scanned dataclass or NamedTuple: the instance with its fields bound
        as the generated `__init__` binds them. Any other class (its own `__init__`, a base
        outside the scan that may define one): Unknown."""
        shape = self._record_shape(cls.qualname, 0)
        if isinstance(shape, Unknown):
            return shape
        fields, is_tuple, truth, post_set = shape
        init = [(name, default) for name, default, in_init in fields if in_init]
        if len(args) > len(init):
            return Unknown("type-error", f"{cls.qualname}(): too many arguments")
        bound = dict(zip((name for name, _d in init), args))
        for k, v in kwargs.items():
            if k in bound or not any(name == k for name, _d in init):
                return Unknown("type-error", f"{cls.qualname}(): argument {k}")
            bound[k] = v
        out = []
        for name, default, _in_init in fields:
            if name in post_set:
                v = Unknown("post-init", f"{cls.qualname}.{name}")
            elif name in bound:
                v = bound[name]
            elif default is _NO_DEFAULT:
                return Unknown("type-error", f"{cls.qualname}(): missing {name}")
            else:
                v = default
            out.append((name, v))
        return ObjV(cls.qualname, tuple(out), truth, is_tuple)

    def _record_shape(self, qualname: str, level: int):
        """(fields [(name, default or _NO_DEFAULT, in __init__)], NamedTuple?, truth, names
        `__post_init__` sets) of a scanned dataclass or NamedTuple class, inherited dataclass
        fields first; Unknown for any other class. Kept per class."""
        got = self._shapes.get(qualname)
        if got is None:
            c = self.r.ctx(qualname)
            if c is None or c.kind != "class" or c.node is None or level > 8:
                return Unknown("runtime-call", f"{qualname}()")
            got = self._shapes[qualname] = self._shape_of(c, qualname, level)
        return got

    def _shape_of(self, c: Ctx, qualname: str, level: int):
        mctx = self.r.ctx(c.mod.name) or c
        decorated = any(self._is_external(mctx, d.f["func"] if d.k == "call" else d, ("dataclasses.dataclass",))
                        for d in c.node.f.get("decorators") or [])
        inherited: list = []
        is_tuple = False
        for b in c.node.f["bases"]:
            if self._is_external(mctx, b, ("typing.NamedTuple", "typing_extensions.NamedTuple")):
                is_tuple = True
                continue
            bv = self.eval(mctx, b, {}, 1)
            if isinstance(bv, ClassV) and decorated:
                base = self._record_shape(bv.qualname, level + 1)
                if isinstance(base, Unknown):
                    return base
                inherited = [f for f in inherited if f[0] not in {x[0] for x in base[0]}] + list(base[0])
            elif not self._is_external(mctx, b, ("typing.Generic", "builtins.object")) and not (
                    b.k == "name" and b.f["id"] == "object"):
                return Unknown("runtime-call", f"{qualname}(): base {_short(mctx, b)}")
        if not decorated and not is_tuple:
            return Unknown("runtime-call", f"{qualname}()")
        own, methods = [], {}
        for st in c.node.f["body"]:
            if st.k == "def":
                methods[st.f["name"]] = st
            elif st.k == "assign" and st.f["annotation"] is not None and len(st.f["targets"]) == 1 \
                    and st.f["targets"][0].k == "name":
                ann = _short(mctx, st.f["annotation"])
                if "InitVar" in ann:
                    return Unknown("runtime-call", f"{qualname}(): InitVar")
                if "ClassVar" not in ann:
                    own.append(self._field(mctx, st.f["targets"][0].f["id"], st.f["value"]))
        if "__init__" in methods or "__new__" in methods:
            return Unknown("runtime-call", f"{qualname}(): its own __init__")
        fields = [f for f in inherited if f[0] not in {x[0] for x in own}] + own
        post = methods.get("__post_init__")
        post_set = _set_in_post_init(mctx, post) if post is not None else set()
        if post_set is None:
            post_set = {name for name, _d, _i in fields}
        truth = None if "__bool__" in methods or "__len__" in methods else (bool(fields) if is_tuple else True)
        return fields, is_tuple, truth, post_set

    def _field(self, mctx: Ctx, name: str, value: N | None) -> tuple:
        """(name, default or _NO_DEFAULT, in __init__) of one annotated class-body field."""
        if value is None:
            return (name, _NO_DEFAULT, True)
        if value.k == "call" and self._is_external(mctx, value.f["func"], ("dataclasses.field",)):
            kw = dict(value.f["kwargs"])
            in_init = not (kw.get("init") is not None and kw["init"].k == "const" and kw["init"].f["value"] is False)
            if "default" in kw:
                return (name, self.eval(mctx, kw["default"], {}, 1), in_init)
            if "default_factory" in kw:
                fac = _short(mctx, kw["default_factory"])
                made = {"list": [], "dict": {}, "tuple": (), "set": []}.get(fac)
                return (name, made if made is not None else Unknown("runtime-call", f"{fac}()"), in_init)
            return (name, _NO_DEFAULT, in_init)
        return (name, self.eval(mctx, value, {}, 1), True)

    def _is_external(self, mctx: Ctx, n: N, names: tuple) -> bool:
        """Whether `n` names one of these (outside the scan) in the module: `dataclass` imported
        from dataclasses, `typing.NamedTuple`, ..."""
        if n.k not in ("name", "attr"):
            return False
        v = self.eval(mctx, n, {}, 1)
        return isinstance(v, Unknown) and v.reason == "external" and v.detail in names

    def _live_returns(self, c: Ctx, body: list, env: dict, out: list) -> bool:
        """The return expressions of `body` that can run with these arguments, each with the
        names bound where it runs, into `out`: an `if` whose test the arguments decide contributes
        only its taken branch (`if variant == "x": return [...]` called with another variant), a
        `for` over known items is walked once per item (`for spec in SPECS: if spec.role == role:
        return spec` returns the matching items), and nothing runs after a statement that always
        returns or raises. True when `body` always leaves the function."""
        for st in body:
            k = st.k
            if k == "return":
                if st.f["value"] is not None:
                    out.append((st.f["value"], env))
                return True
            if k == "raise":
                return True
            if k == "if":
                t = self.truth(c, st.f["test"], env, 1)
                taken = ([st.f["body"]] if t is True else [st.f["orelse"] or []] if t is False
                         else [st.f["body"], st.f["orelse"] or []])
                ends = [self._live_returns(c, b, env, out) for b in taken]
                if all(ends):
                    return True
                continue
            if k in ("def", "class"):
                continue
            if k == "for" and self._loop_returns(c, st, env, out):
                continue
            for sub in iter_stmts([st]):
                if sub.k == "return" and sub.f["value"] is not None:
                    out.append((sub.f["value"], env))
        return False

    def _loop_returns(self, c: Ctx, st: N, env: dict, out: list) -> bool:
        """The returns of a `for` loop's body once per item of a known iterable, with the loop
        variables bound to it (and of its `else`); False when the items are not known."""
        items = self._iterable(self.eval(c, st.f["iter"], env, 1))
        if items is None or len(items) > MAX_ITEMS:
            return False
        for item in items:
            e2 = dict(env)
            assign_target(st.f["target"], item, e2)
            self._live_returns(c, st.f["body"], e2, out)
        self._live_returns(c, st.f["orelse"] or [], env, out)
        return True


class _Parents:
    def __init__(self, path: PathV):
        self.path = path


class _Method:
    def __init__(self, recv, name):
        self.recv, self.name = recv, name


class _DictItems:
    def __init__(self, items):
        self.items = items


class _Aug:
    pass


_AUG = _Aug()


class _OpenFile:
    """`open(path)` / `path.open()` of a file in the scan (read by json.load or .read())."""

    def __init__(self, path: PathV):
        self.path = path


_LITERAL = re.compile(r"((?:[A-Za-z_]\w*\.)+)?Literal\[(.*)\]", re.S)
_SLICE = re.compile(r"\s*(-?\d+)?\s*:\s*(-?\d+)?\s*")
_STR_METHODS = frozenset({"replace", "startswith", "endswith", "removeprefix", "removesuffix", "split", "rsplit",
                          "partition", "rpartition", "zfill", "ljust", "rjust", "center", "find", "rfind"})
_PLAIN = (str, int, float, bool, type(None))
# the functions _builtin folds (besides any `*.Path` and `*path.join`)
_BUILTINS = frozenset({
    "pathlib.Path", "Path", "pathlib.PurePath", "pathlib.PosixPath", "PurePosixPath", "pathlib.PurePosixPath",
    "os.path.join", "posixpath.join", "os.path.dirname", "os.path.abspath", "os.path.realpath", "os.path.normpath",
    "str", "int", "list", "tuple", "sorted", "set", "frozenset", "dict", "len", "dict.fromkeys", "json.loads", "json.load",
    "open", "io.open", "builtins.open", "os.getenv", "os.environ.get", "getenv"})
# methods that change a list, dict or set in place
_MUTATORS = frozenset({"append", "extend", "insert", "update", "setdefault", "pop", "popitem", "clear", "remove",
                       "sort", "reverse", "add", "discard"})
_DEL = re.compile(r"del\s+([A-Za-z_]\w*)\b")


def alt(options):
    """One of these values: nested Alt flattened, repeats dropped; the value itself when only one
    remains; Unknown beyond MAX_ALT options."""
    flat, seen = [], set()
    for o in options:
        for x in (o.options if isinstance(o, Alt) else (o,)):
            k = _akey(x)
            if k not in seen:
                seen.add(k)
                flat.append(x)
    if len(flat) > MAX_ALT:
        return Unknown("too-many-alternatives", str(len(flat)))
    return flat[0] if len(flat) == 1 else Alt(tuple(flat))


def _akey(x):
    """A key telling repeated options apart without printing large values (manifest records)."""
    if _hashable(x):
        return x
    if isinstance(x, (list, tuple)) and len(x) <= 64 and all(_hashable(e) for e in x):
        return (type(x).__name__, tuple(x))
    return ("id", id(x))


def _hashable(x) -> bool:
    try:
        hash(x)
        return True
    except TypeError:
        return False


def _plain(v) -> bool:
    return isinstance(v, _PLAIN)


def _truth(v):
    """Python's truth of a value: True, False, or None when not known."""
    if isinstance(v, Alt):
        ts = {_truth(o) for o in v.options}
        return ts.pop() if len(ts) == 1 else None
    if isinstance(v, Some):
        return False if not v.items else None
    if isinstance(v, (_PLAIN, list, tuple, dict)):
        return bool(v)
    if isinstance(v, (PathV, ModV, FuncV, ClassV, _OpenFile)):
        return True
    if isinstance(v, ObjV):
        return v.truth
    return None


def _equal(a, b):
    """a == b: True, False, or None when a part is not known (dicts and lists part by part)."""
    if isinstance(a, Alt) or isinstance(b, Alt):
        ts = {_equal(x, y) for x in (a.options if isinstance(a, Alt) else (a,))
              for y in (b.options if isinstance(b, Alt) else (b,))}
        return ts.pop() if len(ts) == 1 else None
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return False
        return _all3(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b) or isinstance(a, tuple) != isinstance(b, tuple):
            return False if len(a) != len(b) else None
        return _all3(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, PathV) or isinstance(b, PathV):
        return a == b if isinstance(a, PathV) and isinstance(b, PathV) else None
    if isinstance(a, ObjV) and isinstance(b, ObjV):
        # a dataclass's __eq__ compares fields of the same class only
        return _all3(_equal(x, y) for (_k, x), (_k2, y) in zip(a.fields, b.fields)) if a.cls == b.cls else False
    if isinstance(a, ObjV) and not a.is_tuple and _plain(b) or isinstance(b, ObjV) and not b.is_tuple and _plain(a):
        return False
    if _plain(a) and _plain(b):
        return a == b
    if isinstance(a, (dict, list, tuple)) and _plain(b) or isinstance(b, (dict, list, tuple)) and _plain(a):
        return False
    return None


def _all3(ts) -> bool | None:
    out = True
    for t in ts:
        if t is False:
            return False
        if t is None:
            out = None
    return out


def _compare1(op: str, a, b):
    """One comparison on one option of each side: True, False, or Unknown."""
    if op in ("==", "!="):
        t = _equal(a, b)
        return Unknown("comparison") if t is None else t == (op == "==")
    if op in ("is", "is not"):
        if a is None or b is None:
            other = b if a is None else a
            if isinstance(other, (_PLAIN, list, tuple, dict, PathV)):
                return (other is None) == (op == "is")
        return Unknown("comparison")
    if op in ("in", "not in"):
        if isinstance(b, dict):
            b = list(b)
        if isinstance(b, str) and isinstance(a, str):
            return (a in b) == (op == "in")
        if isinstance(b, (list, tuple)):
            ts = [_equal(a, x) for x in b]
            t = True if True in ts else None if None in ts else False
            return Unknown("comparison") if t is None else t == (op == "in")
        return Unknown("comparison")
    if op in ("<", "<=", ">", ">=") and (isinstance(a, (int, float)) and isinstance(b, (int, float))
                                          or isinstance(a, str) and isinstance(b, str)):
        return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
    return Unknown("comparison")


def _formattable(v) -> bool:
    """A value an f-string turns into known text."""
    if isinstance(v, (_PLAIN, PathV)):
        return True
    if isinstance(v, (list, tuple)):
        return all(_plain(x) for x in v)
    return False


def _fmt(v) -> str:
    return v.path if isinstance(v, PathV) else str(v)


def _product_size(choices) -> int:
    size = 1
    for c in choices:
        size *= max(len(c), 1)
    return size


def _holds_methods(v) -> bool:
    """Values whose methods are folded here (an Unknown passes its reason on)."""
    return isinstance(v, (_PLAIN, PathV, dict, list, tuple, _OpenFile)) or (
        isinstance(v, Unknown) and v.reason not in ("external", "undefined"))


def _dict_get(d: dict, k, default):
    if isinstance(k, Unknown):
        return alt(list(d.values()) + [default])
    k = k.path if isinstance(k, PathV) else k
    if not _hashable(k):
        return Unknown("type-error", "unhashable key")
    return d.get(k, default)


def _as_dict(a):
    """dict(x) of a dict, of .items(), of a list of pairs."""
    if isinstance(a, dict):
        return dict(a)
    pairs = a.items if isinstance(a, _DictItems) else a
    if isinstance(pairs, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2 and _hashable(p[0])
                                                and not isinstance(p[0], (Unknown, Alt)) for p in pairs):
        return {k: v for k, v in pairs}
    return Unknown("runtime-call", "dict()")


def _sorted(items: list) -> list:
    try:
        return sorted(items)
    except TypeError:
        return sorted(items, key=str)


def text_nests(text: str) -> bool:
    """Whether a JSON text has enough brackets to nest deeper than the limit at all."""
    return text.count("[") + text.count("{") > MAX_JSON_DEPTH


def _literal_items(inner: str):
    """The values of `Literal[<inner>]` when they are str/int/bool/None literals."""
    if len(inner) > 4096:
        return None
    inner = inner.strip()
    if inner.endswith(","):  # `Literal[\n    "a",\n    "b",\n]`
        inner = inner[:-1]
    try:
        vals = ast.literal_eval("(" + inner + ",)")
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if not isinstance(vals, tuple) or not vals or not all(isinstance(v, _PLAIN) for v in vals):
        return None
    return vals


def _pat(v) -> str:
    if isinstance(v, Unknown):
        return v.pattern or "{" + (v.detail or v.reason) + "}"
    if isinstance(v, PathV):
        return v.path
    if _texts(v):
        # one of several texts: what they share, the rest as {a|b} (`tgv_{bf16|fp16}_64x8.cu`)
        opts = [_pat(o) for o in v.options]
        pre = posixpath.commonprefix(opts)
        suf = posixpath.commonprefix([o[len(pre):][::-1] for o in opts])[::-1]
        return pre + "{" + "|".join(o[len(pre):len(o) - len(suf)] for o in opts) + "}" + suf
    return str(v)


def _texts(v) -> bool:
    """One of several strs or paths."""
    return isinstance(v, Alt) and all(isinstance(o, (str, PathV)) for o in v.options)


def _as_path(v):
    if isinstance(v, PathV):
        return v
    if isinstance(v, str):
        return PathV(posixpath.normpath(v), False) if v.startswith("/") else PathV(v)
    return v


def _join(base, parts):
    if not isinstance(base, PathV):
        return base if isinstance(base, Unknown) else Unknown("runtime-call", "path of a non-path")
    out = base
    for p in parts:
        if isinstance(p, Unknown):
            return Unknown(p.reason, p.detail, (out.path + "/{" + (p.pattern or p.detail) + "}"))
        if isinstance(p, PathV):
            p = p.path
        if not isinstance(p, str):
            return Unknown("path-part", repr(p))
        out = out.join(p)
    return out


def assign_target(target: N, value, env: dict) -> None:
    if target.k == "name":
        env[target.f["id"]] = value
    elif target.k in ("tuple", "list"):
        elts = target.f["elts"]
        if isinstance(value, (list, tuple)) and len(value) == len(elts):
            for t, v in zip(elts, value):
                assign_target(t, v, env)
        else:
            # an unknown value's reason is kept; one of several (Alt) is not split: its parts go together
            for t in elts:
                for nm in _names(t):
                    env[nm] = value if isinstance(value, Unknown) else Unknown("unpack", nm)


def unstar(e: N) -> N:
    """A list element as Python reads it: the parser gives the lone element of `[*a[k]]`,
    `[*a.b]`, `[*f(x)]` as subscript/attribute/call of starred(a); this is starred(a[k]) etc."""
    chain, x = [], e
    while x.k in ("subscript", "attr", "call"):
        chain.append(x)
        x = x.f["value" if x.k != "call" else "func"]
    if x.k != "starred" or not chain:
        return e
    inner = x.f["value"]
    for c in reversed(chain):
        f = dict(c.f)
        f["value" if c.k != "call" else "func"] = inner
        inner = N(c.k, c.line, c.col, inner.sb, c.eb, f)
    return N("starred", e.line, e.col, e.sb, e.eb, {"value": inner})


def _names(t: N) -> list[str]:
    if t.k == "name":
        return [t.f["id"]]
    if t.k in ("tuple", "list"):
        return [x for e in t.f["elts"] for x in _names(e)]
    return []


def stmts_with_loops(body: list, loops: tuple = ()):
    for st in body:
        yield st, loops
        if st.k in ("def", "class"):
            continue
        inner = loops + (st,) if st.k == "for" else loops
        for key in ("body", "orelse", "final"):
            sub = st.f.get(key)
            if isinstance(sub, list):
                yield from stmts_with_loops(sub, inner if key == "body" else loops)
        if st.k == "try":
            for h in st.f["handlers"]:
                yield from stmts_with_loops(h, loops)


_dotted = dotted_name


def _short(ctx: Ctx, n: N) -> str:
    if n.eb <= n.sb:
        return n.k
    t = " ".join(ctx.mod.parsed.text(n).split())
    return t if len(t) <= 60 else t[:57] + "..."


def flatten_values(v, limit: int = MAX_ITEMS) -> list:
    """A list value (possibly with Alt parts: one of several lists; Some: some of the items) as a
    flat list of the items it may hold."""
    out = []
    if isinstance(v, Alt):
        for o in v.options:
            out.extend(flatten_values(o, limit))
        return out[:limit]
    if isinstance(v, Some):
        v = list(v.items)
    if isinstance(v, (list, tuple)):
        for x in v:
            if isinstance(x, (Alt, Some)):
                for o in (x.options if isinstance(x, Alt) else x.items):
                    out.extend(flatten_values(o, limit) if isinstance(o, (list, tuple, Alt, Some)) else [o])
            else:
                out.append(x)
        return out[:limit]
    return [v]


_ = itertools  # product over loops is built iteratively above
