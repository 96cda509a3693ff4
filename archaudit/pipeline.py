"""The scan pipeline: sources -> Python index -> gates -> verdicts, each phase a function of `_scan`.

Analyses never print; progress goes through the optional `progress` callback, called as
progress(message) or progress(message, done, total).

With a cache (see scancache.py), a scan whose inputs are unchanged returns the stored result
without reading a source file, and a change that cannot affect the analysis (early cutoff)
reuses it after checking that one file.
"""
from __future__ import annotations

import mmap
import multiprocessing
import os
import pickle
import re
import threading
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from .cache import Cache
from .children import die_with_parent
from .model import Diagnostic, Finding, Gate
from .parsing.screen import binary_problem
from .progress import adapt_progress
from .runtime import default_workers, gc_paused, run_with_big_stack
from .scancache import CUTOFF_MAX_FILES, fingerprint, inputs_unchanged, prefilter_in_workers, rebuild_old, run_key
from .sources import MAX_FILE_BYTES, DirSource, Distribution, Source, SourceError, WheelSource, open_source
from .targets import Registry, TargetRequest, registry

if TYPE_CHECKING:
    from .python.index import Index

# The analyses (parsers, interpreter, CUDA readers) are imported where a scan runs them: a
# cache hit, the warm re-scan users wait for, needs none of them.
Progress = Callable[..., None]
CPP_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".cc", ".cpp", ".cxx", ".inl")


class SourceReader:
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


def _open_cache(cache) -> Cache | None:
    if cache is None or cache is False:
        return None
    if cache is True:
        return Cache()
    return cache


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
    cached = _CacheState.open(cache)
    reused = cached.look_up(inputs, workers, say, t0)
    if reused is not None:
        return reused
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
    result = _result(inputs, index, gscan, gates, judged, cached.info, t0)
    cached.store_result(inputs, result, gscan.names, reg)
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


@dataclass
class _CacheState:
    """The cache's part in one scan: the store (None without a cache), the inputs' fingerprint
    and the previous run's record with its key (set by look_up), and `info`, how the result was
    obtained (ScanResult.cache)."""
    store: Cache | None
    fp: Any = None
    prev: dict | None = None
    rkey: str | None = None
    info: dict = field(default_factory=lambda: {"mode": "off"})

    @classmethod
    def open(cls, cache) -> "_CacheState":
        """cache: a Cache, True for the default cache directory, None/False for none."""
        return cls(_open_cache(cache))

    def look_up(self, inputs: _Inputs, workers: int, say: Progress, t0: float) -> ScanResult | None:
        """Fingerprints the inputs and gives the stored result when it still holds: stored for the
        same inputs (a hit), or for inputs whose changes cannot affect it (an early cutoff, stored
        now under the new key); None without a cache or when the scan must run."""
        store = self.store
        if store is None:
            return None
        self.rkey = run_key(inputs.source)
        prev = store.get("run", self.rkey)
        self.prev = prev if isinstance(prev, dict) else None
        fp = self.fp = fingerprint(inputs.source, inputs.files, self.prev, workers, say)
        self.info = {"mode": "miss", "hashed": fp.hashed, "reused": fp.reused}
        key = fp.key(inputs.tnames)
        payload = _payload(store.get("result", key))
        mode = "hit"
        if payload is None:
            payload = _cutoff(inputs.source, fp, self.prev, store, inputs.tnames)
            mode = "cutoff"
        if payload is None:
            return None
        self.info["mode"] = mode
        self.info["key"] = key  # what commands deriving their output from this result key it by (derived.py)
        if mode == "cutoff":
            store.put("result", key, payload)
        if mode == "cutoff" or not _same_run(self.prev, fp, key, inputs.tnames):
            _save_run(store, self.rkey, fp, key, inputs.tnames, payload)
        self.info.update(store.stats())
        stats = dict(payload["stats"], seconds=round(time.perf_counter() - t0, 3))
        return ScanResult(root=inputs.root, packages=inputs.dists, gates=list(payload["gates"]),
                          diagnostics=list(payload["diagnostics"]), targets=inputs.targets,
                          findings=list(payload["findings"]), modules=list(payload["modules"]),
                          stats=stats, cache=self.info)

    def store_result(self, inputs: _Inputs, result: ScanResult, names, reg: Registry) -> None:
        """Stores a computed result under the inputs' fingerprint, with the gate scan's names (what
        an early cutoff compares) and the patch `archaudit patch` reads back (derived.py), unless
        there is no cache or an input changed while the scan read it."""
        store, fp = self.store, self.fp
        if store is None or fp is None or not inputs_unchanged(inputs.source, fp):
            return
        payload = {"gates": result.gates, "diagnostics": result.diagnostics, "findings": result.findings,
                   "modules": result.modules,
                   "stats": {k: v for k, v in result.stats.items() if k != "seconds"}, "names": names}
        key = fp.key(inputs.tnames)
        if store.put("result", key, payload):
            self.info["key"] = key
            # lazy: a cache hit imports no analysis
            from .derived import store_scan_patch

            store_scan_patch(store, result, reg)
        _save_run(store, self.rkey, fp, key, inputs.tnames, payload)
        self.info.update(store.stats())


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
    runtime_checks: _RuntimeChecksJob | None
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
        runtime_checks = _RuntimeChecksJob.start(source, cpp_files) if workers > 1 else None
        # and another process prepares the CUDA side of the verdicts
        with_cuda = workers > 1 and inputs.targets and cpp_files
        cuda = CudaWorker.start(source, inputs.files, inputs.py_files) if with_cuda else None
        return cls(parse_pool, runtime_checks, cuda)

    def stop_parsing(self, index: "Index") -> None:
        """Ends the parse worker (only the gate rounds ask it for parses)."""
        if self.parse_pool is not None:
            self.parse_pool.close()
            index.parse_pool = None

    def abandon(self) -> None:
        """Ends the C++ host-code checks and the CUDA side unheard (the scan failed)."""
        if self.runtime_checks is not None:
            self.runtime_checks.ex.shutdown(wait=False, cancel_futures=True)
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
            cache_info: dict, t0: float) -> ScanResult:
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
        work={"parses": index.parses, "modules_parsed": index.parsed_count},
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


def _background(parent: int) -> None:
    """A forked helper that works ahead (C++ host checks, CUDA warm-up) ends with the scan
    (die_with_parent) and runs only on a core nothing else wants: the analysis thread is the
    scan's critical path, and the parse worker (ParsePool) takes work off it. At nice 5 they
    took 10 s of CPU from the analysis thread."""
    die_with_parent(parent)
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (OSError, AttributeError):
        try:
            os.nice(5)
        except OSError:
            pass


def _can_fork(source: Source) -> bool:
    """Fork only: a helper needs the Source as it is (spawn would re-import a user's __main__);
    a directory only: a wheel's open zip file would be shared with the fork (one file offset for
    two readers)."""
    return isinstance(source, DirSource) and "fork" in multiprocessing.get_all_start_methods()


def _fork_pool(source: Source):
    """A one-process pool forked from this one (see _can_fork), or None."""
    if not _can_fork(source):
        return None
    try:
        return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork"),
                                   initializer=_background, initargs=(os.getpid(),))
    except (OSError, RuntimeError):
        return None


def _with_reads(source: Source, fn):
    """In a worker: fn()'s value, with what reading told the Source meanwhile (Source.reads_since),
    for the parent to record as its own."""
    mark = source.read_mark()
    value = fn()
    return (value, *source.reads_since(mark))


def _runtime_checks_worker(source: Source, cpp_files: list[str]):
    """In a forked process: the checks, and what reading the files told the Source."""
    # lazy: a cache hit imports no analysis
    from .cuda.runtime_checks import scan_runtime_checks

    return _with_reads(source, lambda: scan_runtime_checks(SourceReader(source), cpp_files))


# In the forked CUDA worker: its CudaProject (set by _cuda_warm, used by _cuda_analyse).
_CUDA: dict = {}
# JIT sources named in Python code ("norm.cu", csrc / "x.cpp"): the TUs the warm-up reads first
_NAMED_SOURCE = re.compile(rb"[\w.+-]+\.(?:cu|cpp|cc|cxx)\b")
_SOURCE_SUFFIX = re.compile(rb"\.(?:cu|cpp|cc|cxx)\b")
_NAME_BYTE = frozenset(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_.+-")


def named_sources(data: bytes) -> set[bytes]:
    """set(_NAMED_SOURCE.findall(data)), searched from the suffixes: a match is a prefix of a
    maximal run of name bytes (_NAME_BYTE), so each run holding a suffix is searched alone (the
    pattern run over the whole file tries every offset of every name: seconds a corpus)."""
    out: set[bytes] = set()
    run_end = -1
    for m in _SOURCE_SUFFIX.finditer(data):
        if m.start() < run_end:
            continue  # in the run searched last
        start = m.start()
        while start > 0 and data[start - 1] in _NAME_BYTE:
            start -= 1
        run_end = m.end()
        while run_end < len(data) and data[run_end] in _NAME_BYTE:
            run_end += 1
        out.update(_NAMED_SOURCE.findall(data[start:run_end]))
    return out


def _cuda_warm(files: list[str], py_files: list[str]) -> int:
    """In the CUDA worker, while the parent evaluates the Python gates: build the same
    CudaProject judge_scan builds, and extract the facts of the C/C++ files the JIT modules
    are likely to compile (sources named in Python code, then their includes), until the
    parent sets the stop event (inherited: an Event cannot be pickled).
    Only files that read without a diagnostic are kept (Source.read_quietly): the others are
    read, and reported, by the TU analysis that needs them, as in-process."""
    # lazy: a cache hit imports no analysis
    from .cuda import features as F
    from .cuda.preproc import OP_INCLUDE
    from .cuda.tu import CudaProject

    source, stop = _CUDA["source"], _CUDA["stop"]
    reader = SourceReader(source)
    project = CudaProject(reader, CudaProject.discover_include_roots(files, reader), files=files)
    _CUDA["project"] = project
    named: set[bytes] = set()
    for p in py_files:
        if stop.is_set():
            return 0
        data = source.read_quietly(p)
        if data is not None:
            named.update(named_sources(data))
    todo = deque(f for f in files if f.endswith((".cu", ".cpp", ".cc", ".cxx"))
                 and f.rsplit("/", 1)[-1].encode() in named)
    resolver = project.resolver.for_tu()  # the roots resolving adds stay its own
    seen = set(todo)
    done = 0
    while todo and not stop.is_set():
        path = todo.popleft()
        data = source.read_quietly(path)
        if data is None or binary_problem(data) is not None:
            continue
        ff = F.extract(path, data)
        project.set_facts(ff)
        done += 1
        included = []
        for op in ff.program.ops:
            if op[0] == OP_INCLUDE and not op[5]:  # not a computed #include
                r = resolver.resolve(op[2], op[3], path)
                if r.kind == "file" and r.path not in seen:
                    seen.add(r.path)
                    included.append(r.path)
        # depth first: the headers most TUs share (CCCL, CUTLASS) come with the first TUs,
        # not after every named source
        todo.extendleft(reversed(included))
    return done


def _cuda_analyse(todo: list[tuple]):
    """In the CUDA worker: analyse_tu for each (key, arguments), with the new diagnostics and
    screened files of the Source the project reads through (as _runtime_checks_worker)."""
    source, project = _CUDA["source"], _CUDA["project"]
    return _with_reads(source, lambda: run_with_big_stack(
        lambda: [(key, project.analyse_tu(*args)) for key, args in todo]))


class CudaWorker:
    """One forked process for the CUDA side of the verdicts. Started before the Python gates
    are evaluated (which keep one core busy), it reads and extracts the C/C++ files the JIT
    modules likely compile; when the verdicts begin, it analyses the TUs they need, sent as
    the call graph finds them, while this process goes on following calls. Its results are
    installed in the TU cache as if analysed here: a TU's analysis depends only on its
    arguments and the files (the worker's caches only save work). A failure leaves the rest
    to be analysed in-process."""

    def __init__(self, source: Source, ex, stop):
        self.source, self.ex, self.stop = source, ex, stop
        self.futs: list = []
        self.sent: set = set()

    @classmethod
    def start(cls, source: Source, files: list[str], py_files: list[str]) -> "CudaWorker | None":
        ex = _fork_pool(source)
        if ex is None:
            return None
        try:
            # inherited, not sent: set before the worker is forked (at the first submit); the
            # worker's Source is the one its project reads through, task after task
            _CUDA["source"] = source
            stop = _CUDA["stop"] = multiprocessing.get_context("fork").Event()
            w = cls(source, ex, stop)
            w.futs.append(ex.submit(_cuda_warm, files, py_files))
            return w
        except (OSError, RuntimeError, pickle.PicklingError):
            ex.shutdown(wait=False, cancel_futures=True)
            _CUDA.clear()
            return None

    def send(self, wanted: dict) -> None:
        """Analyse these TUs ({key: analyse_tu arguments}; those sent before are skipped)."""
        self.stop.set()  # the warm-up ends: what it has not read, the analyses read on demand
        todo = [(k, a) for k, a in wanted.items() if k not in self.sent]
        if not todo or self.ex is None:
            return
        self.sent.update(k for k, _a in todo)
        try:
            self.futs.append(self.ex.submit(_cuda_analyse, todo))
        except RuntimeError:  # the worker is gone
            self.close()

    def collect(self, tus, say: Progress) -> None:
        """Wait for every analysis sent and install the results in `tus`."""
        total, done = len(self.sent), 0
        try:
            for fut in self.futs[1:]:
                results, diags, screened = fut.result()
                for key, r in results:
                    tus.install(key, r)
                self.source.adopt_reads(diags, screened)
                done += len(results)
                say("analysing CUDA translation units", done, total)
        except Exception:  # noqa: BLE001 - a lost worker (killed, no memory): the rest is analysed in-process
            pass
        finally:
            self.close()

    def close(self) -> None:
        if self.ex is not None:
            self.stop.set()
            self.ex.shutdown(wait=True, cancel_futures=True)
            self.ex = None
            _CUDA.clear()  # the worker has its own copy; this process keeps no Source alive


def _parse_one(data: bytes, shallow: bool) -> bytes | None:
    """Index._load's parse of these bytes, for loads_parsed; None when it failed (the parent
    parses them again, and reports what goes wrong, as without a worker)."""
    # lazy: a cache hit imports no analysis
    from .parsing.python_ir import dumps_parsed, parse_python

    try:
        return dumps_parsed(parse_python(data, shallow=shallow, lazy=True))
    except Exception:  # noqa: BLE001 - the parent's parse decides
        return None


def _parse_serve(requests, results, claimed, nice: int, parent: int) -> None:
    """The parse worker's loop: parse what is asked for, in order, skipping what the parent
    has claimed (parsed itself meanwhile), until asked for None. A thread of its own sends the
    results, so parsing goes on while the parent is not reading. Ends with its parent."""
    die_with_parent(parent)

    if nice:
        try:
            os.nice(nice)
        except OSError:
            pass
    out: deque = deque()
    ready = threading.Condition()

    def send() -> None:
        while True:
            with ready:
                while not out:
                    ready.wait()
                item = out.popleft()
            try:
                results.send(item)
            except (OSError, ValueError):  # the parent is gone
                return

    def parse() -> None:
        todo: deque = deque()
        while True:
            if not todo or requests.poll():
                msg = requests.recv()
                if msg is None:
                    return  # what is left unsent is not wanted (the sender is a daemon)
                todo.extend(msg)
                continue
            rid, data, shallow = todo.popleft()
            if not claimed[rid]:
                blob = _parse_one(data, shallow)
                with ready:
                    out.append((rid, blob))
                    ready.notify()

    threading.Thread(target=send, daemon=True).start()
    run_with_big_stack(parse)  # the parses need the stack the analysis thread has


class ParsePool:
    """One forked process that parses the Python modules the analysis thread is about to load
    (Index.prefetch), from the bytes it is sent, in that order. The analysis thread takes a
    parse the worker has finished (loads_parsed costs about 6 % of a parse) and parses itself
    one it has not, claiming it (the worker then skips it): it never waits. A parse depends only
    on the bytes, so the IR is the same whichever process made it.
    No thread of this process serves the worker (a ProcessPoolExecutor's threads took the
    interpreter lock from the analysis thread at every task: 14,000 time slices instead of 1,500
    in the gate rounds): requests go out in messages of a few MB, and results are read from a
    pipe when a module is loaded. The worker runs below the analysis thread (nice 5) and above
    the other helpers (SCHED_IDLE, see _background), which only work ahead."""

    CAPACITY = 1 << 16  # requests per scan (ids of the claimed array)
    MESSAGE_BYTES = 1 << 21
    NICE = 5

    def __init__(self, proc, requests, results, claimed):
        self.proc, self.requests, self.results, self.claimed = proc, requests, results, claimed
        self.ids: dict[tuple[str, bool], int] = {}  # asked for, not yet taken
        self.done: dict[int, bytes | None] = {}  # results not yet taken
        self.batch: list[tuple] = []
        self.next_id = 0
        self.taken = self.parsed_here = 0

    @classmethod
    def start(cls, source: Source) -> "ParsePool | None":
        if not _can_fork(source):
            return None
        ctx = multiprocessing.get_context("fork")
        try:
            recv_end, send_end = ctx.Pipe(duplex=False)
            results, results_in = ctx.Pipe(duplex=False)
            # shared with the fork, and no file behind it (RawArray would write one in /dev/shm)
            claimed = mmap.mmap(-1, cls.CAPACITY)
            proc = ctx.Process(target=_parse_serve, args=(recv_end, results_in, claimed, cls.NICE, os.getpid()),
                               daemon=True)
            proc.start()
        except Exception:  # noqa: BLE001 - no helper process here (limits, sandbox): parse in-process
            return None
        # only the worker holds these ends: if it dies, even halfway through a message, reading
        # gives EOFError instead of waiting for ever
        recv_end.close()
        results_in.close()
        return cls(proc, send_end, results, claimed)

    def want(self, path: str, data: bytes, shallow: bool) -> None:
        key = (path, shallow)
        if self.proc is None or self.results is None or key in self.ids or self.next_id >= self.CAPACITY:
            return
        rid = self.ids[key] = self.next_id
        self.next_id += 1
        self.batch.append((rid, data, shallow))

    def flush(self) -> None:
        """Send what was asked for since the last flush, in messages of a few MB (one message
        of a round's bytes would be as large again in this process's heap)."""
        batch, self.batch = self.batch, []
        chunk, size = [], 0
        for item in batch:
            chunk.append(item)
            size += len(item[1])
            if size >= self.MESSAGE_BYTES or item is batch[-1]:
                if self.proc is None:
                    return
                try:
                    self.requests.send(chunk)
                except (OSError, ValueError):  # the worker is gone
                    self.close()
                chunk, size = [], 0

    def receive(self, timeout: float = 0.0) -> int:
        """Read the parses the worker has sent; with a timeout, wait for every one asked for
        (for at most that long). Returns how many asked for are not here yet."""
        deadline = time.monotonic() + timeout
        # without a timeout, read all there is: take() has already removed what it looks for
        while self.proc is not None and self.results is not None and (not timeout or len(self.done) < len(self.ids)):
            try:
                if not self.results.poll(max(0.0, deadline - time.monotonic())):
                    break
                got, blob = self.results.recv()
            except (OSError, EOFError, ValueError):  # the worker is gone: parse the rest here
                self.results.close()
                self.results = None
                break
            if not self.claimed[got]:  # else parsed here meanwhile
                self.done[got] = blob
        return len(self.ids) - len(self.done)

    def take(self, path: str, data: bytes, shallow: bool):
        """The ParsedModule of these bytes if the worker has made it, else None (and the worker
        will not make it)."""
        # lazy: a cache hit imports no analysis
        from .parsing.python_ir import loads_parsed

        rid = self.ids.pop((path, shallow), None)
        if rid is None:
            return None
        if rid not in self.done:
            self.receive()
        if rid not in self.done:
            self.claimed[rid] = 1
            self.parsed_here += 1
            return None
        blob = self.done.pop(rid)
        if blob is None:  # it failed there: the parse here decides, and reports
            self.parsed_here += 1
            return None
        self.taken += 1
        return loads_parsed(blob, data, shallow)

    def close(self) -> None:
        if self.proc is not None:
            if self.results is not None:  # first: a worker blocked sending a result stops
                self.results.close()
                self.results = None
            try:
                self.requests.send(None)
            except (OSError, ValueError):
                pass
            self.proc.join(timeout=5)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join()
            self.requests.close()
            self.proc = None
        self.ids.clear()
        self.done.clear()


class _RuntimeChecksJob:
    """scan_runtime_checks in one forked worker process while the Python gates are evaluated.
    The result is the same as in-process: the worker reads through a copy of the same Source,
    and its diagnostics are recorded in the parent's (deduplicated as a second read would be)."""

    def __init__(self, source: Source, ex, fut):
        self.source, self.ex, self.fut = source, ex, fut

    @classmethod
    def start(cls, source: Source, cpp_files: list[str]) -> "_RuntimeChecksJob | None":
        ex = _fork_pool(source) if cpp_files else None
        if ex is None:
            return None
        try:
            return cls(source, ex, ex.submit(_runtime_checks_worker, source, cpp_files))
        except (OSError, RuntimeError, pickle.PicklingError):
            ex.shutdown(wait=False, cancel_futures=True)
            return None

    def result(self) -> list[Gate] | None:
        """The gates, or None when the worker failed (the caller then runs the checks itself)."""
        try:
            gates, diags, screened = self.fut.result()
        except Exception:  # noqa: BLE001 - a lost worker (killed, no memory): redo in-process
            return None
        finally:
            self.ex.shutdown(wait=True)
        self.source.adopt_reads(diags, screened)
        return gates


_PAYLOAD_KEYS = ("gates", "diagnostics", "findings", "modules", "stats", "names")


def _payload(v) -> dict | None:
    if isinstance(v, dict) and all(k in v for k in _PAYLOAD_KEYS):
        return v
    return None


def _save_run(store: Cache, rkey: str, fp, key: str, tnames: list[str], payload: dict) -> None:
    store.put("run", rkey, {"snapshot_ns": fp.snapshot_ns, "files": fp.files, "unreadable": sorted(fp.unreadable),
                            "listing": fp.listing, "whole": fp.whole, "targets": tnames, "result_key": key})


def _same_run(prev: dict | None, fp, key: str, tnames: list[str]) -> bool:
    """Would the run snapshot written now say what the stored one says? When every file's state
    was taken from the stored snapshot (none read again; unreadable files are retried on every
    run anyway) and the listing, targets and result are the same, it would differ only in its
    time, and keeping the older time trusts exactly the same files next run (a file is trusted
    when modified well before the snapshot; a later change moves its mtime past both times).
    Not writing it saves pickling and writing 16,000 file states."""
    if prev is None or prev.get("listing") != fp.listing or prev.get("result_key") != key:
        return False
    old = prev.get("files") or {}
    return (prev.get("targets") == tnames and prev.get("whole") == fp.whole and len(old) == len(fp.files)
            and prev.get("unreadable") == sorted(fp.unreadable)
            and all(st is old.get(p) for p, st in fp.files.items()))


def _cutoff(source: Source, fp, prev: dict | None, store: Cache, tnames: list[str]) -> dict | None:
    """The previous result, if every changed file provably cannot change it (see scancache)."""
    # lazy: a cache hit imports no analysis
    from .python.gates import cutoff_view
    from .python.index import words_of

    if prev is None or fp.whole is not None or prev.get("whole") is not None:
        return None
    if prev.get("listing") != fp.listing or prev.get("targets") != tnames:
        return None
    old_files = prev.get("files") or {}
    if set(old_files) != set(fp.files) or sorted(fp.unreadable) != prev.get("unreadable"):
        return None
    changed = [p for p, st in fp.files.items() if old_files[p].hash != st.hash]
    if not changed or len(changed) > CUTOFF_MAX_FILES or not all(p.endswith(".py") for p in changed):
        return None
    payload = _payload(store.get("result", prev.get("result_key", "")))
    if payload is None:
        return None
    names = payload["names"]
    for p in changed:
        new = source.read(p)
        if new is None or len(new) > MAX_FILE_BYTES:
            return None
        old = rebuild_old(new, old_files[p])
        if old is None:
            return None
        a, b = cutoff_view(old, names), cutoff_view(new, names)
        if a is None or b is None or a[0] != b[0] or a[1] > old_files[p].code_end:
            return None
        # which modules name a word (comments included) bounds the call graph's caller search
        # and is quoted in its notes: a comment that brings a new word may change the result
        if words_of(old) != words_of(new):
            return None
        # a patch quotes context lines, which may reach into a file's trailing comments
        patches = [f.patch for f in payload["findings"] if f.patch and f"--- {p}\n" in f.patch]
        if patches:
            # lazy: a cache hit imports no analysis
            from .verdict.patch import hunks_unchanged

            o, n = (x.decode("utf-8", "surrogateescape") for x in (old, new))
            if not all(hunks_unchanged(t, p, o, n) for t in patches):
                return None
    return payload


def _prefilter_facts(source: Source, py_files: list[str], workers: int, say) -> dict | None:
    """The prefilter's per-file answers computed in worker processes (no cache run)."""
    if not isinstance(source, DirSource):
        return None
    return prefilter_in_workers(str(source.root), py_files, workers, say)


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
