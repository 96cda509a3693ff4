"""Behind a gate: the JIT modules whose build or use a gate controls, with the chain of links.

Regions a gate guards (each becomes the start of a forward search through the call graph):
- `if gate:` -> the then-branch ("then") and the else-branch ("else");
- `if not gate: raise/return` and `assert gate` -> the rest of its block and of the blocks around
  it through `with` ("after-exit"); code after that which also runs on paths that never decided
  the gate (past an enclosing branch, or after `if other and not gate: raise`) is
  "after-exit-partly";
- an arch list passed on (`get_nvcc_flags_list(supported_major_versions=...)` or hard-coded
  -gencode flags) -> the JIT spec in the same function that receives it ("flags");
- a refusal every call of its function passes (`if arch is None: raise ...` at the top level of
  the function body, or only inside `with` blocks) -> in each caller, the rest of the statement
  holding the call (the calls its result flows into) and the statements after it in its block
  ("caller:after-exit"); where that call is itself always passed, the same in the callers of the
  caller (up to `CALLER_DEPTH` levels);
- a gate in `return ...`, or whose region returns a value (a predicate or a resolver such as
  `_resolve_backend`, a selection `if C: return "sm100a"`, a helper returning nvcc flags) -> in
  each caller, the branches that test the call's result or a local derived from it
  ("caller:then"/"caller:else"), the calls that take it or such a local as an argument or
  receiver (`gen_module(target)`, `gen_jit_spec(..., extra_cuda_cflags=flags())`,
  `FLAGS[target]` or `f"mod_{target}"` in an argument: "caller:value"; "caller:value-dispatch"
  when the function it is passed to branches on it, `if backend == "mnnvl":`, so that which value
  leads where is decided there), and, where the caller returns it, the callers of that caller
  (up to `CALLER_DEPTH` levels);
- a gate in an assignment (`x = A if C else B`) -> the same tests and calls of `x` in its own
  function ("value").
The forward search follows resolved call edges breadth-first (bounded depth and size) down to
JIT sink nodes; entry points are the attributes called on a built module along the way.
"""
from __future__ import annotations

import bisect
import re
from collections import deque
from dataclasses import dataclass, field

from ..model import Gate, Link
from ..parsing.python_ir import N, iter_stmts
from .graph import UNRESOLVED_PREFIX, Call, CallGraph
from .jit import JitModel, JitModule
from .resolve import Ctx, looked_up_name, walk_exprs

WORD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# marks an attribute looked up at run time among the calls outside what the search follows
LOOKED_UP = "(looked up at run time)"
CALLER_DEPTH = 3
MAX_DEPTH = 10
MAX_NODES = 4000


@dataclass
class Region:
    arm: str  # "then" | "else" | "after-exit" | "after-exit-partly" | "flags" | "statement" | "caller:<arm>"
    ctx: Ctx
    spans: list[tuple[int, int]]  # byte ranges in ctx's module
    links: list[Link]  # how we got here (gate region link, caller links)


@dataclass
class BehindModule:
    """A JIT module a gate controls."""

    module: JitModule
    arm: str
    chain: list[Link]  # gate -> region -> calls ... -> jit-module
    entry_points: list[str] | None  # attributes called on the built module on the way; None if unknown
    built_by: list[Link] = field(default_factory=list)  # call sites that build the spec (for spec sinks)

    def to_json(self) -> dict:
        return {"module": self.module.to_json(), "arm": self.arm, "chain": [x.to_json() for x in self.chain],
                "entry_points": self.entry_points, "built_by": [x.to_json() for x in self.built_by]}


@dataclass
class ExternalCall:
    """A function outside the scan that a gate's region reaches: code archaudit cannot judge."""

    callee: str  # dotted name
    arm: str
    chain: list[Link]


@dataclass
class GateSite:
    """Where a gate is: enough to analyse its region (a real Gate or a FILE:LINE position)."""

    path: str
    line: int
    col: int
    function: str | None = None
    kind: str = ""
    expr: str = ""


class Behind:
    def __init__(self, graph: CallGraph, jit: JitModel | None = None):
        self.g = graph
        self.r = graph.r
        self.jit = jit or JitModel(graph.r)
        self._lines: dict[str, list[int]] = {}
        self._builders: dict[str, list[Link]] = {}  # module key -> its build sites (same for every gate)

    # ------------------------------------------------------------------ positions
    def _line_starts(self, ctx: Ctx) -> list[int]:
        p = ctx.mod.path
        ls = self._lines.get(p)
        if ls is None:
            src = ctx.mod.parsed.src
            ls = [0]
            i = src.find(b"\n")
            while i >= 0:
                ls.append(i + 1)
                i = src.find(b"\n", i + 1)
            self._lines[p] = ls
        return ls

    def _offset(self, ctx: Ctx, line: int, col: int) -> int:
        ls = self._line_starts(ctx)
        if line < 1 or line > len(ls):
            return -1
        return ls[line - 1] + max(col - 1, 0)

    def _line_of(self, ctx: Ctx, off: int) -> int:
        return bisect.bisect_right(self._line_starts(ctx), off)

    def locate(self, site: GateSite) -> Ctx | None:
        """The scope (function, or module) holding the gate."""
        if site.function:
            c = self.r.ctx(site.function)
            if c is not None and c.kind in ("function", "module") and c.mod.path == site.path:
                return c
        modname = self.r.index.module_of_path.get(site.path)
        if modname is None:
            return None
        mod = self.r.module(modname)
        if mod is None:
            return None
        off = self._offset(self.r.ctx(modname), site.line, site.col)
        best = None
        for q, node in mod.all_functions():
            if node.sb <= off < node.eb and (best is None or node.sb >= best[1].sb):
                best = (q, node)
        return self.r.ctx(f"{modname}.{best[0]}") if best else self.r.ctx(modname)

    @staticmethod
    def _body(ctx: Ctx) -> list[N]:
        return _statements(ctx.node) if ctx.kind == "function" else ctx.mod.parsed.body

    def _chain_at(self, body: list[N], off: int) -> list[tuple[list, int, N]]:
        """Statements containing `off`, outermost first: (container, index, statement)."""
        out = []
        cont = body
        while True:
            hit = None
            for i, st in enumerate(cont):
                if st.sb <= off < st.eb:
                    hit = (cont, i, st)
                    break
            if hit is None:
                return out
            out.append(hit)
            st = hit[2]
            if st.k in ("def", "class"):
                return out
            nxt = None
            for key in ("body", "orelse", "final"):
                sub = st.f.get(key)
                if isinstance(sub, list) and any(s.sb <= off < s.eb for s in sub):
                    nxt = sub
            if st.k == "try":
                for h in st.f["handlers"]:
                    if any(s.sb <= off < s.eb for s in h):
                        nxt = h
            if nxt is None:
                return out
            cont = nxt

    def tests_before(self, site: GateSite) -> list[tuple[str, int, int, str]]:
        """Tests that run before the gate's statement and decide whether it is reached at all,
        innermost last: (relation, line, col, text) with relation
        - "else-of": the gate sits in the else/elif of this test (reached when it is false);
        - "then-of": the gate sits in the then-branch of this test (reached when it is true);
        - "exit-if": an earlier statement of an enclosing block leaves (raise/return/...) when
          this test is true."""
        ctx = self.locate(site)
        if ctx is None:
            return []
        off = self._offset(ctx, site.line, site.col)
        chain = self._chain_at(self._body(ctx), off)
        src = ctx.mod.parsed.src
        out = []

        def test(rel: str, t: N) -> None:
            out.append((rel, t.line, t.col, " ".join(src[t.sb:t.eb].decode("utf-8", "replace").split())))

        for level, (cont, idx, st) in enumerate(chain):
            for earlier in cont[:idx]:
                if earlier.k == "if" and _exits(earlier.f["body"]):
                    test("exit-if", earlier.f["test"])
            if st.k == "if" and level + 1 < len(chain):
                inner = chain[level + 1][0]
                if inner is st.f["body"]:
                    test("then-of", st.f["test"])
                elif inner is st.f["orelse"]:
                    test("else-of", st.f["test"])
        return out

    # ------------------------------------------------------------------ regions
    def regions(self, site: GateSite, ctx: Ctx) -> list[Region]:
        off = self._offset(ctx, site.line, site.col)
        body = self._body_at(ctx, off)
        chain = self._chain_at(body, off)
        if not chain:
            return []
        cont, idx, st = chain[-1]
        at_keyword = st.k in ("if", "while") and off < st.f["test"].sb
        if at_keyword:
            off = st.f["test"].sb  # FILE:LINE pointed at the `if` keyword: the whole test is the gate
        gate_link = Link("region", site.path, site.line, site.expr or ctx.mod.parsed.text(st).split("\n")[0][:120], "")
        out: list[Region] = []
        resolver = False
        # the gate selects the value returned (`return "sm100a"`, a value computed by the gate's
        # own expression), not only whether the function returns at all (a refusal before
        # `return result`) or which computation's result it returns (`if C: return f(x)`, whose
        # call is followed in the branch): the calls that value flows into are followed too
        selects = False
        if st.k in ("if", "while") and st.f["test"].sb <= off < st.f["test"].eb:
            part = None if at_keyword else _gate_part(st.f["test"], off, ctx.mod.parsed.text, site.expr)
            out += self._if_regions(ctx, chain, [gate_link], part)
            selects = _returns_constant(st.f["body"]) or _returns_constant(st.f["orelse"])
            resolver = selects or self._returns_in(st.f["body"]) or self._returns_in(st.f["orelse"]) or (
                _exits(st.f["body"]) and self._returns_in(self._after(chain)))
        elif st.k == "assert":
            out += self._exit_regions(ctx, chain, [gate_link], True)
            resolver = self._returns_in(self._after(chain))
        elif st.k == "return":
            resolver = selects = True
            # `return gen_jit_spec(..., extra_cuda_cflags=[...])`: the gate is the build's flags
            flag = self._flag_region(site, ctx, st, gate_link)
            if flag is not None:
                out.append(flag)
        elif st.k in ("assign", "augassign"):
            # `flags = C` and `flags += C`: the name's later uses carry the gate's value
            targets = st.f["targets"] if st.k == "assign" else [st.f["target"]]
            names = [t.f["id"] for t in targets if t.k == "name"]
            flag = self._flag_region(site, ctx, st, gate_link)
            if flag is not None:
                out.append(flag)
            for nm in names:
                for r in self._name_tests(ctx, nm, [gate_link]):
                    out.append(r)
                if flag is None and self._name_returned(ctx, nm):
                    resolver = selects = True
            # `target = "sm100a" if C else "sm90a"; gen_module(target)`: the calls the value flows
            # into; a value that is the flags of this function's builds is their "flags" region
            uses = self._uses(ctx, body, None, set(names), st.eb) if flag is None else _Uses(set(), [], [], False)
            if uses.consumers:
                out.append(Region("value", ctx, uses.consumers, [_relink(gate_link, "value")]))
            if uses.dispatchers:
                out.append(Region("value-dispatch", ctx, uses.dispatchers, [_relink(gate_link, "value-dispatch")]))
            if not out:
                out.append(Region("statement", ctx, [(st.sb, st.eb)], [_relink(gate_link, "statement")]))
        else:
            flag = self._flag_region(site, ctx, st, gate_link)
            if flag is not None:
                out.append(flag)
            out.append(Region("statement", ctx, [(st.sb, st.eb)], [_relink(gate_link, "statement")]))
        if ctx.kind == "function" and _refuses(chain) and _passed_always(chain):
            # every call of the function passes the refusal: what runs after each call is guarded
            # (a refusal some calls do not pass guards nothing in the callers: they also go on
            # without it)
            out += self._caller_regions(ctx, [gate_link], CALLER_DEPTH, raises=True)
        elif resolver and ctx.kind == "function":
            out += self._caller_regions(ctx, [gate_link], CALLER_DEPTH, raises=False, consumers=selects)
        return out

    def _if_regions(self, ctx: Ctx, chain, links: list[Link], carries=None) -> list[Region]:
        """The arms of the `if` ending the chain; `carries(expr)` picks the parts of its test that
        carry the gate's value (None: the whole test is the gate)."""
        st = chain[-1][2]
        test = st.f["test"]
        out = [Region("then", ctx, _spans(st.f["body"]), [_relink(x, "then") if i == len(links) - 1 else x for i, x in enumerate(links)])]
        if st.f["orelse"]:
            out.append(Region("else", ctx, _spans(st.f["orelse"]), [_relink(x, "else") if i == len(links) - 1 else x for i, x in enumerate(links)]))
        then_exits, else_exits = _exits(st.f["body"]), bool(st.f["orelse"]) and _exits(st.f["orelse"])
        if then_exits or else_exits:
            pinned = (then_exits and _pins(test, carries, False)) or (else_exits and _pins(test, carries, True))
            out += self._exit_regions(ctx, chain, links, pinned)
        return out

    def _exit_regions(self, ctx: Ctx, chain, links: list[Link], pinned: bool) -> list[Region]:
        """The code after a refusal: "after-exit" where it runs only on paths that passed the
        gate's test, "after-exit-partly" where it also runs on paths that never decided the gate
        (`if backend == "x" and not ok: raise` lets other backends on whatever `ok` is; after
        `if isinstance(s, Tensor): [if not ok: raise]`, the code runs for a float `s` untested)."""
        inner = _continuation(chain)
        outer = self._after(chain)[len(inner):]
        out = []
        for arm, stmts in (("after-exit" if pinned else "after-exit-partly", inner), ("after-exit-partly", outer)):
            if stmts:
                out.append(Region(arm, ctx, _spans(stmts), [_relink(x, arm) if i == len(links) - 1 else x for i, x in enumerate(links)]))
        return out

    @staticmethod
    def _after(chain) -> list[N]:
        """Statements that run after the innermost statement of the chain, at every nesting level
        up to a block that ends by leaving (`if backend == "xqa": ...; return x`: nothing after
        that block runs after the statement)."""
        out = []
        for cont, idx, st in reversed(chain):
            out.extend(cont[idx + 1:])
            if _exits(cont):
                break
        return out

    @staticmethod
    def _returns_in(stmts: list[N]) -> bool:
        return any(s.k == "return" and s.f["value"] is not None for s in iter_stmts(stmts))

    def _name_tests(self, ctx: Ctx, name: str, links: list[Link]) -> list[Region]:
        out = []
        body = self._body(ctx)
        for st in iter_stmts(body):
            if st.k in ("if", "while") and any(e.k == "name" and e.f["id"] == name for e in walk_exprs(st.f["test"])):
                chain = self._chain_at(body, st.f["test"].sb)
                l2 = links + [Link("region", ctx.mod.path, st.line, f"tests {name}", "variable")]
                out += self._if_regions(ctx, chain, l2, _naming(name))
        return out

    def _name_returned(self, ctx: Ctx, name: str) -> bool:
        for st in iter_stmts(self._body(ctx)):
            if st.k == "return" and st.f["value"] is not None and any(
                    e.k == "name" and e.f["id"] == name for e in walk_exprs(st.f["value"])):
                return True
        return False

    def _flag_region(self, site: GateSite, ctx: Ctx, st: N, gate_link: Link) -> Region | None:
        """An arch list / flags gate: the sinks in this function whose nvcc flags come from it."""
        self.g.expand(ctx.qualname)  # registers the sinks of this function
        lo, hi = st.line, self._line_of(ctx, st.eb - 1)
        keys = []
        for key, s in self.r.sinks.items():
            if s.ctx.mod.path != ctx.mod.path:
                continue
            m = self.jit.module(key)
            if m is None:
                continue
            if any(f.path == site.path and (lo <= f.line <= hi) for f in m.flags) or s.ctx is ctx and (
                    s.call.sb <= st.sb and st.eb <= s.call.eb or st.sb <= s.call.sb and s.call.eb <= st.eb):
                keys.append(key)
        if not keys:
            return None
        return Region("flags", ctx, [], [_relink(gate_link, "flags")] + [Link("flags", ctx.mod.path, self.jit.module(k).line, k, "dataflow") for k in keys])

    def _caller_regions(self, ctx: Ctx, links: list[Link], depth: int, raises: bool,
                        consumers: bool = False) -> list[Region]:
        """Regions in the callers of ctx's function. raises: the function refuses the GPUs the gate
        excludes before it returns, so the rest of each call's statement and the statements after
        it are guarded (and, where the call is always passed, the callers' callers' likewise; where
        it is not but its value is returned, what the callers' callers do with that value).
        Otherwise the returned value decides: the caller's tests of it, with `consumers` (the gate
        selects that value) the calls it flows into, and the callers' callers where it is returned."""
        out: list[Region] = []
        if depth <= 0:
            return out
        short = ctx.qualname.rsplit(".", 1)[-1]
        for c in self.g.callers(ctx.qualname):
            gctx = self.r.ctx(c.caller)
            if gctx is None or gctx.kind not in ("function", "module"):
                continue
            off = self._offset(gctx, c.line, c.col)
            body = self._body_at(gctx, off)
            chain = self._chain_at(body, off)
            if not chain:
                continue
            cont, idx, st = chain[-1]
            path = path_to_call(st, off, short)
            if raises:
                if path is None or any(n.k == "lambda" for n in path):
                    continue  # a call deferred into a lambda runs later, if at all
                l2 = links + [Link("call", c.path, c.line, c.caller, "caller-after-raise")]
                call = path[-1]
                spans = [(call.eb, st.eb)] + [(n.sb, n.sb + 1) for n in path[:-1] if n.k == "call"]
                spans += _spans(_continuation(chain))
                out.append(Region("caller:after-exit", gctx, spans, l2))
                if gctx.kind != "function":
                    continue
                if _passed_always(chain) and _unconditional(path):
                    out += self._caller_regions(gctx, l2, depth - 1, True)
                elif self._uses(gctx, body, path, set(), path[-1].eb).returned:
                    # `if backend is None: return None` before `return f(backend)`: the caller's
                    # callers go on either way, with what it returns deciding
                    out += self._caller_regions(gctx, l2, depth - 1, False)
                continue
            l2 = links + [Link("call", c.path, c.line, c.caller, "caller-branch")]
            if st.k in ("if", "while") and st.f["test"].sb <= off < st.f["test"].eb:
                out += [Region("caller:" + r.arm, r.ctx, r.spans, r.links) for r in self._if_regions(gctx, chain, l2, _gate_part(st.f["test"], off))]
                # the caller is itself a resolver when the branches decide what it returns
                if gctx.kind == "function" and (self._returns_in(st.f["body"]) or self._returns_in(st.f["orelse"])):
                    out += self._caller_regions(gctx, l2, depth - 1, False)
            if path is None:
                continue
            uses = self._uses(gctx, body, path, set(), path[-1].eb)
            for nm in sorted(uses.names):
                out += [Region("caller:" + r.arm, r.ctx, r.spans, r.links) for r in self._name_tests(gctx, nm, l2)]
            if consumers and uses.consumers:
                out.append(Region("caller:value", gctx, uses.consumers,
                                  links + [Link("call", c.path, c.line, c.caller, "caller-value")]))
            if consumers and uses.dispatchers:
                out.append(Region("caller:value-dispatch", gctx, uses.dispatchers,
                                  links + [Link("call", c.path, c.line, c.caller, "caller-value-dispatch")]))
            if uses.returned and gctx.kind == "function":
                out += self._caller_regions(gctx, l2, depth - 1, False, consumers)
        return out

    def _uses(self, ctx: Ctx, body: list[N], path: list[N] | None, names: set[str], after: int) -> "_Uses":
        """Where a value goes in ctx: the value of the call at the end of `path` (None: no call)
        or of the local `names`. Locals bound from it (through any chain of assignments, tuple
        unpacking and loops: the scope's bindings as the resolver reads them) carry it too; the
        calls that take it in an argument (`gen(target)`, `gen(FLAGS[target])`,
        `gen(f"m_{target}")`) or as a receiver and start after byte `after` (where the value is
        made), and the calls the call itself sits in, are its consumers; those into a function
        that branches on the parameter receiving it are its dispatchers."""
        binds = self.r.locals_of(ctx) if ctx.kind == "function" else self.r.gbind(ctx.mod.name)
        call = path[-1] if path else None
        names = set(names)
        if call is not None:
            for nm, bl in binds.items():
                if any((v := _bound_value(bd)) is not None and v.sb <= call.sb and call.eb <= v.eb for bd in bl):
                    names.add(nm)
        grew = bool(names)
        while grew:
            grew = False
            for nm, bl in binds.items():
                if nm not in names and any(_mentions(_bound_value(bd), names) for bd in bl):
                    names.add(nm)
                    grew = True
        def carries(x: N) -> bool:
            return _mentions(x, names) or (call is not None and x.sb <= call.sb and call.eb <= x.eb)

        found = [n for n in (path or [])[:-1] if n.k == "call"]
        returned = False
        for st in iter_stmts(body):
            own = [v for key, v in st.f.items() if key not in ("body", "orelse", "handlers", "final")]
            if st.k == "return" and st.f["value"] is not None and (
                    _mentions(st.f["value"], names) or (call is not None and st.sb <= call.sb < st.eb)):
                returned = True
            if not names or st.k in ("def", "class"):
                continue
            for e in walk_exprs(own):
                if e.k != "call" or e.sb < after:
                    continue
                fn = e.f["func"]
                if (any(_mentions(a, names) for a in e.f["args"]) or any(_mentions(v, names) for _k, v in e.f["kwargs"])
                        or (fn.k == "attr" and _mentions(fn.f["value"], names))):
                    found.append(e)
        consumers, dispatchers = set(), set()
        for e in found:
            (dispatchers if self._dispatches_on(ctx, e, carries) else consumers).add((e.sb, e.sb + 1))
        return _Uses(names, sorted(consumers), sorted(dispatchers - consumers), returned)

    def _dispatches_on(self, ctx: Ctx, call: N, carries) -> bool:
        """Whether a function the call resolves to tests a parameter that receives the value (an
        `if`/`while` test naming it: `if backend == "mnnvl":`), so that which value leads where
        is decided inside it."""
        off = call.sb
        for c in self.g.expand(ctx.qualname):
            if c.callee.startswith("<") or self._offset(ctx, c.line, c.col) != off:
                continue
            fctx = self.r.ctx(c.callee)
            if fctx is None or fctx.kind != "function":
                continue
            params = [p for p in fctx.node.f["params"] if p[2] in ("", "kwonly")]
            positional = [p[0] for p in params if p[2] == ""][1 if fctx.self_name else 0:]
            recv = {k for k, v in call.f["kwargs"] if carries(v)}
            for i, a in enumerate(call.f["args"]):
                if carries(a) and i < len(positional):
                    recv.add(positional[i])
            if recv and any(st.k in ("if", "while") and _mentions(st.f["test"], recv)
                            for node in fctx.mod.bound_defs(fctx.qual) for st in iter_stmts(node.f["body"])):
                return True
        return False

    def _body_at(self, ctx: Ctx, off: int) -> list[N]:
        """The body holding `off`: of the def (among those bound to a redefined name) that spans it."""
        if ctx.kind != "function":
            return ctx.mod.parsed.body
        for node in ctx.mod.bound_defs(ctx.qual):
            if node.sb <= off < node.eb:
                return _statements(node)
        return _statements(ctx.node)

    # ------------------------------------------------------------------ forward search
    def _calls_in(self, region: Region) -> list[Call]:
        calls = self.g.expand(region.ctx.qualname)
        out = []
        for c in calls:
            off = self._offset(region.ctx, c.line, c.col)
            if any(a <= off < b for a, b in region.spans):
                out.append(c)
        return out

    def search(self, region: Region, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_NODES,
               externals: dict[str, list[Call]] | None = None) -> dict[str, tuple[list[Call], set]]:
        """JIT sink key -> (call path to it, entry points seen). externals, when given, gets the
        call path to every function outside the scan the region reaches (dotted name -> path)."""
        parent: dict[str, tuple[str | None, Call | None]] = {}
        found: dict[str, list[Call]] = {}
        entries: dict[str, set] = {}
        q: deque = deque()
        depth: dict[str, int] = {}
        # a function that calls one of its parameters (`def build(factory): return factory()`)
        # calls what its callers on the way pass for it: every call site seen in this search,
        # and those of its callers when they hand on a parameter of their own
        incoming: dict[str, list[Call]] = {}
        param_calls: dict[str, list[tuple[Call, str]]] = {}
        origin = region.ctx.qualname  # a runtime is outside the scan from the gate's package (Index.hidden)

        def visit(c: Call, prev: str | None, d: int) -> None:
            if c.callee.startswith("<jit:"):
                key = c.callee[5:-1]
                path = self._path(parent, prev) + [c]
                if key not in found or len(path) < len(found[key]):
                    found[key] = path
                if c.entry:
                    entries.setdefault(key, set()).add(c.entry)
                return
            if externals is not None and c.callee.startswith(UNRESOLVED_PREFIX):
                # an attribute of a package holding GPU code looked up at run time (a __getattr__
                # handing names to its prebuilt ops, a name its extension module binds): code
                # outside what the search follows
                name = self._gpu_lookup(c)
                if name is not None and name not in externals:
                    externals[name] = self._path(parent, prev) + [c]
                return
            if c.callee in parent:
                incoming.setdefault(c.callee, []).append(c)
                for pc, pname in param_calls.get(c.callee, ()):
                    for nc in self._passed(c.callee, pc, pname, [c], incoming):
                        visit(nc, c.callee, depth[c.callee] + 1)
                return
            if self.g.index.hidden(origin, c.callee) or self.r.ctx(c.callee) is None:
                if externals is not None and c.how != "builtin" and not c.callee.startswith("<") and c.callee not in externals:
                    externals[c.callee] = self._path(parent, prev) + [c]
                return
            parent[c.callee] = (prev, c)
            depth[c.callee] = d
            incoming.setdefault(c.callee, []).append(c)
            q.append(c.callee)

        for c in self._calls_in(region):
            visit(c, None, 1)
        while q and len(parent) < max_nodes:
            n = q.popleft()
            if depth[n] >= max_depth:
                continue
            for c in self.g.expand(n):
                pname = self.g.called_parameter(n, c)
                if pname is not None:
                    param_calls.setdefault(n, []).append((c, pname))
                    for nc in self._passed(n, c, pname, incoming.get(n, []), incoming):
                        visit(nc, n, depth[n] + 1)
                visit(c, n, depth[n] + 1)
        return {k: (v, entries.get(k, set())) for k, v in found.items()}

    def _passed(self, fn: str, pc: Call, pname: str, sites: list[Call], incoming: dict[str, list[Call]],
                hops: int = 0) -> list[Call]:
        """Calls made by `fn`'s call pc of its parameter pname: what the call sites `sites` pass for
        it (functions, partials of them, classes constructed, objects with __call__); an argument
        that is itself a parameter of the caller is looked up at the caller's sites (4 hops)."""
        out: list[Call] = []
        for site in sites:
            for ref in self.g.argument_refs(site, pname):
                how = f"argument:{pname}"
                if ref.kind in ("function", "partial") and ref.target != "<build>":
                    out.append(Call(fn, ref.target, pc.path, pc.line, pc.col, how))
                elif ref.kind == "class":
                    for m in self.r.class_member(ref.target, "__init__", 1, False):
                        if m.kind == "function":
                            out.append(Call(fn, m.target, pc.path, pc.line, pc.col, how + "+constructor"))
                elif ref.kind == "instance":
                    for m in self.r.class_member(ref.target, "__call__", 1, True):
                        if m.kind == "function":
                            out.append(Call(fn, m.target, pc.path, pc.line, pc.col, how + "+__call__"))
                elif (ref.kind == "unresolved" and ref.target == "unknown-receiver" and hops < 4
                      and ref.extra.startswith("parameter ")):
                    outer = ref.extra[len("parameter "):]
                    ctx = self.r.ctx(site.caller)
                    if ctx is not None and ctx.kind == "function" and any(p[0] == outer for p in ctx.node.f["params"]):
                        # the caller hands on what its own callers passed it
                        out.extend(self._passed(fn, pc, outer, incoming.get(site.caller, []), incoming, hops + 1))
        seen: dict = {}
        for c in out:
            seen.setdefault(c.callee, c)
        return list(seen.values())

    def _gpu_lookup(self, c: Call) -> str | None:
        """The name an unresolved call looks up at run time (resolve.looked_up_name), marked as
        such, when its package holds GPU code (Index.gpu_packages); else None. A name a class
        lacks is not one: a method its subclasses define (a module's is bound at run time, by
        an extension module or a __getattr__)."""
        kind = c.callee[len(UNRESOLVED_PREFIX):-1]
        name = looked_up_name(kind, c.detail)
        if name is None or name.split(".", 1)[0] not in self.g.index.gpu_packages:
            return None
        if kind == "missing-attribute" and not self.g.index.has_module(name.rsplit(".", 1)[0]):
            return None
        return f"{name} {LOOKED_UP}"

    @staticmethod
    def _path(parent, node) -> list[Call]:
        out = []
        while node is not None:
            prev, call = parent[node]
            out.append(call)
            node = prev
        return list(reversed(out))

    # ------------------------------------------------------------------ API
    def modules_behind(self, gate: Gate | GateSite) -> list[BehindModule]:
        return self.behind_gate(gate)[0]

    def behind_gate(self, gate: Gate | GateSite) -> tuple[list[BehindModule], list[ExternalCall]]:
        """The JIT modules the gate's regions reach, and the functions outside the scan they call
        (code archaudit cannot judge), from one search."""
        site = gate if isinstance(gate, GateSite) else GateSite(gate.path, gate.line, gate.col, gate.function, gate.kind, gate.expr)
        ctx = self.locate(site)
        if ctx is None:
            return [], []
        out: dict[tuple[str, str], BehindModule] = {}
        outside: dict[tuple[str, str], ExternalCall] = {}
        for region in self.regions(site, ctx):
            if region.arm == "flags":
                for ln in region.links:
                    if ln.kind == "flags":
                        m = self.jit.module(ln.text)
                        chain = list(region.links[:1]) + [ln, Link("jit-module", m.path, m.line, m.name, "jit-sink")]
                        out.setdefault((m.key, region.arm), BehindModule(m, region.arm, chain, None, self.builders(m)))
                continue
            found_ext: dict[str, list[Call]] = {}
            got = self.search(region, externals=found_ext)
            for callee, calls in found_ext.items():
                outside.setdefault((callee, region.arm), ExternalCall(
                    callee, region.arm, list(region.links) + [Link("call", c.path, c.line, c.callee, c.how) for c in calls]))
            for key, (calls, entries) in got.items():
                m = self.jit.module(key)
                if m is None:
                    continue
                chain = list(region.links)
                for c in calls[:-1]:
                    chain.append(Link("call", c.path, c.line, c.callee, c.how))
                last = calls[-1]
                chain.append(Link("jit-module", last.path, last.line, m.name, last.how))
                prev = out.get((key, region.arm))
                if prev is None or len(chain) < len(prev.chain):
                    out[(key, region.arm)] = BehindModule(m, region.arm, chain, sorted(entries) or None, self.builders(m))
                elif entries:
                    prev.entry_points = sorted(set(prev.entry_points or []) | entries)
        return (sorted(out.values(), key=lambda b: (b.module.name, b.arm)),
                [outside[k] for k in sorted(outside)])

    def modules_compiling(self, path: str, first: Link) -> list[BehindModule]:
        """The JIT modules whose resolved sources include `path` (a .cu file): the sinks in the
        Python modules that name the file's stem, each with chain first -> module."""
        stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        if not WORD_RE.fullmatch(stem):
            return []
        names = set(self.g.modules_naming(stem))
        for modname in sorted(names):
            mod = self.r.module(modname)
            for q in (mod.functions if mod is not None else ()):
                self.g.expand(f"{modname}.{q}")  # resolving the calls is what finds the sinks
        out = []
        for key, site in sorted(self.r.sinks.items()):
            if site.ctx.mod.name not in names:
                continue
            m = self.jit.module(key)
            if m is not None and any(s.status == "resolved" and s.path == path for s in m.sources):
                out.append(BehindModule(m, "statement", [first, Link("jit-module", m.path, m.line, m.name, "compiles-source")],
                                        None, self.builders(m)))
        return out

    def builders(self, m: JitModule) -> list[Link]:
        """Call sites that build a spec sink's module: `.build_and_load()` on the producer's result."""
        if m.kind != "spec":
            return []
        got = self._builders.get(m.key)
        if got is not None:
            return list(got)
        out = []
        for c in self.g.callers(m.function):
            for c2 in self.g.expand(c.caller):
                if c2.callee == m.node and c2.line == c.line and "build" in c2.how.split("+"):
                    out.append(Link("call", c.path, c.line, c.caller, "build"))
                    break
        self._builders[m.key] = out
        return list(out)


@dataclass
class _Uses:
    names: set  # locals that carry the value
    consumers: list[tuple[int, int]]  # spans of the calls it flows into (their first byte)
    dispatchers: list[tuple[int, int]]  # those of the calls into functions that branch on it
    returned: bool  # the scope returns it


def _bound_value(bd: tuple) -> N | None:
    """The expression a binding (Resolver's binding tuples) takes its value from."""
    if bd[0] in ("assign", "unpack", "iter", "with", "aug"):
        return bd[1]
    return None


def _mentions(x: N | None, names: set) -> bool:
    return x is not None and bool(names) and any(e.k == "name" and e.f["id"] in names for e in walk_exprs(x))


def path_to_call(st: N, off: int, short: str) -> list[N] | None:
    """The expressions of a statement's own header from the outermost down to the call that starts
    at `off` (the innermost such call whose callee is named `short`, else the innermost)."""
    found: list[list[N]] = []

    def rec(v, path: list[N]) -> None:
        if isinstance(v, N):
            if not (v.sb <= off < v.eb) or v.k in ("def", "class"):
                return
            p = path + [v]
            if v.k == "call" and v.sb == off:
                found.append(p)
            for x in v.f.values():
                rec(x, p)
        elif isinstance(v, (list, tuple)):
            for x in v:
                rec(x, path)

    for key, v in st.f.items():
        if key not in ("body", "orelse", "handlers", "final"):
            rec(v, [])
    if not found:
        return None

    def named(p: list[N]) -> bool:
        fn = p[-1].f["func"]
        return (fn.k == "name" and fn.f["id"] == short) or (fn.k == "attr" and fn.f["attr"] == short)

    return max(found, key=lambda p: (named(p), len(p)))


def _unconditional(path: list[N]) -> bool:
    """Whether the last expression of the path runs whenever its statement does (not in an
    `x if t else y` arm, the right of `and`/`or`, a comprehension or a lambda)."""
    for node, child in zip(path, path[1:]):
        if node.k in ("lambda", "comp"):
            return False
        if node.k == "ifexp" and child is not node.f["test"]:
            return False
        if node.k == "boolop" and child is node.f["right"]:
            return False
    return True


def _passed_always(chain) -> bool:
    """Whether the innermost statement of the chain runs on every call of its function: it sits at
    the top of the body, or only inside `with` blocks (not in a branch, a loop or a `try`), and no
    statement before it can return (`if not enabled: return` lets the callers go on without it)."""
    return all(st.k == "with" for _cont, _idx, st in chain[:-1]) and not any(
        s.k == "return" for cont, idx, _st in chain for s in iter_stmts(cont[:idx]))


def _continuation(chain) -> list[N]:
    """The statements that run after the innermost statement of the chain whenever it completes:
    the rest of its block, and of the blocks around it through `with` statements (after a branch,
    a loop or a `try` the code also runs on paths that did not pass it), up to a block that
    ends by leaving."""
    out = []
    for level in range(len(chain) - 1, -1, -1):
        cont, idx, st = chain[level]
        out.extend(cont[idx + 1:])
        if _exits(cont) or level == 0 or chain[level - 1][2].k != "with":
            break
    return out


def _returns_constant(stmts: list[N]) -> bool:
    """Whether the statements return a constant other than None/False (`"sm100a"`, `"sm100f" if
    ok else "sm100a"`; `return False` after a failed test is a refusal, as the gate evaluation
    reads it)."""

    def const(e: N) -> bool:
        if e.k == "const":
            return e.f["value"] is not None and e.f["value"] is not False
        if e.k == "ifexp":
            return const(e.f["body"]) and const(e.f["orelse"])
        if e.k in ("tuple", "list"):
            return bool(e.f["elts"]) and all(const(x) for x in e.f["elts"])
        return False

    return any(s.k == "return" and s.f["value"] is not None and const(s.f["value"]) for s in iter_stmts(stmts))


def _relink(link: Link, arm: str) -> Link:
    return Link(link.kind, link.path, link.line, link.text, arm)


def _gate_part(test: N, off: int, text=None, expr: str = ""):
    """The parts of a test that hold the gate: the expression starting at byte `off` whose text is
    `expr` (else the largest one starting there), or with no `text`, the call starting there (a
    call of the gate's function in a caller's test). None (the whole test) when none starts there."""
    starts = [e for e in walk_exprs(test) if e.sb == off]
    if text is None:
        starts = [e for e in starts if e.k == "call"]
    else:
        want = " ".join(expr.split())
        starts = [e for e in starts if " ".join(text(e).split()) == want] or starts
    if not starts:
        return None
    g = max(starts, key=lambda e: e.eb - e.sb)
    return lambda e: g.sb <= e.sb and e.eb <= g.eb or e.sb <= g.sb and g.eb <= e.eb


def _naming(name: str):
    """The parts of a test that read the local `name`."""
    return lambda e: any(x.k == "name" and x.f["id"] == name for x in walk_exprs(e))


def _pins(test: N, carries, value: bool) -> bool:
    """Whether `test` evaluating to `value` decides the parts `carries` picks (None: all of it).
    `a and b` is true only when both are, `a or b` false only when both are: one side deciding is
    enough; otherwise (`a and b` false, `a or b` true) both sides must."""
    if carries is None:
        return True
    if test.k == "not":
        return _pins(test.f["value"], carries, not value)
    if test.k == "boolop":
        left, right = _pins(test.f["left"], carries, value), _pins(test.f["right"], carries, value)
        return (left or right) if (test.f["op"] == "and") == value else (left and right)
    return carries(test)


def _spans(stmts: list[N]) -> list[tuple[int, int]]:
    return [(s.sb, s.eb) for s in stmts]


def _exits(stmts: list[N]) -> bool:
    return bool(stmts) and stmts[-1].k in ("raise", "return", "continue", "break")


def _refuses(chain) -> bool:
    """Whether the innermost statement is a refusal: `assert C`, or `if not C: ... raise` with no
    else (the code after it runs exactly when the test is false)."""
    st = chain[-1][2]
    if st.k == "assert":
        return True
    return st.k == "if" and bool(st.f["body"]) and st.f["body"][-1].k == "raise" and not st.f["orelse"]


def _statements(node: N) -> list[N]:
    """A function's statements; none for a lambda, whose body is one expression (what is at an
    offset inside it is in no statement: followed no further)."""
    body = node.f["body"]
    return body if isinstance(body, list) else []
