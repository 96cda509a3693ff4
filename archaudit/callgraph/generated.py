"""Sources a JIT generator writes at build time: which file of the scan each one is made from.

flashinfer's generators write a module's sources into a workspace directory before building it,
from data in the package: a jinja template read and rendered
(`write_if_different(dest, jinja2.Template(f.read()).render(...))`), or a csrc file copied
unchanged (`write_if_different(dest, f.read())`, `shutil.copy2(src, dest)`). The written path is
outside the scan; what is written to it is not.

For the function holding a sink call, every write site (rules/jit.toml [generate]) that runs
before the sink on the same branch is evaluated once per iteration of its enclosing loops: the
destination, by ConstEval exactly as the sink's source list is (so the two compare as text), and
the origin of what is written, followed through the function's bindings that reach the write
(an assignment in another arm of an `if` does not; a later one on the way kills an earlier one):

  rendered  `T.render(...)`, T bound to `Template(<text of file F>)`  -> F, read as a rendered view
  copied    `<text of file F>`: `f.read()` of `with open(F) as f`, `F.read_text()`, or copy(F, dest)

  text      a string ConstEval evaluates to one constant (an f-string template in Python filled
            with the variant's values, `"".join(...)` of define lines): the text itself

Text built any other way (a value known only at run time, one of several texts) gives an origin
without a file and the reason.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from ..parsing.python_ir import N, dotted_name
from .consteval import Alt, ConstEval, PathV, Unknown
from .resolve import Ctx, Resolver, walk_exprs
from .rules import GenerateRules

MAX_DEPTH = 8


@dataclass(frozen=True)
class Origin:
    how: str  # "rendered" | "copied" | "text" | "unknown"
    path: str | None  # the file of the scan the written text comes from
    where: str  # "path:line" of the write
    reason: str = ""  # for "unknown": why the text cannot be traced to a file
    suffix: str = ""  # of the file written (".cu"), as the generator's code spells it
    text: str = ""  # for "text": what is written, evaluated from the Python that builds it


@dataclass
class _Stmt:
    node: N
    chain: tuple  # ((id of an if/for/while/try, arm), ...): the conditional blocks around it
    loops: tuple  # enclosing for statements, outermost first


@dataclass
class _Def:
    stmt: _Stmt
    kind: str  # "assign" | "with" (`with X as name`) | "for" (a loop target)
    value: N | None


@dataclass
class _Write:
    stmt: _Stmt
    kind: str  # "write" (text written) | "copy" (a file copied)
    dest: N
    what: N  # the text written, or the file copied


class _Fn:
    """One function's statements, local bindings and write sites, in source order."""

    def __init__(self, ctx: Ctx, rules: GenerateRules):
        self.ctx = ctx
        self.stmts: list[_Stmt] = []
        self.defs: dict[str, list[_Def]] = {}
        self.writes: list[_Write] = []
        self._rules = rules
        self._exits: set = set()  # blocks of `chain` that end in return/raise: nothing after them follows them
        self._walk(ctx.node.f["body"], (), ())

    def _def(self, target: N, stmt: _Stmt, kind: str, value: N | None) -> None:
        if target.k == "name":
            self.defs.setdefault(target.f["id"], []).append(_Def(stmt, kind, value))
        elif target.k in ("tuple", "list"):
            for t in target.f["elts"]:
                self._def(t, stmt, kind if kind == "for" else "unpack", None)

    def _walk(self, body: list, chain: tuple, loops: tuple) -> None:
        if chain and body and body[-1].k in ("return", "raise"):
            self._exits.add(chain[-1])
        for st in body:
            s = _Stmt(st, chain, loops)
            self.stmts.append(s)
            k = st.k
            if k in ("def", "class"):
                continue
            if k == "assign":
                for t in st.f["targets"]:
                    self._def(t, s, "assign", st.f["value"])
            elif k == "expr":
                self._write_site(s, st.f["value"])
            elif k == "with":
                for value, target in st.f["items"]:
                    if target is not None:
                        self._def(target, s, "with", value)
                self._walk(st.f["body"], chain, loops)
            elif k == "if":
                self._walk(st.f["body"], chain + ((id(st), "body"),), loops)
                self._walk(st.f["orelse"], chain + ((id(st), "orelse"),), loops)
            elif k in ("for", "while"):
                if k == "for":
                    self._def(st.f["target"], s, "for", st.f["iter"])
                inner = chain + ((id(st), "body"),)
                self._walk(st.f["body"], inner, loops + (st,) if k == "for" else loops)
                self._walk(st.f["orelse"], chain + ((id(st), "orelse"),), loops)
            elif k == "try":
                self._walk(st.f["body"], chain, loops)
                for i, h in enumerate(st.f["handlers"]):
                    self._walk(h, chain + ((id(st), f"except{i}"),), loops)
                self._walk(st.f["orelse"], chain, loops)
                self._walk(st.f["final"], chain, loops)
            elif k == "block":
                self._walk(st.f["body"], chain, loops)

    def _write_site(self, s: _Stmt, e: N) -> None:
        if e.k != "call" or e.f["star"]:
            return
        fn, args = e.f["func"], e.f["args"]
        last = fn.f["attr"] if fn.k == "attr" else fn.f["id"] if fn.k == "name" else ""
        r = self._rules
        if last in r.writers:
            d, c = r.writers[last]
            if max(d, c) < len(args):
                self.writes.append(_Write(s, "write", args[d], args[c]))
        elif last in r.write_methods and fn.k == "attr" and args:
            self.writes.append(_Write(s, "write", fn.f["value"], args[0]))
        elif last in r.copies:
            src, d = r.copies[last]
            if max(src, d) < len(args):
                self.writes.append(_Write(s, "copy", args[d], args[src]))

    def stmt_at(self, node: N) -> _Stmt | None:
        """The innermost statement holding `node`."""
        best = None
        for s in self.stmts:
            if s.node.sb <= node.sb < s.node.eb or s.node is node:
                best = s
        return best

    def reaching(self, name: str, at: _Stmt, used: bool = False) -> list[_Def]:
        """The bindings of `name` that can be the one in force at `at`: earlier, not in another
        arm of an `if` around it, and not followed by another binding that always runs on the way.
        used: the value is used (a method called on it, its text written), so a `name = None`
        placeholder is not it when another binding can be."""
        cands = [d for d in self.defs.get(name, ()) if d.stmt.node.sb < at.node.sb and self.flows(d.stmt, at)]
        live = [d for d in cands if not any(
            o.stmt.node.sb > d.stmt.node.sb and at.chain[:len(o.stmt.chain)] == o.stmt.chain for o in cands)]
        if used:
            real = [d for d in live if not (d.kind == "assign" and d.value.k == "const" and d.value.f["value"] is None)]
            return real or live
        return live


    def flows(self, a: _Stmt, b: _Stmt) -> bool:
        """Whether running `a` can be followed by running `b` (a before b in the source): not in
        two arms of one `if`, and not from inside a block that ends in return/raise to outside it."""
        if not _compatible(a.chain, b.chain):
            return False
        inner = a.chain[len(_common(a.chain, b.chain)):]
        return not any(c in self._exits for c in inner)


def _through_bindings(defs: list[_Def], follow: Callable[[_Def], list[Origin]], where: str, what: str) -> list[Origin]:
    """The origins of a name through its reaching bindings: `follow(d)` for each assignment, and
    an unknown origin for any other binding of `what` (a loop target, a `with`, an unpacking)."""
    out: list[Origin] = []
    for d in defs:
        if d.kind == "assign":
            out.extend(follow(d))
        else:
            out.append(Origin("unknown", None, where, f"{what} is bound by a {d.kind} statement"))
    return out


def _compatible(a: tuple, b: tuple) -> bool:
    arms = dict(a)
    return all(arms.get(k, arm) == arm for k, arm in b)


def _common(a: tuple, b: tuple) -> tuple:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


class Generated:
    """What the write sites of a generator function write, and from which files."""

    def __init__(self, resolver: Resolver, ce: ConstEval, rules: GenerateRules):
        self.r = resolver
        self.ce = ce
        self.rules = rules
        self._fns: dict[str, _Fn] = {}

    def _fn(self, ctx: Ctx) -> _Fn:
        got = self._fns.get(ctx.qualname)
        if got is None:
            got = self._fns[ctx.qualname] = _Fn(ctx, self.rules)
        return got

    def writes_before(self, ctx: Ctx, call: N, env: dict) -> dict[str, list[Origin]] | None:
        """Written path (as `text_key` gives it) -> origins, for the write sites of the function
        holding `call` that can run before it. None when the function writes nothing."""
        fctx = ctx
        while fctx is not None and fctx.kind != "function":
            fctx = fctx.parent
        if fctx is None:
            return None
        fn = self._fn(fctx)
        if not fn.writes:
            return None
        at = fn.stmt_at(call)
        if at is None:
            return None
        out: dict[str, list[Origin]] = {}
        for w in fn.writes:
            if w.stmt.node.sb >= at.node.sb or not fn.flows(w.stmt, at):
                continue
            where = f"{fctx.mod.path}:{w.stmt.node.line}"
            suffix = self._suffix(fn, w.stmt, w.dest, 0)
            for lenv in self.ce._loop_envs(fctx, w.stmt.loops, env, 0):
                dest = self.ce.eval(fctx, w.dest, lenv)
                if w.kind == "copy":
                    origins = self._file_at(fn, w.stmt, w.what, lenv, "copied", where)
                else:
                    origins = self._text(fn, w.stmt, w.what, lenv, where, 0)
                origins = [replace(o, suffix=suffix) for o in origins]
                for key in text_keys(dest):
                    got = out.setdefault(key, [])
                    got.extend(o for o in origins if o not in got)
        return out

    # ------------------------------------------------------------------ what is written
    def _text(self, fn: _Fn, at: _Stmt, e: N, env: dict, where: str, depth: int) -> list[Origin]:
        """Where the text `e` (at statement `at`) comes from."""
        if depth > MAX_DEPTH:
            return [Origin("unknown", None, where, "the text is passed through too many bindings")]
        if e.k == "name":
            name = e.f["id"]
            if name in env:
                return self._built(fn, e, env, where, f"`{name}` is a loop variable: text built in code")
            defs = fn.reaching(name, at, used=True)
            if not defs:
                v = self.ce.eval(fn.ctx, e, env)
                if isinstance(v, str):
                    return [Origin("text", None, where, text=v)]
                return [Origin("unknown", None, where, f"`{name}` is {v}, not a file of the scan")]
            return _through_bindings(defs, lambda d: self._text(fn, d.stmt, d.value, env, where, depth + 1),
                                     where, f"`{name}`")
        if e.k == "call":
            f = e.f["func"]
            if f.k == "attr" and f.f["attr"] in self.rules.render_methods:
                return self._template(fn, at, f.f["value"], env, where, depth + 1)
            if f.k == "attr" and f.f["attr"] in self.rules.read_methods:
                return self._file_at(fn, at, f.f["value"], env, "copied", where)
            # a scanned function that builds the text from its arguments (an f-string template)
            v = self.ce.eval(fn.ctx, e, env)
            if isinstance(v, str):
                return [Origin("text", None, where, text=v)]
            # one that returns the text read from a file: its return expressions, arguments unbound
            out = []
            for r in self.r.callee(fn.ctx, e):
                c = self.r.ctx(r.target) if r.kind == "function" else None
                if c is not None and c.kind == "function":
                    cfn = self._fn(c)
                    for s in cfn.stmts:
                        if s.node.k == "return" and s.node.f["value"] is not None:
                            out.extend(self._text(cfn, s, s.node.f["value"], {}, where, depth + 1))
            if out:
                return out
            return [Origin("unknown", None, where, f"the text `{_short(fn, e)}` is built in code, not read from a file")]
        return self._built(fn, e, env, where, f"the text `{_short(fn, e)}` is built in code, not read from a file")

    def _built(self, fn: _Fn, e: N, env: dict, where: str, why: str) -> list[Origin]:
        """Text built in Python: itself when it evaluates to one constant string, else unknown."""
        v = self.ce.eval(fn.ctx, e, env)
        if isinstance(v, str):
            return [Origin("text", None, where, text=v)]
        return [Origin("unknown", None, where, why)]

    def _template(self, fn: _Fn, at: _Stmt, recv: N, env: dict, where: str, depth: int) -> list[Origin]:
        """`recv.render(...)`: the file the template `recv` is made from."""
        if recv.k == "name":
            defs = fn.reaching(recv.f["id"], at, used=True)
            if not defs:
                return [Origin("unknown", None, where, f"template `{recv.f['id']}` is not bound in {fn.ctx.qualname}")]
            return _through_bindings(defs, lambda d: self._template(fn, d.stmt, d.value, env, where, depth + 1),
                                     where, f"template `{recv.f['id']}`")
        if recv.k == "call" and _last(recv.f["func"]) in self.rules.template_classes and recv.f["args"]:
            out = []
            for o in self._text(fn, at, recv.f["args"][0], env, where, depth + 1):
                if o.how == "copied":
                    out.append(Origin("rendered", o.path, where))
                elif o.how == "text":
                    out.append(Origin("unknown", None, where, "rendered from a template that is not a file of the scan: "
                                      f"`{_short(fn, recv.f['args'][0])}` is a string held in Python code, not a file "
                                      "of the scan"))
                else:
                    out.append(Origin("unknown", None, where, "rendered from a template that is not a file of the scan: "
                                      + o.reason))
            return out
        return [Origin("unknown", None, where, f"`{_short(fn, recv)}` is not a template made from a file")]

    def _file_at(self, fn: _Fn, at: _Stmt, e: N, env: dict, how: str, where: str) -> list[Origin]:
        """The file `e` names: an open file (`with open(P) as f`, `open(P)`) or a path."""
        if e.k == "name" and e.f["id"] not in env:
            defs = fn.reaching(e.f["id"], at)
            if defs and all(d.kind == "with" and d.value is not None for d in defs):
                out = []
                for d in defs:
                    out.extend(self._file_at(fn, d.stmt, d.value, env, how, where))
                return out
            if len(defs) == 1 and defs[0].kind == "assign" and _is_open(defs[0].value):
                return self._file_at(fn, defs[0].stmt, defs[0].value, env, how, where)
        if _is_open(e):
            if not e.f["args"]:
                return [Origin("unknown", None, where, "open() without a path")]
            e = e.f["args"][0]
        v = self.ce.eval(fn.ctx, e, self._flow_env(fn, at, e, env, 0))
        opts = v.options if isinstance(v, Alt) else (v,)
        exists = self.r.index.source.exists
        if len(opts) > 1 and any(isinstance(x, PathV) and x.rooted and x.path and exists(x.path) for x in opts):
            # candidates (an installed or a checkout directory): reading or copying one that does
            # not exist fails, so only those in the scan can be what was written
            opts = tuple(x for x in opts if isinstance(x, PathV) and x.rooted and x.path and exists(x.path))
        out = []
        for x in opts:
            if isinstance(x, PathV) and x.rooted and x.path and exists(x.path):
                out.append(Origin(how, x.path, where))
            elif isinstance(x, PathV) and x.rooted:
                out.append(Origin("unknown", None, where, f"{x.path}: no such file in the scan"))
            else:
                out.append(Origin("unknown", None, where, f"the file read, `{_short(fn, e)}`, is not known: {x}"))
        return out

    def _suffix(self, fn: _Fn, at: _Stmt, e: N, depth: int) -> str:
        """The suffix of the path `e` builds, from the literal text it ends with
        (`gen_dir / f"x_{n}.cu"`, through the assignments that reach `at`); "" if not literal."""
        if depth > MAX_DEPTH:
            return ""
        if e.k == "name":
            defs = fn.reaching(e.f["id"], at)
            got = {self._suffix(fn, d.stmt, d.value, depth + 1) if d.kind == "assign" else "" for d in defs}
            return got.pop() if len(got) == 1 else ""
        if e.k == "binop" and e.f["op"] in ("/", "+"):
            return self._suffix(fn, at, e.f["right"], depth + 1)
        if e.k == "call" and e.f["args"] and _last(e.f["func"]) in ("join", "Path", "joinpath"):
            return self._suffix(fn, at, e.f["args"][-1], depth + 1)
        tail = e.f["parts"][-1] if e.k == "fstring" and e.f["parts"] else e
        if tail.k == "const" and isinstance(tail.f["value"], str):
            # the literal end of the name: "x.cu", or ".cu" after an f-string's last hole
            end = tail.f["value"].rsplit("/", 1)[-1]
            return "." + end.rsplit(".", 1)[1] if "." in end else ""
        return ""

    def _flow_env(self, fn: _Fn, at: _Stmt, e: N, env: dict, depth: int) -> dict:
        """env with the names of `e` bound to the values of the assignments that reach `at`
        (ConstEval alone takes every binding of a local in the function)."""
        out = dict(env)
        if depth > MAX_DEPTH:
            return out
        for n in walk_exprs(e):
            if n.k != "name" or n.f["id"] in out:
                continue
            defs = fn.reaching(n.f["id"], at)
            if not defs or any(d.kind != "assign" for d in defs):
                continue
            vals = [self.ce.eval(fn.ctx, d.value, self._flow_env(fn, d.stmt, d.value, env, depth + 1)) for d in defs]
            out[n.f["id"]] = vals[0] if len({repr(v) for v in vals}) == 1 else Alt(tuple(vals))
        return out


def text_keys(v) -> list[str]:
    """How a path value compares with another: ConstEval's pattern for one with unknown parts."""
    if isinstance(v, Alt):
        return [k for o in v.options for k in text_keys(o)]
    if isinstance(v, Unknown):
        return [v.pattern or str(v)]
    if isinstance(v, PathV):
        return [v.path if v.rooted else "/" + v.path.lstrip("/")]
    if isinstance(v, str):
        return [v]
    return []


def _last(fn: N) -> str:
    d = dotted_name(fn)
    return d.rsplit(".", 1)[-1] if d else ""


def _is_open(e: N | None) -> bool:
    return e is not None and e.k == "call" and _last(e.f["func"]) == "open"


def _short(fn: _Fn, n: N) -> str:
    t = " ".join(fn.ctx.mod.parsed.text(n).split())
    return t if len(t) <= 60 else t[:57] + "..."
