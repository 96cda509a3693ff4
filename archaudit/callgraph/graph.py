"""The call graph (networkx DiGraph), built on demand.

Nodes: modules (`pkg.mod`), classes (`pkg.mod.Class`), functions and methods (`pkg.mod.Class.meth`,
nested: `pkg.mod.f.<locals>.g`, lambdas: `pkg.mod.f.<locals>.<lambda1>`), names outside the scan (`torch.empty`, `<builtin>.len`), JIT
modules (`<jit:NAME>`), and `<unresolved:REASON>` nodes for callees that could not be resolved.
Edge data: `how` (the resolution rules of the first call site) and `sites`: [(path, line, how)].

`expand(node)` computes one node's out-edges (parsing only the modules it reaches);
`callers(qualname)` finds in-edges, parsing only modules whose bytes contain the callee's name
(other than as an attribute of a package outside the scan);
`build_all()` expands everything (what `callgraph --format pycg` needs; with arg_flow, parameters
get the arguments of every call site). bench/pycg.py scores it on PyCG's micro-benchmark.
"""
from __future__ import annotations

import bisect
import re
from collections import deque
from dataclasses import dataclass, replace

import networkx as nx

from ..parsing.python_ir import N, iter_stmts
from ..parsing.words import words_of
from ..python.index import Index, flatten_top
from ..python.pybytes import ExternalRoots, word_pattern
from ..ruledata import load_rule
from .resolve import Ctx, Ref, Resolver, walk_exprs

UNRESOLVED_PREFIX = "<unresolved:"
MAX_CALLER_MODULES = 40  # reverse search: more modules naming a function than this is reported, not searched
# after this many whole-scan byte searches, one pass builds a word -> modules index (about 25 s on
# 170 MB of Python here, against ~0.2-0.8 s per search): a full scan gets there within a few gates,
# `explain` of one gate never does
WORD_INDEX_AFTER = 40
# builds of the whole graph with argument flow (build_all): each pass may find call sites (of
# functions reached only through a parameter) that the next one follows
ARG_FLOW_PASSES = 4
# built-ins that call a function handed to them: name -> the keyword it comes in (None: any
# positional argument)
_CALLING_BUILTINS = {"map": None, "filter": None, "sorted": "key", "min": "key", "max": "key"}
# a word the index answers exactly as `\bword\b` would (bytes patterns: \w is ASCII)
_ASCII_WORD = re.compile(rb"\w+")


def jit_node(key: str) -> str:
    return f"<jit:{key}>"


class SearchBudgetExceeded(Exception):
    """CallGraph.work passed CallGraph.limit: the search asked of the graph stops where it is. Raised
    before a node is expanded or a callee's call sites are searched, never halfway through one, so
    what the graph has stored stays complete for the searches after it."""


@dataclass(frozen=True)
class Call:
    """One resolved call site: caller node -> callee node."""

    caller: str
    callee: str
    path: str
    line: int
    col: int
    how: str
    detail: str = ""
    entry: str | None = None  # for calls on a built JIT module: the entry point's name
    # a call inside the body of a lambda of the caller: an edge of the caller (the scan follows
    # what a scope may run), and of the lambda's own node, which the PyCG format keeps alone
    in_lambda: bool = False


class CallGraph:
    def __init__(self, index: Index, resolver: Resolver | None = None):
        self.index = index
        self.r = resolver or Resolver(index)
        self.g = nx.DiGraph()
        self._expanded: set[str] = set()
        self._calls: dict[str, list[Call]] = {}
        self._callers_done: set[str] = set()
        self._by_callee: dict[str, list[Call]] = {}  # reverse edges, filled as nodes are expanded
        self._words: dict[bytes, list[str]] | None = None
        self._sites: dict[str, dict[tuple[int, int], N]] = {}  # qualname -> (line, col) -> call in its body
        self._scans = 0
        self._outside = ExternalRoots(index.path_of)
        # calls outside the scan that run what they are handed (rules/externals.toml)
        self._tracers = frozenset(load_rule("externals").get("traces_arguments", []))
        self.skipped_callers = {}
        self.skip_log: set | None = None  # when a set: callers() adds each skipped name it is asked for
        # steps taken: statements expanded and definitions searched for call sites (a count, the
        # same on every run, that the judge's per-module budget reads)
        self.work = 0
        # when set: the work after which expand() and callers() raise SearchBudgetExceeded
        self.limit: int | None = None
        # when a dict: every call site resolved to a function of the scan is recorded here
        # (Resolver.arg_sites' form), for build_all's argument flow
        self.recorded_sites: dict[str, list] | None = None

    def check_budget(self) -> None:
        if self.limit is not None and self.work > self.limit:
            raise SearchBudgetExceeded

    # ------------------------------------------------------------------ nodes
    def _node(self, name: str, kind: str, path: str | None = None, line: int | None = None) -> None:
        if name not in self.g:
            self.g.add_node(name, kind=kind, path=path, line=line)

    def _in_outside_package(self, caller: str, callee: str) -> bool:
        """A callee in a package with nothing architecture-dependent (Index.outside) called from
        another package: external, named without parsing its module."""
        return callee.split(".", 1)[0] in self.index.outside and self.index.hidden(caller, callee)

    def _def_node(self, qualname: str) -> bool:
        d = self.r.defn(qualname)
        if d is None:
            return False
        mod, q, node, kind = d
        self._node(qualname, kind, mod.path, node.line if node is not None else None)
        return True

    # ------------------------------------------------------------------ expansion
    def expand(self, qualname: str) -> list[Call]:
        """Out-edges of a module, class or function node (computed once)."""
        if qualname in self._calls:
            return self._calls[qualname]
        self.check_budget()
        self._calls[qualname] = []
        ctx = self.r.ctx(qualname)
        if ctx is None:
            return []
        self._def_node(qualname)
        if ctx.kind == "function" and ctx.node.k == "lambda":
            stmts = [N("expr", ctx.node.line, ctx.node.col, ctx.node.sb, ctx.node.eb, {"value": ctx.node.f["body"]})]
        elif ctx.kind == "function":
            # the body of every def that may be bound to the name (one per branch of an if)
            stmts = [st for node in ctx.mod.bound_defs(ctx.qual) for st in iter_stmts(node.f["body"])]
        elif ctx.kind == "class":
            stmts = list(flatten_top(ctx.node.f["body"]))
        else:
            # the module's statements, those in its loops' bodies too (they run at import)
            stmts = list(iter_stmts(ctx.mod.parsed.body))
        self.work += len(stmts)
        calls: list[Call] = []
        for st in stmts:
            if st.k in ("def", "class"):
                # evaluated in this scope when the definition runs: decorators, defaults, bases
                roots = list(st.f.get("decorators", []))
                if st.k == "def":
                    roots += [d for _n, d, _k in st.f["params"] if d is not None]
                else:
                    roots += list(st.f["bases"])
                for dec in st.f.get("decorators", []):
                    calls.extend(self._decorator_calls(ctx, dec))
                exprs = walk_exprs([x for x in roots])
            else:
                exprs = walk_exprs([v for key, v in st.f.items() if key not in ("body", "orelse", "handlers", "final")])
                if st.k == "for":
                    calls.extend(self._iteration_calls(ctx, st.f["iter"]))
            for e in exprs:
                if e.k == "call":
                    calls.extend(self._resolve_call(ctx, e))
                elif e.k == "comp":
                    for g in e.f.get("gens", ()):
                        if g[0] == "for" and g[2] is not None:
                            calls.extend(self._iteration_calls(ctx, g[2]))
                elif e.k == "lambda":
                    for x in walk_exprs([e.f["body"]]):
                        if x.k == "call":
                            calls.extend(replace(c, in_lambda=True) for c in self._resolve_call(ctx, x))
        self._calls[qualname] = calls
        for c in calls:
            self._add(c)
            self._by_callee.setdefault(c.callee, []).append(c)
        return calls

    def _iteration_calls(self, ctx: Ctx, it: N) -> list[Call]:
        """A loop over an instance of a class of the scan calls its `__iter__`, then `__next__`."""
        if it.k in ("list", "tuple", "const", "fstring", "dict", "set"):
            return []
        refs = self.r.eval(ctx, it)
        return [Call(ctx.qualname, m.target, ctx.mod.path, it.line, it.col, "+".join(m.how + ("iteration",)))
                for m in self.r.iter_protocol(refs, 1)]

    def _decorator_calls(self, ctx: Ctx, dec: N) -> list[Call]:
        """`@deco` calls deco with the function when the definition runs."""
        if dec.k == "call":
            return []  # `@deco(args)`: the call itself is found by the expression walk
        out = []
        for r in self.r.eval(ctx, dec):
            if r.kind in ("function", "class"):
                out.append(self._mk(ctx, dec, r, "decorator"))
        return out

    def _mk(self, ctx: Ctx, site: N, r: Ref, how: str | None = None, entry: str | None = None) -> Call:
        h = how or "+".join(r.how) or "direct"
        return Call(ctx.qualname, r.target, ctx.mod.path, site.line, site.col, h, r.extra if r.kind == "unresolved" else "", entry)

    def _record_sites(self, ctx: Ctx, call: N, refs: tuple) -> None:
        """Call sites of functions of the scan, with the parameters the call binds itself."""
        for r in refs:
            if r.kind in ("function", "partial") and r.target != "<build>":
                c = self.r.ctx(r.target)
                if c is None or c.kind != "function":
                    continue
                bound = 0
                if c.self_name and c.self_name.startswith("@cls:"):
                    bound = 1
                elif c.self_name and call.f["func"].k == "attr":
                    recv = self.r.eval(ctx, call.f["func"].f["value"])
                    bound = int(any(x.kind in ("instance", "super") for x in recv))
                self.recorded_sites.setdefault(r.target, []).append((ctx.qualname, call, bound))
            elif r.kind == "class":
                for m in self.r.class_member(r.target, "__init__", 1, False):
                    if m.kind == "function":
                        self.recorded_sites.setdefault(m.target, []).append((ctx.qualname, call, 1))

    def _resolve_call(self, ctx: Ctx, call: N) -> list[Call]:
        out: list[Call] = []
        refs = self.r.callee(ctx, call)
        if self.recorded_sites is not None:
            self._record_sites(ctx, call, refs)
        path = ctx.mod.path
        for r in refs:
            k = r.kind
            rule = self.r.sink_rule_for(ctx, call, r)
            if rule is not None:
                self.r.apply(ctx, call, r, 0)  # registers the sink
                key = self.r.sink_key(ctx, call)
                out.append(Call(ctx.qualname, jit_node(key), path, call.line, call.col, "jit-sink"))
            if k in ("function", "partial") and r.target != "<build>":
                target = r.target
                out.append(Call(ctx.qualname, target, path, call.line, call.col, "+".join(r.how) or "direct"))
                if k == "function" and r.jit and target.rsplit(".", 1)[-1] in self.r.rules.build_methods:
                    for key in sorted(r.jit):
                        out.append(Call(ctx.qualname, jit_node(key), path, call.line, call.col, "+".join(r.how + ("build",))))
            elif k == "function" and r.target == "<build>":
                for key in sorted(r.jit):
                    out.append(Call(ctx.qualname, jit_node(key), path, call.line, call.col, "+".join(r.how + ("build",))))
            elif k == "class":
                init = [m for m in self.r.class_member(r.target, "__init__", 1, False) if m.kind == "function"]
                how = "+".join(r.how + ("constructor",))
                if init:
                    for m in init:
                        out.append(Call(ctx.qualname, m.target, path, call.line, call.col, how))
                else:
                    out.append(Call(ctx.qualname, r.target, path, call.line, call.col, how))
            elif k == "external":
                out.append(Call(ctx.qualname, r.target, path, call.line, call.col, "+".join(r.how) or "external"))
                if r.target in self._tracers:
                    out.extend(self._traced_arguments(ctx, call, r.target))
            elif k == "builtin":
                out.append(Call(ctx.qualname, f"<builtin>.{r.target}", path, call.line, call.col, "builtin"))
                if r.target in _CALLING_BUILTINS:
                    out.extend(self._called_by_builtin(ctx, call, r.target))
            elif k == "entry":
                for key in sorted(r.jit):
                    out.append(Call(ctx.qualname, jit_node(key), path, call.line, call.col,
                                    "+".join(r.how + ("entry-point",)), entry=r.target))
            elif k == "instance":
                ms = [m for m in self.r.class_member(r.target, "__call__", 1, True) if m.kind == "function"]
                for m in ms:
                    out.append(Call(ctx.qualname, m.target, path, call.line, call.col, "+".join(m.how + ("__call__",))))
                if not ms:
                    out.append(Call(ctx.qualname, f"{UNRESOLVED_PREFIX}not-callable>", path, call.line, call.col,
                                    "unresolved", f"instance of {r.target} has no __call__"))
            elif k == "unresolved":
                out.append(Call(ctx.qualname, f"{UNRESOLVED_PREFIX}{r.target}>", path, call.line, call.col, "unresolved", r.extra))
            elif k == "const" and r.target == "None":
                continue  # a global initialised to None and rebound later: the None binding is not called
            elif k in ("built", "spec", "module", "wrapper", "const", "instance-external"):
                out.append(Call(ctx.qualname, f"{UNRESOLVED_PREFIX}not-callable>", path, call.line, call.col,
                                "unresolved", f"call of a {k} value"))
        if not out:
            out.append(Call(ctx.qualname, f"{UNRESOLVED_PREFIX}no-binding>", path, call.line, call.col, "unresolved",
                            _text(ctx, call.f["func"])))
        # one edge per (site, callee)
        seen = {}
        for c in out:
            seen.setdefault((c.callee, c.entry), c)
        return list(seen.values())

    # ------------------------------------------------------------------ arguments
    def call_at(self, qualname: str, line: int, col: int) -> N | None:
        """The call expression of `qualname`'s body (lambdas included) at line:col."""
        found = self._sites.get(qualname)
        if found is None:
            found = self._sites[qualname] = {}
            ctx = self.r.ctx(qualname)
            if ctx is not None and ctx.kind == "function" and ctx.node.k == "lambda":
                stmts = [N("expr", ctx.node.line, ctx.node.col, ctx.node.sb, ctx.node.eb, {"value": ctx.node.f["body"]})]
            elif ctx is not None and ctx.kind == "function":
                stmts = [st for node in ctx.mod.bound_defs(ctx.qual) for st in iter_stmts(node.f["body"])]
            elif ctx is not None and ctx.kind == "class":
                stmts = list(flatten_top(ctx.node.f["body"]))
            elif ctx is not None:
                stmts = list(iter_stmts(ctx.mod.parsed.body))  # as expand() walks a module
            else:
                stmts = []
            stack = [v for st in stmts for key, v in st.f.items() if key not in ("body", "orelse", "handlers", "final")]
            for e in walk_exprs(stack):
                if e.k == "call":
                    found.setdefault((e.line, e.col), e)
                elif e.k == "lambda":
                    for x in walk_exprs([e.f["body"]]):
                        if x.k == "call":
                            found.setdefault((x.line, x.col), x)
        return found.get((line, col))

    def called_parameter(self, qualname: str, c: Call) -> str | None:
        """The parameter of `qualname` that the unresolved call c calls by its bare name
        (`factory(*args)` in `def build(factory, *args)`), else None."""
        if c.callee != f"{UNRESOLVED_PREFIX}unknown-receiver>" or not c.detail.startswith("parameter "):
            return None
        name = c.detail[len("parameter "):]
        node = self.call_at(qualname, c.line, c.col)
        ctx = self.r.ctx(qualname)
        if node is None or ctx is None or ctx.kind != "function" or node.f["func"].k != "name" \
                or node.f["func"].f["id"] != name:
            return None
        return name if any(p[0] == name for p in ctx.node.f["params"]) else None

    def argument_refs(self, site: Call, pname: str) -> tuple:
        """What the call `site` (in site.caller) passes for parameter `pname` of site.callee: the
        resolved values (Refs) of the argument, or of the parameter's default when it is not
        passed; () when the binding cannot be told (an argument after a * or ** unpacking)."""
        node = self.call_at(site.caller, site.line, site.col)
        callee = self.r.ctx(site.callee)
        caller = self.r.ctx(site.caller)
        if node is None or node.k != "call" or callee is None or caller is None or callee.kind != "function":
            return ()
        params = callee.node.f["params"]
        # the receiver fills the first parameter of a method called on an object or constructed
        bound_first = bool(callee.self_name) and (node.f["func"].k == "attr" or "constructor" in site.how)
        for key, value in node.f["kwargs"]:
            if key == pname:
                return self.r.eval(caller, value)
        positional = [p[0] for p in params if p[2] == ""][1 if bound_first else 0:]
        if pname in positional:
            i = positional.index(pname)
            args = node.f["args"]
            text = caller.mod.parsed.text(node)
            if i < len(args):
                # an unpacking before the argument shifts the positions: not bound
                head = text[: max(0, args[i].sb - node.sb)]
                if re.search(r"[(,]\s*\*", head):
                    return ()
                return self.r.eval(caller, args[i])
            if node.f["star"]:
                return ()
        for name, default, _kind in params:
            if name == pname and default is not None and callee.parent is not None:
                return self.r.eval(callee.parent, default)
        return ()

    def _called_by_builtin(self, ctx: Ctx, call: N, name: str) -> list[Call]:
        """Functions of the scan that a built-in calls: any function among the positional
        arguments of map/filter (called on each item), the `key=` of sorted/min/max."""
        kw = _CALLING_BUILTINS[name]
        args = [v for k, v in call.f["kwargs"] if k == kw] if kw else list(call.f["args"])
        out = []
        for a in args:
            for ref in self.r.eval(ctx, a):
                if ref.kind in ("function", "partial") and ref.target != "<build>":
                    out.append(Call(ctx.qualname, ref.target, ctx.mod.path, a.line, a.col, f"called-by:{name}"))
        return out

    def _traced_arguments(self, ctx: Ctx, call: N, tracer: str) -> list[Call]:
        """Functions of the scan, and objects whose class defines __call__, handed to a call that
        runs them to build code (`cute.compile(kernel, ...)` traces `kernel`): called there."""
        out = []
        for a in list(call.f["args"]) + [v for _k, v in call.f["kwargs"]]:
            a = a.f["value"] if a.k == "starred" else a
            for ref in self.r.eval(ctx, a):
                if ref.kind in ("function", "partial") and ref.target != "<build>":
                    out.append(Call(ctx.qualname, ref.target, ctx.mod.path, a.line, a.col, f"traced-by:{tracer}"))
                elif ref.kind == "instance":
                    for m in self.r.class_member(ref.target, "__call__", 1, True):
                        if m.kind == "function":
                            out.append(Call(ctx.qualname, m.target, ctx.mod.path, a.line, a.col,
                                            f"traced-by:{tracer}+__call__"))
        return out

    def _add(self, c: Call) -> None:
        callee = c.callee
        if callee.startswith("<jit:"):
            self._node(callee, "jit")
        elif callee.startswith(UNRESOLVED_PREFIX):
            self._node(callee, "unresolved")
        elif callee.startswith("<builtin>"):
            self._node(callee, "builtin")
        elif self._in_outside_package(c.caller, callee) or not self._def_node(callee):
            self._node(callee, "external")
        self._node(c.caller, "function")
        if self.g.has_edge(c.caller, callee):
            e = self.g.edges[c.caller, callee]
            e["sites"].append((c.path, c.line, c.how))
            e["direct"] = e["direct"] or not c.in_lambda
        else:
            self.g.add_edge(c.caller, callee, how=c.how, sites=[(c.path, c.line, c.how)], direct=not c.in_lambda)

    # ------------------------------------------------------------------ traversal
    def reachable(self, start: str, max_depth: int = 12, stop=None) -> nx.DiGraph:
        """The subgraph reachable from `start`, expanding lazily (breadth-first, depth-bounded)."""
        seen = {start: 0}
        q = deque([start])
        while q:
            n = q.popleft()
            d = seen[n]
            if d >= max_depth or (stop is not None and stop(n)):
                continue
            for c in self.expand(n):
                if c.callee not in seen and self.r.ctx(c.callee) is not None:
                    seen[c.callee] = d + 1
                    q.append(c.callee)
                elif c.callee not in seen:
                    seen[c.callee] = d + 1
        return self.g.subgraph(seen).copy()

    skipped_callers: dict  # qualname -> modules naming it, when too many to search

    def modules_naming(self, word: str) -> list[str]:
        """Modules (sorted) whose bytes contain `word` as a whole word, as `\\bword\\b` finds it."""
        wb = word.encode()
        # with the prefilter's words at hand the index costs about one search: build it at once
        if self._words is None and (self._scans >= WORD_INDEX_AFTER or self.index.byte_facts):
            self._build_word_index()
        if self._words is not None and _ASCII_WORD.fullmatch(wb):
            return self._words.get(wb, [])
        self._scans += 1
        pat = word_pattern(wb)
        # a substring test runs at memchr speed; the word-boundary regex only on hits
        return [m for m in sorted(self.index.path_of)
                if wb in (data := self.index.peek_bytes(m)) and pat.search(data)]

    def _build_word_index(self) -> None:
        words: dict[bytes, list[str]] = {}
        facts = self.index.byte_facts or {}
        for m in sorted(self.index.path_of):
            data = self.index.peek_bytes(m)  # read as before: unreadable files have no words
            f = facts.get(self.index.path_of[m]) if data else None
            # the prefilter workers already split these bytes into words
            for w in (f[1].split(b"\n") if f is not None else words_of(data)):
                if not w:
                    continue
                got = words.get(w)
                if got is None:
                    words[w] = [m]
                else:
                    got.append(m)
        self._words = words

    def callers(self, qualname: str) -> list[Call]:
        """Call sites of a function or class anywhere in the scan. Modules are parsed only when
        their bytes contain the callee's name (or, for __init__, its class name)."""
        parts = qualname.split(".")
        short = parts[-2] if parts[-1] == "__init__" and len(parts) > 1 else parts[-1]
        if qualname not in self._callers_done:
            self.check_budget()
            self._callers_done.add(qualname)
            try:
                self._search_callers(qualname, short)
            except SearchBudgetExceeded:
                self._callers_done.discard(qualname)  # searched again in full when asked again
                raise
        if qualname in self.skipped_callers and self.skip_log is not None:
            self.skip_log.add(qualname)  # every time, not only the first: reasons must not depend on order
        return sorted(self._by_callee.get(qualname, ()), key=lambda c: (c.path, c.line, c.col))

    def _search_callers(self, qualname: str, short: str) -> None:
        """Expand every definition that may call `qualname` (whose span names `short`)."""
        cands = self.modules_naming(short)
        if len(cands) > MAX_CALLER_MODULES:
            # a name this common would pull in a large part of the scan: say so, do not guess
            self.skipped_callers[qualname] = len(cands)
            cands = []
        pat = word_pattern(short.encode())
        for m in cands:
            data = self.index.source_bytes(m)
            # the name's positions once per module, then each class/function that spans one;
            # an attribute of a package outside the scan (`prims.load_ext` after `from
            # cutlass.experimental import primitives as prims`) cannot call the scan's function
            hits = [x.start() for x in pat.finditer(data) if not self._outside.outside_attribute(m, data, x.start())]
            if not hits:
                continue
            mod = self.r.module(m)
            if mod is None:
                continue
            self.expand(m)
            self.work += len(mod.classes) + len(mod.functions)
            for q, node in list(mod.classes.items()) + list(mod.all_functions()):
                i = bisect.bisect_left(hits, node.sb)
                if i < len(hits) and hits[i] < node.eb:
                    self.expand(f"{m}.{q}")

    def build_all(self, progress=None, arg_flow: bool = False) -> None:
        """Expand every module, class and function. With arg_flow, parameters then get the
        arguments of every call site found (Resolver.arg_sites) and the graph is built again,
        until the call sites stop changing (at most ARG_FLOW_PASSES builds): a function passed
        as an argument (`run(step)`, `run(cb=lambda: ...)`) is an edge from where the parameter
        is called. Only the whole graph knows every call site; the scan's demand-driven graph
        does not use this."""
        if not arg_flow:
            self._build_all(progress)
            return
        seen = None
        for i in range(ARG_FLOW_PASSES):
            self.recorded_sites = {}
            self._build_all(progress)
            got = {k: sorted({(c, x.sb, x.eb, b) for c, x, b in v}) for k, v in self.recorded_sites.items()}
            if got == seen or i == ARG_FLOW_PASSES - 1:
                self.recorded_sites = None
                break
            seen = got
            sites, self.recorded_sites = self.recorded_sites, None
            r = self.r
            r.arg_sites = sites
            r.reset()
            self.__init__(self.index, r)

    def _build_all(self, progress=None) -> None:
        mods = sorted(self.index.path_of)
        for i, m in enumerate(mods):
            if progress and i % 200 == 0:
                progress(f"call graph: {i}/{len(mods)} modules")
            mod = self.r.module(m)
            if mod is None:
                continue
            self.expand(m)
            for q in list(mod.classes):
                self.expand(f"{m}.{q}")
            for q in list(mod.functions):
                self.expand(f"{m}.{q}")
            for q in list(self.r.lambdas(mod)[1]):
                self.expand(f"{m}.{q}")

    def calls_from(self, qualname: str) -> list[Call]:
        return self.expand(qualname)

    def to_pycg(self) -> dict[str, list[str]]:
        """PyCG's format: every defined node (module/class/function) -> sorted callees, named as
        PyCG names them. Unresolved and JIT pseudo-nodes are left out (PyCG has no such nodes);
        so is the edge to a class of the scan (calling it calls its __init__, an edge of its
        own; a class whose constructor comes from a base outside the scan gets that base's
        `__init__`), and an edge made only of calls inside a lambda's body, which belong to the
        lambda's node (see `in_lambda`)."""
        out: dict[str, list[str]] = {}
        for n, data in self.g.nodes(data=True):
            if data.get("kind") not in ("module", "class", "function") or self.r.ctx(n) is None:
                continue
            callees = set()
            for v in self.g.successors(n):
                if v.startswith(("<unresolved:", "<jit:")) or not self.g.edges[n, v].get("direct", True):
                    continue
                if self.g.nodes[v].get("kind") == "class":
                    callees.update(m.target for m in self.r.class_member(v, "__init__", 1, False) if m.kind == "external")
                    continue
                callees.add(pycg_name(v))
            out[pycg_name(n)] = sorted(callees)
        return dict(sorted(out.items()))


# PyCG's names for the methods of built-in types (`"a b".split` -> `<**PyStr**>.split`)
_PYCG_TYPES = {"str": "PyStr", "dict": "PyDict", "list": "PyList", "tuple": "PyTuple", "set": "PySet",
               "int": "PyInt", "float": "PyFloat", "bytes": "PyBytes"}


def pycg_name(node: str) -> str:
    """A node's name as PyCG writes it: nested scopes without `<locals>`, methods of built-in
    types on a pseudo-module of their type."""
    if node.startswith("<builtin>."):
        parts = node.split(".")
        if len(parts) == 3 and parts[1] in _PYCG_TYPES:
            return f"<**{_PYCG_TYPES[parts[1]]}**>.{parts[2]}"
        return node
    return node.replace(".<locals>", "")

def _text(ctx: Ctx, n: N) -> str:
    t = " ".join(ctx.mod.parsed.text(n).split())
    return t if len(t) <= 80 else t[:77] + "..."
