"""The Python call graph and the JIT model (issue 4).

Entry point for other stages: `Analysis` (one per scan root) with
- `graph`: the demand-driven `CallGraph` (networkx DiGraph in `graph.g`),
- `jit`: the `JitModel` (JIT sinks -> `JitModule` with name, sources, flag sources),
- `modules_behind(gate) -> list[BehindModule]`,
- `explain(gate_or_site) -> Explanation` (data; formatted by `render.explain_text`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..model import Gate
from ..python.index import Index
from ..sources import Source, WheelSource, open_source
from .behind import Behind, BehindModule, GateSite
from .graph import Call, CallGraph
from .jit import FlagSource, JitModel, JitModule, SourceFile
from .resolve import Resolver

__all__ = ["Analysis", "BehindModule", "Call", "CallGraph", "Explanation", "FlagSource", "GateSite",
           "JitModel", "JitModule", "SourceFile", "modules_behind"]


@dataclass
class Explanation:
    site: GateSite
    function: str | None  # the scope holding the gate
    modules: list[BehindModule] = field(default_factory=list)
    note: str = ""  # why nothing was found, when nothing was

    def to_json(self) -> dict:
        return {"path": self.site.path, "line": self.site.line, "col": self.site.col, "function": self.function,
                "kind": self.site.kind, "expr": self.site.expr, "modules": [m.to_json() for m in self.modules],
                "note": self.note}


class Analysis:
    def __init__(self, source: Source, index: Index):
        self.source = source
        self.index = index
        self.graph = CallGraph(index, Resolver(index))
        self.jit = JitModel(self.graph.r)
        self.behind = Behind(self.graph, self.jit)

    @classmethod
    def open(cls, path) -> "Analysis":
        """From a scan root (site-packages dir, source tree or wheel); SourceError if unreadable."""
        source = open_source(path)
        py = [f for f in source.files() if f.endswith(".py")]
        path_based = bool(source.distributions()) or isinstance(source, WheelSource)
        return cls(source, Index(source, py, path_based=path_based))

    def modules_behind(self, gate: Gate | GateSite) -> list[BehindModule]:
        return self.behind.modules_behind(gate)

    def behind_gate(self, gate: Gate | GateSite):
        """(modules, functions outside the scan) behind the gate: see Behind.behind_gate."""
        return self.behind.behind_gate(gate)

    def site_at(self, path: str, line: int) -> GateSite | None:
        """A gate position from FILE:LINE: the first expression on that line (the test of an `if`)."""
        modname = self.index.module_of_path.get(path)
        if modname is None:
            return None
        data = self.index.source_bytes(modname)
        lines = data.split(b"\n")
        if line < 1 or line > len(lines):
            return None
        raw = lines[line - 1]
        col = len(raw) - len(raw.lstrip()) + 1
        site = GateSite(path, line, col, None, "", raw.decode("utf-8", "replace").strip()[:160])
        ctx = self.behind.locate(site)
        site.function = ctx.qualname if ctx is not None else None
        return site

    def explain(self, gate: Gate | GateSite) -> Explanation:
        site = gate if isinstance(gate, GateSite) else GateSite(gate.path, gate.line, gate.col, gate.function, gate.kind, gate.expr)
        ctx = self.behind.locate(site)
        if ctx is None:
            return Explanation(site, None, [], "no Python module in the scan holds this position")
        mods = self.behind.modules_behind(site)
        note = "" if mods else "no JIT module is reached from the region this line guards"
        return Explanation(site, ctx.qualname, mods, note)

def modules_behind(gate: Gate | GateSite, analysis: Analysis) -> list[BehindModule]:
    """The JIT modules `gate` controls, each with its chain of Links (see behind.py)."""
    return analysis.modules_behind(gate)
