"""Platform needs of a JIT module's Python setup: NVLink multicast and fabric (rules/platform.toml).

A module can compile for a GPU whose system cannot give it what its kernels are handed: a
multicast address made by `cuMulticastCreate` / `cuMulticastAddDevice` exists only on NVSwitch
NVLink systems (rules/targets.toml `nvlink_multicast`). Such a need is read from the Python that
sets the module up, never guessed from names:

1. need sites: calls of a driver function of rules/platform.toml `python_calls`, resolved by the
   call graph to the external binding (not a function of the scan with the same name);
2. from each, callers are walked upwards. A path counts only while every test that decides it is
   settled: a branch on a runtime probe of the feature (`is_multicast_supported()`) means the
   code has another way and ends the path (no need); an early `raise` on one is the code refusing
   to run without the feature (kept as evidence); a flag (`if self._enable_multicast:`) is
   followed to the call that binds it (a literal argument or the parameter's default); any other
   `if` test ends the path (not shown to be needed), while an early exit on a test that is no
   probe (`if val is None: continue`) is not an alternative and leaves the path as it is;
3. a function reached with nothing left open, in a Python file that builds the module (calls the
   generator and loads what it returns), whose module users name it, holds the need for the module.
"""
from __future__ import annotations

import re
import weakref
from dataclasses import dataclass
from functools import lru_cache

from .callgraph.graph import SearchBudgetExceeded, jit_node
from .model import Link
from .ruledata import load_rule

# callers walked upwards from a need site, and the calls looked at in all, per scan
MAX_DEPTH = 8
MAX_STEPS = 2000
_FLAG = re.compile(r"(not\s+)?(self\.)?(_*([A-Za-z]\w*))")
_UNKNOWN = object()


@dataclass(frozen=True)
class NeedRule:
    feature: str
    python_calls: frozenset[str]
    probe: re.Pattern
    description: str


@dataclass(frozen=True)
class PlatformNeed:
    """A module's need of a platform feature, with the chain from its setup to the driver call."""

    feature: str  # a targets.toml field: "nvlink_multicast"
    api: str  # the driver function called
    path: str  # the call of it
    line: int
    holder: str  # the function of the module's own Python file that reaches it unconditionally
    chain: tuple[Link, ...]  # holder -> ... -> the driver call
    refusals: tuple[tuple[str, int, str], ...] = ()  # (path, line, test) of raises without it
    description: str = ""


@lru_cache(maxsize=1)
def need_rules() -> tuple[NeedRule, ...]:
    return tuple(NeedRule(n["feature"], frozenset(n.get("python_calls", ())), re.compile(n["probe"]),
                          n.get("description", "")) for n in load_rule("platform").get("need", []))


_FINDERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def need_finder(analysis) -> "NeedFinder":
    """The scan's NeedFinder (one per call-graph Analysis)."""
    nf = _FINDERS.get(analysis)
    if nf is None:
        nf = _FINDERS[analysis] = NeedFinder(analysis)
    return nf


def _any_probe(text: str) -> bool:
    return any(r.probe.search(text) for r in need_rules())


class NeedFinder:
    """Platform needs of JIT modules, computed once per scan from the call graph."""

    def __init__(self, analysis):
        self.a = analysis
        self.g = analysis.graph
        self._holders: dict[str, list[PlatformNeed]] | None = None
        self._by_key: dict[str, list[PlatformNeed]] = {}
        self._steps = 0

    def needs_of(self, jm) -> list[PlatformNeed]:
        """The platform needs of JitModule `jm` (empty when none is shown)."""
        got = self._by_key.get(jm.key)
        if got is None:
            limit, self.g.limit = self.g.limit, None  # a fixed walk, the same whichever gate asks first
            try:
                got = self._by_key[jm.key] = self._needs_of(jm)
            finally:
                self.g.limit = limit
        return got

    def _needs_of(self, jm) -> list[PlatformNeed]:
        holders = self.holders()
        if not holders:
            return []
        loaders = self._loaders(jm)
        files = {self._path_of(q) for q in loaders}
        users = set(loaders)
        for q in loaders:
            users.update(c.caller for c in self._callers(q))
        texts = [self._text_of(u) for u in sorted(users)]
        best: dict[str, PlatformNeed] = {}
        for q in sorted(holders):
            if self._path_of(q) not in files:
                continue
            short = q.rsplit(".", 2)[-2] if q.endswith(".__init__") else q.rsplit(".", 1)[-1]
            if not any(re.search(rf"\b{re.escape(short)}\b", t) for t in texts):
                continue
            for n in holders[q]:
                # one need per feature: the shortest chain, then the first place
                if n.feature not in best or (len(n.chain), n.path, n.line, n.holder) < (
                        len(best[n.feature].chain), best[n.feature].path, best[n.feature].line, best[n.feature].holder):
                    best[n.feature] = n
        return [best[f] for f in sorted(best)]

    def _loaders(self, jm) -> list[str]:
        """Functions that build the module: callers of its generator (two levels up) with a build
        call on the spec it returns."""
        node = jit_node(jm.key)
        out, frontier, seen = [], [jm.function], {jm.function}
        for _level in range(2):
            nxt = []
            for q in frontier:
                for c in self._callers(q):
                    if c.caller in seen:
                        continue
                    seen.add(c.caller)
                    if any(x.callee == node and "build" in x.how for x in self._expand(c.caller)):
                        out.append(c.caller)
                    else:
                        nxt.append(c.caller)
            frontier = nxt
        return sorted(out)

    # ------------------------------------------------------------------ the walk
    def holders(self) -> dict[str, list[PlatformNeed]]:
        """Function -> the needs it reaches with every deciding test settled."""
        if self._holders is None:
            self._holders = {}
            for rule in need_rules():
                for api in sorted(rule.python_calls):
                    for fn, path, line in self._sites(api):
                        self._walk(rule, api, fn, path, line)
        return self._holders

    def _sites(self, api: str) -> list[tuple[str, str, int]]:
        """(function, path, line) of calls of the external driver function `api`."""
        out = []
        for mod in self.g.modules_naming(api):
            path = self.a.index.path_of.get(mod)
            data = self.a.index.source_bytes(mod)
            for i, raw in enumerate(data.split(b"\n"), 1):
                if api.encode() + b"(" not in raw.replace(b" ", b""):
                    continue
                site = self.a.site_at(path, i)
                if site is None or not site.function:
                    continue
                if any(c.line == i and c.callee.rsplit(".", 1)[-1] == api and self.g.r.ctx(c.callee) is None
                       for c in self._expand(site.function)):
                    out.append((site.function, path, i))
        return out

    def _walk(self, rule: NeedRule, api: str, fn: str, path: str, line: int) -> None:
        start = self._settle(path, line, fn, frozenset(), ())
        if start is None:
            return
        pending, refusals = start
        first = Link("platform", path, line, api, "driver-call")
        queue = [(fn, pending, (first,), refusals, 0)]
        seen = set()
        while queue and self._steps < MAX_STEPS:
            q, pending, chain, refusals, depth = queue.pop(0)
            if (q, pending) in seen:
                continue
            seen.add((q, pending))
            if not pending:
                self._holders.setdefault(q, []).append(
                    PlatformNeed(rule.feature, api, path, line, q, chain, refusals, rule.description))
            if depth >= MAX_DEPTH:
                continue
            for c in self._callers(q):
                self._steps += 1
                nxt = self._through(c, pending)
                if nxt is None:
                    continue
                got = self._settle(c.path, c.line, c.caller, nxt, refusals)
                if got is not None:
                    link = Link("call", c.path, c.line, q, c.how)
                    queue.append((c.caller, got[0], (link, *chain), got[1], depth + 1))

    def _settle(self, path: str, line: int, fn: str, pending: frozenset, refusals: tuple):
        """The tests deciding whether the statement at path:line of `fn` runs, applied: (pending
        flags, refusals), or None when a test leaves the path not shown to be taken."""
        site = self.a.site_at(path, line)
        try:
            tests = self.a.behind.tests_before(site) if site is not None else None
        except RecursionError:
            tests = None
        if tests is None:
            return None
        ctx = self.g.r.ctx(fn)
        cls = ctx.cls if ctx is not None else None
        for rel, tline, _col, text in tests:
            if rel == "exit-if":
                if _any_probe(text):
                    if not self._raises_after(path, tline):
                        return None  # returns another way when the probe says no: an alternative
                    refusals = (*refusals, (path, tline, text))
                continue
            want = rel == "then-of"
            flags = self._flags(text, want, fn, cls)
            if flags is None:
                return None
            pending = pending | flags
        return pending, refusals

    def _flags(self, text: str, want: bool, fn: str, cls: str | None) -> frozenset | None:
        """A test made only of flags (`self._x`, `x`, `not x`, joined by `and` when it must hold):
        each as (scope, parameter, value wanted), the scope being the function whose parameter it
        is or the class whose constructor stores the parameter in that attribute; None for any
        other test."""
        parts = [p.strip() for p in text.split(" and ")] if want else [text.strip()]
        out = set()
        for p in parts:
            m = _FLAG.fullmatch(p)
            if m is None or _any_probe(p):
                return None
            value = want != bool(m.group(1))
            if not m.group(2):
                out.add((fn, m.group(3), value))
                continue
            init = self._text_of(f"{cls}.__init__") if cls else ""
            # the attribute must be the constructor's parameter stored as it is
            if not re.search(rf"\bself\.{re.escape(m.group(3))}\s*(?::[^=\n]*)?=\s*{re.escape(m.group(4))}\s*$",
                             init, re.M):
                return None
            out.add((cls, m.group(4), value))
        return frozenset(out)

    def _through(self, c, pending: frozenset):
        """Pending flags after stepping from c.callee up to c.caller: those bound by the call (the
        callee's parameters; a class's attributes at its constructor) settled, None when one is
        bound to the other value or to what is not a literal."""
        out = set()
        for scope, name, want in pending:
            if scope == c.callee or (c.callee == f"{scope}.__init__" and "constructor" in c.how):
                value = self._bound(c, name)
                if value is _UNKNOWN or value != want:
                    return None
            elif scope != c.callee.rsplit(".", 1)[0] or not c.caller.startswith(scope + "."):
                return None  # an attribute of an object made elsewhere, a parameter not passed here
            else:
                out.add((scope, name, want))
        return frozenset(out)

    def _bound(self, c, name: str):
        """The literal the call c passes for parameter `name` of c.callee (or its default)."""
        callee = self.g.r.ctx(c.callee)
        node = self.g.call_at(c.caller, c.line, c.col)
        if callee is None or node is None or callee.kind != "function":
            return _UNKNOWN
        params = callee.node.f["params"]
        if not any(p[0] == name for p in params):
            return _UNKNOWN
        for key, value in node.f["kwargs"]:
            if key == name:
                return _literal(value)
            if key is None:
                return _UNKNOWN  # **kwargs may hold it
        skip = 1 if callee.self_name else 0
        positional = [p[0] for p in params if p[2] == ""][skip:]
        if name in positional and positional.index(name) < len(node.f["args"]):
            return _literal(node.f["args"][positional.index(name)])
        if node.f.get("star"):
            return _UNKNOWN
        default = next((d for n, d, _k in params if n == name), None)
        return _literal(default) if default is not None else _UNKNOWN

    # ------------------------------------------------------------------ helpers
    def _callers(self, q: str) -> list:
        try:
            return self.g.callers(q)
        except (SearchBudgetExceeded, RecursionError):
            return []

    def _expand(self, q: str) -> list:
        try:
            return self.g.expand(q)
        except (SearchBudgetExceeded, RecursionError):
            return []

    def _path_of(self, q: str) -> str | None:
        ctx = self.g.r.ctx(q)
        return ctx.mod.path if ctx is not None else None

    def _text_of(self, q: str) -> str:
        ctx = self.g.r.ctx(q)
        if ctx is None or ctx.node is None:
            return ""
        return ctx.mod.parsed.text(ctx.node)

    def _raises_after(self, path: str, line: int) -> bool:
        """Whether the `if` whose test starts at `line` begins its body with a raise."""
        mod = self.a.index.module_of_path.get(path)
        lines = self.a.index.source_bytes(mod).split(b"\n") if mod else []
        body = False
        for raw in lines[line - 1:line + 40]:
            s = raw.split(b"#", 1)[0].strip()
            if not body:
                head, colon, rest = s.partition(b":")
                if s.endswith(b":"):
                    body = True
                elif colon and rest.strip().startswith(b"raise"):
                    return True  # `if C: raise E`
                continue
            if s:
                return s.startswith(b"raise")
        return False


def _literal(n):
    if n is not None and n.k == "const" and isinstance(n.f["value"], (bool, int)):
        return n.f["value"]
    return _UNKNOWN
