"""The scan pipeline: sources -> Python index -> gates (-> later: CUDA, call graph, verdicts).

Analyses never print; progress goes through the optional `progress` callback.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .model import CPP_RUNTIME_CHECK, Diagnostic, Finding, Gate
from .cuda.runtime_checks import scan_runtime_checks
from .python.gates import find_python_gates
from .python.index import Index
from .sources import Distribution, Source, SourceError, WheelSource, open_source
from .targets import Registry, TargetRequest, registry

Progress = Callable[[str], None]
CPP_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".cc", ".cpp", ".cxx", ".inl")


class _Reader:
    """The CUDA side's reader protocol over a Source: bytes or None, never an exception."""

    def __init__(self, source: Source):
        self.source = source

    def read(self, rel: str) -> bytes | None:
        try:
            return self.source.read(rel)
        except (OSError, SourceError):
            return None

    def exists(self, rel: str) -> bool:
        # probing include candidates must not read (a missing file would be a diagnostic)
        try:
            return self.source.exists(rel)
        except (OSError, SourceError):
            return False


@dataclass
class ScanResult:
    root: str
    packages: list[Distribution]
    gates: list[Gate]
    diagnostics: list[Diagnostic]
    targets: list[TargetRequest] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)  # gate x target verdicts (issue 5)
    patcher: Any = None  # the scan's Patcher when verdicts were computed (used by `archaudit patch`)
    stats: dict = field(default_factory=dict)


def package_resolver(source: Source, dists: list[Distribution]) -> Callable[[str], str | None]:
    top: dict[str, str] = {}
    for d in dists:
        for t in d.top_level:
            top.setdefault(t, d.name)

    def package_of(path: str) -> str | None:
        first = path.split("/", 1)[0]
        if first.endswith(".py"):
            first = first[:-3]
        return top.get(first, first if "/" in path else None)

    return package_of


def run_with_big_stack(fn):
    """Run fn in a thread with a large stack: the tree walks and the interpreter recurse deeply
    on pathological inputs, and a RecursionError is far better than a C stack overflow."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as e:  # re-raised in the caller's thread
            box["error"] = e

    old = threading.stack_size()
    threading.stack_size(512 * 1024 * 1024)
    try:
        t = threading.Thread(target=target, name="archaudit-analysis")
        t.start()
    finally:
        threading.stack_size(old)
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def scan(path, targets: list[TargetRequest] | None = None, reg: Registry | None = None,
         progress: Progress | None = None) -> ScanResult:
    reg = reg or registry()
    t0 = time.perf_counter()
    say = progress or (lambda msg: None)
    source = open_source(path)
    say(f"listing {source.label}")
    files = source.files()
    dists = source.distributions()
    py_files = [f for f in files if f.endswith(".py")]
    # in site-packages and wheels, a file's path is its module name (namespace packages included)
    path_based = bool(dists) or isinstance(source, WheelSource)
    index = Index(source, py_files, path_based=path_based)
    say(f"evaluating Python gates in {len(py_files)} files")
    gscan = run_with_big_stack(
        lambda: find_python_gates(source, index, reg, package_resolver(source, dists), progress=say)
    )
    say("looking for architecture checks in C++ host code")
    cpp_gates = scan_runtime_checks(_Reader(source), [f for f in files if f.endswith(CPP_SUFFIXES)])
    pkg_of = package_resolver(source, dists)
    for g in cpp_gates:
        g.package = pkg_of(g.path)
    gates = sorted(gscan.gates + cpp_gates, key=Gate.sort_key)
    findings: list[Finding] = []
    patcher = None
    if targets:
        findings, patcher = run_with_big_stack(
            lambda: judge_scan(source, files, index, gates, targets, reg, path_based, say))
    budget = [
        Diagnostic(index.path_of.get(m, m), "analysis-budget",
                   f"evaluation of {m + '.' + q if q else m} stopped at the step budget; gates after that point may be missing")
        for m, q in gscan.over_budget
    ]
    diags = sorted(set(source.diagnostics) | set(index.diagnostics) | set(budget))
    stats = {
        "files": len(files),
        "python_files": len(py_files),
        "python_modules_parsed": gscan.parsed_modules,
        "python_modules_evaluated": gscan.evaluated_modules,
        "python_functions_evaluated": gscan.evaluated_functions,
        "gate_rounds": gscan.rounds,
        "findings": len(findings),
        "seconds": round(time.perf_counter() - t0, 3),
    }
    return ScanResult(
        root=str(path) if path is not None else source.label,
        packages=dists,
        gates=gates,
        diagnostics=diags,
        findings=findings,
        patcher=patcher,
        targets=list(targets or []),
        stats=stats,
    )


def judge_scan(source: Source, files: list[str], index: Index, gates: list[Gate], targets: list[TargetRequest],
               reg: Registry, path_based: bool, say: Progress):
    """Verdicts for every gate x target the gate excludes (archaudit.judge)."""
    from .callgraph import Analysis
    from .cuda.tu import CudaProject
    from .judge import Behind, ModuleRef, TuCache, behind_from_callgraph, judge_gates
    from .patch import Patcher, module_binding, reevaluate_gate

    reader = _Reader(source)
    say("finding include roots")
    project = CudaProject(reader, CudaProject.discover_include_roots(files, reader), files=files)
    py_files = [f for f in files if f.endswith(".py")]
    python_behind = behind_from_callgraph(Analysis(source, index))

    def behind(g: Gate) -> Behind:
        if g.kind == CPP_RUNTIME_CHECK:
            # a host-side check guards the code of its own translation unit
            if g.path.endswith(".cu"):
                return Behind([ModuleRef(g.path.rsplit("/", 1)[-1], [g.path])])
            return Behind([], reason="a runtime check in a header: the translation units including it are not followed")
        return python_behind(g)

    patcher = Patcher(source, index, reg, lambda s, g: reevaluate_gate(s, g, reg, py_files, path_based),
                      module_binding(index, reg))
    pairs = [(t.gpu, reg.compile_target(t)) for t in targets]
    return judge_gates(gates, pairs, behind, TuCache(project), patcher, progress=say), patcher
