"""Verdicts: for each gate that excludes a target, what stands behind it and whether the target
could run it (docs/architecture.md, "Verdicts").

The call graph says which JIT modules a gate controls (and which entry points of each the guarded
path calls); the CUDA engine says, per source and compile target, whether the active code builds,
which kernels are stubs and which kernels each exported entry point reaches. This module only
joins the two:

  fails on any source behind the gate              -> hardware-bound (the blocking line)
  every kernel the guarded path reaches is a stub  -> hardware-bound (the stub)
  some reached kernels are stubs, others real      -> partial (each stub with its guard line)
  every reached kernel is real, every source read  -> software-only (+ patch)
  prebuilt code only                               -> binary-only
  anything that could not be followed              -> unresolved, with the reason
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Iterable

from ..callgraph import GateSite
from ..callgraph.behind import LOOKED_UP
from ..callgraph.dsl import DslCallRule, dsl_rule_for
from ..callgraph.graph import SearchBudgetExceeded
from ..cuda.includes import IncludeRoot
from ..model import (BINARY_ONLY, BUILD_FLAGS, CPP_RUNTIME_CHECK, HARDWARE_BOUND, NO_GPU_CODE, PARTIAL, SOFTWARE_ONLY, UNRESOLVED,
                     Diagnostic, Evidence, Finding, Gate, Kernel, Link, ModuleVerdict, internal_error)
from ..platform import PlatformNeed, need_finder
from ..platform_facts import needs_index, needs_of, refuse_on_platform
from ..ruledata import load_rule
from ..targets import CompileTarget, Gpu, admits_of_nvcc_flags, registry

# TU diagnostics a scan reports as problems of the input (archaudit.cuda.tu.INPUT_PROBLEMS less the
# read failures, which the Source reports itself), and an #include of an absolute path (never read)
PREPROCESSOR_PROBLEMS = frozenset(("unbalanced-conditional", "include-cycle", "expansion-limit", "expression-depth",
                                   "absolute-include"))
# steps of the call-graph search (CallGraph.work) the gates of one file may take, in the order they
# are judged; the gates left after that are unresolved with an analysis-budget diagnostic (like
# the gate evaluation's python.interp.STEP_BUDGET)
JUDGE_WORK_BUDGET = 1_000_000
# the same steps for every gate of the scan together, so that many files each under their own
# budget still end: 16x what flashinfer 0.7.2 + sglang 0.5.23 take in all (316,337)
JUDGE_TOTAL_BUDGET = 5_000_000


@dataclass
class ModuleRef:
    """A JIT module the call graph found behind a gate."""

    name: str
    sources: list[str]  # paths relative to the scan root, resolved to real files
    chain: list[Link] = field(default_factory=list)  # gate -> ... -> the build call
    entry_points: frozenset[str] | None = None  # names called on the built module; None: unknown
    unresolved: list[str] = field(default_factory=list)  # sources or flags that could not be followed
    include_roots: list[str] = field(default_factory=list)
    defines: dict[str, str] = field(default_factory=dict)
    flags_gate: tuple[str, int] | None = None  # the arch-list gate feeding its nvcc flags
    host_sources: list[str] = field(default_factory=list)  # resolved .cpp/.cc files (no device code)
    binary: dict | None = None  # prebuilt code: {"artifact", "archs": {...}, "runs": "sass"|"ptx-jit"|"no"}
    # the -gencode/-arch code targets when its nvcc flags are hard-coded (not from an arch list):
    # the module is only ever built for these, whatever the gate says
    hard_flags: list[str] | None = None
    notes: list[str] = field(default_factory=list)  # flags/include paths not followed that do not block
    # a runtime check's own translation unit, judged alone (no JIT module is known to compile it)
    own_unit_only: bool = False
    guarded_function: str | None = None  # a C++ runtime check: the function holding it
    sink: tuple[str, int, int, str] | None = None  # the build call: path, line, column, function holding it
    # platform features (NVLink multicast ...) its Python setup needs on every path (archaudit.platform)
    platform_needs: list[PlatformNeed] = field(default_factory=list)
    # files the generator writes beside the sources at build time: (name included, file of the scan)
    include_aliases: list[tuple[str, str]] = field(default_factory=list)
    # sources whose text the generator builds in Python: path in `sources` -> that text
    texts: dict[str, str] = field(default_factory=dict)
    # the build compiles one of these lists of files, chosen by its arguments (see JitModule)
    source_options: list[tuple[str, ...]] = field(default_factory=list)

    def tu_roots(self) -> list:
        """The include roots its TUs are analysed with: the generated files first, then its -I paths."""
        return [IncludeRoot(path, False, "generated", name) for name, path in self.include_aliases] + \
            list(self.include_roots)


@dataclass
class Behind:
    modules: list[ModuleRef] = field(default_factory=list)
    reason: str = ""  # why nothing (more) could be followed
    chain: list[Link] = field(default_factory=list)  # links common to every module (gate region)
    # functions outside the scan, in packages not known to be portable, that the guarded path calls:
    # (dotted name, call chain to it)
    outside: list[tuple[str, list[Link]]] = field(default_factory=list)
    no_gpu_code: bool = False  # no module, and every path the gate changes was shown free of GPU code
    # CuTe DSL calls with an architecture-specific instruction (rules/cute_dsl.toml) that the guarded
    # path makes under no test of its own: (rule, dotted name, chain to the call)
    dsl_calls: list[tuple[DslCallRule, str, list[Link]]] = field(default_factory=list)


BehindFn = Callable[[Gate], Behind]


class TuCache:
    """TU analyses shared by every finding of a scan: (source, compile target, defines) -> TuResult."""

    def __init__(self, project):
        self.project = project
        self._got: dict = {}

    @staticmethod
    def request(src: str, ct: CompileTarget, roots: Iterable[str] = (), defines: dict | None = None,
                text: str | None = None) -> tuple:
        """(key, analyse_tu's arguments) of one TU analysis; text: the source's own text when
        it is built in Python (its path names that text: jit.written_text_path)."""
        arch = str(ct.major * 100 + ct.minor * 10)
        defines = {k: str(v).replace("{cuda_arch}", arch) for k, v in (defines or {}).items()}
        key = (src, ct.name, tuple(roots), tuple(sorted(defines.items())))
        args = (src, ct, list(roots) or None, defines or None)
        return key, args + (text,) if text is not None else args

    def analyse(self, src: str, ct: CompileTarget, roots: Iterable[str] = (), defines: dict | None = None,
                text: str | None = None):
        key, args = self.request(src, ct, roots, defines, text)
        r = self._got.get(key)
        if r is None:
            r = self._got[key] = self.project.analyse_tu(*args)
        return r

    def missing(self, refs: Iterable[ModuleRef], ct: CompileTarget) -> dict:
        """key -> analyse_tu's arguments, for the TUs judge_module(ref, ct) will analyse that
        are not done yet."""
        out = {}
        for ref in refs:
            if ref.binary is not None or ref.unresolved:
                continue
            for src in ref.sources:
                key, args = self.request(src, ct, ref.tu_roots(), ref.defines, ref.texts.get(src))
                if key not in self._got:
                    out[key] = args
        return out

    def install(self, key: tuple, result) -> None:
        """A result analysed elsewhere (a worker process): the same as analysing it here."""
        self._got.setdefault(key, result)

    def input_problems(self) -> list[Diagnostic]:
        """Problems in the sources analysed so far that make nvcc reject a TU or never finish it
        (the files themselves; unreadable and binary files are reported by the Source)."""
        out = {d for r in self._got.values() for d in r.diagnostics if d.kind in PREPROCESSOR_PROBLEMS}
        return sorted(out)


@dataclass
class ModuleJudgement:
    verdict: ModuleVerdict
    evidence: list[Evidence]  # blocking lines when the module fails
    entry_kernels: dict[str, list[str]]  # exported name -> kernels (and stub functions) it reaches
    stub_kind: dict[str, str] = field(default_factory=dict)  # function stub -> what makes it one
    entry_reached: dict[str, set[str]] = field(default_factory=dict)  # exported name -> functions it reaches
    # a module that fails but compiles one of several source lists: (lists whose every source
    # builds, lists with a source that fails, all lists); None otherwise
    choices: tuple[int, int, int] | None = None


def judge_module(ref: ModuleRef, ct: CompileTarget, tus: TuCache) -> ModuleJudgement:
    """One JIT module for one compile target: its prediction, kernels and entry points."""
    mv = ModuleVerdict(ref.name, list(ref.sources), ct.name, "builds")
    out = ModuleJudgement(mv, [], {})
    if ref.binary is not None:
        _judge_binary(ref, ct, mv)
        return out
    hard_note = _hard_flags_note(ref, ct)
    if ref.unresolved or not ref.sources:
        _judge_unresolved(ref, mv)
        return out
    status_of: dict[str, Kernel] = {}
    unknown: list[str] = []
    predicted: dict[str, str] = {}
    for src in ref.sources:
        tu = tus.analyse(src, ct, ref.tu_roots(), ref.defines, ref.texts.get(src))
        predicted[src] = tu.prediction
        _add_kernels(tu, status_of, out.stub_kind)
        for name, e in tu.exports.items():
            out.entry_kernels[name] = sorted(set(e.kernels) | ({n for n in e.reached if n in out.stub_kind}))
            out.entry_reached.setdefault(name, set()).update({e.function, *e.reached})
        if tu.prediction == "fails":
            mv.prediction = "fails"
            mv.reason = mv.reason or tu.reason
            for b in tu.blocking:
                if b.kind in ("ptx", "intrinsic", "error") or b.feature == "smem.static":
                    out.evidence.append(Evidence(b.path, b.line, b.feature, tuple(b.supported_on), b.text))
        elif tu.prediction == "unknown":
            unknown.append(f"{src}: {tu.reason}")
    mv.kernels = sorted(status_of.values(), key=lambda k: (k.path, k.line, k.name))
    _entry_statuses(out, status_of)
    _module_prediction(mv, ct, unknown)
    mv.reason += hard_note
    if mv.prediction == "fails" and ref.source_options:
        out.choices = _choices_that_build(ref.source_options, predicted)
    return out


def _choices_that_build(options: list[tuple[str, ...]], predicted: dict[str, str]) -> tuple[int, int, int] | None:
    """(lists that build, lists that fail, all lists) for a module compiling one of several source
    lists, when some list fails and another builds with real code (every device source it holds
    builds; host files hold none); None when no list is known to build."""
    builds = sum(1 for o in options if all(predicted.get(p, "builds") == "builds" for p in o))
    fails = sum(1 for o in options if any(predicted.get(p) == "fails" for p in o))
    return (builds, fails, len(options)) if builds and fails else None


def _judge_binary(ref: ModuleRef, ct: CompileTarget, mv: ModuleVerdict) -> None:
    """A module that is prebuilt code: a torch op of a scanned extension, or a binary sink."""
    if "op" in ref.binary:
        # lazy: a cache hit imports no analysis
        from ..binary.torchops import prediction

        v = ref.binary["index"].judge(*ref.binary["op"], ct.gpu_name)
        mv.prediction, mv.reason = prediction(v), v.reason
        return
    # lazy: a cache hit imports no analysis
    from ..binary.sinks import module_binary

    b = module_binary(ref.binary["sink"], ct.gpu_name)
    mv.prediction = "binary" if b["runs"] in ("no", "unknown") else "builds"
    mv.reason = b["reason"]


def _hard_flags_note(ref: ModuleRef, ct: CompileTarget) -> str:
    """What the module's reason adds when its hard-coded nvcc flags give no code for the GPU."""
    if not ref.hard_flags:
        return ""
    flags = [f"-gencode=arch=compute_{c.split('_', 1)[1]},code={c}" for c in ref.hard_flags if "_" in c]
    adm = admits_of_nvcc_flags(registry(), flags)
    if adm is not None and ct.gpu_name not in adm:
        # the build never targets this GPU: the sources are judged as if it did, with the
        # module's own defines, and a patch must change the flags too
        return (f"; built with hard-coded nvcc flags for {', '.join(ref.hard_flags)}, "
                f"which give no code for {ct.gpu_name}: a patch must change them too")
    return ""


def _judge_unresolved(ref: ModuleRef, mv: ModuleVerdict) -> None:
    """A module without GPU sources to read: host code only, or sources not followed."""
    if not ref.unresolved and ref.host_sources:
        mv.sources = list(ref.host_sources)
        mv.reason = "host code only: nothing is compiled for the GPU"
        return
    mv.prediction = "unknown"
    mv.reason = "; ".join(ref.unresolved) or "no source file resolved"


def _add_kernels(tu, status_of: dict[str, Kernel], stub_kind: dict[str, str]) -> None:
    """The kernels of one TU and the functions that stop at run time, into status_of (name ->
    Kernel, the worst status across instantiations and files) and stub_kind (function -> why)."""
    for k in tu.kernels:
        status = {"empty": "empty-stub", "trap": "trap-stub"}.get(k.status, k.status)
        prev = status_of.get(k.name)
        # one name, several instantiations or files: the worst status speaks for it
        if prev is None or (prev.status == "real" and status != "real"):
            status_of[k.name] = Kernel(k.name, k.path, k.line, status, k.guard_line)
    # stubs inside functions (CUTLASS_NOT_IMPLEMENTED, CuTe's invalid control path, a trap,
    # an oversized shared-memory request): the function counts as a stub for its callers
    for st in tu.stubs:
        if st.kind in ("empty-kernel", "trap-kernel"):
            continue
        name = st.function or f"{st.path}:{st.line}"
        prev = status_of.get(name)
        if prev is None or prev.status == "real":
            status_of[name] = Kernel(name, st.path, st.line, "trap-stub", st.guard_line)
            stub_kind[name] = f"{st.kind} ({st.text[:80]})"


def _entry_statuses(out: ModuleJudgement, status_of: dict[str, Kernel]) -> None:
    """Each exported entry point's status from the kernels and stub functions it reaches."""
    for name, ks in out.entry_kernels.items():
        sts = {status_of[k].status for k in ks if k in status_of}
        # reaching a function that stops at run time (an atom for another target, a trap):
        # the entry point is taken to hit it, since a kernel template's callee is not bound here
        # an entry point that reaches no kernel by name in a module that has kernels: the launch
        # goes through something the name search does not follow (a template alias, a table)
        out.verdict.entry_points[name] = ("stub" if any(k in out.stub_kind for k in ks) else
                                          "unknown" if not sts and status_of else _combine(sts))


def _module_prediction(mv: ModuleVerdict, ct: CompileTarget, unknown: list[str]) -> None:
    """The module's prediction once every source is read: unknown when a source could not be
    decided (unless one fails), stub when every kernel is one."""
    if mv.prediction != "fails" and unknown:
        mv.prediction = "unknown"
        mv.reason = "; ".join(unknown)
    elif mv.prediction == "builds":
        if mv.kernels and all(k.status in STUBS for k in mv.kernels):
            mv.prediction = "stub"
            mv.reason = f"every kernel is a stub on {ct.name}"
        else:
            mv.reason = f"every source builds for {ct.name}"


STUBS = ("empty-stub", "trap-stub")


def _combine(statuses: set[str]) -> str:
    if not statuses:
        return "real"  # an entry point that launches no kernel (host-only work)
    if statuses <= set(STUBS):
        return "stub"
    if statuses & set(STUBS):
        return "partial"
    return "unknown" if "unknown" in statuses else "real"


def _all_entries_stub(mv: ModuleVerdict, entry_points: frozenset[str] | None) -> bool:
    names = list(entry_points) if entry_points is not None else list(mv.entry_points)
    return bool(names) and all(mv.entry_points.get(n) == "stub" for n in names)


def reached_kernels(mj: ModuleJudgement, entry_points: frozenset[str] | None) -> tuple[list[Kernel], bool]:
    """Kernels the guarded path can reach: those of the entry points it calls when every one of
    them is a known export, else every kernel of the module. The flag says which."""
    mv = mj.verdict
    if entry_points and all(e in mj.entry_kernels and mv.entry_points.get(e) != "unknown" for e in entry_points):
        names = {k for e in entry_points for k in mj.entry_kernels[e]}
        return [k for k in mv.kernels if k.name in names], True
    return list(mv.kernels), False


def classify(gate: Gate, gpu: Gpu, ct: CompileTarget, behind: Behind, tus: TuCache) -> Finding:
    """The verdict for one gate that excludes `gpu`."""
    f = Finding(gate, gpu.name, UNRESOLVED, chain=list(behind.chain))
    dsl_reason = _dsl_needs(f, behind, ct)
    if not behind.modules:
        return _nothing_behind(f, behind, dsl_reason)
    verdicts: list[str] = []
    reasons: list[str] = []
    needing: list[tuple[int, str]] = []  # (index in verdicts, reason) of modules needing what gpu's system lacks
    for ref in behind.modules:
        mj = judge_module(ref, ct, tus)
        f.modules.append(mj.verdict)
        f.chain.extend(ref.chain)
        verdict, reason = _module_finding(f, ref, mj, ct)
        verdicts.append(verdict)
        reasons.append(reason)
        why = _platform_needs(f, ref, gpu)
        if why:
            needing.append((len(verdicts) - 1, why))
    _platform_verdicts(verdicts, reasons, needing)
    if dsl_reason:
        verdicts.append(HARDWARE_BOUND)
        reasons.append(dsl_reason)
    if behind.reason:
        verdicts.append(UNRESOLVED)
        reasons.append(behind.reason)
    if behind.outside and not dsl_reason:
        verdicts.append(UNRESOLVED)
        reasons.append(_outside_reason(behind.outside))
        f.chain.extend(behind.outside[0][1])
    # the strongest statement the evidence supports: a hardware line anywhere behind the gate
    # decides; otherwise anything unknown makes the whole unresolved
    for v in (HARDWARE_BOUND, UNRESOLVED, BINARY_ONLY, PARTIAL, SOFTWARE_ONLY):
        if v in verdicts:
            f.verdict = v
            break
    f.reason = "; ".join(reasons)
    f.feature = ", ".join(sorted({m.name for m in behind.modules}))
    return f


def _nothing_behind(f: Finding, behind: Behind, dsl_reason: str) -> Finding:
    """The finding of a gate with no JIT module or prebuilt binary behind it."""
    if dsl_reason:
        f.verdict, f.reason = HARDWARE_BOUND, dsl_reason
        return f
    f.reason = behind.reason or "no JIT module or prebuilt binary found behind the gate"
    if behind.no_gpu_code and not behind.outside:
        f.verdict = NO_GPU_CODE
        return f
    if behind.outside:
        f.reason += "; " + _outside_reason(behind.outside)
        f.chain.extend(behind.outside[0][1])
    return f


def _module_finding(f: Finding, ref: ModuleRef, mj: ModuleJudgement, ct: CompileTarget) -> tuple[str, str]:
    """(verdict, reason) that one module behind the gate gives; its evidence goes on `f`."""
    mv = mj.verdict
    if mv.prediction == "binary":
        sink = ref.binary.get("sink")
        if sink is not None:
            f.evidence.append(Evidence(sink.path, sink.line, "prebuilt-code", tuple(sink.archs or ()), mv.reason))
        else:
            f.evidence.extend(Evidence(p, 1, "prebuilt-code", (), mv.reason) for p in ref.sources)
        return BINARY_ONLY, (f"{ref.name}: {mv.reason}" if ref.binary and "op" in ref.binary else mv.reason)
    if mv.prediction == "unknown":
        return UNRESOLVED, f"{ref.name}: {mv.reason}"
    if ref.own_unit_only and not mv.kernels and mv.prediction != "fails":
        return UNRESOLVED, (f"{ref.name}: the check guards host code that defines no kernel, and no JIT module in the "
                            f"scan is known to compile this file with the sources that define the kernels it launches")
    if mv.prediction == "fails" and mj.choices:
        # which list is compiled is chosen at run time: on the target some choices build, others not
        builds, fails, total = mj.choices
        f.evidence.extend(mj.evidence)
        return PARTIAL, (f"{ref.name}: the build compiles one of {total} source lists, chosen by its arguments; "
                         f"on {ct.name} every source of {builds} of them builds and {fails} hold one that cannot: {mv.reason}")
    if mv.prediction == "fails":
        f.evidence.extend(mj.evidence)
        return HARDWARE_BOUND, f"{ref.name}: {mv.reason}"
    return _kernels_finding(f, ref, mj, ct)


def _kernels_finding(f: Finding, ref: ModuleRef, mj: ModuleJudgement, ct: CompileTarget) -> tuple[str, str]:
    """(verdict, reason) of a module that builds, from the kernels the guarded path reaches:
    stubs (evidence on `f`), real ones, and ones under conditions not decided for the target."""
    mv = mj.verdict
    entry_points = ref.entry_points
    if ref.guarded_function:
        # a C++ check guards its own function: the exports that reach it
        entry_points = frozenset(e for e, fns in mj.entry_reached.items()
                                 if ref.guarded_function in fns) or entry_points
    kernels, narrowed = reached_kernels(mj, entry_points)
    stubs = [k for k in kernels if k.status in STUBS]
    real = [k for k in kernels if k.status == "real"]
    undecided = [k for k in kernels if k.status not in STUBS and k.status != "real"]
    scope = (f"entry point(s) {', '.join(sorted(entry_points))}" if narrowed else "the module")
    _stub_evidence(f, mj, stubs, ct)
    if undecided and not stubs:
        return UNRESOLVED, (f"{ref.name}: kernel(s) {', '.join(k.name for k in undecided)} are under conditions "
                            f"that could not be decided for {ct.name}")
    if stubs and (not real or _all_entries_stub(mv, entry_points if narrowed else None)):
        return HARDWARE_BOUND, (f"{ref.name}: every kernel {scope} reaches is a stub on {ct.name}"
                                if not real else f"{ref.name}: " + (f"{scope} stop(s) at run time on {ct.name}" if narrowed else
                                                            f"every entry point of the module stops at run time on {ct.name}"))
    if stubs and not any(st == "real" for st in mv.entry_points.values()):
        # partial means "these entry points are safe": with none known to reach only real
        # kernels, the stubs are what the gate's path may run
        return HARDWARE_BOUND, (f"{ref.name}: {len(stubs)} kernel(s) {scope} reaches are stubs on {ct.name} "
                                f"({', '.join(k.name for k in stubs)}) and no entry point of the module is known "
                                f"to reach only real kernels")
    if stubs:
        safe = sorted(e for e, st in mv.entry_points.items() if st == "real")
        return PARTIAL, (f"{ref.name}: {len(stubs)} kernel(s) {scope} reaches are stubs on {ct.name} "
                         f"({', '.join(k.name for k in stubs)}); entry points real on {ct.name}: "
                         f"{', '.join(safe) or 'none'}")
    return SOFTWARE_ONLY, f"{ref.name}: {mv.reason}" + (f"; {scope} reaches only real kernels" if narrowed else "")


def _stub_evidence(f: Finding, mj: ModuleJudgement, stubs: list[Kernel], ct: CompileTarget) -> None:
    """One evidence line per stub kernel or function the path reaches."""
    # concrete evidence first: an ArchTag only names what the code was written for
    for k in sorted(stubs, key=lambda k: mj.stub_kind.get(k.name, "").startswith("arch-tag")):
        what = ("is an empty kernel that silently does nothing" if k.status == "empty-stub"
                else f"stops at run time: {mj.stub_kind[k.name]}" if k.name in mj.stub_kind
                else "only traps")
        guard = f": its body is excluded by the guard at line {k.guard_line}" if k.guard_line else ""
        noun = "function" if k.name in mj.stub_kind else "kernel"
        f.evidence.append(Evidence(k.path, k.guard_line or k.line, k.status, (),
                                   f"{noun} {k.name} (line {k.line}) {what} on {ct.name}{guard}"))


def _platform_needs(f: Finding, ref: ModuleRef, gpu: Gpu) -> str:
    """Evidence on `f` for the platform features (NVLink multicast ...) the module's Python setup
    needs and no system with `gpu` has; the reason, or "" when there is none."""
    reasons = []
    for n in ref.platform_needs:
        if not gpu.lacks(n.feature):
            continue
        may = tuple(g.name for g in registry().gpus if getattr(g, n.feature) == "may")
        steps = " -> ".join(".".join(x.text.rsplit(".", 2)[-2:]) for x in n.chain if x.kind == "call")
        holder = n.holder.removesuffix(".__init__")
        f.evidence.append(Evidence(n.path, n.line, f"platform.{n.feature}", may,
                                   f"{n.api}: {n.description}; {holder} reaches it on every path "
                                   f"({steps} -> {n.api}); no system with {gpu.name} has it (a platform fact, "
                                   f"not an instruction-set one)"))
        for path, line, test in n.refusals:
            f.evidence.append(Evidence(path, line, f"platform.{n.feature}", may,
                                       f"raises when the runtime probe says no: `{test[:120]}`"))
        reasons.append(f"{ref.name}: its Python setup ({holder}) needs {n.feature.replace('_', ' ')} "
                       f"({n.api} at {n.path}:{n.line}), which no system with {gpu.name} has")
    return "; ".join(reasons)


def _platform_verdicts(verdicts: list[str], reasons: list[str], needing: list[tuple[int, str]]) -> None:
    """Modules whose setup needs what the system lacks are hardware-bound; behind a gate that also
    reaches usable modules (another backend it may choose), the gate is partial for that reason."""
    if not needing:
        return
    hit = {i for i, _ in needing}
    usable = any(v in (SOFTWARE_ONLY, PARTIAL) for i, v in enumerate(verdicts) if i not in hit)
    for i, why in needing:
        if verdicts[i] != HARDWARE_BOUND:  # an instruction it lacks already decides
            verdicts[i] = PARTIAL if usable else HARDWARE_BOUND
        reasons.append(why + ("; the gate also reaches modules that do not need it" if usable else ""))


def _dsl_needs(f: Finding, behind: Behind, ct: CompileTarget) -> str:
    """The CuTe DSL calls on the guarded path that `ct` cannot build, as evidence on `f` (and the
    chain to the first); the reason, or "" when there are none."""
    lacking = [(rule, name, chain) for rule, name, chain in behind.dsl_calls if not rule.builds_for(ct)]
    if not lacking:
        return ""
    missing = {}
    for rule, name, chain in lacking:
        missing[name] = [q.id for q in rule.requires if not q.supports(ct)]
        have = sorted(set.intersection(*(set(q.supported_on) for q in rule.requires)))
        f.evidence.append(Evidence(chain[-1].path, chain[-1].line, missing[name][0], tuple(have),
                                   f"CuTe DSL call {name} emits {rule.description}; {ct.name} has no "
                                   f"{', '.join(missing[name])}"))
    _rule, name, chain = lacking[0]
    f.chain.extend(chain)
    tracer = next((ln.how.split(":", 1)[1].split("+")[0] for ln in chain if ln.how.startswith("traced-by:")), "")
    via = f"a function traced by {tracer} calls " if tracer else "the guarded path calls "
    more = f" (and {len(lacking) - 1} more such call(s))" if len(lacking) > 1 else ""
    return (f"{via}{name} ({chain[-1].path}:{chain[-1].line}), which needs "
            f"{', '.join(missing[name])}: not on {ct.name}{more}")


def _outside_reason(outside: list[tuple[str, list[Link]]]) -> str:
    names = [n for n, _ in outside]
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return ("the guarded path also calls code outside the scan whose GPU support is not analysed: "
            + ", ".join(names[:3]) + more)


def holds_gpu_code(dotted: str) -> bool:
    """Whether a call into `dotted` (outside the scan) may run NVIDIA GPU code archaudit does not
    analyse, so that a verdict cannot stand on what was read (rules/externals.toml)."""
    rules = load_rule("externals")
    parts = dotted.split(".")
    top = parts[0]
    if top == "torch" and len(parts) > 3 and parts[1] == "ops":
        return parts[2] not in rules.get("torch_op_namespaces_portable", [])
    return top in rules.get("gpu_code", [])


def passes_objects(dotted: str) -> bool:
    """Whether what `dotted` (outside the scan) returns can be an object it was handed or one
    that calls back into it (rules/externals.toml passes_objects)."""
    return any(dotted == p or dotted.startswith(p + ".") for p in load_rule("externals").get("passes_objects", []))


def noreturn(dotted: str) -> bool:
    """Whether a call of `dotted` (outside the scan) never returns (rules/externals.toml noreturn)."""
    return dotted in load_rule("externals").get("noreturn", [])


def _confiner(analysis):
    """The scan's Confiner (callgraph/confine.py), made on first use."""
    c = analysis.__dict__.get("_confiner")
    if c is None:
        # lazy: a cache hit imports no analysis
        from ..callgraph.confine import Confiner

        scanned = {m.split(".", 1)[0] for m in analysis.index.path_of}
        c = analysis.__dict__["_confiner"] = Confiner(
            analysis.behind, holds_gpu_code, passes_objects, noreturn, lambda fns: _binary_sinks_in(analysis, fns), scanned)
    return c


TestsBefore = Callable[[Gate], list]  # Behind.tests_before for a gate: (relation, line, col, text)


def judge_gates(gates: list[Gate], gpus: list[tuple[Gpu, CompileTarget]], behind: BehindFn, tus: TuCache,
                patcher=None, progress=None, all_gates: list[Gate] | None = None,
                tests_before: TestsBefore | None = None, not_evaluated: list | None = None,
                prefetch: Callable[[dict], None] | None = None,
                problems: list[Diagnostic] | None = None,
                sinks_of: Callable[[str], dict[tuple[str, int], list]] | None = None) -> list[Finding]:
    """Every gate x target that the gate excludes, classified; software-only ones with a patch
    plan that covers every gate on the chain (looked up in all_gates, default: gates).
    With tests_before, a gate the target never evaluates because an earlier arm admits the target
    (an `if`/`elif` chain, or `if C: return x` before it) gives no finding (appended to
    not_evaluated as (gate, target, that arm's gate)); one that an earlier gate stops first says
    so, and its plan patches that one too.
    prefetch: given {key: analyse_tu arguments} of TUs still to analyse, as behind() of each
    pair finds them, then None once before any verdict (workers.CudaWorker analyses them in
    another process and installs the results in `tus`). The verdicts reuse those behind()s.
    sinks_of(target): build calls a patch may not give the target's -gencode (inventory.protected_sinks)."""
    known = all_gates if all_gates is not None else gates
    by_place = {(g.path, g.line): g for g in known}
    findings: list[Finding] = []
    pending: list = []  # software-only and partial findings, planned once every verdict is known
    platform = needs_index(known)
    fail = _failure_note(problems)
    arms = _Arms(tests_before, known)
    follow = _Follow(behind, fail)
    excluding = _in_file_rounds(gates, [(g, gpu, ct) for g in gates for gpu, ct in gpus if gpu.name not in g.admits])
    if prefetch is not None:
        _prefetch(excluding, arms, follow, tus, prefetch, progress)
    for i, (g, gpu, ct) in enumerate(excluding):
        if progress and i % 25 == 0:
            progress(f"judging {i}/{len(excluding)} gate x target pairs")
        served = arms.served_by(g, gpu)
        if served is not None:
            if not_evaluated is not None:
                not_evaluated.append((g, gpu.name, served))
            continue
        f, plan = _judge_pair(g, gpu, ct, arms, follow, tus, patcher, fail, platform)
        if plan is not None:
            pending.append(plan)
        findings.append(f)
    if problems is not None:
        problems.extend(follow.diagnostics())
    _plan_all(pending, findings, by_place, patcher, fail, sinks_of)
    return sorted(findings, key=Finding.sort_key)


def _failure_note(problems: list[Diagnostic] | None) -> Callable[[Gate, str, Exception], str]:
    """fail(gate, phase, error): an internal-error diagnostic in `problems`, and the reason a
    finding gives for it."""
    def fail(g: Gate, phase: str, e: Exception) -> str:
        if problems is not None:
            problems.append(internal_error(g.path, phase, e, g.line))
        return f"archaudit's {phase} failed on this gate ({type(e).__name__}); see the internal-error diagnostic"
    return fail


class _Arms:
    """The earlier tests of a gate's function that decide whether the gate is reached, each
    looked up once: an arm the target takes first, or a refusal that stops it before."""

    def __init__(self, tests_before: TestsBefore | None, known: list[Gate]):
        self.tests_before = tests_before
        self.by_pos: dict[tuple[str, int, int], list[Gate]] = {}
        for g in known:
            self.by_pos.setdefault((g.path, g.line, g.col), []).append(g)
        self.cache: dict[tuple[str, int, int], list[tuple[str, Gate]]] = {}

    def earlier(self, g: Gate) -> list[tuple[str, Gate]]:
        if self.tests_before is None:
            return []
        key = (g.path, g.line, g.col)
        if key not in self.cache:
            self.cache[key] = _gates_before(g, self.tests_before, self.by_pos)
        return self.cache[key]

    def served_by(self, g: Gate, gpu: Gpu) -> Gate | None:
        """An earlier arm the target takes (`elif` after it, or code after `if C: return x`)."""
        return next((eg for rel, eg in self.earlier(g) if _test_true(eg, gpu.name) and (
            rel == "else-of" or (rel == "exit-if" and eg.region == "branch"))), None)

    def stopped_by(self, g: Gate, gpu: Gpu) -> list[Gate]:
        """An earlier refusal, or an enclosing test, that excludes the target: patching it lets it on."""
        return [eg for rel, eg in self.earlier(g) if
                (rel == "exit-if" and eg.region == "after-early-exit" and _test_true(eg, gpu.name))
                or (rel == "then-of" and eg.region == "branch" and _test_false(eg, gpu.name))]


class _Follow:
    """What stands behind each gate (the call-graph search `behind`), once per gate line, within a
    step budget per file (like the gate evaluation's per-module budget) and one for the scan."""

    def __init__(self, behind: BehindFn, fail: Callable[[Gate, str, Exception], str]):
        self.behind, self.fail = behind, fail
        self.work = getattr(behind, "work", None)  # steps of the call-graph search so far, when it counts them
        self.limit = getattr(behind, "limit", None)  # sets the work at which the search stops (None: never)
        self.cache: dict[tuple[str, int], Behind] = {}
        self.spent: dict[str, int] = {}  # per file
        self.total = 0  # every file's together
        self.stopped_at: dict[str, int] = {}  # files over their budget -> gates not followed
        self.cut_by_total: dict[str, int] = {}  # files with gates not followed once the scan's budget was spent

    def __call__(self, g: Gate) -> Behind:
        b = self.cache.get((g.path, g.line))
        if b is None:
            b = self.cache[(g.path, g.line)] = self._search(g)
        return b

    def _search(self, g: Gate) -> Behind:
        file_left = JUDGE_WORK_BUDGET - self.spent.get(g.path, 0)
        total_left = JUDGE_TOTAL_BUDGET - self.total
        work, limit = self.work, self.limit
        if work is not None and min(file_left, total_left) < 0:
            return self._over_budget(g, file_left)
        w0 = work() if work is not None else 0
        if limit is not None and work is not None:
            limit(w0 + min(file_left, total_left))
        try:
            b = self.behind(g)
        except SearchBudgetExceeded:
            # this gate's own search ran past what was left: it is the first one cut
            b = self._over_budget(g, file_left - (work() - w0))
        except Exception as e:  # noqa: BLE001 - contained to this gate
            b = Behind(reason=self.fail(g, "call-graph search", e))
        finally:
            if limit is not None:
                limit(None)
        if work is not None:
            self.spent[g.path] = self.spent.get(g.path, 0) + work() - w0
            self.total += work() - w0
        return b

    def _over_budget(self, g: Gate, file_left: int) -> Behind:
        if file_left <= 0:
            self.stopped_at[g.path] = self.stopped_at.get(g.path, 0) + 1
            return Behind(reason=f"not followed: the call-graph search from this file's gates stopped at its "
                                 f"budget of {JUDGE_WORK_BUDGET:,} steps")
        self.cut_by_total[g.path] = self.cut_by_total.get(g.path, 0) + 1
        return Behind(reason=f"not followed: the call-graph search of this scan stopped at its total "
                             f"budget of {JUDGE_TOTAL_BUDGET:,} steps")

    def diagnostics(self) -> list[Diagnostic]:
        """One analysis-budget diagnostic per file whose gates were not all followed."""
        out = [Diagnostic(p, "analysis-budget", f"the call-graph search from this file's gates stopped at its "
                          f"budget of {JUDGE_WORK_BUDGET:,} steps; {n} gates not followed (unresolved)")
               for p, n in sorted(self.stopped_at.items())]
        out += [Diagnostic(p, "analysis-budget", f"the call-graph search of this scan stopped at its total "
                           f"budget of {JUDGE_TOTAL_BUDGET:,} steps; {n} gates of this file not followed "
                           f"(unresolved)")
                for p, n in sorted(self.cut_by_total.items())]
        return out


def _in_file_rounds(gates: list[Gate], excluding: list[tuple]) -> list[tuple]:
    """The (gate, gpu, compile target) pairs, each file's first gate, then each one's second...:
    the scan's total budget is shared out, not spent on the files that sort first."""
    rank: dict[int, int] = {}
    per_file: dict[str, int] = {}
    for g in gates:
        rank[id(g)] = per_file.get(g.path, 0)
        per_file[g.path] = rank[id(g)] + 1
    excluding.sort(key=lambda t: rank[id(t[0])])  # stable: in file order within a rank
    return excluding


def _prefetch(excluding: list[tuple], arms: _Arms, follow: _Follow, tus: TuCache,
              prefetch: Callable[[dict | None], None], progress) -> None:
    """Every TU the verdicts will analyse, handed to `prefetch` as the call graph finds them."""
    for i, (g, gpu, ct) in enumerate(excluding):
        if progress and i % 25 == 0:
            progress(f"following calls from gate {i}/{len(excluding)}")
        if arms.served_by(g, gpu) is None:
            wanted = tus.missing(follow(g).modules, ct)
            if wanted:
                prefetch(wanted)
    prefetch(None)


def _judge_pair(g: Gate, gpu: Gpu, ct: CompileTarget, arms: _Arms, follow: _Follow, tus: TuCache, patcher,
                fail, platform: dict[str, list[Gate]]) -> tuple[Finding, tuple | None]:
    """The finding for one gate x target it excludes, and what _plan_all needs to plan its patch
    (None: no patch to plan)."""
    stopped = arms.stopped_by(g, gpu)
    b = follow(g)
    try:
        f = classify(g, gpu, ct, b, tus)
    except Exception as e:  # noqa: BLE001 - contained to this gate
        return Finding(g, gpu.name, UNRESOLVED, reason=fail(g, "verdict", e)), None
    if gpu.name in g.mixed and f.verdict in (SOFTWARE_ONLY, PARTIAL):
        _mixed_unresolved(f, g, gpu)
    if refuse_on_platform(f, gpu, needs_of(g, platform)):
        return f, None
    if stopped:
        f.reason += "; " + "; ".join(
            f"{gpu.name} does not get this far unless the gate at {eg.path}:{eg.line} (`{eg.expr}`) lets it through"
            for eg in stopped)
    if f.verdict == HARDWARE_BOUND and patcher is not None:
        _maintainer_words(f, g, gpu, patcher)
    if f.verdict in (SOFTWARE_ONLY, PARTIAL) and patcher is not None:
        # partial: the plan still applies, for the entry points the reason names as real
        return f, (f, g, gpu, b, stopped)
    return f, None


def _mixed_unresolved(f: Finding, g: Gate, gpu: Gpu) -> None:
    """`fused is None` after a fused path the target may take: the test refuses the target only
    as far as the architecture goes, and may let it through on run-time values (shapes, dtypes,
    a build that fails), so no patch of the gate is what stands between the target and the path
    it guards."""
    f.verdict = UNRESOLVED
    f.reason = (f"on {gpu.name} the test's outcome is not decided by the architecture alone: it may be true "
                f"or false there, as on {_others(g.mixed, gpu.name)} (a run-time value, or one the evaluation "
                f"could not follow), so {gpu.name} is not shown to be refused here and no edit of an "
                f"architecture test is shown to decide it; the patch is manual (what the path reaches: "
                f"{f.reason})")


def _maintainer_words(f: Finding, g: Gate, gpu: Gpu, patcher) -> None:
    """A gate held by a platform need: a comment at the gate saying the target is left out on
    purpose (archaudit.verdict.patch_warnings) is shown as evidence with the verdict."""
    if not any(e.feature.startswith("platform.") for e in f.evidence):
        return
    try:
        words = patcher.patch(g, gpu).warnings
    except Exception:  # noqa: BLE001 - the verdict stands without the comment
        return
    for w in words:
        f.evidence.append(Evidence(g.path, g.line, "maintainer-comment", (), w))
    if words:
        f.reason += "; the maintainers' comment at the gate agrees"


def _others(names: Iterable[str], gpu: str) -> str:
    rest = sorted((n for n in names if n != gpu), key=lambda n: (len(n), n))
    return ", ".join(rest[:6]) + (f" and {len(rest) - 6} more" if len(rest) > 6 else "") if rest else "no other GPU"


def _gates_before(g: Gate, tests_before: TestsBefore, by_pos) -> list[tuple[str, Gate]]:
    """The tests deciding whether g is reached that are, as a whole, a resolved gate."""
    if not g.path.endswith(".py"):
        return []
    out = []
    for rel, line, col, text in tests_before(g):
        for eg in by_pos.get((g.path, line, col), []):
            whole = eg.expr == text or (eg.expr.endswith("...") and text.startswith(eg.expr[:-3]))
            if whole and eg.resolved and eg.region in ("branch", "after-early-exit") and eg is not g:
                out.append((rel, eg))
                break
    return out


def _test_true(g: Gate, gpu: str) -> bool:
    """Whether the gate's test is certainly true on gpu. A refusal (`if not ok: raise`) admits the
    GPUs that go on, i.e. those for which its test is false."""
    return gpu in g.decided and (gpu in g.admits) != (g.region == "after-early-exit")


def _test_false(g: Gate, gpu: str) -> bool:
    return gpu in g.decided and not _test_true(g, gpu)


def patch_gates_of(f: Finding, gates: list[Gate]) -> list[Gate]:
    """The gates a finding's patch plan edits: its own, then those down its chain."""
    return list(f.plan) or [f.gate]


def protected_functions(findings: list[Finding], gates: Iterable[Gate], target: str) -> dict[str, str]:
    """Functions that a gate other than the software-only and partial ones for the target holds or
    goes through (one the target may not pass, or one whose outcome on the target is fine as it
    is): a patch does not edit them outside its own gate, nor a module constant they read (the edit
    would change that gate's outcome too). Each maps to the gate that holds it, said as
    `the gate at PATH:LINE, VERDICT for TARGET` (the one that stops the target hardest)."""
    verdicts = {(f.gate.path, f.gate.line, f.gate.col): f.verdict for f in findings if f.target == target}
    rank = {HARDWARE_BOUND: 0, BINARY_ONLY: 1, UNRESOLVED: 2, NO_GPU_CODE: 3}
    best: dict[str, tuple] = {}
    for g in sorted(gates, key=Gate.sort_key):
        v = verdicts.get((g.path, g.line, g.col))
        if v in (SOFTWARE_ONLY, PARTIAL):
            continue
        what = (f"the gate at {g.path}:{g.line}, " + (f"{v} for {target}" if v else f"which admits {target}"))
        key = (rank.get(v, 4), g.sort_key())
        for fn in [g.function] + [x[len("inferred "):] for x in g.via if x.startswith("inferred ")]:
            if fn not in best or key < best[fn][0]:
                best[fn] = (key, what)
    return {fn: what for fn, (_k, what) in best.items()}


def _plan_all(pending: list, findings: list[Finding], by_place, patcher, fail, sinks_of=None) -> None:
    """The patch plans, once every verdict is known (see protected_functions and sinks_of)."""
    protected: dict[str, dict[str, str]] = {}
    sinks: dict[str, dict[tuple[str, int], list]] = {}
    try:
        for f, g, gpu, b, stopped in pending:
            if gpu.name not in protected:
                protected[gpu.name] = protected_functions(findings, by_place.values(), gpu.name)
                sinks[gpu.name] = sinks_of(gpu.name) if sinks_of is not None else {}
            patcher.protected = protected[gpu.name]
            patcher.protected_sinks = sinks[gpu.name]
            patcher.own_modules = {m.name for m in f.modules}
            try:
                patch_plan(f, g, gpu, b, by_place, patcher, first=stopped)
            except Exception as e:  # noqa: BLE001 - the verdict stands; the patch is what is missing
                f.reason += "; " + fail(g, "patch planning", e)
    finally:
        if patcher is not None:
            patcher.protected = {}
            patcher.protected_sinks, patcher.own_modules = {}, set()


def patch_plan(f: Finding, g: Gate, gpu: Gpu, b: Behind, by_place, patcher, first: list[Gate] = ()) -> None:
    """The gate's own patch plus one for each gate further down the chain that also excludes the
    target: the arch list feeding a module's nvcc flags, and the build call of a module whose
    hard-coded nvcc flags give no code for the target (its flags get the target's -gencode);
    `first`: gates that stop the target before it reaches this one. A `build-flags` gate at a
    generator's def is patched at its build calls only."""
    # lazy: a cache hit imports no analysis
    from .patch import combined_patch

    plan = list(first) + ([] if g.kind == BUILD_FLAGS and g.region == "build" else [g])
    for ref in b.modules:
        if any(gpu.lacks(n.feature) for n in ref.platform_needs):
            continue  # a module the target's system cannot run: its own gates stay
        fg = by_place.get(ref.flags_gate) if ref.flags_gate else None
        if fg is not None and fg is not g and gpu.name not in fg.admits and fg not in plan:
            plan.append(fg)
        if ref.hard_flags and ref.sink is not None:
            flags = [f"-gencode=arch=compute_{c.split('_', 1)[1]},code={c}" for c in ref.hard_flags if "_" in c]
            adm = admits_of_nvcc_flags(patcher.reg, flags)
            path, line, col, function = ref.sink
            if adm is not None and gpu.name not in adm and not any((p.path, p.line) == (path, line) for p in plan):
                plan.append(Gate(path, line, col, function, BUILD_FLAGS, " ".join(flags), adm,
                                 "hard-coded nvcc flags", region="build-call"))
    f.plan = plan
    diff, done = combined_patch(patcher, plan, gpu, in_gate_order=True)
    by_gate = {(pg.path, pg.line, pg.col): p for pg, p in done}
    notes, manual = [], []
    for pg in plan:
        p = by_gate[(pg.path, pg.line, pg.col)]
        if not p.diff and not p.covered:
            manual.append(f"{pg.path}:{pg.line}")
        why = p.description if p.diff or p.covered else f"no patch, edit by hand ({p.description})"
        notes.append(f"{pg.path}:{pg.line}: {why}")
    f.patch = diff or None
    head = ("patch plan" if not manual else
            f"patch plan, manual for {', '.join(manual)}" + (" (the diff holds the other steps)" if diff else ""))
    f.reason += f"; {head}: " + "; ".join(notes)


DEVICE_SUFFIXES = (".cu", ".cuh")  # sglang's load_jit compiles .cuh files given as cuda_files


def _injected_defines(rule_id: str) -> dict[str, str]:
    """Defines a JIT adds on its own (rules/jit.toml `injects_defines`), with {cuda_arch} left for
    the compile target."""
    for r in load_rule("jit").get("sink", []):
        if r.get("id") == rule_id:
            return dict(r.get("injects_defines", {}))
    return {}


# a module name only names the build directory: what is compiled is its sources and flags
NON_BLOCKING = ("include-path", "flags-define-value", "flags-arch", "name")


# code after a refusal that also runs on paths that never decided the gate (callgraph.behind)
PARTLY = "after-exit-partly"
PARTLY_REASON = ("what was reached lies after the refusal on a path that also runs without deciding the gate "
                 "(past an enclosing branch, or after `if other and not gate: raise`); it is not shown to be "
                 "what the gate enables")


def behind_from_callgraph(analysis) -> BehindFn:
    """Adapt the call graph's answer (archaudit.callgraph) to what the judge needs."""

    def behind(gate: Gate) -> Behind:
        if gate.kind == CPP_RUNTIME_CHECK:
            return _behind_runtime_check(analysis, gate)
        skipped = getattr(analysis.graph, "skipped_callers", {})
        analysis.graph.skip_log = set()
        try:
            mods, calls_out = analysis.behind_gate(gate)
        except RecursionError:
            return Behind([], reason="the call graph search went too deep")
        mods = [bm for bm in mods if _admitted_arm(gate, bm.arm)]
        ext_refs, calls_out = _torch_op_refs(analysis, [x for x in calls_out if _admitted_arm(gate, x.arm)])
        outside = list({x.callee: (x.callee, x.chain) for x in calls_out
                        if holds_gpu_code(x.callee) or x.callee.endswith(LOOKED_UP)}.values())
        dsl_calls = _dsl_calls(analysis, gate, calls_out)
        new_skips = sorted(analysis.graph.skip_log)
        analysis.graph.skip_log = None
        by_value = _selected_value_reason(analysis, gate, mods)
        if mods and all(bm.arm.endswith(PARTLY) for bm in mods):
            return Behind([], reason=_partly_reason(mods), outside=outside, dsl_calls=dsl_calls)
        ambiguous: list[str] = []
        if not mods:
            mods, ambiguous = _through_config_keys(analysis, gate)
        if not mods and not ext_refs and not _binary_sinks_in(analysis, {gate.function}):
            not_searched = {q: skipped[q] for q in new_skips[:3]}
            return _nothing_reached(analysis, gate, ambiguous, not_searched, calls_out, outside, dsl_calls)
        refs = module_refs(analysis, mods)
        refs.update(ext_refs)
        _add_binary_sinks(analysis, gate, mods, refs)
        return Behind(sorted(refs.values(), key=lambda r: r.name), reason=by_value, outside=outside, dsl_calls=dsl_calls)

    behind.work = lambda: analysis.graph.work  # the steps judge_gates charges to each module
    behind.limit = lambda n: setattr(analysis.graph, "limit", n)  # and where it stops a search
    return behind


def _selected_value_reason(analysis, gate: Gate, mods) -> str:
    """Why the modules reached are not shown to be what the gate enables when the gate selects a
    value rather than a path ("" when they are).

    `if C: return "mnnvl"` in a resolver: its callers' branches were followed, but not which
    returned value leads where, so what they reach is not shown to be what C enables (a call the
    value flows into, "caller:value", is reached with the value C selects; one into a function
    that branches on it, "value-dispatch", is not)."""
    by_value = ""
    if mods and all(bm.arm.endswith("value-dispatch") for bm in mods):
        by_value = ("the gate selects a value, and the modules were reached only through functions it is passed "
                    "to that branch on it; which value leads to them is not followed")
    elif gate.region == "branch" and mods and all(bm.arm.startswith("caller:") and bm.arm != "caller:value"
                                                  for bm in mods):
        by_value = ("the gate selects a value its function returns, and the modules were reached only through "
                    "its callers' branches; which returned value leads to them is not followed")
    # `if backend == "cutedsl": if not ok: raise ...; return backend`: the refusal guards one
    # case of what the function returns, while its callers' code was followed for every value
    if (gate.region == "after-early-exit" and mods and gate.path.endswith(".py") and all(
            any(x.how in ("caller-branch", "caller-value", "caller-value-dispatch") for x in bm.chain)
            for bm in mods)):
        outer = next((t for t in _tests_before(analysis, gate) if t[0] in ("then-of", "else-of")), None)
        if outer is not None:
            by_value = (f"the refusal sits inside `if {outer[3]}:` (line {outer[1]}), one case of what its function "
                        f"returns, and the modules were reached only through its callers' branches; which "
                        f"returned value leads to them is not followed")
    return by_value


def _partly_reason(mods) -> str:
    """The reason for modules that all lie after a refusal on a path that also runs without the gate."""
    names = sorted({bm.module.name for bm in mods})
    return f"{PARTLY_REASON}: {', '.join(names[:3])}" + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _nothing_reached(analysis, gate: Gate, ambiguous: list[str], not_searched: dict[str, int], calls_out,
                     outside, dsl_calls) -> Behind:
    """The answer for a gate behind which no JIT module, torch op or prebuilt binary is reached: the
    reasons the search may have missed one (ambiguous config keys; callers not searched: name ->
    modules naming it), and for a Python gate with nothing else open, whether the confinement
    check shows it decides only Python."""
    why = "no JIT module is reached from the region this gate guards"
    if ambiguous:
        why += "; " + "; ".join(ambiguous)
    if not_searched:
        why += ("; callers not searched (name in too many modules): "
                + ", ".join(f"{q} ({n})" for q, n in not_searched.items()))
    if dsl_calls:
        return Behind([], reason=why, outside=outside, dsl_calls=dsl_calls)
    if any(x.arm.endswith(PARTLY) and dsl_rule_for(x.callee) for x in calls_out):
        return Behind([], reason=f"{why}; {PARTLY_REASON} (CuTe DSL calls)", outside=outside)
    if not ambiguous and not not_searched and not outside and gate.path.endswith(".py"):
        conf = _confiner(analysis).check(gate)
        if conf.confined:
            return Behind([], reason=conf.reason, no_gpu_code=True)
        why += f"; not shown free of GPU code: {conf.reason}"
    return Behind([], reason=why, outside=outside)


def _add_binary_sinks(analysis, gate: Gate, mods, refs: dict) -> None:
    """Add to `refs` the prebuilt code loaded on the way (cubins fetched at run time, downloaded
    .so files): looked for in the gate's function, every function on a chain and each module's
    builder."""
    funcs = {gate.function} | {x.text for bm in mods for x in bm.chain if x.kind == "call"}
    funcs |= {bm.module.function for bm in mods}
    for sink in _binary_sinks_in(analysis, funcs):
        key = f"binary:{sink.path}:{sink.line}"
        refs.setdefault(key, ModuleRef(sink.artifact or sink.loader, [], [Link(
            "binary", sink.path, sink.line, f"{sink.loader}: {sink.artifact or '?'}", sink.how)],
            binary={"sink": sink}))


# a test that may choose by GPU: a DSL call under one is not taken as made on every GPU
_ARCH_WORDS = re.compile(r"arch|sm_?\d|\bsm\d|capab|major|minor|hopper|blackwell|tcgen|wgmma|umma|famil|version|"
                         r"device|\bcc\b|compute_", re.I)


def _dsl_calls(analysis, gate: Gate, calls_out) -> list[tuple[DslCallRule, str, list[Link]]]:
    """The CuTe DSL calls (rules/cute_dsl.toml) among the calls outside the scan that the guarded
    path makes (callgraph ExternalCalls), kept only where the path is the one the gate admits --
    not reached through a caller's branch on a value the gate selects, which may be either way
    round (the same rule as for JIT modules) -- and no call on the way to it sits under a test
    (other than the gate) that may depend on the GPU (an `if` on an architecture name in a kernel
    that serves several)."""
    out = []
    outer = None
    for x in calls_out:
        rule = dsl_rule_for(x.callee)
        if rule is None:
            continue
        name, chain = x.callee, x.chain
        if x.arm.endswith(("value-dispatch", PARTLY)):
            continue
        if gate.region == "branch" and x.arm.startswith("caller:") and x.arm != "caller:value":
            continue
        if gate.region == "after-early-exit" and any(
                ln.how in ("caller-branch", "caller-value", "caller-value-dispatch") for ln in chain):
            if outer is None:
                outer = any(t[0] in ("then-of", "else-of") for t in _tests_before(analysis, gate))
            if outer:
                continue
        if all(not any(_ARCH_WORDS.search(t[3]) for t in _tests_at(analysis, ln.path, ln.line)
                       if (ln.path, t[1]) != (gate.path, gate.line))
               for ln in chain[1:] if ln.kind == "call"):
            out.append((rule, name, chain))
    return out


def _tests_at(analysis, path: str, line: int) -> list:
    """The tests that decide whether the statement at path:line runs (Behind.tests_before)."""
    site = analysis.site_at(path, line)
    if site is None:
        return [("unknown", line, 1, "arch")]  # a place that cannot be read is taken as conditional
    try:
        return analysis.behind.tests_before(site)
    except RecursionError:
        return [("unknown", line, 1, "arch")]


def module_refs(analysis, mods) -> dict[str, ModuleRef]:
    """ModuleRefs for the JIT modules found behind a gate, one per module (and per flags binding)."""
    refs: dict[str, ModuleRef] = {}
    for bm in mods:
        jm = bm.module
        # flags passed down as a parameter: bound to the arguments of the call on this chain
        # (the call of its builder function on the chain: a `call` link into it, or the
        # `jit-module` link when the chain ends at a call whose return value is the spec)
        via = next(((x.path, x.line) for x in bm.chain if (x.kind == "call" and x.text == jm.function) or (
            x.kind == "jit-module" and (x.path, x.line) != (jm.path, jm.line))), None)
        if via is not None:
            jm = analysis.jit.flags_via(jm, *via) or jm
        builder = _builder_call_in_region(analysis, bm) if jm is bm.module else None
        if builder is not None:
            via = builder
            jm = analysis.jit.flags_via(jm, *via) or jm
        sources, host, unresolved, notes = [], [], [], []
        texts = {s.path: s.content for s in jm.sources if s.status == "generated" and s.path and s.content is not None}
        for s in jm.sources:
            if s.status == "resolved" and s.path:
                (sources if s.path.endswith(DEVICE_SUFFIXES) else host).append(s.path)
            elif s.status == "generated" and s.path:
                # a template rendered at build time: compiled as the file it is written to, read
                # from the template (cuda/template_view.py); text built in Python: read as written
                if s.suffix in DEVICE_SUFFIXES:
                    sources.append(s.path)
                elif s.suffix in (".cpp", ".cc", ".cxx", ".c"):
                    host.append(s.path)
                else:
                    unresolved.append(f"source {s.text} is rendered from {s.path} at build time into a file whose "
                                      f"kind is not known")
            elif s.status == "generated":
                unresolved.append(f"source {s.text} is generated at build time"
                                  + (f" from {', '.join(s.templates)}" if s.templates else "")
                                  + (f": {s.reason}" if s.reason else ""))
            else:
                unresolved.append(f"source {s.text}: {s.status}" + (f" ({s.reason})" if s.reason else ""))
        for k, r in jm.unresolved:
            # an include path outside the scan or a define with a run-time value (kept defined,
            # value unknown to the preprocessor) does not stop the judgement; a flag list that
            # is not constant may hide a -D that changes the active code: it does
            (notes if k in NON_BLOCKING else unresolved).append(f"{k}: {r}")
        flags_gate = next(((fs.path, fs.line) for fs in jm.flags if fs.kind == "arch-list"), None)
        key = jm.key if via is None or jm is bm.module else f"{jm.key}@{via[0]}:{via[1]}"
        ref = refs.get(key)
        entry = frozenset(bm.entry_points) if bm.entry_points is not None else None
        if ref is None:
            refs[key] = ModuleRef(jm.name, sorted(dict.fromkeys(sources)), list(bm.chain), entry,
                                  sorted(dict.fromkeys(unresolved)), include_roots=list(jm.include_paths),
                                  defines={**_injected_defines(jm.rule), **dict(jm.defines)},
                                  flags_gate=flags_gate,
                                  host_sources=sorted(dict.fromkeys(host)),
                                  hard_flags=list(jm.hard_coded_archs) if jm.hard_coded_archs else None,
                                  notes=sorted(dict.fromkeys(notes)),
                                  sink=(jm.path, jm.line, int(jm.key.rsplit(":", 1)[1]), jm.function),
                                  platform_needs=need_finder(analysis).needs_of(bm.module),
                                  include_aliases=list(jm.include_aliases), texts=texts,
                                  source_options=list(jm.source_options))
        elif ref.entry_points is not None:
            # reached along several paths: the union of what they call, unknown beats known
            ref.entry_points = None if entry is None else ref.entry_points | entry
    return refs


def _builder_call_in_region(analysis, bm: BehindModule) -> tuple[str, int] | None:
    """For a chain that reaches the module through what the region's function returns (a
    `caller-value` link right after the region: `return gen_x(..., extra_cuda_cflags=flags)`
    built by a caller): the one call of the module's builder function in the region's
    function, which made the returned spec and binds its flags; None when there is not exactly
    one."""
    if len(bm.chain) < 2 or bm.chain[0].kind != "region" or bm.chain[1].how != "caller-value":
        return None
    first = bm.chain[0]
    site = analysis.site_at(first.path, first.line)
    if site is None or not site.function:
        return None
    calls = {(c.path, c.line) for c in analysis.graph.expand(site.function) if c.callee == bm.module.function}
    return calls.pop() if len(calls) == 1 else None


def _behind_runtime_check(analysis, gate: Gate) -> Behind:
    """A host-side check in a .cu file guards the code its JIT module compiles with that file:
    the module(s) whose resolved sources include it. Without one, the file's own translation unit
    is judged, and only if it defines kernels (a binding that launches kernels compiled from other
    sources cannot be judged alone)."""
    first = Link("region", gate.path, gate.line, gate.expr, "runtime-check")
    if not gate.path.endswith(".cu"):
        units = _includers_of(analysis, gate.path)
        mods = []
        try:
            for u in units:
                for m in analysis.behind.modules_compiling(u, first):
                    m.chain.insert(1, Link("include", u, 1, gate.path, "includes"))
                    mods.append(m)
        except RecursionError:
            mods = []
        if not mods:
            return Behind([], reason="a runtime check in a header: no translation unit that includes it "
                          + (f"({', '.join(units[:3])}) " if units else "in its directory ")
                          + "is compiled by a JIT module found in the scan")
        refs = sorted(module_refs(analysis, mods).values(), key=lambda r: r.name)
        for r in refs:
            r.guarded_function = gate.function
        return Behind(refs)
    try:
        mods = analysis.behind.modules_compiling(gate.path, first)
    except RecursionError:
        mods = []
    refs = sorted(module_refs(analysis, mods).values(), key=lambda r: r.name) if mods else [
        ModuleRef(gate.path.rsplit("/", 1)[-1], [gate.path], own_unit_only=True)]
    for r in refs:
        r.guarded_function = gate.function
    return Behind(refs)


HEADER_LEVELS = 3  # headers between a header's runtime check and the .cu files compiling it


def _includers_of(analysis, header: str) -> list[str]:
    """The .cu files under the header's directory that include it, directly or through other
    headers there (HEADER_LEVELS deep), found by the #include lines naming its file name."""
    scope = header.rsplit("/", 1)[0] + "/"
    files = [f for f in analysis.source.files() if f.startswith(scope) and f.endswith((".cu", ".cuh", ".h", ".hpp", ".inl"))]
    names, seen, units = {header.rsplit("/", 1)[-1]}, {header}, []
    for _ in range(HEADER_LEVELS):
        pattern = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*[<"](?:[^">]*/)?(' + b"|".join(
            re.escape(n.encode()) for n in sorted(names)) + rb')[">]', re.M)
        found = []
        for f in files:
            if f in seen:
                continue
            data = analysis.source.read(f)
            if data and pattern.search(data):
                seen.add(f)
                found.append(f)
        units += [f for f in found if f.endswith(".cu")]
        names = {f.rsplit("/", 1)[-1] for f in found if not f.endswith(".cu")}
        if not names:
            break
    return sorted(units)


def tests_before_from_callgraph(analysis) -> TestsBefore:
    return lambda g: _tests_before(analysis, g)


def _tests_before(analysis, g: Gate) -> list:
    try:
        return analysis.behind.tests_before(GateSite(g.path, g.line, g.col, g.function, g.kind, g.expr))
    except RecursionError:
        return []


def _admitted_arm(gate: Gate, arm: str) -> bool:
    """Whether code in this arm of the gate's test is the behaviour the gate admits: the `then`
    branch of a plain test, the code after `if not ok: raise/return`, never an `else` (that is what
    the excluded GPUs get). Through callers of a predicate, a truthy result is taken as admitting."""
    if arm.endswith("else"):
        return False
    if arm == "then" and gate.region == "after-early-exit":
        return False
    # `if C: ... return value`: what follows runs when C is false, i.e. on the GPUs C excludes
    if arm in ("after-exit", PARTLY) and gate.region == "branch":
        return False
    return True


def _extension_index(analysis):
    """The scan's prebuilt extensions (binary/torchops.py), read on first use."""
    idx = analysis.__dict__.get("_extensions")
    if idx is None:
        # lazy: a cache hit imports no analysis
        from ..binary.torchops import ExtensionIndex

        idx = analysis.__dict__["_extensions"] = ExtensionIndex(analysis.source)
    return idx


def _torch_op_refs(analysis, calls_out) -> tuple[dict[str, ModuleRef], list]:
    """`torch.ops.<ns>.<op>` calls on the guarded path whose namespace a shared object of the scan
    registers: a ModuleRef each, judged through that binary; an op its build does not define is
    no code of this build and is dropped. The other calls are returned as they were."""
    # lazy: a cache hit imports no analysis
    from ..binary.torchops import torch_op

    refs: dict[str, ModuleRef] = {}
    rest = []
    for x in calls_out:
        op = torch_op(x.callee)
        if op is None or not _extension_index(analysis).registers(op[0]):
            rest.append(x)
            continue
        idx = _extension_index(analysis)
        if not idx.defines(*op):
            continue
        name = f"torch.ops.{op[0]}.{op[1]}"
        paths = idx.paths(op[0])
        refs.setdefault(f"torch-op:{name}", ModuleRef(name, list(paths), list(x.chain) + [
            Link("binary", paths[0], 1, name, "torch-op-namespace")], binary={"op": op, "index": idx}))
    return refs, rest


def _binary_sinks_in(analysis, functions: set[str]) -> list:
    # lazy: a cache hit imports no analysis
    from ..binary.sinks import sink_finder, sinks_in_function

    cache = analysis.__dict__.setdefault("_binary_sinks", {})
    out = []
    for fn in sorted(f for f in functions if f):
        if fn not in cache:
            finder = analysis.__dict__.get("_sink_finder")
            if finder is None:
                finder = analysis.__dict__["_sink_finder"] = sink_finder(analysis.index, analysis.source)
            try:
                cache[fn] = sinks_in_function(analysis.index, fn, analysis.source, finder)
            except RecursionError:
                cache[fn] = []
                analysis.__dict__["_sink_finder"] = None  # it may keep a module's partial answer
        out += cache[fn]
    return out


# `{"flashinfer_allreduce_fusion_backend": "auto"}` or `args.enable_fused_moe = True`: a setting
# the guarded code turns on. Long names only: short keys ("dtype", "device") are everywhere.
_CONFIG_KEY = re.compile(rb"""["'](\w{16,})["']\s*:|\.(\w{16,})\s*=(?!=)""")
MAX_CONFIG_READERS = 12


def _through_config_keys(analysis, gate: Gate):
    """When the guarded code only sets a configuration value, follow the tests that read it.
    Each hop is a `config-key` link: a heuristic by name, marked as such."""
    site = GateSite(gate.path, gate.line, gate.col, gate.function, gate.kind, gate.expr)
    ctx = analysis.behind.locate(site)
    if ctx is None:
        return [], []
    keys: dict[str, tuple[int, bool]] = {}
    for r in analysis.behind.regions(site, ctx):
        if not _admitted_arm(gate, r.arm):
            continue
        src = r.ctx.mod.parsed.src
        for a, b in r.spans:
            for m in _CONFIG_KEY.finditer(src, a, b):
                keys.setdefault((m.group(1) or m.group(2)).decode(),
                                (src.count(b"\n", 0, m.start()) + 1, m.group(2) is not None))
    found, ambiguous = [], []
    for key, (line, attribute) in sorted(keys.items()):
        reader = re.compile(rb"(?:\.|[\"'])" + re.escape(key.encode()) + rb"\b(?![\"']\s*:)(?!\s*=[^=])")
        sites, self_reads = [], []
        for modname in analysis.graph.modules_naming(key):
            path = analysis.index.path_of[modname]
            data = analysis.index.source_bytes(modname)
            for m in reader.finditer(data):
                ln = data.count(b"\n", 0, m.start()) + 1
                if (path, ln) != (gate.path, gate.line):
                    sites.append((path, ln))
                    if data[max(0, m.start() - 4):m.start()] == b"self":
                        self_reads.append((path, ln))
            if len(sites) > MAX_CONFIG_READERS:
                break  # too many readers to follow: the key is skipped below, whatever the rest hold
        if len(sites) > MAX_CONFIG_READERS:
            continue
        resolved = [(p, ln, analysis.site_at(p, ln)) for p, ln in sites]
        classes = _unrelated_classes(analysis, [rs for p, ln, rs in resolved if (p, ln) in self_reads])
        if attribute and len(classes) > 1:
            # `obj.key = True` with `self.key` read in unrelated classes: which class's instance
            # the guarded code sets is not known, and each reader may lead somewhere else
            ambiguous.append(f"setting `{key}` (line {line}) is read as `self.{key}` in {len(classes)} unrelated "
                             f"classes ({', '.join(classes[:3])}); which one the guarded code sets is not followed")
            continue
        for path, ln, rs in resolved:
            if rs is None:
                continue
            try:
                got = analysis.modules_behind(rs)
            except RecursionError:
                continue
            hop = [Link("region", gate.path, gate.line, gate.expr, "sets a setting"),
                   Link("config", gate.path, line, f"{key} read at {path}:{ln}", "config-key")]
            for bm in got:
                bm.chain = hop + list(bm.chain)
            found += got
    return found, ambiguous


def _unrelated_classes(analysis, sites) -> list[str]:
    """The classes holding these method-level sites, one per family (a class and its scanned
    bases or subclasses count once)."""
    r = analysis.behind.r
    classes = []
    for rs in sites:
        owner = (rs.function or "").rsplit(".", 1)[0] if rs is not None else ""
        c = r.ctx(owner) if owner else None
        if c is not None and c.kind == "class" and owner not in classes:
            classes.append(owner)
    out: list[str] = []
    for cls in classes:
        if not any(cls in r.mro(o) or o in r.mro(cls) for o in out):
            out.append(cls)
    return out
