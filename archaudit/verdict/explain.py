"""The whole evidence for the gates on one line, per target.

`archaudit explain FILE:LINE --target T` reads it off the scan's result (`from_scan`: through the
scan's cache, so it says exactly what `scan` reported, verdicts, evidence and patches included).

`explain` judges one gate without a full scan: only the function holding the line is evaluated
(its callees on demand), then the call graph is searched from that gate, the modules behind it are
judged for each target, and the gates down the chain (the arch lists feeding the modules' nvcc
flags) are evaluated the same way for the patch plan. It does not see what only the whole scan
knows (gates found in later rounds, the functions other gates protect from patching), so its
answer can differ from the scan's.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..callgraph import Analysis
from ..cuda.runtime_checks import find_runtime_checks
from ..cuda.tu import CudaProject
from ..model import Finding, Gate
from ..python.gates import to_gates
from ..python.index import function_at_line
from ..python.interp import Interp
from ..report.shown import shown
from ..sources import Source, SourceReader
from ..targets import Registry, TargetRequest
from .judge import TuCache, behind_from_callgraph, judge_gates, tests_before_from_callgraph
from .patch import Patcher, module_binding, reevaluate_gate


@dataclass
class GateExplanation:
    gate: Gate
    findings: list[Finding] = field(default_factory=list)  # one per target the gate excludes
    admitted: list[str] = field(default_factory=list)  # targets the gate admits (no finding)
    # targets that never evaluate the gate: (target, the earlier if/elif arm's gate that admits it)
    not_evaluated: list[tuple[str, Gate]] = field(default_factory=list)


def gates_at(source: Source, index, reg: Registry, path: str, line: int) -> list[Gate]:
    """The gates on one line, from evaluating only the innermost function that holds it."""
    return [g for g in _scope_gates(source, index, reg, path, line) if g.line == line]


def _scope_gates(source: Source, index, reg: Registry, path: str, line: int) -> list[Gate]:
    """Every gate of the innermost function (or module) holding the line, from evaluating only it;
    in a C/C++ file, its runtime checks."""
    modname = index.module_of_path.get(path)
    if modname is None:
        return _cpp_gates(source, path)
    mod = index.module(modname, full=True)
    if mod is None:
        return []
    best = function_at_line(mod, line)
    interp = Interp(index, reg)
    if best is not None:
        interp.report_function(mod, best[0], [best[1]])
    else:
        interp.report_module(modname)
    return [g for g in to_gates(interp.gates, lambda p: None) if g.path == path]


def _cpp_gates(source: Source, path: str) -> list[Gate]:
    data = source.read(path)
    return [] if data is None else find_runtime_checks(path, data)


def explain(source: Source, files: list[str], index, reg: Registry, path: str, line: int,
            targets: list[TargetRequest], path_based: bool) -> list[GateExplanation]:
    scope = _scope_gates(source, index, reg, path, line)
    gates = [g for g in scope if g.line == line]
    if not gates:
        return []
    reader = SourceReader(source)
    project = CudaProject(reader, CudaProject.discover_include_roots(files, reader), files=files)
    analysis = Analysis(source, index)
    behind = behind_from_callgraph(analysis)
    tests_before = tests_before_from_callgraph(analysis)
    py_files = [f for f in files if f.endswith(".py")]
    patcher = Patcher(source, index, reg, lambda s, g: reevaluate_gate(s, g, reg, py_files, path_based),
                      module_binding(index, reg))
    # the gates down each chain, so that the patch plan can name them, and those of the tests
    # that run before each gate (in the same function: already evaluated)
    chain_gates = list(gates)
    for g in gates:
        if g.path.endswith(".py"):
            lines = {ln for _rel, ln, _col, _text in tests_before(g)}
            chain_gates += [x for x in scope if x.line in lines]
        for ref in behind(g).modules:
            if ref.flags_gate and ref.flags_gate != (g.path, g.line):
                chain_gates += gates_at(source, index, reg, *ref.flags_gate)
    pairs = [(t.gpu, reg.compile_target(t)) for t in targets]
    tus = TuCache(project)
    out = []
    for g in gates:
        skipped: list = []
        fs = judge_gates([g], pairs, behind, tus, patcher, all_gates=chain_gates,
                         tests_before=tests_before, not_evaluated=skipped)
        out.append(GateExplanation(g, fs, [t.gpu.name for t in targets if t.gpu.name in g.admits],
                                   [(t, eg) for _g, t, eg in skipped]))
    return out


_NOT_EVALUATED = re.compile(r"^(?P<target>\S+) (?P<path>.+):(?P<line>\d+) \(earlier arm at line (?P<earlier>\d+)\)$")


def from_scan(result, path: str, line: int) -> list[GateExplanation]:
    """The explanations of the gates on one line, read off a scan's result (the same verdicts,
    evidence and patches the scan reports: `archaudit explain --target` on the scan's cache)."""
    gates = [g for g in result.gates if g.path == path and g.line == line]
    out = []
    for g in gates:
        fs = [f for f in result.findings if f.gate.location == g.location and f.gate.kind == g.kind
              and f.gate.expr == g.expr]
        admitted = [t.gpu.name for t in result.targets if t.gpu.name in g.admits]
        skipped = []
        for text in result.stats.get("not_evaluated_gates", []):
            m = _NOT_EVALUATED.match(text)
            if m is None or (m["path"], int(m["line"])) != (g.path, g.line):
                continue
            earlier = next((e for e in result.gates if e.path == g.path and e.line == int(m["earlier"])), None)
            if earlier is not None:
                skipped.append((m["target"], earlier))
        out.append(GateExplanation(g, fs, admitted, skipped))
    return out


def render_text(expls: list[GateExplanation], reg: Registry) -> str:
    lines = []
    for e in expls:
        g = e.gate
        lines.append(f"gate {g.path}:{g.line}:{g.col} in {g.function}")
        lines.append(f"  {g.kind}: {g.expr}")
        lines.append(f"  admits: {' '.join(reg.sort_names(g.admits)) or '(none)'}")
        lines.append(f"  resolution: {g.resolution}")
        for t in e.admitted:
            lines.append(f"  {t}: admitted, nothing to judge")
        for t, eg in e.not_evaluated:
            lines.append(f"  {t}: not evaluated: the earlier arm at line {eg.line} (`{eg.expr}`) admits it, nothing to judge")
        for f in e.findings:
            lines.append("")
            lines.append(f"  {f.target}: {f.verdict.upper()}")
            lines.append(f"    {f.reason}")
            if f.chain:
                lines.append("    chain:")
                for link in f.chain:
                    how = f" [{link.how}]" if link.how else ""
                    lines.append(f"      {link.kind:<10} {link.path}:{link.line}  {link.text}{how}")
            for m in f.modules:
                lines.append(f"    module {m.name} for {m.compile_target}: {m.prediction} ({m.reason})")
                for s in m.sources:
                    lines.append(f"      source {s}")
                for k in m.kernels:
                    if k.status != "real":
                        guard = f", guard line {k.guard_line}" if k.guard_line else ""
                        lines.append(f"      {k.status}: {k.name} at {k.path}:{k.line}{guard}")
                for name, st in sorted(m.entry_points.items()):
                    lines.append(f"      entry point {name}: {st}")
            for ev in f.evidence:
                sup = f" (supported on {', '.join(ev.supported_on)})" if ev.supported_on else ""
                lines.append(f"    evidence {ev.path}:{ev.line}: {ev.feature}: {ev.message}{sup}")
            if f.patch:
                lines.append("    patch:")
                lines += ["      " + x for x in f.patch.rstrip("\n").split("\n")]
    return "\n".join(map(shown, lines)) + "\n"  # names from the scanned tree: report/shown.py
