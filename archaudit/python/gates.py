"""Find every Python gate: decision points whose outcome depends on the GPU architecture.

Which files are evaluated is decided from their bytes: files that mention a capability query, a
predicate, an arch list or nvcc target flags are evaluated first; then every file that mentions
the name of a function or constant found to depend on the GPU is added, until nothing changes.
Everything else is never parsed (unless the interpreter follows a call or import into it).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..model import Gate
from ..sources import Source
from ..targets import Registry
from .index import Index
from .interp import GateRecord, Interp

# Bytes that can start an architecture test in Python source.
TRIGGERS = (
    rb"is_sm\d|_sm\d\d|\bsm\d\d|device_capability|compute_capability|cuda_capability|get_device_sm"
    rb"|sm_version|supported_major_versions|gencode|arch=compute|CUDA_ARCH|get_device_properties|device_sm\b"
)


@dataclass
class GateScan:
    gates: list[Gate] = field(default_factory=list)
    evaluated_modules: int = 0
    evaluated_functions: int = 0
    parsed_modules: int = 0
    rounds: int = 0
    predicates: list[str] = field(default_factory=list)


def find_python_gates(source: Source, index: Index, reg: Registry, package_of) -> GateScan:
    modules = sorted(index.path_of)
    names: set[str] = set()
    scan = GateScan()
    while True:
        scan.rounds += 1
        pattern = re.compile(
            TRIGGERS + b"".join(b"|\\b" + re.escape(n.encode()) + b"\\b" for n in sorted(names))
        )
        relevant = {m for m in modules if pattern.search(index.source_bytes(m))}
        index.full_filter = relevant.__contains__
        interp = Interp(index, reg)
        scan.evaluated_modules = len(relevant)
        scan.evaluated_functions = 0
        for modname in sorted(relevant):
            mod = index.module(modname)
            if mod is None:
                continue
            interp.report_module(modname)
            src = mod.parsed.src
            for qual, node in mod.functions.items():
                if pattern.search(src, node.sb, node.eb):
                    scan.evaluated_functions += 1
                    interp.report_function(mod, qual, node)
        # names that now carry an architecture dependence: their users may be gates too
        found = {f.rsplit(".", 1)[-1] for f in interp.arch_functions} | _arch_globals(interp)
        new = {n for n in found - names if len(n) > 3 and n.isidentifier() and not n.startswith("__")}
        if not new or scan.rounds >= 6:
            break
        names |= new
    scan.parsed_modules = sum(1 for m in index._mods.values() if m is not None)
    scan.predicates = sorted(interp.arch_functions)
    scan.gates = _to_gates(interp.gates, package_of)
    return scan


def _arch_globals(interp: Interp) -> set[str]:
    out = set()
    for modname, g in interp._globals.items():
        for name, v in g.items():
            if hasattr(v, "sets") and interp.arch_dependent(v):
                out.add(name)
    return out


def _to_gates(records: list[GateRecord], package_of) -> list[Gate]:
    out: dict[tuple, Gate] = {}
    for r in records:
        node = r.expr_node or r.node
        text = " ".join(r.module.parsed.text(node).split())
        if len(text) > 240:
            text = text[:237] + "..."
        if not r.resolved:
            resolution = "unresolved: " + "; ".join(r.reasons)
        elif any(v.startswith("name-rule") for v in r.via):
            resolution = "name-rule: " + "; ".join(v for v in r.via if v.startswith("name-rule"))
        elif any(v.startswith("inferred ") for v in r.via):
            resolution = "inferred: " + " -> ".join(_chain(r.via))
        else:
            resolution = "evaluated: " + "; ".join(r.via) if r.via else "evaluated"
        g = Gate(
            path=r.module.path,
            line=node.line,
            col=node.col,
            function=r.function,
            kind=r.kind,
            expr=text,
            admits=r.admits,
            resolution=resolution,
            resolved=r.resolved,
            package=package_of(r.module.path),
            region=r.region,
            via=sorted(r.via),
        )
        key = (g.path, g.line, g.col, g.kind)
        if key not in out:
            out[key] = g
    return sorted(out.values(), key=Gate.sort_key)


def _chain(via: list[str]) -> list[str]:
    inferred = [v[len("inferred "):] for v in via if v.startswith("inferred ")]
    return inferred
