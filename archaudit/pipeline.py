"""The scan pipeline: sources -> Python index -> gates -> verdicts, each phase a function of `_scan`.

Analyses never print; progress goes through the optional `progress` callback, called as
progress(message) or progress(message, done, total).

With a cache (scancache.ScanCache), a scan whose inputs are unchanged returns the stored result
without reading a source file, and a change that cannot affect the analysis (early cutoff)
reuses it after checking that one file.

The helper processes the phases start are in workers.py; how the analysis thread runs (the
collector paused, a large stack) is in runtime.py.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from .cache import Cache
from .model import Diagnostic, Finding, Gate
from .progress import adapt_progress
from .runtime import default_workers, gc_paused, run_with_big_stack
from .scancache import ScanCache, prefilter_in_workers, result_payload
from .sources import CPP_SUFFIXES, DirSource, Distribution, Source, SourceReader, WheelSource, open_source
from .targets import Registry, TargetRequest, registry
from .workers import CudaWorker, ParsePool, RuntimeChecksJob

if TYPE_CHECKING:
    from .python.index import Index

# The analyses (parsers, interpreter, CUDA readers) are imported where a scan runs them: a
# cache hit, the warm re-scan users wait for, needs none of them.
Progress = Callable[..., None]


# Source bytes whose IR may be held at once during the gate scan (the IR is ~20x the source);
# evicted modules are parsed again when needed. Off by default: on flashinfer+sglang a 32 MB
# bound re-parsed so often that CPU time doubled (see bench/results/perf.md).
IR_BUDGET = int(os.environ.get("ARCHAUDIT_IR_BUDGET_MB", "0") or 0) * 1024 * 1024


@dataclass
class ScanResult:
    root: str
    packages: list[Distribution]
    gates: list[Gate]
    diagnostics: list[Diagnostic]
    targets: list[TargetRequest] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)  # gate x target verdicts
    modules: list = field(default_factory=list)  # inventory.ModuleRecord: every JIT module, judged per target
    patcher: Any = None  # the scan's Patcher when verdicts were computed (used by `archaudit patch`)
    stats: dict = field(default_factory=dict)
    # how the result was obtained: {"mode": "off"|"miss"|"hit"|"cutoff", files hashed/reused, ...}
    cache: dict = field(default_factory=dict)
    work: dict = field(default_factory=dict)  # effort counters (parses incl. re-parses), not part of the report


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


def scope_packages(source: Source, files: list[str], index: "Index", package_of, facts: dict | None) -> None:
    """How each top-level package is read, decided once before the gates are looked for: in a
    site-packages or a wheel (packages installed side by side), those with nothing
    architecture-dependent are only read, as outside the scan from the others (Index.outside);
    in any scan, those holding GPU code of their own are marked so (Index.gpu_packages). facts:
    the prefilter's byte_facts per .py path when it ran."""
    # lazy: a cache hit imports no analysis
    from .python.gates import holds_trigger
    from .python.scope import gpu_packages, passive_packages

    if index.path_based:
        index.outside = passive_packages(source, files, facts, index.runtimes, package_of, holds_trigger)
    index.gpu_packages = gpu_packages(source, files, index.package_dirs(), index.runtimes | index.outside)


def package_scope(py_files: list[str], parsed: list[str], package_of) -> dict:
    """Which packages' Python was analysed (some module parsed: a byte trigger, a gate's name, a
    call the verdicts followed) and which was only read as bytes: {"packages_analysed": {package:
    modules parsed}, "packages_read": [package, ...]} (files in no package are left out)."""
    analysed: dict[str, int] = {}
    for p in parsed:
        k = package_of(p)
        if k:
            analysed[k] = analysed.get(k, 0) + 1
    read = sorted({k for k in map(package_of, py_files) if k and k not in analysed})
    return {"packages_analysed": dict(sorted(analysed.items())), "packages_read": read}


def scan(path, targets: list[TargetRequest] | None = None, reg: Registry | None = None,
         progress: Progress | None = None, cache: Cache | bool | None = None,
         workers: int | None = None) -> ScanResult:
    """cache: a Cache, True for the default cache directory, None/False for none.
    workers: processes for reading and prefiltering files (default: the usable cores)."""
    with gc_paused():
        return _scan(path, targets, reg, progress, cache, workers)


def _scan(path, targets, reg, progress, cache, workers) -> ScanResult:
    """The scan's phases: list the inputs; answer from the cache when they are unchanged (or
    changed where it cannot matter); else index the Python files and start the helper processes,
    find the Python gates and the C++ host-code gates, judge each gate for each target, gather
    the diagnostics and counters, and store the result for the next scan."""
    reg = reg or registry()
    t0 = time.perf_counter()
    say = adapt_progress(progress)
    workers = default_workers() if workers is None else max(1, int(workers))
    inputs = _list_inputs(path, targets, say)
    cached = ScanCache.open(cache)
    stored = cached.look_up(inputs.source, inputs.files, inputs.tnames, workers, say)
    if stored is not None:
        return _stored_result(inputs, stored, cached.info, t0)
    index, facts = _python_index(inputs, cached.fp, workers, say)
    helpers = _Helpers.start(inputs, index, facts, workers)
    scope_packages(inputs.source, inputs.files, index, inputs.package_of, facts)
    gscan = _python_gates(inputs, index, helpers, reg, facts, say)
    # the gate scan's working set (shallow IR, bytes read to be passed over) is not what the
    # verdicts read: freed before they start
    say("releasing the gate scan's memory")
    index.release_shallow()
    gates = _with_host_gates(inputs, helpers, gscan.gates, say)
    # the IR memory bound is proven exact for the gate scan only (tests/test_perf.py); the call
    # graph and the patcher keep their own references to modules, so nothing is evicted now
    index.ir_budget = None
    judged = _judge(inputs, index, gates, reg, helpers, say) if inputs.targets else None
    if judged is not None:
        gates = sorted(gates + judged.flag_gates, key=Gate.sort_key)
    result = _result(inputs, index, gscan, gates, judged, helpers, cached.info, t0)
    cached.store_result(inputs.source, inputs.tnames, result_payload(result, gscan.names),
                        lambda store: _store_patch(store, result, reg))
    return result


@dataclass
class _Inputs:
    """What one scan reads, listed before anything is analysed: the source, its files (all, the
    Python ones, the C/C++/CUDA ones), its distributions and the package of each path, the
    targets, and the targets' names that key a stored result."""
    source: Source
    root: str
    files: list[str]
    py_files: list[str]
    cpp_files: list[str]
    dists: list[Distribution]
    package_of: Callable[[str], str | None]
    targets: list[TargetRequest]
    tnames: list[str]

    @property
    def path_based(self) -> bool:
        """In site-packages and wheels, a file's path is its module name (namespace packages
        included)."""
        return bool(self.dists) or isinstance(self.source, WheelSource)


def _list_inputs(path, targets, say: Progress) -> _Inputs:
    """Opens the source at path (SourceError when it cannot be read) and lists what the scan reads."""
    source = open_source(path)
    say(f"listing {source.label}")
    files = source.files()
    dists = source.distributions()
    targets = list(targets or [])
    # the result depends on each target's compile variant too (-t sm_100f judges sm_100f builds,
    # -t sm_100 what a JIT would pass): keyed by both, or a warm sm_100f scan answered for sm_100
    tnames = sorted({t.gpu.name + (f"/{t.variant}" if t.variant else "") for t in targets})
    return _Inputs(source=source, root=str(path) if path is not None else source.label, files=files,
                   py_files=[f for f in files if f.endswith(".py")],
                   cpp_files=[f for f in files if f.endswith(CPP_SUFFIXES)],
                   dists=dists, package_of=package_resolver(source, dists), targets=targets, tnames=tnames)


def _python_index(inputs: _Inputs, fp, workers: int, say: Progress) -> tuple["Index", dict | None]:
    """The Python index over the inputs' .py files, and the prefilter's byte facts per file it
    reads them with: the fingerprint's (a cache run), else computed in worker processes when
    there are several; None when neither."""
    # lazy: a cache hit imports no analysis
    from .python.index import Index

    facts = fp.facts if fp is not None else None
    if fp is None and workers > 1:
        facts = _prefilter_facts(inputs.source, inputs.py_files, workers, say)
    index = Index(inputs.source, inputs.py_files, path_based=inputs.path_based)
    index.ir_budget = IR_BUDGET if IR_BUDGET > 0 else None
    index.byte_facts = facts
    return index, facts


@dataclass
class _Helpers:
    """The forked processes that work beside the scan's analysis thread, each None when not
    started: the parse worker (for the gate rounds), the C++ host-code checks, and the CUDA side
    of the verdicts."""
    parse_pool: ParsePool | None
    runtime_checks: RuntimeChecksJob | None
    cuda: CudaWorker | None

    @classmethod
    def start(cls, inputs: _Inputs, index: "Index", facts: dict | None, workers: int) -> "_Helpers":
        """Starts those the scan gains from: none with one worker; the parse worker only when there
        is much to parse (the prefilter ran in worker processes: PARALLEL_MIN_BYTES); the CUDA
        side only with targets and C/C++ files. The parse worker is forked first, while this
        process is small and has no other helper's threads, and is handed to the index."""
        source, cpp_files = inputs.source, inputs.cpp_files
        parse_pool = index.parse_pool = ParsePool.start(source) if workers > 1 and facts else None
        # the C++ host-code checks need nothing from the Python side: another core reads them meanwhile
        runtime_checks = RuntimeChecksJob.start(source, cpp_files) if workers > 1 else None
        # and another process prepares the CUDA side of the verdicts
        with_cuda = workers > 1 and inputs.targets and cpp_files
        cuda = CudaWorker.start(source, inputs.files, inputs.py_files) if with_cuda else None
        return cls(parse_pool, runtime_checks, cuda)

    def stop_parsing(self, index: "Index") -> None:
        """Ends the parse worker (only the gate rounds ask it for parses)."""
        if self.parse_pool is not None:
            self.parse_pool.close()
            index.parse_pool = None

    def delivered(self) -> dict:
        """What each helper gave the scan (None: not started): the parse worker's parses taken and
        those parsed here after all, whether the host-code checks came from their worker, and the
        CUDA translation units sent and installed from the worker."""
        pool, checks, cuda = self.parse_pool, self.runtime_checks, self.cuda
        return {
            "parse_worker": {"taken": pool.taken, "parsed_here": pool.parsed_here} if pool is not None else None,
            "host_checks": checks.ran if checks is not None else None,
            "cuda": {"sent": len(cuda.sent), "installed": cuda.installed} if cuda is not None else None,
        }

    def abandon(self) -> None:
        """Ends the C++ host-code checks and the CUDA side unheard (the scan failed)."""
        if self.runtime_checks is not None:
            self.runtime_checks.abandon()
        if self.cuda is not None:
            self.cuda.close()


def _python_gates(inputs: _Inputs, index: "Index", helpers: _Helpers, reg: Registry, facts: dict | None,
                  say: Progress):
    """Runs the gate rounds over the Python files on a big stack: find_python_gates' result (gates,
    names, counters, the modules over the step budget). The parse worker is ended either way, the
    other helpers too when it fails."""
    # lazy: a cache hit imports no analysis
    from .python.gates import find_python_gates

    say(f"evaluating Python gates in {len(inputs.py_files)} files")
    try:
        return run_with_big_stack(
            lambda: find_python_gates(inputs.source, index, reg, inputs.package_of, progress=say, facts=facts)
        )
    except BaseException:
        helpers.abandon()
        raise
    finally:
        helpers.stop_parsing(index)


def _with_host_gates(inputs: _Inputs, helpers: _Helpers, python_gates: list[Gate], say: Progress) -> list[Gate]:
    """The Python gates with the architecture checks in C++ host code (from the helper process,
    or read here when it did not run or failed), each with its package, in report order."""
    # lazy: a cache hit imports no analysis
    from .cuda.runtime_checks import scan_runtime_checks

    say("looking for architecture checks in C++ host code")
    cpp_gates = helpers.runtime_checks.result() if helpers.runtime_checks is not None else None
    if cpp_gates is None:
        cpp_gates = scan_runtime_checks(SourceReader(inputs.source), inputs.cpp_files)
    for g in cpp_gates:
        g.package = inputs.package_of(g.path)
    return sorted(python_gates + cpp_gates, key=Gate.sort_key)


def _judge(inputs: _Inputs, index: "Index", gates: list[Gate], reg: Registry, helpers: _Helpers,
           say: Progress) -> JudgedScan:
    """The verdicts for every gate x target (judge_scan) on a big stack; the CUDA helper is ended
    either way."""
    # the function bodies the gate scan converted: the verdicts read few of them again, most
    # of those in the modules that hold gates
    gate_paths = {g.path for g in gates}
    index.release_bodies(keep={m for m, p in index.path_of.items() if p in gate_paths})
    try:
        return run_with_big_stack(
            lambda: judge_scan(inputs.source, inputs.files, index, gates, inputs.targets, reg, inputs.path_based,
                               say, helpers.cuda, inputs.package_of))
    finally:
        if helpers.cuda is not None:
            helpers.cuda.close()


def _result(inputs: _Inputs, index: "Index", gscan, gates: list[Gate], judged: JudgedScan | None,
            helpers: _Helpers, cache_info: dict, t0: float) -> ScanResult:
    """The computed ScanResult: the gates, the verdicts (none without targets), the diagnostics of
    every stage (unreadable files, the step budget, sources nvcc would reject) and the counters."""
    findings = judged.findings if judged is not None else []
    not_evaluated = judged.not_evaluated if judged is not None else []
    budget = [
        Diagnostic(index.path_of.get(m, m), "analysis-budget",
                   f"evaluation of {m + '.' + q if q else m} stopped at the step budget; gates after that point may be missing")
        for m, q in gscan.over_budget
    ]
    # Python files the prefilter only saw in worker processes were never read through the Source,
    # which is where unreadable ones (NUL bytes, UTF-16, bad UTF-8) are reported: read them now
    for p in inputs.py_files:
        if not index.holds_bytes(p) and p.endswith(".py"):
            inputs.source.read(p)
    tu_problems = judged.problems if judged is not None else []
    diags = sorted(set(inputs.source.diagnostics) | set(index.diagnostics) | set(budget) | set(tu_problems))
    return ScanResult(
        root=inputs.root,
        packages=inputs.dists,
        gates=gates,
        diagnostics=diags,
        findings=findings,
        modules=judged.modules if judged is not None else [],
        patcher=judged.patcher if judged is not None else None,
        targets=inputs.targets,
        stats=_stats(inputs, index, gscan, findings, not_evaluated, t0),
        cache=cache_info,
        work={"parses": index.parses, "modules_parsed": index.parsed_count, "helpers": helpers.delivered()},
    )


def _stats(inputs: _Inputs, index: "Index", gscan, findings: list[Finding], not_evaluated: list,
           t0: float) -> dict:
    """The scan's counters (ScanResult.stats); all but "seconds" are part of the report."""
    py_files = inputs.py_files
    return {
        "files": len(inputs.files),
        "python_files": len(py_files),
        "python_modules_parsed": gscan.parsed_modules,
        "python_modules_evaluated": gscan.evaluated_modules,
        "python_bytes_evaluated": gscan.evaluated_bytes,
        "python_functions_evaluated": gscan.evaluated_functions,
        "gate_rounds": gscan.rounds,
        "findings": len(findings),
        "not_evaluated": len(not_evaluated),
        # gate x target pairs with no finding because an earlier if/elif arm admits the target
        "not_evaluated_gates": sorted(f"{t} {g.path}:{g.line} (earlier arm at line {eg.line})"
                                      for g, t, eg in not_evaluated),
        # the same pairs as (target, path, line, col, kind): what every report leaves out alike
        "not_evaluated_pairs": sorted([t, g.path, g.line, g.col, g.kind] for g, t, _eg in not_evaluated),
        **package_scope(py_files, [index.path_of[m] for m in index.loaded_modules() if m in index.path_of],
                         inputs.package_of),
        "seconds": round(time.perf_counter() - t0, 3),
    }


def _prefilter_facts(source: Source, py_files: list[str], workers: int, say) -> dict | None:
    """The prefilter's per-file answers computed in worker processes (no cache run)."""
    if not isinstance(source, DirSource):
        return None
    return prefilter_in_workers(str(source.root), py_files, workers, say)


def _stored_result(inputs: _Inputs, payload: dict, cache_info: dict, t0: float) -> ScanResult:
    """The ScanResult of a stored payload (scancache.result_payload) for these inputs."""
    stats = dict(payload["stats"], seconds=round(time.perf_counter() - t0, 3))
    return ScanResult(root=inputs.root, packages=inputs.dists, gates=list(payload["gates"]),
                      diagnostics=list(payload["diagnostics"]), targets=inputs.targets,
                      findings=list(payload["findings"]), modules=list(payload["modules"]),
                      stats=stats, cache=cache_info)


def _store_patch(store: Cache, result: ScanResult, reg: Registry) -> None:
    """Stores the patch `archaudit patch` reads back for this result (derived.py)."""
    # lazy: a cache hit imports no analysis
    from .derived import store_scan_patch

    store_scan_patch(store, result, reg)


@dataclass
class JudgedScan:
    findings: list[Finding]
    patcher: Any
    problems: list[Diagnostic]  # sources a JIT module compiles that nvcc would reject; internal errors
    not_evaluated: list  # gate x target pairs an earlier arm of the same if/elif serves
    modules: list  # inventory.ModuleRecord
    flag_gates: list[Gate]  # hard-coded build flags, as gates


def judge_scan(source: Source, files: list[str], index: Index, gates: list[Gate], targets: list[TargetRequest],
               reg: Registry, path_based: bool, say: Progress, cuda: CudaWorker | None = None,
               package_of: Callable[[str], str | None] = lambda p: None) -> JudgedScan:
    """Verdicts for every gate x target the gate excludes (archaudit.verdict.judge), and the JIT-module
    inventory with the build-flag gates it finds (archaudit.verdict.inventory)."""
    # lazy: a cache hit imports no analysis
    from .callgraph import Analysis
    from .cuda.tu import CudaProject
    from .verdict.inventory import Inventory
    from .verdict.judge import TuCache, behind_from_callgraph, judge_gates, tests_before_from_callgraph
    from .verdict.patch import Patcher, module_binding, reevaluate_gate

    reader = SourceReader(source)
    say("finding include roots")
    project = CudaProject(reader, CudaProject.discover_include_roots(files, reader), files=files)
    py_files = [f for f in files if f.endswith(".py")]
    analysis = Analysis(source, index)
    patcher = Patcher(source, index, reg, lambda s, g: reevaluate_gate(s, g, reg, py_files, path_based),
                      module_binding(index, reg))
    pairs = [(t.gpu, reg.compile_target(t)) for t in targets]
    tus = TuCache(project)
    not_evaluated: list = []
    say("listing JIT modules")
    inventory = Inventory(analysis, reg, tus)
    inventory.collect(say)
    ct_of = {gpu.name: ct for gpu, ct in pairs}

    def prefetch(wanted):
        # the TUs behind the gates as they are found, then those judging the inventory's modules
        if wanted is not None:
            cuda.send(wanted)
            return
        extra = inventory.tu_requests(ct_of)
        if extra:
            cuda.send(extra)
        cuda.collect(tus, say)

    findings = judge_gates(gates, pairs, behind_from_callgraph(analysis), tus, patcher, progress=say,
                           tests_before=tests_before_from_callgraph(analysis), not_evaluated=not_evaluated,
                           prefetch=prefetch if cuda is not None else None, problems=inventory.problems,
                           sinks_of=lambda target: inventory.protected_sinks(pairs, target))
    say("judging JIT modules")
    inventory.judge(pairs)
    flag_gates, flag_findings = inventory.build_flag_findings(pairs, gates, package_of, patcher)
    findings = sorted(findings + flag_findings, key=Finding.sort_key)
    return JudgedScan(findings, patcher, tus.input_problems() + inventory.problems, not_evaluated,
                      inventory.records, flag_gates)
