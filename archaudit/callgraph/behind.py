"""Behind a gate: the JIT modules whose build or use a gate controls, with the chain of links.

Regions a gate guards (each becomes the start of a forward search through the call graph):
- `if gate:` -> the then-branch ("then") and the else-branch ("else");
- `if not gate: raise/return` and `assert gate` -> the rest of the function ("after-exit");
- an arch list passed on (`get_nvcc_flags_list(supported_major_versions=...)` or hard-coded
  -gencode flags) -> the JIT spec in the same function that receives it ("flags");
- a gate in `return ...`, or whose region returns a value (a predicate or a resolver such as
  `_resolve_backend`) -> in each caller, the branches that test the call's result or a variable
  assigned from it, the code after the call when the gate raises, and, for `return f()`, the
  callers of that caller (up to `CALLER_DEPTH` levels).
The forward search follows resolved call edges breadth-first (bounded depth and size) down to
JIT sink nodes; entry points are the attributes called on a built module along the way.
"""
from __future__ import annotations

import bisect
import re
from collections import deque
from dataclasses import dataclass, field

from ..model import Gate, Link
from ..parsing.python_ir import N
from .graph import Call, CallGraph
from .jit import JitModel, JitModule
from .resolve import Ctx, iter_stmts, walk_exprs

WORD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
CALLER_DEPTH = 3
MAX_DEPTH = 10
MAX_NODES = 4000


@dataclass
class Region:
    arm: str  # "then" | "else" | "after-exit" | "flags" | "statement" | "caller:<arm>"
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
        return ctx.node.f["body"] if ctx.kind == "function" else ctx.mod.parsed.body

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
        chain = self._chain_at(self._body(ctx), off)
        if not chain:
            return []
        cont, idx, st = chain[-1]
        if st.k in ("if", "while") and off < st.f["test"].sb:
            off = st.f["test"].sb  # FILE:LINE pointed at the `if` keyword
        gate_link = Link("region", site.path, site.line, site.expr or ctx.mod.parsed.text(st).split("\n")[0][:120], "")
        out: list[Region] = []
        resolver = False
        if st.k in ("if", "while") and st.f["test"].sb <= off < st.f["test"].eb:
            out += self._if_regions(ctx, chain, [gate_link])
            resolver = self._returns_in(st.f["body"]) or self._returns_in(st.f["orelse"]) or (
                _exits(st.f["body"]) and self._returns_in(self._after(chain)))
        elif st.k == "assert":
            after = self._after(chain)
            out.append(Region("after-exit", ctx, _spans(after), [_relink(gate_link, "after-exit")]))
            resolver = self._returns_in(after)
        elif st.k == "return":
            resolver = True
        elif st.k == "assign":
            names = [t.f["id"] for t in st.f["targets"] if t.k == "name"]
            flag = self._flag_region(site, ctx, st, gate_link)
            if flag is not None:
                out.append(flag)
            for nm in names:
                for r in self._name_tests(ctx, nm, [gate_link]):
                    out.append(r)
                if self._name_returned(ctx, nm):
                    resolver = True
            if not out:
                out.append(Region("statement", ctx, [(st.sb, st.eb)], [_relink(gate_link, "statement")]))
        else:
            flag = self._flag_region(site, ctx, st, gate_link)
            if flag is not None:
                out.append(flag)
            out.append(Region("statement", ctx, [(st.sb, st.eb)], [_relink(gate_link, "statement")]))
        if resolver and ctx.kind == "function":
            out += self._caller_regions(ctx, [gate_link], CALLER_DEPTH, raises=False)
        elif ctx.kind == "function" and any(r.arm == "after-exit" for r in out) and _exits_by_raise(chain):
            out += self._caller_regions(ctx, [gate_link], 1, raises=True)
        return out

    def _if_regions(self, ctx: Ctx, chain, links: list[Link]) -> list[Region]:
        st = chain[-1][2]
        out = [Region("then", ctx, _spans(st.f["body"]), [_relink(x, "then") if i == len(links) - 1 else x for i, x in enumerate(links)])]
        if st.f["orelse"]:
            out.append(Region("else", ctx, _spans(st.f["orelse"]), [_relink(x, "else") if i == len(links) - 1 else x for i, x in enumerate(links)]))
        if _exits(st.f["body"]) or (st.f["orelse"] and _exits(st.f["orelse"])):
            after = self._after(chain)
            if after:
                out.append(Region("after-exit", ctx, _spans(after), [_relink(x, "after-exit") if i == len(links) - 1 else x for i, x in enumerate(links)]))
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
                out += self._if_regions(ctx, chain, l2)
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
            if any(f.path == site.path and (lo <= f.line <= hi) for f in m.flags) or (
                    s.call.sb <= st.sb and st.eb <= s.call.eb and s.ctx is ctx):
                keys.append(key)
        if not keys:
            return None
        return Region("flags", ctx, [], [_relink(gate_link, "flags")] + [Link("flags", ctx.mod.path, self.jit.module(k).line, k, "dataflow") for k in keys])

    def _caller_regions(self, ctx: Ctx, links: list[Link], depth: int, raises: bool) -> list[Region]:
        out: list[Region] = []
        if depth <= 0:
            return out
        for c in self.g.callers(ctx.qualname):
            gctx = self.r.ctx(c.caller)
            if gctx is None or gctx.kind not in ("function", "module"):
                continue
            off = self._offset(gctx, c.line, c.col)
            chain = self._chain_at(self._body(gctx), off)
            if not chain:
                continue
            cont, idx, st = chain[-1]
            l2 = links + [Link("call", c.path, c.line, c.caller, "caller-branch" if not raises else "caller-after-raise")]
            if raises:
                after = self._after(chain)
                if after:
                    out.append(Region("caller:after-exit", gctx, _spans(after), l2))
                continue
            if st.k in ("if", "while") and st.f["test"].sb <= off < st.f["test"].eb:
                out += [Region("caller:" + r.arm, r.ctx, r.spans, r.links) for r in self._if_regions(gctx, chain, l2)]
                # the caller is itself a resolver when the branches decide what it returns
                if gctx.kind == "function" and (self._returns_in(st.f["body"]) or self._returns_in(st.f["orelse"])):
                    out += self._caller_regions(gctx, l2, depth - 1, False)
            elif st.k == "assign":
                for t in st.f["targets"]:
                    if t.k == "name":
                        out += [Region("caller:" + r.arm, r.ctx, r.spans, r.links) for r in self._name_tests(gctx, t.f["id"], l2)]
                        if self._name_returned(gctx, t.f["id"]) and gctx.kind == "function":
                            out += self._caller_regions(gctx, l2, depth - 1, False)
            elif st.k == "return" and gctx.kind == "function":
                out += self._caller_regions(gctx, l2, depth - 1, False)
        return out

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

        def visit(c: Call, prev: str | None, d: int) -> None:
            if c.callee.startswith("<jit:"):
                key = c.callee[5:-1]
                path = self._path(parent, prev) + [c]
                if key not in found or len(path) < len(found[key]):
                    found[key] = path
                if c.entry:
                    entries.setdefault(key, set()).add(c.entry)
                return
            if c.callee in parent:
                return
            if self.r.ctx(c.callee) is None:
                if externals is not None and c.how != "builtin" and not c.callee.startswith("<") and c.callee not in externals:
                    externals[c.callee] = self._path(parent, prev) + [c]
                return
            parent[c.callee] = (prev, c)
            depth[c.callee] = d
            q.append(c.callee)

        for c in self._calls_in(region):
            visit(c, None, 1)
        while q and len(parent) < max_nodes:
            n = q.popleft()
            if depth[n] >= max_depth:
                continue
            for c in self.g.expand(n):
                visit(c, n, depth[n] + 1)
        return {k: (v, entries.get(k, set())) for k, v in found.items()}

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


def _relink(link: Link, arm: str) -> Link:
    return Link(link.kind, link.path, link.line, link.text, arm)


def _spans(stmts: list[N]) -> list[tuple[int, int]]:
    return [(s.sb, s.eb) for s in stmts]


def _exits(stmts: list[N]) -> bool:
    return bool(stmts) and stmts[-1].k in ("raise", "return", "continue", "break")


def _exits_by_raise(chain) -> bool:
    st = chain[-1][2]
    if st.k == "assert":
        return True
    return st.k == "if" and bool(st.f["body"]) and st.f["body"][-1].k == "raise"
