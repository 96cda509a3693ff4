"""JIT modules: what a sink call (gen_jit_spec, a JitSpec subclass, cpp_extension.load, ...) builds.

For each sink site: the module name, the nvcc flags' architecture source (the
`get_nvcc_flags_list(supported_major_versions=...)` call or hard-coded -gencode flags feeding it),
and the source files, resolved to files in the scan by constant evaluation. Whatever cannot be
resolved is listed with a reason. A source the generator writes at build time is traced to what
it is written from (generated.py): a file copied there is that file ("resolved"), a rendered
template is the template ("generated", read through the CUDA side's rendered view).
"""
from __future__ import annotations

import hashlib
import itertools
import math
import posixpath
import re
from dataclasses import dataclass, field

from ..cuda.preproc import UNKNOWN_VALUE
from ..parsing.python_ir import N, iter_stmts
from ..python.index import function_at_line
from ..targets import Registry, admits_of_nvcc_flags
from .consteval import RAISES, Alt, ConstEval, PathV, Unknown, flatten_values
from .generated import Generated, text_keys
from .flags import Flag, FlagEval, bind_args, defines_of, hard_coded_archs, is_arch_flag, unknown_defines
from .resolve import Ctx, Resolver, SinkSite, walk_exprs
from .rules import ArgSpec

_ARCH_FLAG = re.compile(r"-gencode|arch=|compute_\d|sm_\d|^-arch|--gpu-architecture|-code=")


@dataclass(frozen=True)
class SourceFile:
    text: str  # the path as evaluated (or the pattern with {holes})
    status: str  # "resolved" | "missing" | "generated" | "inline" | "outside" | "unresolved" ("alternative": see JitModule)
    path: str | None = None  # root-relative file in the scan (resolved/missing; generated: the template, if known)
    reason: str = ""
    templates: tuple[str, ...] = ()  # for generated sources: the templates it is (or may be) rendered from
    suffix: str = ""  # for generated sources: of the file written (".cu"), from its path or the generator's code
    # for a source whose text the generator builds in Python: that text, read at `path`, a name
    # that is no file of the scan (written_text_path)
    content: str | None = None

    def to_json(self) -> dict:
        d = {"text": self.text, "status": self.status, "path": self.path}
        if self.reason:
            d["reason"] = self.reason
        if self.templates:
            d["templates"] = list(self.templates)
        if self.suffix:
            d["suffix"] = self.suffix
        return d


@dataclass(frozen=True)
class FlagSource:
    kind: str  # "arch-list" | "hard-coded" | "default" | "no-arch" | "unresolved"
    path: str
    line: int
    text: str
    majors: tuple = ()  # for arch-list: supported_major_versions
    how: str = ""

    def to_json(self) -> dict:
        return {"kind": self.kind, "path": self.path, "line": self.line, "text": self.text,
                "majors": list(self.majors), "how": self.how}


@dataclass
class JitModule:
    key: str  # the sink call site "path:line:col"
    name: str  # the module name, or a pattern with {holes} when not constant
    name_resolved: bool
    rule: str
    kind: str  # "spec" (built later by build_and_load) | "built" (compiled at the call)
    path: str
    line: int
    function: str  # qualified name of the function with the sink call
    sources: list[SourceFile] = field(default_factory=list)
    flags: list[FlagSource] = field(default_factory=list)
    unresolved: list[tuple[str, str]] = field(default_factory=list)  # (kind, reason)
    # candidate paths that do not exist while the same file resolves through another candidate
    # (`_source_dir()` returning an installed or a checkout directory); not counted as sources
    alternatives: list[SourceFile] = field(default_factory=list)
    # the compile flags, evaluated (flags.py): None when the sink takes no nvcc flags
    cuda_cflags: list[str] | None = None  # extra_cuda_cflags as strings; {holes} where not constant
    flag_items: list[Flag] = field(default_factory=list)  # the same with kind, condition and place
    defines: dict[str, str] = field(default_factory=dict)  # -DNAME[=VAL] (conditional ones included)
    include_paths: list[str] = field(default_factory=list)  # extra include dirs, scan-relative
    hard_coded_archs: list[str] | None = None  # -gencode/-arch code targets when not from an arch list
    # how many different source lists the sources argument may be (an Alt of lists: a table entry
    # picked by an argument); 1 when it is one list
    source_choices: int = 1
    # when the sources argument is one of several lists (an Alt of lists): each list's files in the
    # scan, one tuple per list; empty when it is one list or an option holds a file not found
    source_options: list[tuple[str, ...]] = field(default_factory=list)
    # files written beside its generated sources that are included, not compiled (a rendered
    # config.inc): (file name, the file of the scan it is rendered or copied from)
    include_aliases: list[tuple[str, str]] = field(default_factory=list)

    @property
    def conditional_flags(self) -> dict[str, str]:
        """Flag -> the condition under which it is passed (counted as passed: the code *can* be built so)."""
        return {f.text: f.condition for f in self.flag_items if f.condition}

    @property
    def all_sources_resolved(self) -> bool:
        return bool(self.sources) and all(
            s.status in ("resolved", "inline") or (s.status == "generated" and s.path) for s in self.sources) and not any(
            k.startswith("sources") for k, _ in self.unresolved)

    @property
    def node(self) -> str:
        return f"<jit:{self.key}>"

    def to_json(self) -> dict:
        return {"key": self.key, "name": self.name, "name_resolved": self.name_resolved, "rule": self.rule,
                "kind": self.kind, "path": self.path, "line": self.line, "function": self.function,
                "sources": [s.to_json() for s in self.sources], "flags": [f.to_json() for f in self.flags],
                "unresolved": [{"kind": k, "reason": r} for k, r in self.unresolved],
                "alternatives": [a.to_json() for a in self.alternatives],
                "all_sources_resolved": self.all_sources_resolved,
                "cuda_cflags": self.cuda_cflags, "flag_items": [f.to_json() for f in self.flag_items],
                "defines": self.defines, "include_paths": self.include_paths,
                "hard_coded_archs": self.hard_coded_archs}


class JitModel:
    def __init__(self, resolver: Resolver):
        self.r = resolver
        self.ce = ConstEval(resolver)
        self.fe = FlagEval(resolver, self.ce)
        self.gen = Generated(resolver, self.ce, resolver.rules.generate)
        self._mods: dict[str, JitModule] = {}
        self._own: dict[tuple[str, str], dict[str, str]] = {}

    def module(self, key: str) -> JitModule | None:
        if key in self._mods:
            return self._mods[key]
        site = self.r.sinks.get(key)
        if site is None:
            return None
        m = self._analyse(site)
        self._mods[key] = m
        return m

    # ------------------------------------------------------------------ arguments
    @staticmethod
    def _arg(call: N, specs: tuple[ArgSpec, ...]) -> list[N]:
        out = []
        args, kwargs = call.f["args"], dict(call.f["kwargs"])
        for a in specs:
            if a.kw and a.kw in kwargs:
                out.append(kwargs[a.kw])
            elif a.pos is not None and a.varargs:
                out.extend(args[a.pos:])
            elif a.pos is not None and a.pos < len(args):
                out.append(args[a.pos])
        return out

    def module_via(self, key: str, calls: list[tuple[str, int]], outer: dict | None = None) -> JitModule | None:
        """The module of sink `key` with the parameters of its function bound along a chain of
        calls: calls[0] calls the sink's function, calls[1] calls the function holding calls[0],
        and so on. Arguments are evaluated outermost first, each in its caller's bindings (values
        for ConstEval, argument nodes for FlagEval); `outer` binds names of the outermost caller.
        None when a call cannot be found."""
        site = self.r.sinks.get(key)
        if site is None:
            return None
        fctx = site.ctx
        chain = []
        for path, line in calls:
            while fctx is not None and fctx.kind != "function":
                fctx = fctx.parent
            if fctx is None:
                return None
            call, cctx = self._call_at(path, line, fctx.qual.rsplit(".", 1)[-1])
            if call is None or call.f["star"]:
                return None
            chain.append((fctx, call, cctx))
            fctx = cctx
        env: dict = dict(outer or {})
        bound: dict = {}
        callers: list[tuple[Ctx, N, dict]] = []  # each call on the chain, in its caller's bindings
        for fctx, call, cctx in reversed(chain):
            b = bind_args(fctx, call, cctx, self.r, f"called at {cctx.mod.path}:{call.line}")
            bound.update(b)
            outer = env
            callers.append((cctx, call, outer))
            env = {p: self.ce.eval(actx, node, outer if actx is cctx else {}) for (_f, p), (actx, node, _c) in b.items()}
        if not self.reachable_under(site, env):
            return None
        saved = self.fe.bound
        self.fe.bound = {**saved, **bound}
        try:
            return self._analyse(site, env, callers)
        finally:
            self.fe.bound = saved

    def reachable_under(self, site: SinkSite, env: dict) -> bool:
        """False when, with the sink function's parameters bound to `env`, an `if` around the
        sink call is decided against it (`elif backend == "fa3":` for a caller passing "fa2"): that
        caller never builds this module. Tests that are not constant leave the call reachable."""
        fctx = site.ctx
        while fctx is not None and fctx.kind != "function":
            fctx = fctx.parent
        if not env or fctx is None or fctx.node is None:
            return True
        pos = site.call.sb
        body = fctx.node.f["body"]
        while body:
            st = next((x for x in body if x.sb <= pos < x.eb), None)
            if st is None or st.k in ("def", "class"):
                return True
            if st.k == "if" and not (st.f["test"].sb <= pos < st.f["test"].eb):
                in_body = any(x.sb <= pos < x.eb for x in st.f["body"])
                v = self.ce.eval(fctx, st.f["test"], env)
                if type(v) is bool and v is not in_body:
                    return False
                body = st.f["body"] if in_body else st.f["orelse"]
                continue
            body = next((sub for key in ("body", "orelse", "final") for sub in [st.f.get(key)]
                         if isinstance(sub, list) and any(x.sb <= pos < x.eb for x in sub)), None)
            if body is None and st.k == "try":
                body = next((h for h in st.f["handlers"] if any(x.sb <= pos < x.eb for x in h)), None)
        return True

    def _written(self, ctx: Ctx, call: N, env: dict, callers: list) -> dict:
        """Path written before the sink call -> origins: in the sink's function, and in each caller
        on the binding chain before its call (the nearest writer of a path first)."""
        written = dict(self.gen.writes_before(ctx, call, env) or {})
        for cctx, ccall, cenv in reversed(callers):
            for key, origins in (self.gen.writes_before(cctx, ccall, cenv) or {}).items():
                written.setdefault(key, origins)
        return written

    def literal_params(self, ctx: Ctx | None) -> list[tuple[str, list]]:
        """(name, options) of each parameter of a function annotated `Literal[...]` with several options."""
        if ctx is None or ctx.kind != "function":
            return []
        out: list[tuple[str, list]] = []
        for name, bds in self.r.locals_of(ctx).items():
            bd = bds[0] if len(bds) == 1 else None
            if bd is None or bd[0] != "param" or bd[4] or not bd[2]:
                continue
            opts = self.ce.literal_options(ctx.mod.name, bd[2])
            if opts and len(opts) > 1:
                out.append((name, list(opts)))
        return out

    def literal_variants(self, key: str, fn: str, calls: list[tuple[str, int]], limit: int) -> list[JitModule]:
        """The module of sink `key`, bound along `calls` (see module_via) up to function `fn`, once
        per value of the `Literal[...]`-annotated parameters of `fn`, when its sources or flags
        differ by that value (`record = MODULES[ROUTES[f"{target}:{stage}"]]` with `stage:
        Literal[...]`): each variant's name, sources and flags then go together (`_TARGET_DEFINE[target]`: one
        define per variant, never all of them at once). A value whose evaluation fails (a key
        missing from the table) builds nothing and is left out. [] when neither the sources nor
        the flags differ, or there are more than `limit` combinations."""
        options = self.literal_params(self.r.ctx(fn))
        if not options or math.prod(len(opts) for _name, opts in options) > limit:
            return []
        site = self.r.sinks.get(key)
        out: dict[tuple, JitModule] = {}  # (name, files, flags) -> the variant, repeats dropped
        saved = self.ce.fixed
        try:
            for combo in itertools.product(*(opts for _name, opts in options)):
                env = dict(zip((n for n, _o in options), combo))
                self.ce.fixed = {**saved, **{(fn, n): v for n, v in env.items()}}
                v = self.module_via(key, calls, env) if calls else self._analyse(site, env) if site else None
                if v is None or not v.sources or any(k.startswith("sources-") and k[8:] in RAISES
                                                      for k, _r in v.unresolved):
                    continue
                v.source_choices, v.source_options = 1, []
                out.setdefault((v.name, tuple(s.path or s.text for s in v.sources), tuple(v.cuda_cflags or ())), v)
        finally:
            self.ce.fixed = saved
        differ = len({k[1] for k in out}) > 1 or len({k[2] for k in out}) > 1
        return list(out.values()) if differ else []

    def _analyse(self, site: SinkSite, env: dict | None = None, callers: list | None = None) -> JitModule:
        """The module of a sink, its function's parameters bound to `env`; callers: the calls
        that bound them, (caller, call, the caller's bindings), whose writes before the call
        (a source a caller writes and passes down) count as the sink function's own."""
        ctx, call, rule = site.ctx, site.call, site.rule
        env = env or {}
        m = JitModule(key=site.key, name="?", name_resolved=False, rule=rule.id, kind=rule.kind,
                      path=ctx.mod.path, line=call.line, function=ctx.qualname)
        self._module_name(m, ctx, call, rule, env)
        self._module_sources(m, ctx, call, rule, env, callers or [])
        self._split_alternatives(m)
        self._arch_flags(m, ctx, call, rule)
        self._compile_flags(site, rule, m, env)
        return m

    def _module_name(self, m: JitModule, ctx, call, rule, env: dict) -> None:
        """The module's name from the call's name arguments (joined by "_"), or a pattern of it
        and why it is not constant."""
        names = self._arg(call, rule.name)
        if not names:
            m.unresolved.append(("name", "no name argument"))
            return
        vals = [self.ce.eval(ctx, n, env) for n in names]
        if all(isinstance(v, str) for v in vals):
            m.name, m.name_resolved = "_".join(vals), True
            return
        parts = []
        for n, v in zip(names, vals):
            if isinstance(v, str):
                parts.append(v)
            elif isinstance(v, Unknown) and v.pattern:
                parts.append(v.pattern)
            elif isinstance(v, Alt) and all(isinstance(o, str) for o in v.options):
                parts.append("{" + "|".join(sorted(set(v.options))) + "}")
            else:
                parts.append("{" + _text(ctx, n) + "}")
        m.name = "_".join(parts)
        why = next((v for v in vals if isinstance(v, Unknown)), None)
        m.unresolved.append(("name", f"not constant: {why}" if why else "one of several values"))

    def _module_sources(self, m: JitModule, ctx, call, rule, env: dict, callers: list) -> None:
        """The module's source files: inline texts, files found, written before the call or
        rendered from templates; what cannot be resolved is noted in m.unresolved."""
        srcs = self._arg(call, rule.sources)
        inline = self._arg(call, rule.inline_sources)
        for n in inline:
            m.sources.append(SourceFile(_text(ctx, n), "inline", reason="source text passed inline"))
        if not srcs and not inline:
            m.unresolved.append(("sources-none", "no source list in the call (not an nvcc build from files)"))
        templates = written = None
        dest_dirs: set[str] = set()
        for n in srcs:
            v = self.ce.eval(ctx, n, env)
            if isinstance(v, Unknown):
                m.unresolved.append((f"sources-{v.reason}", f"{_text(ctx, n)}: {v}"))
                continue
            m.source_choices = max(m.source_choices, _choices(v))
            if isinstance(v, Alt) and len(srcs) == 1:
                m.source_options = self._source_options(v, rule.source_root)
            for item in flatten_values(v):
                sf = self._source(item, rule.source_root)
                if sf.status in ("unresolved", "missing"):
                    if written is None:
                        written = self._written(ctx, call, env, callers)
                    got = _written_from(sf, item, written)
                    if got:
                        m.sources.extend(got)
                        dest_dirs.update(posixpath.dirname(k) for k in text_keys(item))
                        continue
                if sf.status == "unresolved":
                    if templates is None:
                        templates = self._templates(ctx)
                    if templates:
                        sf = SourceFile(sf.text, "generated", reason=f"rendered at run time ({sf.reason}); no write of "
                                        f"this path found before the build call", templates=templates)
                m.sources.append(sf)
        if dest_dirs:
            m.include_aliases = _generated_includes(written, dest_dirs, {k for sf in m.sources for k in [sf.text]})

    def _source_options(self, v: Alt, root: str) -> list[tuple[str, ...]]:
        """The files of each list an Alt of source lists may be. A candidate path that does not
        exist while the same file is found through another candidate (an installed or a checkout
        directory) is left out; any other file not found in an option gives no options at all."""
        out: dict[tuple[str, ...], None] = {}
        for option in v.options:
            files = [self._source(item, root) for item in flatten_values(option)]
            found = _resolved_names(files)
            if any(sf.status != "resolved" and not _other_candidate(sf, found) for sf in files):
                return []
            out.setdefault(tuple(sorted({sf.path for sf in files if sf.status == "resolved"})), None)
        return list(out) if len(out) > 1 else []

    @staticmethod
    def _split_alternatives(m: JitModule) -> None:
        """Move missing candidates of a file found elsewhere to m.alternatives; note the sources
        left unresolved."""
        # `_source_dir()` returning an installed or a checkout directory: a candidate that does not
        # exist is not a missing source when the same file resolves through another candidate
        found = _resolved_names(m.sources)
        alt = [sf for sf in m.sources if _other_candidate(sf, found)]
        m.alternatives = [SourceFile(sf.text, "alternative", sf.path, "another candidate path for this file exists") for sf in alt]
        m.sources = [sf for sf in m.sources if sf not in alt]
        for sf in m.sources:
            if sf.status in ("unresolved", "missing", "outside") or (sf.status == "generated" and not sf.path):
                m.unresolved.append((f"sources-{sf.status}", f"{sf.text}: {sf.reason}"))

    def _arch_flags(self, m: JitModule, ctx, call, rule) -> None:
        """Where the module's CUDA architecture flags come from (the call's extra CUDA flags)."""
        fl = self._arg(call, rule.cuda_flags)
        if not rule.cuda_flags:
            return
        if not fl:
            m.flags.append(FlagSource("default", ctx.mod.path, call.line, "no extra_cuda_cflags: the JIT's default architectures", how="absent"))
            return
        found: list[FlagSource] = []
        for n in fl:
            self._flags(ctx, n, found, 0, set())
        if not any(f.kind in ("arch-list", "hard-coded", "unresolved") for f in found):
            found.append(FlagSource("no-arch", ctx.mod.path, fl[0].line, _text(ctx, fl[0]), how="no architecture flag found"))
        m.flags.extend(_dedup(found))

    def _own_defines(self, sink_def: str, local: str) -> dict[str, str]:
        """-D flags the sink's definition always passes (flashinfer's gen_jit_spec adds
        -DFLASHINFER_ENABLE_F16 ... to every module): the unconditional, constant ones of `local`."""
        got = self._own.get((sink_def, local))
        if got is None:
            sctx = self.r.ctx(sink_def)
            flags = self.fe._name(sctx, local, sctx.node, (), 0, set()) if sctx is not None and sctx.kind == "function" else []
            got = self._own[(sink_def, local)] = defines_of([f.text for f in flags if f.kind == "flag" and not f.condition])
        return got

    def _compile_flags(self, site: SinkSite, rule, m: JitModule, env: dict | None = None) -> None:
        """cuda_cflags, defines, hard-coded archs and include paths of one sink call."""
        ctx, call = site.ctx, site.call
        if rule.cuda_flags:
            items = self._bound_flags(ctx, self._arg(call, rule.cuda_flags), env)
            if items is None:
                items = []
                for n in self._arg(call, rule.cuda_flags):
                    items += self.fe.flags(ctx, n)
            m.flag_items = items
            m.cuda_cflags = [f.text for f in items]
            shared = self._bound_flags(ctx, self._arg(call, rule.shared_flags), env)
            if shared is None:
                shared = []
                for n in self._arg(call, rule.shared_flags):
                    shared += self.fe.flags(ctx, n)
            valued = unknown_defines(f.text for f in items + shared if f.kind == "unknown")
            arch_unknown = False
            for f in items + shared:
                if f.kind == "unknown":
                    # a define whose value is not constant stays defined, its value unknown to the
                    # preprocessor; an architecture flag with holes selects targets only; any other
                    # flag that is not constant may hide a -D: reported, and blocks the judgement
                    kind = ("flags-define-value" if f.text in valued else "flags-arch" if is_arch_flag(f.text)
                            else "flags-unknown")
                    arch_unknown |= kind == "flags-arch"
                    m.unresolved.append((kind, f"{f.text}: {f.reason}" + (f" (if {f.condition})" if f.condition else "")))
            known = [f.text for f in items + shared if f.kind == "flag"]
            m.defines = {**{n: UNKNOWN_VALUE for n in valued.values()}, **defines_of(known)}
            archs = hard_coded_archs(known)
            m.hard_coded_archs = (archs if archs and not arch_unknown and not any(f.kind == "arch-list" for f in items)
                                  else None)
        if rule.own_flags and site.via == "function":
            # the sink's own defaults come first on nvcc's command line: the call's -D win (here,
            # so that flags re-evaluated for a call on a gate's chain keep them too)
            m.defines = {**self._own_defines(site.callee, rule.own_flags), **m.defines}
        for n in self._arg(call, rule.include_paths):
            v = self.ce.eval(ctx, n, env or {})
            items = flatten_values(v) if not isinstance(v, Unknown) else [v]
            for it in items:
                d, why = self._include_dir(it)
                if d is not None:
                    if d not in m.include_paths:
                        m.include_paths.append(d)
                else:
                    m.unresolved.append(("include-path", why))

    def _bound_flags(self, ctx: Ctx, nodes: list[N], env: dict | None) -> list[Flag] | None:
        """The flags of one variant (parameters bound by its callers or one value of a Literal):
        the arguments' values when each is a constant list of strings with those bindings
        (`[*_NVCC_FLAGS[target], _TARGET_DEFINE[target]]` for target="sm100a" gives that target's
        flags only); None otherwise, and FlagEval reads the arguments for every binding."""
        if not env or not nodes:
            return None
        out: list[Flag] = []
        for n in nodes:
            v = self.ce.eval(ctx, n, env)
            v = [v] if isinstance(v, str) else v
            if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
                return None
            out += [Flag(x, path=ctx.mod.path, line=n.line) for x in v]
        return out

    def flags_via(self, m: JitModule, path: str, line: int) -> JitModule | None:
        """`m` with the flags that come from parameters of its function bound to the arguments of
        the call at path:line (the caller on a gate's chain); None when nothing changes."""
        if not any(f.kind == "unknown" and f.reason.startswith("parameter ") for f in m.flag_items) and not any(
                k == "include-path" and "parameter" in r for k, r in m.unresolved):
            return None
        site = self.r.sinks.get(m.key)
        fctx = site.ctx if site is not None else None
        while fctx is not None and fctx.kind != "function":
            fctx = fctx.parent
        call, cctx = self._call_at(path, line, fctx.qual.rsplit(".", 1)[-1] if fctx is not None else "")
        if call is None or fctx is None or call.f["star"]:
            return None
        bound = bind_args(fctx, call, cctx, self.r, f"called at {path}:{line}")
        if not bound:
            return None
        out = JitModule(key=m.key, name=m.name, name_resolved=m.name_resolved, rule=m.rule, kind=m.kind, path=m.path,
                        line=m.line, function=m.function, sources=m.sources, flags=m.flags,
                        unresolved=[u for u in m.unresolved if not u[0].startswith(("flags-", "include-path"))],
                        alternatives=m.alternatives, source_choices=m.source_choices,
                        source_options=m.source_options, include_aliases=m.include_aliases)
        saved = self.fe.bound
        self.fe.bound = bound
        try:
            rule = next(r for r in self.r.rules.sinks if r.id == m.rule)
            self._compile_flags(site, rule, out)
        finally:
            self.fe.bound = saved
        return out

    def _call_at(self, path: str, line: int, short: str):
        """The call of a function named `short` at path:line, with its scope."""
        modname = self.r.index.module_of_path.get(path)
        mctx = self.r.ctx(modname) if modname else None
        if mctx is None or not short:
            return None, None
        src = mctx.mod.parsed.src
        best = function_at_line(mctx.mod, line)
        ctx = self.r.ctx(f"{modname}.{best[0]}") if best else mctx
        body = ctx.node.f["body"] if ctx is not None and ctx.kind == "function" else mctx.mod.parsed.body
        for e in walk_exprs(body):
            if e.k == "call" and e.line <= line:
                fn = e.f["func"]
                last = fn.f["attr"] if fn.k == "attr" else fn.f["id"] if fn.k == "name" else ""
                if last == short and (e.line == line or e.line + src.count(b"\n", e.sb, e.eb) >= line):
                    return e, ctx
        return None, None

    def _include_dir(self, item) -> tuple[str | None, str]:
        src = self.r.index.source
        if isinstance(item, PathV) and item.rooted:
            if item.path and src.is_dir(item.path):
                return item.path, ""
            return None, f"{item.path}: no such directory in the scan"
        if isinstance(item, PathV) or (isinstance(item, str) and item.startswith("/")):
            return None, f"{item.path if isinstance(item, PathV) else item}: absolute path outside the scan"
        if isinstance(item, str):
            return None, f"{item}: relative to the working directory at build time"
        if isinstance(item, Unknown):
            return None, f"{item.pattern or item.detail or item.reason}: {item}"
        if item is None:
            return None, "None in the include path list"
        return None, f"{item!r}: not a path"

    def _source(self, item, root: str) -> SourceFile:
        exists = self.r.index.source.exists
        if isinstance(item, PathV):
            if not item.rooted:
                return SourceFile(item.path, "outside", reason="absolute path outside the scan")
            p = item.path
            if exists(p):
                return SourceFile(p, "resolved", p)
            if root and exists(f"{root}/{p}"):
                return SourceFile(p, "resolved", f"{root}/{p}")
            return SourceFile(p, "missing", p, reason="no such file in the scan")
        if isinstance(item, str):
            if item.startswith("/"):
                return SourceFile(item, "outside", reason="absolute path outside the scan")
            if root and exists(f"{root}/{item}"):
                return SourceFile(item, "resolved", f"{root}/{item}")
            if exists(item):
                return SourceFile(item, "resolved", item)
            return SourceFile(item, "missing", f"{root}/{item}" if root else item, reason="no such file in the scan")
        if isinstance(item, Unknown):
            return SourceFile(item.pattern or str(item), "unresolved", reason=str(item))
        return SourceFile(repr(item)[:80], "unresolved", reason=f"not a path ({type(item).__name__})")

    def _templates(self, ctx: Ctx) -> tuple[str, ...]:
        """Template files the function reads (e.g. `CSRC / "x.jinja"`): its generated sources come from them."""
        sfx = self.r.rules.template_suffixes
        fn = ctx
        while fn is not None and fn.kind != "function":
            fn = fn.parent
        if fn is None:
            return ()
        if not any(s.encode() in fn.mod.parsed.src[fn.node.sb:fn.node.eb] for s in sfx):
            return ()
        out = []
        for e in walk_exprs(fn.node.f["body"]):
            if e.k == "binop" and e.f["right"].k == "const" and isinstance(e.f["right"].f["value"], str) and e.f["right"].f["value"].endswith(sfx):
                v = self.ce.eval(fn, e)
                out.append(v.path if isinstance(v, PathV) else e.f["right"].f["value"])
            elif e.k == "const" and isinstance(e.f["value"], str) and e.f["value"].endswith(sfx) and "/" in e.f["value"]:
                out.append(e.f["value"])
        return tuple(sorted(set(out)))

    # ------------------------------------------------------------------ flags
    def _flags(self, ctx: Ctx, n: N | None, out: list, depth: int, seen: set) -> None:
        if n is None or depth > 12:
            return
        k = n.k
        if k == "call":
            fn = n.f["func"]
            last = fn.f["attr"] if fn.k == "attr" else fn.f["id"] if fn.k == "name" else ""
            if last in self.r.rules.arch_flag_functions:
                majors: tuple = ()
                for kw, v in n.f["kwargs"]:
                    if kw == "supported_major_versions":
                        val = self.ce.eval(ctx, v)
                        if isinstance(val, (list, tuple)) and all(isinstance(x, int) for x in val):
                            majors = tuple(val)
                        elif val is None:
                            majors = ()
                        else:
                            out.append(FlagSource("unresolved", ctx.mod.path, n.line, _text(ctx, n), how=f"arch list not constant: {val}"))
                            return
                if not majors and n.f["args"]:
                    val = self.ce.eval(ctx, n.f["args"][0])
                    if isinstance(val, (list, tuple)) and all(isinstance(x, int) for x in val):
                        majors = tuple(val)
                out.append(FlagSource("arch-list", ctx.mod.path, n.line, _text(ctx, n), majors, how="arch-flag-function"))
                return
            # flags returned by a scanned helper
            for r in self.r.callee(ctx, n):
                if r.kind == "function" and r.target not in seen:
                    seen.add(r.target)
                    c = self.r.ctx(r.target)
                    if c is not None and c.kind == "function":
                        for st in iter_stmts(c.node.f["body"]):
                            if st.k == "return":
                                self._flags(c, st.f["value"], out, depth + 1, seen)
            if fn.k == "attr":
                self._flags(ctx, fn.f["value"], out, depth + 1, seen)  # flags.replace(...), x + y
            for a in n.f["args"]:
                self._flags(ctx, a, out, depth + 1, seen)
            return
        if k == "const":
            v = n.f["value"]
            if isinstance(v, str) and _ARCH_FLAG.search(v):
                out.append(FlagSource("hard-coded", ctx.mod.path, n.line, v, how="constant"))
            return
        if k == "fstring":
            txt = _text(ctx, n)
            if _ARCH_FLAG.search(txt):
                out.append(FlagSource("hard-coded", ctx.mod.path, n.line, txt, how="f-string"))
            return
        if k == "name":
            key = (ctx.qualname, n.f["id"])
            if key in seen:
                return
            seen.add(key)
            self._flags_name(ctx, n.f["id"], out, depth, seen)
            return
        if k == "attr":
            base = self.r.eval(ctx, n.f["value"], 1)
            for b in base:
                if b.kind == "module":
                    key = (b.target, n.f["attr"])
                    if key not in seen:
                        seen.add(key)
                        mctx = self.r.ctx(b.target)
                        if mctx is not None:
                            self._flags_name(mctx, n.f["attr"], out, depth, seen, global_only=True)
            return
        for child in n.f.values():
            if isinstance(child, N):
                self._flags(ctx, child, out, depth + 1, seen)
            elif isinstance(child, (list, tuple)):
                for c in child:
                    if isinstance(c, N):
                        self._flags(ctx, c, out, depth + 1, seen)
                    elif isinstance(c, tuple):
                        for x in c:
                            if isinstance(x, N):
                                self._flags(ctx, x, out, depth + 1, seen)

    def _flags_name(self, ctx: Ctx, name: str, out: list, depth: int, seen: set, global_only: bool = False) -> None:
        c = ctx
        binds = None
        if not global_only:
            while c is not None and c.kind != "module":
                if c.kind == "function":
                    loc = self.r.locals_of(c)
                    if name in loc:
                        binds = loc[name]
                        break
                c = c.parent
        if binds is None:
            c = self.r.ctx(ctx.mod.name)
            binds = self.r.gbind(ctx.mod.name).get(name, [])
        for bd in binds:
            if bd[0] == "assign":
                self._flags(bd[3] or c, bd[1], out, depth + 1, seen)
            elif bd[0] == "aug":
                self._flags(c, bd[1], out, depth + 1, seen)
            elif bd[0] == "from" and self.r.index.has_module(bd[1]):
                key = (bd[1], bd[2])
                if key not in seen:
                    seen.add(key)
                    mctx = self.r.ctx(bd[1])
                    if mctx is not None:
                        self._flags_name(mctx, bd[2], out, depth + 1, seen, global_only=True)
            elif bd[0] == "param" and (c.qualname, name) in self.fe.bound and self.fe.bound[(c.qualname, name)][1] is not None:
                # bound along a caller's chain (module_via / flags_via): the caller's argument
                actx, arg, _why = self.fe.bound[(c.qualname, name)]
                self._flags(actx, arg, out, depth + 1, seen)
            elif bd[0] == "param":
                out.append(FlagSource("unresolved", c.mod.path, c.node.line if c.node is not None else 0,
                                      f"parameter {name}", how="flags come from a parameter"))
        # list growth: flags.append("-gencode...") / flags += [...]
        if c is not None and c.kind == "function" and not global_only:
            for st in iter_stmts(c.node.f["body"]):
                if st.k == "expr" and st.f["value"].k == "call":
                    f = st.f["value"].f["func"]
                    if f.k == "attr" and f.f["attr"] in ("append", "extend") and f.f["value"].k == "name" and f.f["value"].f["id"] == name:
                        for a in st.f["value"].f["args"]:
                            self._flags(c, a, out, depth + 1, seen)

    # ------------------------------------------------------------------ whole scan
    def find_all_sinks(self, graph, progress=None) -> list[JitModule]:
        """Every sink in the scan: modules whose bytes name a sink are expanded, then analysed.
        A sink outside the scan (`torch.utils.cpp_extension.load`) counts only in a module whose
        bytes also name every package component before it: its last name alone (`load`) is in
        half the modules of a serving stack."""
        rules = self.r.rules
        # word -> the byte strings that must also be in the module for the word to name a sink
        needs: dict[bytes, list[tuple[bytes, ...]]] = {}
        for w in set(rules.by_def_name) | set(rules.base_names):
            needs.setdefault(w.encode(), []).append(())
        for e in rules.by_external:
            *pkg, last = e.split(".")
            needs.setdefault(last.encode(), []).append(tuple(p.encode() for p in pkg))
        mods = sorted(self.r.index.path_of)
        done: dict[str, list] = {}  # module -> the words it was searched for
        while True:  # again when a scanned subclass of a sink class (JitSpecCuteDsl) is a new word
            grew = False
            for i, m in enumerate(mods):
                data = self.r.index.peek_bytes(m)  # most are not parsed: their bytes are not kept
                words = [w for w, alts in needs.items() if w in data and any(all(p in data for p in a) for a in alts)]
                if not words or done.get(m) == words:
                    continue
                pat = re.compile(rb"\b(" + b"|".join(re.escape(w) for w in sorted(words)) + rb")\b")
                if not pat.search(data):
                    continue
                done[m] = words
                if progress and i % 100 == 0:
                    progress(f"JIT sinks: {i}/{len(mods)} modules")
                mod = self.r.module(m)
                if mod is None:
                    continue
                graph.expand(m)
                for q, node in list(mod.all_functions()) + list(mod.classes.items()):
                    if pat.search(data, node.sb, node.eb):
                        graph.expand(f"{m}.{q}")
                for q in mod.classes:
                    name = q.rsplit(".", 1)[-1].encode()
                    if name not in needs and self.r.jitspec_rule(f"{m}.{q}") is not None:
                        needs[name] = [()]
                        grew = True
            if not grew:
                break
        return [self.module(k) for k in sorted(self.r.sinks)]


def _written_from(sf: SourceFile, item, written: dict) -> list[SourceFile]:
    """The sources a path the generator writes stands for: the file copied there, or the template
    rendered there (one per write site it may come from); one without a file when any is unknown."""
    origins = list(dict.fromkeys(o for k in text_keys(item) for o in written.get(k, ())))
    if not origins:
        return []
    unknown = next((o for o in origins if o.how == "unknown"), None)
    if unknown is not None:
        tmpl = tuple(sorted({o.path for o in origins if o.how == "rendered"}))
        return [SourceFile(sf.text, "generated", reason=f"written at {unknown.where}: {unknown.reason}", templates=tmpl)]
    out = []
    name = sf.text.rsplit("/", 1)[-1]
    own_suffix = "." + name.rsplit(".", 1)[1] if "." in name and "}" not in name.rsplit(".", 1)[1] else None
    for o in origins:
        suffix = own_suffix or o.suffix
        if o.how == "copied":
            out.append(SourceFile(sf.text, "resolved", o.path, reason=f"copied there at build time ({o.where})"))
        elif o.how == "text":
            out.append(SourceFile(sf.text, "generated", written_text_path(name, o.text),
                                  reason=f"written there at build time from text built in Python ({o.where})",
                                  suffix=suffix, content=o.text))
        else:
            out.append(SourceFile(sf.text, "generated", o.path, reason=f"rendered there at build time ({o.where})",
                                  templates=(o.path,), suffix=suffix))
    return out


WRITTEN_TEXT_PREFIX = "<generated:"


def written_text_path(name: str, text: str) -> str:
    """Where a source written from text built in Python is read: a name no file of a scan has,
    unique per text (the variants of one write site write different texts)."""
    digest = hashlib.blake2b(text.encode("utf-8", "surrogateescape"), digest_size=6).hexdigest()
    return f"{WRITTEN_TEXT_PREFIX}{digest}>/{name or 'source'}"


def _generated_includes(written: dict, dest_dirs: set[str], source_keys: set[str]) -> list[tuple[str, str]]:
    """The files written into the directories the sources are written to that are not sources
    themselves (`gen_dir / "config.inc"` beside `gen_dir / "kernel.cu"`): (name, origin) when
    what is written there is one file of the scan, rendered or copied."""
    out = []
    for key, origins in sorted(written.items()):
        name = posixpath.basename(key)
        if posixpath.dirname(key) not in dest_dirs or key in source_keys or not name or "{" in name:
            continue
        paths = {o.path for o in origins}
        if len(paths) == 1 and all(o.how in ("rendered", "copied") and o.path for o in origins):
            out.append((name, paths.pop()))
    return out


def _resolved_names(files: list[SourceFile]) -> set[str]:
    return {sf.path.rsplit("/", 1)[-1] for sf in files if sf.status == "resolved"}


def _other_candidate(sf: SourceFile, found: set[str]) -> bool:
    """A missing candidate path of a file found through another candidate (`_source_dir()`
    returning an installed or a checkout directory): not a missing source."""
    return sf.status == "missing" and sf.path.rsplit("/", 1)[-1] in found


def _choices(v) -> int:
    """How many different lists of files a sources value may be: an Alt of lists, or a list with
    Alt items. Options naming the same file (an installed or a checkout directory) count once."""
    if isinstance(v, Alt):
        return len({tuple(sorted(_file_name(x) for x in flatten_values(o))) for o in v.options})
    n = 1
    if isinstance(v, (list, tuple)):
        for x in v:
            if isinstance(x, Alt):
                n *= len({_file_name(o) for o in x.options})
    return n


def _file_name(x) -> str:
    text = x.path if isinstance(x, PathV) else x if isinstance(x, str) else repr(x)
    return text.rsplit("/", 1)[-1]


def _dedup(xs: list) -> list:
    seen = {}
    for x in xs:
        seen.setdefault(x, None)
    return list(seen)


def _text(ctx: Ctx, n: N) -> str:
    t = " ".join(ctx.mod.parsed.text(n).split())
    return t if len(t) <= 120 else t[:117] + "..."


# flag problems that leave the architectures a build targets unknown
ARCH_UNKNOWN = ("flags-unknown", "flags-arch")


def _evaluated_without_arch(jm: JitModule) -> bool:
    """The module's flags were evaluated item by item, each a constant passed always, and none
    chooses an architecture: the flag sources its function holds (hard-coded, or read from a
    parameter this variant binds) belong to other variants (`arch_flags = []` for one target,
    `_FLAGS[target]` for the others)."""
    return bool(jm.flag_items) and all(f.kind == "flag" and not f.condition and not _ARCH_FLAG.search(f.text)
                                       for f in jm.flag_items)


def build_admits(jm: JitModule, reg: Registry) -> tuple[frozenset | None, str, list[tuple[str, int, str]]]:
    """The GPUs a module's build gives code for, how that was established, and the flag sources
    that fix it. None when the flags that choose the architectures could not be evaluated."""
    arch_lists = [f for f in jm.flags if f.kind == "arch-list"]
    hard = [f for f in jm.flags if f.kind == "hard-coded"]
    unknown = [u for u in jm.unresolved if u[0] in ARCH_UNKNOWN]
    gates = [(f.path, f.line, f.kind) for f in arch_lists + hard]
    if unknown:
        return None, "unknown", gates
    if jm.hard_coded_archs:
        flags = [f"-gencode=arch=compute_{c.split('_', 1)[1]},code={c}" for c in jm.hard_coded_archs if "_" in c]
        adm = admits_of_nvcc_flags(reg, flags)
        return adm, "hard-coded" if adm is not None else "unknown", gates
    if arch_lists:
        if any(not f.majors for f in arch_lists):
            return None, "unknown", gates
        majors = {m for f in arch_lists for m in f.majors}
        return frozenset(reg.with_major(majors)), "arch-list", gates
    if any(f.kind in ("unresolved", "hard-coded") for f in jm.flags) and not _evaluated_without_arch(jm):
        return None, "unknown", gates
    # no architecture flag at all: the JIT compiles for the GPU it runs on
    return reg.all, "default", gates
