"""The compile flags a JIT sink call passes, evaluated: `extra_cuda_cflags` as strings, the -D
defines, the -gencode/-arch targets when hard-coded, and `extra_include_paths` as scan directories.

Flags built under a condition (`*(("-DX",) if is_cuda_version_at_least("12.8") else ())`,
`if ...: flags += [...]`, a name assigned on several paths) are kept and marked with the condition:
the verdict asks whether the code *can* run on the target, so a define that some configuration
passes counts as defined. Whatever is not constant is kept as a pattern with {holes} and reported.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..parsing.python_ir import N, dotted_name, iter_stmts
from .consteval import (RAISES, Alt, ConstEval, FuncV, ModV, PathV, Some, Unknown, assign_target, flatten_values,
                        stmts_with_loops, unstar)
from .resolve import Ctx, Resolver

MAX_DEPTH = 24
MAX_FLAGS = 256


@dataclass(frozen=True)
class Flag:
    text: str  # the flag, or a pattern with {holes} when not constant
    kind: str = "flag"  # "flag" | "arch-list" (flags made per target by an arch-flag function) | "unknown"
    condition: str = ""  # "" when always passed; else the condition(s) under which it is
    path: str = ""
    line: int = 0
    reason: str = ""  # for "unknown": why

    def to_json(self) -> dict:
        d = {"text": self.text, "kind": self.kind, "path": self.path, "line": self.line}
        if self.condition:
            d["condition"] = self.condition
        if self.reason:
            d["reason"] = self.reason
        return d


class FlagEval:
    def __init__(self, resolver: Resolver, ce: ConstEval):
        self.r = resolver
        self.ce = ce
        # id(body) -> (body, id(node) -> conditions); the body is held so that its id, and those
        # of its statements, cannot be reused by nodes parsed later (an evicted module's again)
        self._conds: dict[int, tuple[list, dict[int, tuple[str, ...]]]] = {}
        # parameters bound to the arguments of one call site: (function, param) -> (ctx, node, condition)
        self.bound: dict[tuple[str, str], tuple[Ctx, N | None, tuple]] = {}

    @property
    def bound(self) -> dict:
        return self.ce.arg_nodes

    @bound.setter
    def bound(self, value: dict) -> None:
        # shared with ConstEval: a bound parameter reads as its argument in either evaluation
        # (`_NVCC_FLAGS[target]` with target passed down from a caller)
        self.ce.arg_nodes = value

    # ------------------------------------------------------------------ list of flags
    def flags(self, ctx: Ctx, n: N) -> list[Flag]:
        out = self._walk(ctx, n, (), 0, set())
        return _conflicts(_dedup(out))[:MAX_FLAGS]

    def _walk(self, ctx: Ctx, n: N | None, cond: tuple, depth: int, seen: set) -> list[Flag]:
        if n is None:
            return []
        if depth > MAX_DEPTH:
            return [self._unknown(ctx, n, cond, "too deep")]
        k = n.k
        if k in ("list", "tuple", "set"):
            out = []
            for e in map(unstar, n.f["elts"]):
                out += self._walk(ctx, e.f["value"] if e.k == "starred" else e, cond, depth + 1, seen)
            return out
        if k == "ifexp":
            t = _text(ctx, n.f["test"])
            return (self._walk(ctx, n.f["body"], cond + (t,), depth + 1, seen)
                    + self._walk(ctx, n.f["orelse"], cond + (f"not ({t})",), depth + 1, seen))
        if k == "binop" and n.f["op"] == "+":
            return self._walk(ctx, n.f["left"], cond, depth + 1, seen) + self._walk(ctx, n.f["right"], cond, depth + 1, seen)
        if k == "boolop" and n.f["op"] == "or":
            # `extra_cuda_cflags or []`: the left list when it is non-empty, else the right one
            t = _text(ctx, n.f["left"])
            return (self._walk(ctx, n.f["left"], cond, depth + 1, seen)
                    + self._walk(ctx, n.f["right"], cond + (f"not ({t})",), depth + 1, seen))
        if k == "comp" and n.f.get("body") is not None and n.f.get("kind") != "dict":
            got = self._comp(ctx, n, cond, depth, seen)
            if got is not None:
                return got
        if k == "name":
            return self._name(ctx, n.f["id"], n, cond, depth, seen)
        if k == "attr":
            base = self.ce.eval(ctx, n.f["value"])
            if isinstance(base, ModV):
                mctx = self.r.ctx(base.name)
                if mctx is not None:
                    return self._global(mctx, n.f["attr"], n, cond, depth, seen)
        if k == "call":
            fn = n.f["func"]
            last = fn.f["attr"] if fn.k == "attr" else fn.f["id"] if fn.k == "name" else ""
            if last in self.r.rules.arch_flag_functions:
                return [Flag(_text(ctx, n), "arch-list", _cond(cond), ctx.mod.path, n.line)]
            if len(n.f["args"]) == 1 and (fn.k == "name" and last in ("list", "tuple", "sorted", "set")
                                          or dotted_name(fn) == "dict.fromkeys"):
                return self._walk(ctx, n.f["args"][0], cond, depth + 1, seen)  # same flags, deduplicated or not
            if fn.k == "attr" and last == "copy" and not n.f["args"]:
                return self._walk(ctx, fn.f["value"], cond, depth + 1, seen)
            got = self._returns(ctx, n, cond, depth, seen)
            if got is not None:
                return got
        # anything else: the constant evaluator
        v = self.ce.eval(ctx, n)
        return self._from_value(ctx, n, v, cond)

    def _comp(self, ctx: Ctx, n: N, cond: tuple, depth: int, seen: set) -> list[Flag] | None:
        """`[f(x) for x in flags if ...]`: the constant evaluator's items when it can iterate; else
        the body for each flag of the iterable (walked as flags, with their conditions)."""
        v = self.ce.eval(ctx, n)
        if not isinstance(v, Unknown):
            return self._from_value(ctx, n, v, cond)
        fors = [g for g in n.f["gens"] if g[0] == "for"]
        tests = [g[1] for g in n.f["gens"] if g[0] == "if"]
        if len(fors) != 1:
            return None
        _, target, it = fors[0]
        body = n.f["body"]
        out: list[Flag] = []
        for item in self._walk(ctx, it, cond, depth + 1, seen):
            env: dict = {}
            if item.kind == "flag":
                assign_target(target, item.text, env)
            elif body.k == "name" and target.k == "name" and body.f["id"] == target.f["id"] and not tests:
                out.append(item)  # the items themselves (arch-list flags kept as they are)
                continue
            else:
                assign_target(target, Unknown("loop-variable", f"over {item.text}" + (f" ({item.reason})" if item.reason else "")), env)
            extra = tuple(dict.fromkeys(c for c in item.condition.split(" and ") if c)) if item.condition else ()
            keep = True
            for t in tests:
                tv = self.ce.eval(ctx, t, env)
                if tv is False or tv == 0:
                    keep = False
                elif not isinstance(tv, bool) or not tv:
                    extra += (_text(ctx, t),)
            if keep:
                out += self._from_value(ctx, body, self.ce.eval(ctx, body, env), cond + extra)
        return out

    def _returns(self, ctx: Ctx, call: N, cond: tuple, depth: int, seen: set) -> list[Flag] | None:
        """A scanned function returning flags: its return values, its parameters bound to this call."""
        fv = self.ce.eval(ctx, call.f["func"])
        if not isinstance(fv, FuncV) or call.f["star"]:
            return None
        fctx = self.r.ctx(fv.qualname)
        if fctx is None or fctx.kind != "function" or fv.qualname in seen:
            return None
        rets = [st for st in iter_stmts(fctx.node.f["body"]) if st.k == "return" and st.f["value"] is not None]
        if not rets:
            return None
        saved = self.bound
        self.bound = {**saved, **bind_args(fctx, call, ctx, self.r, f"called at {ctx.mod.path}:{call.line}")}
        try:
            out = []
            conds = self._conditions(fctx, fctx.node.f["body"])
            for st in rets:
                extra = conds.get(id(st), ())
                if len(rets) > 1 and not extra:
                    extra = (f"returned at {fctx.mod.path}:{st.line}",)
                out += self._walk(fctx, st.f["value"], cond + extra, depth + 1, seen | {fv.qualname})
            return out
        finally:
            self.bound = saved

    def _from_value(self, ctx: Ctx, n: N, v, cond: tuple) -> list[Flag]:
        if isinstance(v, Alt):
            out = []
            for o in v.options:
                out += self._from_value(ctx, n, o, cond + (f"one of the values of {_text(ctx, n)}",))
            return out
        if isinstance(v, str):
            return [Flag(v, "flag", _cond(cond), ctx.mod.path, n.line)]
        if isinstance(v, PathV):
            return [Flag(v.path, "flag", _cond(cond), ctx.mod.path, n.line)]
        if isinstance(v, Some):
            why = f"some of the items of {_text(ctx, n)}"
            return [f for x in v.items for f in self._from_value(ctx, n, x, cond + (why,))]
        if isinstance(v, (list, tuple)):
            out = []
            for x in flatten_values(v):
                if isinstance(x, Unknown) and x.reason in RAISES and cond:
                    continue
                if isinstance(x, Unknown):
                    out.append(Flag(x.pattern or "{" + _text(ctx, n) + "}", "unknown", _cond(cond), ctx.mod.path, n.line, str(x)))
                else:
                    out += self._from_value(ctx, n, x, cond)
            return out
        if v is None:
            return []  # `extra_cuda_cflags=None`, or a placeholder rebound elsewhere
        if isinstance(v, Unknown) and v.reason in RAISES and cond:
            # passed only under a condition, and raising where it is computed (`if variant in
            # DEFINES: flags.append(DEFINES[variant])` for a variant without one): not passed
            return []
        if isinstance(v, Unknown):
            return [Flag(v.pattern or "{" + _text(ctx, n) + "}", "unknown", _cond(cond), ctx.mod.path, n.line, str(v))]
        return [Flag("{" + _text(ctx, n) + "}", "unknown", _cond(cond), ctx.mod.path, n.line, f"not a flag ({type(v).__name__})")]

    def _unknown(self, ctx: Ctx, n: N, cond: tuple, why: str) -> Flag:
        return Flag("{" + _text(ctx, n) + "}", "unknown", _cond(cond), ctx.mod.path, n.line, why)

    # ------------------------------------------------------------------ names
    def _name(self, ctx: Ctx, name: str, n: N, cond: tuple, depth: int, seen: set) -> list[Flag]:
        c = ctx
        while c is not None and c.kind != "module":
            if c.kind == "function":
                loc = self.r.locals_of(c)
                if name in loc:
                    return self._binds(c, name, loc[name], n, cond, depth, seen)
            c = c.parent
        mctx = self.r.ctx(ctx.mod.name)
        if mctx is None:
            return [self._unknown(ctx, n, cond, "no module")]
        return self._global(mctx, name, n, cond, depth, seen)

    def _global(self, mctx: Ctx, name: str, n: N, cond: tuple, depth: int, seen: set) -> list[Flag]:
        binds = self.r.gbind(mctx.mod.name).get(name)
        if not binds:
            return self._from_value(mctx, n, self.ce.global_(mctx.mod.name, name, depth), cond)
        return self._binds(mctx, name, binds, n, cond, depth, seen)

    def _binds(self, c: Ctx, name: str, binds: list, n: N, cond: tuple, depth: int, seen: set) -> list[Flag]:
        key = (c.qualname, name)
        if key in seen:
            return []  # `flags = flags + [...]`: the earlier binding is walked on its own
        seen = seen | {key}
        body = c.node.f["body"] if c.kind == "function" else c.mod.parsed.body
        conds = self._conditions(c, body)
        assigns = [bd for bd in binds if bd[0] == "assign"]
        # straight-line reassignments: only the last one reaches the call; several under
        # conditions: each may
        plain = [bd for bd in assigns if not conds.get(id(bd[1]))]
        out: list[Flag] = []
        for bd in binds:
            kind = bd[0]
            if kind == "assign":
                if bd[1] is None:
                    continue
                if len(plain) > 1 and bd in plain and bd is not plain[-1] and not _refers_to(bd, plain, name):
                    continue
                extra = conds.get(id(bd[1]), ())
                out += self._walk(bd[3] or c, bd[1], cond + extra, depth + 1, seen)
            elif kind == "aug":
                out += self._walk(c, bd[1], cond + conds.get(id(bd[1]), ()), depth + 1, seen)
            elif kind == "from":
                _, absmod, nm = bd[0], bd[1], bd[2]
                if self.r.index.has_module(absmod) and not self.r.index.has_module(f"{absmod}.{nm}"):
                    mctx = self.r.ctx(absmod)
                    if mctx is not None:
                        out += self._global(mctx, nm, n, cond, depth + 1, seen)
                        continue
                out.append(self._unknown(c, n, cond, f"imported from outside the scan: {absmod}.{nm}"))
            elif kind == "param" and (c.qualname, name) in self.bound:
                actx, arg, why = self.bound[(c.qualname, name)]
                out += self._walk(actx, arg, cond + why, depth + 1, seen) if arg is not None else []
            elif kind == "param":
                v = self.ce.param(c, bd)
                if isinstance(v, Unknown):
                    out.append(Flag("{" + name + "}", "unknown", _cond(cond), c.mod.path, n.line,
                                    f"parameter {name} of {c.qualname}"))
                else:  # the values of its Literal[...] annotation
                    out += self._from_value(c, n, v, cond)
            elif kind in ("def", "class", "import", "import-as"):
                out.append(self._unknown(c, n, cond, f"{name} is not a list of flags"))
            elif kind in ("unpack", "iter", "with"):
                v = self.ce._bind(c, name, bd, {}, depth)
                if isinstance(v, Unknown):
                    out.append(self._unknown(c, n, cond, f"{name} bound by {kind}: {v}"))
                else:
                    out += self._from_value(c, n, v, cond + conds.get(id(bd[-1]), ()))
            else:
                out.append(self._unknown(c, n, cond, f"{name} bound by {kind}"))
        # in-place growth in the same scope: flags.append(..) / flags.extend(..) / flags.insert(i, ..);
        # inside loops, the argument for each iteration (the loop variables of one iteration together)
        if c.kind == "function":
            for st, extra, loops in self._mutations(body, name, conds):
                e = st.f["value"]
                arg = e.f["args"][-1]
                if not loops:
                    out += self._walk(c, arg, cond + extra, depth + 1, seen)
                    continue
                env0 = {p: self.ce.eval(actx, a) for (q, p), (actx, a, _w) in self.bound.items()
                        if q == c.qualname and a is not None}
                for env in self.ce._loop_envs(c, loops, env0):
                    v = self.ce.eval(c, arg, env)
                    if e.f["func"].f["attr"] != "extend" and not isinstance(v, (Unknown, Alt, Some)):
                        v = [v]
                    out += self._from_value(c, arg, v, cond + extra)
        return out

    @staticmethod
    def _mutations(body: list, name: str, conds: dict):
        for st, loops in stmts_with_loops(body):
            if st.k != "expr" or st.f["value"].k != "call":
                continue
            e = st.f["value"]
            f = e.f["func"]
            if (f.k == "attr" and f.f["attr"] in ("append", "extend", "insert") and f.f["value"].k == "name"
                    and f.f["value"].f["id"] == name and e.f["args"]):
                yield st, conds.get(id(st), ()), loops

    def _conditions(self, c: Ctx, body: list) -> dict[int, tuple[str, ...]]:
        """id(statement or assigned value) -> the tests it sits under (if/elif/else, loops, except)."""
        held = self._conds.get(id(body))
        if held is not None and held[0] is body:
            return held[1]
        got: dict[int, tuple[str, ...]] = {}

        def visit(stmts: list, cond: tuple):
            for st in stmts:
                if cond:
                    got[id(st)] = cond
                    if st.k in ("assign", "augassign") and st.f.get("value") is not None:
                        got[id(st.f["value"])] = cond
                k = st.k
                if k in ("def", "class"):
                    continue
                if k == "if":
                    t = _text(c, st.f["test"])
                    visit(st.f["body"], cond + (t,))
                    visit(st.f["orelse"], cond + (f"not ({t})",))
                elif k in ("for", "while"):
                    what = f"in the loop at line {st.line}"
                    visit(st.f["body"], cond + (what,))
                    visit(st.f["orelse"], cond)
                elif k == "try":
                    visit(st.f["body"], cond)
                    for h in st.f["handlers"]:
                        visit(h, cond + (f"in an exception handler (line {st.line})",))
                    visit(st.f["orelse"], cond)
                    visit(st.f["final"], cond)
                elif k == "with":
                    visit(st.f["body"], cond)

        visit(body, ())
        self._conds[id(body)] = (body, got)
        return got


# ---------------------------------------------------------------------- flag parsing

_DEFINE = re.compile(r"^(?:-D|--define-macro=)(?P<name>[A-Za-z_]\w*)(?:=(?P<val>.*))?$")
_CODE = re.compile(r"(?:^|[,\s])code=\[?(?P<codes>[A-Za-z0-9_,]+)\]?")
_ARCH = re.compile(r"(?:^|[\s,])(?:-arch|--gpu-architecture|arch)[= ](?P<arch>(?:sm|compute)_\w+)")


def tokens(flags: list[str]) -> list[str]:
    """One list element is one argv element; `-D NAME` / `-gencode arch=..` spelled as two
    elements are joined into one."""
    out: list[str] = []
    i = 0
    while i < len(flags):
        f = flags[i]
        if f in ("-D", "--define-macro", "-gencode", "--generate-code", "-arch", "--gpu-architecture") and i + 1 < len(flags):
            out.append(f + ("" if f == "-D" else "=") + flags[i + 1])
            i += 2
            continue
        out.append(f)
        i += 1
    return out


def defines_of(flags: list[str]) -> dict[str, str]:
    """-DNAME[=VAL] -> {NAME: VAL}; nvcc defines a bare -DNAME as 1. Later definitions win."""
    out: dict[str, str] = {}
    for t in tokens(flags):
        m = _DEFINE.match(t.strip())
        if m and "{" not in t:
            out[m.group("name")] = m.group("val") if m.group("val") is not None else "1"
    return out


def hard_coded_archs(flags: list[str]) -> list[str]:
    """The code targets of hard-coded -gencode / -arch flags (sm_90a, compute_90a), in order."""
    out: list[str] = []
    for t in tokens(flags):
        if "{" in t:
            continue
        m = _CODE.search(t)
        if m and ("gencode" in t or "generate-code" in t or t.startswith("arch=")):
            out += [c for c in m.group("codes").split(",") if c]
            continue
        m = _ARCH.search(t)
        if m and ("-arch" in t or "--gpu-architecture" in t):
            out.append(m.group("arch"))
    return list(dict.fromkeys(out))


ARCH_FLAG_PREFIXES = ("-gencode", "--generate-code", "-arch", "--gpu-architecture", "arch=")


def is_arch_flag(text: str) -> bool:
    """An architecture flag (possibly with holes): it selects targets, it cannot define a macro."""
    return text.startswith(ARCH_FLAG_PREFIXES)


def unknown_defines(texts) -> dict[str, str]:
    """Flags `-DNAME=<not constant>` -> {flag text: NAME}."""
    out = {}
    for t in texts:
        m = _DEFINE.match(t.strip())
        if m and "{" not in m.group("name"):
            out[t] = m.group("name")
    return out


def bind_args(fctx: Ctx, call: N, cctx: Ctx, r: Resolver, why: str) -> dict:
    """(function, param) -> (ctx, argument node or default, condition) for one call."""
    params = fctx.node.f["params"]
    pos = [p for p in params if p[2] == ""]
    if pos and fctx.self_name is not None and pos[0][0] == fctx.self_name:
        pos = pos[1:]
    kwargs = dict(call.f["kwargs"])
    out = {}
    mctx = r.ctx(fctx.mod.name) or fctx
    for i, (pname, default, kind) in enumerate(pos):
        if i < len(call.f["args"]):
            out[(fctx.qualname, pname)] = (cctx, call.f["args"][i], (why,))
    for pname, default, kind in params:
        key = (fctx.qualname, pname)
        if key in out:
            continue
        if pname in kwargs:
            out[key] = (cctx, kwargs[pname], (why,))
        elif default is not None:
            out[key] = (mctx, default, ())
    return out



# ---------------------------------------------------------------------- helpers


def _refers_to(bd: tuple, plain: list, name: str) -> bool:
    """Whether a straight-line assignment is read by a later one (`x = [..]; x = x + [..]`)."""
    i = plain.index(bd)
    for later in plain[i + 1:]:
        v = later[1]
        if v is not None and any(e.k == "name" and e.f["id"] == name for e in _exprs(v)):
            return True
    return False


def _exprs(n: N):
    stack = [n]
    while stack:
        v = stack.pop()
        if isinstance(v, N):
            yield v
            stack.extend(v.f.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)


def _cond(cond: tuple) -> str:
    return " and ".join(dict.fromkeys(cond))


def _conflicts(xs: list[Flag]) -> list[Flag]:
    """A macro defined with different values where one of them is conditional (one of several
    records, an `if`): its value is not known, so those flags become one unknown-valued define."""
    vals: dict[str, list[Flag]] = {}
    for f in xs:
        m = _DEFINE.match(f.text.strip()) if f.kind == "flag" else None
        if m:
            vals.setdefault(m.group("name"), []).append(f)
    out, done = [], set()
    for f in xs:
        m = _DEFINE.match(f.text.strip()) if f.kind == "flag" else None
        same = vals.get(m.group("name"), []) if m else []
        values = {_DEFINE.match(g.text.strip()).group("val") or "1" for g in same}
        if len(values) < 2 or not any(g.condition for g in same):
            out.append(f)
            continue
        name = m.group("name")
        if name not in done:
            done.add(name)
            conds = " or ".join(dict.fromkeys(g.condition or "always" for g in same))
            out.append(Flag(f"-D{name}={{{'|'.join(sorted(values))}}}", "unknown", conds, f.path, f.line,
                            f"one of several values: {', '.join(g.text for g in same)}"))
    return out


def _dedup(xs: list[Flag]) -> list[Flag]:
    """One entry per flag text; an unconditional occurrence beats conditional ones."""
    best: dict[str, Flag] = {}
    for f in xs:
        prev = best.get(f.text)
        if prev is None or (prev.condition and not f.condition):
            best[f.text] = f
    order = list(dict.fromkeys(f.text for f in xs))
    return [best[t] for t in order]


def _text(ctx: Ctx, n: N) -> str:
    t = " ".join(ctx.mod.parsed.text(n).split())
    return t if len(t) <= 100 else t[:97] + "..."
