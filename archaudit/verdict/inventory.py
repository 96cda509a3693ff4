"""The JIT-module inventory: every module the scanned packages can build, the GPUs its build flags
admit, and for each target a verdict.

A module's build flags are themselves a gate: `get_nvcc_flags_list(supported_major_versions=[9,
10])` (already a Python gate, found by the gate scan) or hard-coded `-gencode` flags (a literal, a
module constant, an arch-keyed table) that give no code for the GPUs they leave out. The second
kind is reported here as a `build-flags` gate at the generator's `def`, judged like any gate: the
module's sources are compiled (statically) for the target's JIT compile target, and the verdict
says whether adding the target's `-gencode` would give working kernels.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..callgraph.behind import BehindModule
from ..callgraph.jit import ARCH_UNKNOWN, JitModule, build_admits
from ..model import (BUILD_FLAGS, HARDWARE_BOUND, NVCC_FLAGS, PARTIAL, SOFTWARE_ONLY, UNRESOLVED, Diagnostic, Finding, Gate, Link,
                     internal_error)
from ..targets import CompileTarget, Gpu, Registry
from .judge import Behind, ModuleRef, TuCache, classify, module_refs, patch_plan

ADMITTED = "admitted"
# a sink whose sources or flags come from parameters is judged once per chain of calls binding them
# (or value of a Literal parameter), at most MAX_VARIANTS per generator and MAX_SINK_RECORDS per
# sink in all (flashinfer's FlashKDA: 17 wrappers x 3 targets over one generic generator), and this
# many callers up
MAX_VARIANTS = 64
MAX_SINK_RECORDS = 256
MAX_BINDING_DEPTH = 3


@dataclass
class ModuleRecord:
    """One JIT module (or one variant of a generator whose flags an argument decides)."""

    name: str
    generator: tuple[str, int, str]  # path, line of its def, qualified name
    sink: tuple[str, int]  # the gen_jit_spec/JitSpec/load call
    sources: list[str]
    build_admits: frozenset | None  # None: the flags could not be evaluated
    build_gates: list[tuple[str, int, str]]  # (path, line, kind) of what fixes the architectures
    how: str  # "arch-list" | "hard-coded" | "default" | "unknown"
    hard_archs: tuple[str, ...] = ()  # the code targets of hard-coded flags
    # what a compile of its sources needs besides the files (archaudit verify): the include
    # directories (scan-relative), the -D defines and the other constant nvcc flags
    include_paths: list[str] = field(default_factory=list)
    defines: dict[str, str] = field(default_factory=dict)
    cuda_flags: list[str] = field(default_factory=list)
    verdicts: dict[str, dict] = field(default_factory=dict)
    # the build compiles one of these lists of its sources, chosen by its arguments (JitModule)
    source_lists: list[tuple[str, ...]] = field(default_factory=list)

    def to_json(self, reg: Registry) -> dict:
        return {
            "name": self.name,
            "generator": {"path": self.generator[0], "line": self.generator[1], "function": self.generator[2]},
            "sink": {"path": self.sink[0], "line": self.sink[1]},
            "sources": list(self.sources),
            "build_admits": reg.sort_names(self.build_admits) if self.build_admits is not None else None,
            "build_gates": [{"path": p, "line": ln, "kind": k} for p, ln, k in self.build_gates],
            "include_paths": list(self.include_paths),
            "defines": dict(self.defines),
            "cuda_flags": list(self.cuda_flags),
            "verdicts": self.verdicts,
        }


def _open(jm: JitModule) -> bool:
    """Whether a module's sources or architecture flags still depend on a parameter of the function
    holding it (a module name or a -D value that does is no reason to look further)."""
    why = [r for k, r in jm.unresolved if k.startswith("sources") or k in ARCH_UNKNOWN]
    why += [f.reason for f in jm.flag_items if f.kind == "unknown" and not f.text.startswith("-D")]
    return any("parameter" in r for r in why)


class Inventory:
    """Every JIT module of a scan, its variants, and (per target) its verdict."""

    def __init__(self, analysis, reg: Registry, tus: TuCache):
        self.analysis = analysis
        self.reg = reg
        self.tus = tus
        self.records: list[ModuleRecord] = []
        self.refs: list[ModuleRef] = []  # parallel to records
        self.problems: list[Diagnostic] = []
        self._seen: set = set()

    def collect(self, progress=None) -> None:
        jit = self.analysis.jit
        for jm in jit.find_all_sinks(self.analysis.graph, progress):
            try:
                for variant, gen in self._variants(jm):
                    self._add(variant, gen)
            except Exception as e:  # noqa: BLE001 - one module's failure is its diagnostic
                self.problems.append(internal_error(jm.path, "JIT module inventory", e, jm.line))

    def _variants(self, jm: JitModule) -> list[tuple[JitModule, str]]:
        """(module, generator) pairs: the module itself when its sources and flags are known in its
        own function; otherwise the module bound at each call of that function, and so on up the
        callers (MAX_BINDING_DEPTH levels) while they stay open. Sources picked by a `Literal[...]`
        parameter are followed to the callers that narrow them (pass a constant); the function
        stays a generator when a caller passes its own parameter on, with one module per value
        of its Literal parameters. The generator is the function where the binding stopped."""
        jit, graph = self.analysis.jit, self.analysis.graph
        done: list[tuple[JitModule, str]] = []
        frontier: list[tuple[list, str, JitModule]] = [([], jm.function, jm)]
        for _ in range(MAX_BINDING_DEPTH):
            nxt = []
            for calls, fn, mod in frontier:
                # sources picked by a `Literal[...]` parameter: a caller that passes a constant
                # (`gen_x_module(target)` calling `gen_module("x", target)`) generates fewer of them
                chosen = mod.source_choices > 1 and bool(jit.literal_params(graph.r.ctx(fn)))
                narrowed = []
                keep = True
                if _open(mod) or chosen:
                    keep = False
                    for c in graph.callers(fn)[:MAX_VARIANTS]:
                        bound = jit.module_via(jm.key, calls + [(c.path, c.line)])
                        if bound is None:
                            continue
                        if _open(mod) or bound.source_choices < mod.source_choices:
                            narrowed.append((calls + [(c.path, c.line)], c.caller, bound))
                        else:
                            keep = True  # a caller passing its own parameter on: `fn` stays a generator
                if keep or not narrowed:
                    split = jit.literal_variants(jm.key, fn, calls, MAX_VARIANTS)
                    done.extend((v, fn) for v in split or [mod])
                nxt.extend(narrowed)
            frontier = nxt
            if not frontier or len(done) + len(frontier) > MAX_SINK_RECORDS:
                break
        done += [(mod, fn) for _calls, fn, mod in frontier]
        return done or [(jm, jm.function)]

    def _add(self, jm: JitModule, generator: str) -> None:
        [ref] = module_refs(self.analysis, [BehindModule(jm, "inventory", [], None)]).values()
        admits, how, gates = build_admits(jm, self.reg)
        gctx = self.analysis.graph.r.ctx(generator)
        node = gctx.node if gctx is not None else None
        gen = (gctx.mod.path, node.line, generator) if node is not None else (jm.path, jm.line, generator)
        sources = sorted({s.path or s.text for s in jm.sources})
        known_flags = [f.text for f in jm.flag_items if f.kind == "flag"]
        rec = ModuleRecord(jm.name, gen, (jm.path, jm.line), sources, admits, gates, how,
                           tuple(jm.hard_coded_archs or ()), list(ref.include_roots), dict(ref.defines), known_flags,
                           source_lists=list(ref.source_options))
        # two call chains that bind the same variant (a generator called from several places)
        key = (rec.name, rec.generator, rec.sink, tuple(rec.sources), rec.hard_archs, tuple(sorted(rec.defines.items())),
               tuple(rec.cuda_flags))
        if key in self._seen:
            return
        self._seen.add(key)
        self.records.append(rec)
        self.refs.append(ref)

    def tu_requests(self, ct_of: dict[str, CompileTarget]) -> dict:
        """The TU analyses judging every record for the targets its build excludes (for prefetch)."""
        wanted: dict = {}
        for rec, ref in zip(self.records, self.refs):
            for gpu_name, ct in ct_of.items():
                if rec.build_admits is not None and gpu_name not in rec.build_admits:
                    wanted.update(self.tus.missing([ref], ct))
        return wanted

    def judge(self, pairs: list[tuple[Gpu, CompileTarget]]) -> None:
        """Each record's verdict for each target (once: the patch plans ask for them before the
        pipeline's own call)."""
        for rec, ref in zip(self.records, self.refs):
            for gpu, ct in pairs:
                if gpu.name not in rec.verdicts:
                    rec.verdicts[gpu.name] = self._verdict(rec, ref, gpu, ct)

    def protected_sinks(self, pairs: list[tuple[Gpu, CompileTarget]],
                        target: str) -> dict[tuple[str, int], list[tuple[str, str]]]:
        self.judge(pairs)
        return protected_sinks(self.records, target)

    def _verdict(self, rec: ModuleRecord, ref: ModuleRef, gpu: Gpu, ct: CompileTarget) -> dict:
        out = {"verdict": UNRESOLVED, "compile_target": ct.name, "reason": "", "evidence": []}
        if rec.build_admits is None:
            out["reason"] = "the nvcc flags that choose its architectures could not be evaluated"
            return out
        if gpu.name in rec.build_admits:
            out["verdict"] = ADMITTED
            out["reason"] = f"its build flags ({rec.how}) give code for {gpu.name}"
            return out
        try:
            f = classify(self._gate(rec), gpu, ct, Behind([ref]), self.tus)
        except Exception as e:  # noqa: BLE001
            self.problems.append(internal_error(rec.sink[0], "JIT module verdict", e, rec.sink[1]))
            out["reason"] = f"archaudit's verdict failed on this module ({type(e).__name__})"
            return out
        out.update(verdict=f.verdict, reason=f"its build flags ({rec.how}) give no code for {gpu.name}; "
                                             f"built for {ct.name}: {f.reason}",
                   evidence=[e.to_json() for e in f.evidence])
        return out

    def _gate(self, rec: ModuleRecord) -> Gate:
        path, line, function = rec.generator
        return Gate(path, line, 1, function, BUILD_FLAGS, _flags_text(rec), rec.build_admits or frozenset(),
                    "hard-coded nvcc flags", region="build")

    def build_flag_findings(self, pairs: list[tuple[Gpu, CompileTarget]], gates: list[Gate],
                            package_of, patcher=None) -> tuple[list[Gate], list[Finding]]:
        """A `build-flags` gate per generator whose hard-coded flags exclude a target, judged over
        the modules it builds; not where the gate scan already found the flags as an `nvcc-flags`
        gate in that function. With a patcher, a software-only or partial one gets the patch plan
        that adds the target's -gencode at each build call (judge.patch_plan)."""
        found = {g.function for g in gates if g.kind == NVCC_FLAGS}
        by_gen: dict[tuple[str, int, str], list[tuple[ModuleRecord, ModuleRef]]] = {}
        for rec, ref in zip(self.records, self.refs):
            if rec.how == "hard-coded" and rec.build_admits is not None and rec.generator[2] not in found:
                by_gen.setdefault(rec.generator, []).append((rec, ref))
        gates: list[Gate] = []
        findings: list[Finding] = []
        for gen, items in sorted(by_gen.items()):
            # the variants are alternatives (an argument picks one): a GPU one of them builds for is admitted
            admits = frozenset.union(*(r.build_admits for r, _ in items))
            flags = sorted({f for r, _ in items for f in _flag_list(r)})
            g = Gate(gen[0], gen[1], 1, gen[2], BUILD_FLAGS, " ".join(flags), admits,
                     "hard-coded nvcc flags", package=package_of(gen[0]), region="build")
            gates.append(g)
            link = Link("flags", items[0][0].build_gates[0][0] if items[0][0].build_gates else gen[0],
                        items[0][0].build_gates[0][1] if items[0][0].build_gates else gen[1],
                        " ".join(flags), "hard-coded")
            for gpu, ct in pairs:
                if gpu.name in admits:
                    continue
                behind = Behind([ref for _, ref in items], chain=[link])
                try:
                    f = classify(g, gpu, ct, behind, self.tus)
                    if len(items) > 1:
                        f = self._alternatives(f, g, gpu, ct, items, link)
                except Exception as e:  # noqa: BLE001
                    self.problems.append(internal_error(gen[0], "build-flags verdict", e, gen[1]))
                    f = Finding(g, gpu.name, UNRESOLVED, reason=f"archaudit's verdict failed ({type(e).__name__})")
                f.reason = (f"built only with hard-coded nvcc flags ({' '.join(flags)}), which give no code for "
                            f"{gpu.name}; compiled for {ct.name} instead: {f.reason}")
                if patcher is not None and f.verdict in (SOFTWARE_ONLY, PARTIAL):
                    patcher.protected_sinks = protected_sinks(self.records, gpu.name)
                    patcher.own_modules = {rec.name for rec, _ref in items}
                    try:
                        patch_plan(f, g, gpu, behind, {}, patcher)
                    except Exception as e:  # noqa: BLE001 - the verdict stands; the patch is what is missing
                        self.problems.append(internal_error(gen[0], "patch planning", e, gen[1]))
                    finally:
                        patcher.protected_sinks, patcher.own_modules = {}, set()
                findings.append(f)
        return gates, findings


    def _alternatives(self, f: Finding, g: Gate, gpu: Gpu, ct: CompileTarget,
                      items: list[tuple[ModuleRecord, ModuleRef]], link: Link) -> Finding:
        """A generator that builds one of several modules, picked by its arguments: judged over all of
        them, a hardware-bound one would speak for every variant. When some variants give real
        kernels for the target and others cannot, the gate is partial: a patch enables those
        variants only, and the reason names which are which."""
        each = [(rec, classify(g, gpu, ct, Behind([ref], chain=[link]), self.tus)) for rec, ref in items]
        works = [(rec, v) for rec, v in each if v.verdict in (SOFTWARE_ONLY, PARTIAL)]
        bound = [(rec, v) for rec, v in each if v.verdict == HARDWARE_BOUND]
        if not works or not bound or len(works) + len(bound) < len(each):
            return f
        out = Finding(g, gpu.name, PARTIAL, chain=list(f.chain), feature=f.feature)
        out.modules = f.modules
        out.evidence = [e for _rec, v in bound for e in v.evidence]
        out.reason = (f"the generator builds one of {len(each)} modules, chosen by its arguments; real kernels for "
                      f"{ct.name} from {', '.join(sorted(rec.name for rec, _v in works))}; not from the others: "
                      + "; ".join(v.reason for _rec, v in bound))
        return out


# a module with one of these verdicts for a target may build for it as it is, or must not be given
# the target's -gencode
_MAY_SHARE_FLAGS = (SOFTWARE_ONLY, PARTIAL, ADMITTED)


def protected_sinks(records: list[ModuleRecord], target: str) -> dict[tuple[str, int], list[tuple[str, str]]]:
    """Build calls (path, line) that also build a module the target may not be given (hardware-bound,
    binary-only or unresolved for it): a patch adding the target's -gencode there (a shared helper
    such as flashinfer's gen_kda_jit_spec, called by every KDA generator) would enable that module
    as well. Each maps to those modules, (name, what it is), the hardest verdict first."""
    rank = {HARDWARE_BOUND: 0, UNRESOLVED: 2}
    found: dict[tuple[str, int], list[tuple[tuple, str, str]]] = {}
    for rec in records:
        v = rec.verdicts.get(target, {}).get("verdict")
        if v is None or v in _MAY_SHARE_FLAGS:
            continue
        what = f"the module {rec.name} (generator {rec.generator[2]}), {v} for {target}"
        found.setdefault(rec.sink, []).append(((rank.get(v, 1), rec.name), rec.name, what))
    return {sink: [(name, what) for _k, name, what in sorted(items)] for sink, items in found.items()}


def _flag_list(rec: ModuleRecord) -> list[str]:
    """The -gencode flags of a hard-coded build."""
    return [f"-gencode=arch=compute_{c.split('_', 1)[1]},code={c}" for c in rec.hard_archs]


def _flags_text(rec: ModuleRecord) -> str:
    return " ".join(_flag_list(rec)) or rec.how
