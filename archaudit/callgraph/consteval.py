"""A small constant evaluator for strings, paths and lists (JIT module names and source files).

Separate from the gate interpreter: it only folds what is constant in the source (literals,
f-strings, `pathlib.Path(__file__).parent`, `/`, `os.path.join`, `+`, list comprehensions and
loops over constant lists, module constants reached through imports, calls of scanned functions
with constant arguments). Anything else is `Unknown(reason)`. Paths are kept root-relative
(`PathV`), so `Path(__file__).parents[1] / "data" / "csrc"` in flashinfer/jit/env.py becomes
`flashinfer/data/csrc`, which is then looked up in the scan.
"""
from __future__ import annotations

import itertools
import posixpath
from dataclasses import dataclass

from ..parsing.python_ir import N, dotted_name
from .resolve import Ctx, Resolver, iter_stmts

MAX_DEPTH = 30
MAX_ITEMS = 512


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
class Alt:
    """One of several values (a name bound differently on different paths)."""

    options: tuple


def is_unknown(v) -> bool:
    return isinstance(v, Unknown)


def as_str(v):
    if isinstance(v, PathV):
        return v.path if v.rooted else v.path
    return v


class ConstEval:
    def __init__(self, resolver: Resolver):
        self.r = resolver
        self._gmemo: dict = {}
        self._busy: set = set()

    # -------------------------------------------------------------- names
    def name(self, ctx: Ctx, name: str, env: dict, depth: int):
        if name in env:
            return env[name]
        c = ctx
        while c is not None and c.kind != "module":
            if c.kind == "function" or c is ctx:
                loc = self.r.locals_of(c)
                if name in loc:
                    return self._binds(c, name, loc[name], env if c is ctx else {}, depth)
            c = c.parent
        return self.global_(ctx.mod.name, name, depth)

    def global_(self, modname: str, name: str, depth: int):
        key = (modname, name)
        if key in self._gmemo:
            return self._gmemo[key]
        if key in self._busy:
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
        for bd in binds:
            vals.append(self._bind(ctx, name, bd, env, depth))
        # `x = None` placeholders rebound later, and augmented assignments: keep the real values
        real = [v for v in vals if v is not None and v is not _AUG]
        if not real:
            return None if any(v is None for v in vals) else Unknown("no-value", name)
        aug = [bd for bd in binds if bd[0] == "aug"]
        base = real[0] if len(set(map(_key, real))) == 1 else Alt(tuple(real))
        for bd in aug:
            add = self.eval(ctx, bd[1], env, depth + 1)
            base = self._binop("+", base, add)
        # in-place list growth in the same scope: x.append(..), x.extend(..)
        if ctx.kind == "function" and isinstance(base, list):
            base = self._mutations(ctx, name, base, env, depth)
        return base

    def _bind(self, ctx: Ctx, name: str, bd: tuple, env: dict, depth: int):
        k = bd[0]
        if k == "assign":
            _, value, _ann, bctx = bd
            if value is None:
                return Unknown("annotation-only", name)
            return self.eval(bctx or ctx, value, env if bctx is None else {}, depth + 1)
        if k == "import":
            return ModV(bd[1]) if self.r.index.has_module(bd[1]) else Unknown("external", bd[1])
        if k == "import-as":
            return ModV(bd[1]) if self.r.index.has_module(bd[1]) else Unknown("external", bd[1])
        if k == "from":
            _, absmod, nm, _al, _rel, _st = bd
            if self.r.index.has_module(f"{absmod}.{nm}"):
                return ModV(f"{absmod}.{nm}")  # `from . import env as jit_env`
            if self.r.index.has_module(absmod):
                return self.global_(absmod, nm, depth + 1)
            return Unknown("external", f"{absmod}.{nm}")
        if k == "def":
            return FuncV(f"{ctx.mod.name}.{bd[1]}")
        if k == "param":
            _, pname, _ann, default, _self = bd
            return Unknown("parameter", pname)
        if k == "aug":
            return _AUG
        if k == "iter":
            return Unknown("loop-variable", name)
        return Unknown("unsupported-binding", k)

    def _mutations(self, ctx: Ctx, name: str, base: list, env: dict, depth: int):
        out = list(base)
        for st, loops in _stmts_with_loops(ctx.node.f["body"], ()):
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

    def _loop_envs(self, ctx: Ctx, loops: tuple, env: dict, depth: int):
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
                    _assign(lp.f["target"], item, e2)
                    nxt.append(e2)
                    if len(nxt) > MAX_ITEMS:
                        break
            envs = nxt[:MAX_ITEMS]
        return envs

    def _iterable(self, v):
        if isinstance(v, (list, tuple)):
            return list(v)
        if isinstance(v, dict):
            return list(v)
        if isinstance(v, _DictItems):
            return [tuple(x) for x in v.items]
        if isinstance(v, str):
            return list(v)
        return None

    # -------------------------------------------------------------- expressions
    def eval(self, ctx: Ctx, n: N | None, env: dict | None = None, depth: int = 0):
        env = env or {}
        if n is None:
            return None
        if depth > MAX_DEPTH:
            return Unknown("depth-limit")
        k = n.k
        if k == "const":
            return n.f["value"]
        if k == "name":
            if n.f["id"] == "__file__":
                return PathV(ctx.mod.path)
            return self.name(ctx, n.f["id"], env, depth + 1)
        if k == "fstring":
            parts, pat, unknown = [], [], None
            for p in n.f["parts"]:
                if p.k == "const":
                    parts.append(str(p.f["value"]))
                    pat.append(str(p.f["value"]))
                    continue
                v = self.eval(ctx, p, env, depth + 1)
                if isinstance(v, Unknown) or isinstance(v, Alt):
                    unknown = unknown or (v if isinstance(v, Unknown) else Unknown("several-bindings", _short(ctx, p)))
                    pat.append("{" + _short(ctx, p) + "}")
                else:
                    s = as_str(v) if isinstance(v, PathV) else str(v) if not isinstance(v, bool) else str(v)
                    parts.append(s)
                    pat.append(s)
            if unknown is not None:
                return Unknown(unknown.reason, unknown.detail, "".join(pat))
            return "".join(parts)
        if k in ("list", "tuple", "set"):
            out = []
            for e in n.f["elts"]:
                if e.k == "starred":
                    v = self.eval(ctx, e.f["value"], env, depth + 1)
                    if isinstance(v, (list, tuple)):
                        out.extend(v)
                    elif isinstance(v, Alt):
                        out.append(v)  # spread later by the caller (one of several lists)
                    else:
                        out.append(v if isinstance(v, Unknown) else Unknown("starred", _short(ctx, e)))
                else:
                    out.append(self.eval(ctx, e, env, depth + 1))
            return tuple(out) if k == "tuple" else out
        if k == "dict":
            d = {}
            for kk, vv in n.f["pairs"]:
                if kk is None:
                    return Unknown("dict-splat", _short(ctx, n))
                kv = self.eval(ctx, kk, env, depth + 1)
                if isinstance(kv, (Unknown, Alt, list, dict)):
                    return Unknown("dict-key", _short(ctx, kk))
                d[kv if not isinstance(kv, PathV) else kv.path] = self.eval(ctx, vv, env, depth + 1)
            return d
        if k == "comp":
            return self._comp(ctx, n, env, depth)
        if k == "attr":
            return self._attr(ctx, self.eval(ctx, n.f["value"], env, depth + 1), n.f["attr"], n, depth)
        if k == "binop":
            return self._binop(n.f["op"], self.eval(ctx, n.f["left"], env, depth + 1), self.eval(ctx, n.f["right"], env, depth + 1))
        if k == "subscript":
            base = self.eval(ctx, n.f["value"], env, depth + 1)
            idx = self.eval(ctx, n.f["index"], env, depth + 1)
            return self._subscript(base, idx, ctx, n)
        if k == "call":
            return self._call(ctx, n, env, depth)
        if k == "compare":
            return self._compare(ctx, n, env, depth)
        if k == "ifexp":
            a = self.eval(ctx, n.f["body"], env, depth + 1)
            b = self.eval(ctx, n.f["orelse"], env, depth + 1)
            return a if _key(a) == _key(b) else Alt((a, b))
        return Unknown("unsupported-expression", _short(ctx, n))

    def _compare(self, ctx: Ctx, n: N, env: dict, depth: int):
        """`a == b`, `x in (..)` on constants (chains too); anything else is Unknown."""
        vals = [self.eval(ctx, o, env, depth + 1) for o in n.f["operands"]]
        if any(not isinstance(v, (str, int, float, tuple, list)) for v in vals):
            return Unknown("comparison", _short(ctx, n))
        fns = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, "in": lambda a, b: a in b,
               "not in": lambda a, b: a not in b}
        for op, a, b in zip(n.f["ops"], vals, vals[1:]):
            f = fns.get(" ".join(op.split()))
            if f is None:
                return Unknown("comparison", _short(ctx, n))
            try:
                if not f(a, b):
                    return False
            except TypeError:
                return Unknown("comparison", _short(ctx, n))
        return True

    def _comp(self, ctx: Ctx, n: N, env: dict, depth: int):
        if n.f.get("kind") == "dict" or n.f.get("body") is None:
            return Unknown("unsupported-comprehension", _short(ctx, n))
        envs = [dict(env)]
        for kind, a, b in n.f["gens"]:
            nxt = []
            for e in envs:
                if kind == "for":
                    items = self._iterable(self.eval(ctx, b, e, depth + 1))
                    if items is None:
                        return Unknown("comprehension-over-unknown", _short(ctx, b))
                    for it in items:
                        e2 = dict(e)
                        _assign(a, it, e2)
                        nxt.append(e2)
                else:
                    c = self.eval(ctx, a, e, depth + 1)
                    if isinstance(c, (Unknown, Alt)):
                        return Unknown("comprehension-condition", _short(ctx, a))
                    if c:
                        nxt.append(e)
            envs = nxt[:MAX_ITEMS]
        return [self.eval(ctx, n.f["body"], e, depth + 1) for e in envs]

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
            return _Method(base, attr)
        if isinstance(base, (str, list, dict)):
            return _Method(base, attr)
        if isinstance(base, Unknown):
            if base.reason == "external":
                return Unknown("external", f"{base.detail}.{attr}")
            return Unknown(base.reason, base.detail, base.pattern + "." + attr if base.pattern else "")
        if isinstance(base, Alt):
            return Alt(tuple(self._attr(ctx, b, attr, n, depth) for b in base.options))
        return Unknown("unsupported-attribute", _short(ctx, n))

    def _subscript(self, base, idx, ctx, n):
        if isinstance(base, _Parents) and isinstance(idx, int):
            p = base.path
            for _ in range(idx + 1):
                p = p.parent
            return p
        if isinstance(base, dict):
            if isinstance(idx, Unknown):
                # any value of the dict: an Alt over all of them
                vals = list(base.values())
                return Alt(tuple(vals)) if vals else Unknown("empty-dict")
            key = idx.path if isinstance(idx, PathV) else idx
            if isinstance(key, (str, int, bool, tuple)) and key in base:
                return base[key]
            return Unknown("missing-key", repr(idx))
        if isinstance(base, (list, tuple, str)) and isinstance(idx, int) and not isinstance(idx, bool):
            try:
                return base[idx]
            except IndexError:
                return Unknown("index-error", _short(ctx, n))
        if isinstance(base, Unknown):
            return base
        return Unknown("unsupported-subscript", _short(ctx, n))

    def _binop(self, op: str, a, b):
        if isinstance(a, Unknown) or isinstance(b, Unknown):
            # keep a readable pattern: {GEN_DIR}/gen/inst_{dtype}.cu
            if op in ("/", "+") and isinstance(a, (Unknown, str, PathV)) and isinstance(b, (Unknown, str, PathV)):
                sep = "/" if op == "/" else ""
                u = a if isinstance(a, Unknown) else b
                return Unknown(u.reason, u.detail, _pat(a) + sep + _pat(b))
            return a if isinstance(a, Unknown) else b
        if isinstance(a, Alt) or isinstance(b, Alt):
            opts_a = a.options if isinstance(a, Alt) else (a,)
            opts_b = b.options if isinstance(b, Alt) else (b,)
            return Alt(tuple(self._binop(op, x, y) for x in opts_a for y in opts_b))
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
        return Unknown("unsupported-operation", op)

    def _call(self, ctx: Ctx, n: N, env: dict, depth: int):
        fn = n.f["func"]
        args = [self.eval(ctx, a, env, depth + 1) for a in n.f["args"]]
        kwargs = {k: self.eval(ctx, v, env, depth + 1) for k, v in n.f["kwargs"]}
        dotted = _dotted(fn)
        last = dotted.rsplit(".", 1)[-1] if dotted else ""
        # methods on values we hold
        if fn.k == "attr":
            recv = self.eval(ctx, fn.f["value"], env, depth + 1)
            m = fn.f["attr"]
            if isinstance(recv, PathV):
                if m in ("resolve", "absolute", "expanduser"):
                    return recv
                if m == "joinpath":
                    return _join(recv, args)
                if m == "as_posix":
                    return recv.path
                if m == "with_suffix" and args and isinstance(args[0], str):
                    return PathV(posixpath.splitext(recv.path)[0] + args[0], recv.rooted)
                return Unknown("runtime-call", f"Path.{m}()")
            if isinstance(recv, str):
                if m == "format" and not n.f["star"]:
                    if any(isinstance(a, (Unknown, Alt)) for a in args + list(kwargs.values())):
                        return Unknown("format-argument", _short(ctx, n))
                    try:
                        return recv.format(*[as_str(a) for a in args], **{k: as_str(v) for k, v in kwargs.items()})
                    except (IndexError, KeyError, ValueError):
                        return Unknown("format-error", _short(ctx, n))
                if m == "join" and args and isinstance(args[0], (list, tuple)) and all(isinstance(x, str) for x in args[0]):
                    return recv.join(args[0])
                if m in ("lower", "upper", "strip"):
                    return getattr(recv, m)()
                if m in ("replace", "startswith", "endswith") and args and all(isinstance(a, str) for a in args) and not kwargs:
                    try:
                        return getattr(recv, m)(*args)
                    except TypeError:
                        return Unknown("runtime-call", f"str.{m}()")
                return Unknown("runtime-call", f"str.{m}()")
            if isinstance(recv, dict) and m in ("items", "keys", "values"):
                return {"keys": lambda: list(recv), "values": lambda: list(recv.values()),
                        "items": lambda: _DictItems(list(recv.items()))}[m]()
            if isinstance(recv, ModV):
                target = self.global_(recv.name, m, depth + 1)
                if isinstance(target, FuncV):
                    return self._call_func(target, n, args, kwargs, depth)
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
            if isinstance(v, Unknown) and v.reason == "external":
                dotted, last = v.detail, v.detail.rsplit(".", 1)[-1]
        # well-known pure functions
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
        if dotted in ("list", "tuple", "sorted") and len(args) == 1 and isinstance(args[0], (list, tuple)):
            return sorted(args[0], key=str) if dotted == "sorted" else list(args[0])
        if dotted in ("os.getenv", "os.environ.get", "getenv"):
            return Unknown("environment", f"{args[0] if args and isinstance(args[0], str) else '?'}")
        if dotted:
            return Unknown("runtime-call", f"{dotted}()")
        return Unknown("runtime-call", _short(ctx, n))

    def _call_func(self, f: FuncV, call: N, args: list, kwargs: dict, depth: int):
        """A scanned function called with constant arguments: fold its return expression(s)."""
        c = self.r.ctx(f.qualname)
        if c is None or c.kind != "function" or depth > MAX_DEPTH // 2:
            return Unknown("runtime-call", f"{f.qualname}()")
        if f.qualname in self._busy:
            return Unknown("recursion", f.qualname)
        env: dict = {}
        params = c.node.f["params"]
        pos = [p for p in params if p[2] == ""]
        for (pname, _d, _k), a in zip(pos, args):
            env[pname] = a
        for pname, default, _kind in params:
            if pname in kwargs:
                env[pname] = kwargs[pname]
            elif pname not in env and default is not None:
                env[pname] = self.eval(self.r.ctx(c.mod.name) or c, default, {}, depth + 1)
        self._busy.add(f.qualname)
        try:
            rets = [st.f["value"] for st in iter_stmts(c.node.f["body"]) if st.k == "return" and st.f["value"] is not None]
            if not rets:
                return Unknown("no-return", f.qualname)
            vals = [self.eval(c, r, env, depth + 1) for r in rets]
        finally:
            self._busy.discard(f.qualname)
        if len({_key(v) for v in vals}) == 1:
            return vals[0]
        return Alt(tuple(vals))


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


def _key(v):
    try:
        hash(v)
        return v
    except TypeError:
        return repr(v)


def _pat(v) -> str:
    if isinstance(v, Unknown):
        return v.pattern or "{" + (v.detail or v.reason) + "}"
    if isinstance(v, PathV):
        return v.path
    return str(v)


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


def _assign(target: N, value, env: dict) -> None:
    if target.k == "name":
        env[target.f["id"]] = value
    elif target.k in ("tuple", "list"):
        elts = target.f["elts"]
        if isinstance(value, (list, tuple)) and len(value) == len(elts):
            for t, v in zip(elts, value):
                _assign(t, v, env)
        else:
            for t in elts:
                for nm in _names(t):
                    env[nm] = Unknown("unpack", nm)


def _names(t: N) -> list[str]:
    if t.k == "name":
        return [t.f["id"]]
    if t.k in ("tuple", "list"):
        return [x for e in t.f["elts"] for x in _names(e)]
    return []


def _stmts_with_loops(body: list, loops: tuple):
    for st in body:
        yield st, loops
        if st.k in ("def", "class"):
            continue
        inner = loops + (st,) if st.k == "for" else loops
        for key in ("body", "orelse", "final"):
            sub = st.f.get(key)
            if isinstance(sub, list):
                yield from _stmts_with_loops(sub, inner if key == "body" else loops)
        if st.k == "try":
            for h in st.f["handlers"]:
                yield from _stmts_with_loops(h, loops)


_dotted = dotted_name


def _short(ctx: Ctx, n: N) -> str:
    if n.eb <= n.sb:
        return n.k
    t = " ".join(ctx.mod.parsed.text(n).split())
    return t if len(t) <= 60 else t[:57] + "..."


def flatten_values(v, limit: int = MAX_ITEMS) -> list:
    """A list value (possibly with Alt parts: one of several lists) as a flat list of items."""
    out = []
    if isinstance(v, Alt):
        for o in v.options:
            out.extend(flatten_values(o, limit))
        return out[:limit]
    if isinstance(v, (list, tuple)):
        for x in v:
            if isinstance(x, Alt):
                for o in x.options:
                    out.extend(flatten_values(o, limit) if isinstance(o, (list, tuple, Alt)) else [o])
            else:
                out.append(x)
        return out[:limit]
    return [v]


_ = itertools  # product over loops is built iteratively above
