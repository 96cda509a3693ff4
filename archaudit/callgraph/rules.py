"""rules/jit.toml: which calls build CUDA code, read once."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from ..ruledata import load_rule


@dataclass(frozen=True)
class ArgSpec:
    pos: int | None = None
    kw: str | None = None
    varargs: bool = False  # every positional argument from `pos` on


@dataclass(frozen=True)
class SinkRule:
    id: str
    kind: str  # "spec" (returns a spec that is built later) | "built" (builds and loads at once)
    def_names: tuple[str, ...] = ()  # scanned functions with these names
    externals: tuple[str, ...] = ()  # dotted names outside the scan
    base_classes: tuple[str, ...] = ()  # scanned classes deriving from a class with one of these names
    name: tuple[ArgSpec, ...] = ()
    sources: tuple[ArgSpec, ...] = ()
    inline_sources: tuple[ArgSpec, ...] = ()
    cuda_flags: tuple[ArgSpec, ...] = ()
    include_paths: tuple[ArgSpec, ...] = ()
    shared_flags: tuple[ArgSpec, ...] = ()  # host flags the build also passes to nvcc
    source_root: str = ""  # relative source names resolve against this directory (root-relative)
    own_flags: str = ""  # a local of the sink's own definition holding flags it always passes


@dataclass(frozen=True)
class GenerateRules:
    """How generators write sources at build time (rules/jit.toml [generate])."""

    writers: dict = field(default_factory=dict)  # function name -> (dest position, content position)
    write_methods: frozenset = frozenset()
    copies: dict = field(default_factory=dict)  # function name -> (src position, dest position)
    read_methods: frozenset = frozenset()
    template_classes: frozenset = frozenset()
    render_methods: frozenset = frozenset()


@dataclass(frozen=True)
class JitRules:
    sinks: tuple[SinkRule, ...]
    build_methods: frozenset
    arch_flag_functions: frozenset
    cache_wrappers: frozenset  # decorators/wrappers that keep calling the wrapped function
    cache_wrapper_names: frozenset  # their last names (`lru_cache` for functools.lru_cache)
    partial_functions: frozenset
    template_suffixes: tuple[str, ...]
    generate: GenerateRules = field(default_factory=GenerateRules)
    by_def_name: dict = field(default_factory=dict)
    by_external: dict = field(default_factory=dict)
    base_names: dict = field(default_factory=dict)

    def rule_for_def(self, name: str) -> SinkRule | None:
        return self.by_def_name.get(name)


def _args(x) -> tuple[ArgSpec, ...]:
    if x is None:
        return ()
    if isinstance(x, dict):
        x = [x]
    return tuple(ArgSpec(pos=a.get("pos"), kw=a.get("kw"), varargs=bool(a.get("varargs", False))) for a in x)


def _generate(g: dict) -> GenerateRules:
    return GenerateRules(
        writers={w["name"]: (w["dest"], w["content"]) for w in g.get("writers", [])},
        write_methods=frozenset(g.get("write_methods", [])),
        copies={c["name"]: (c["src"], c["dest"]) for c in g.get("copies", [])},
        read_methods=frozenset(g.get("read_methods", [])),
        template_classes=frozenset(g.get("template_classes", [])),
        render_methods=frozenset(g.get("render_methods", [])),
    )


def parse_rules(data: dict) -> JitRules:
    sinks = []
    for s in data.get("sink", []):
        sinks.append(SinkRule(
            id=s["id"], kind=s.get("kind", "spec"),
            def_names=tuple(s.get("def_names", ())), externals=tuple(s.get("externals", ())),
            base_classes=tuple(s.get("base_classes", ())),
            name=_args(s.get("name")), sources=_args(s.get("sources")),
            inline_sources=_args(s.get("inline_sources")), cuda_flags=_args(s.get("cuda_flags")),
            include_paths=_args(s.get("include_paths")), shared_flags=_args(s.get("shared_flags")),
            source_root=s.get("source_root", ""), own_flags=s.get("own_flags", ""),
        ))
    b = data.get("build", {})
    r = JitRules(
        sinks=tuple(sinks),
        build_methods=frozenset(b.get("methods", ["build_and_load"])),
        arch_flag_functions=frozenset(b.get("arch_flag_functions", [])),
        cache_wrappers=frozenset(b.get("cache_wrappers", [])),
        cache_wrapper_names=frozenset(w.rsplit(".", 1)[-1] for w in b.get("cache_wrappers", [])),
        partial_functions=frozenset(b.get("partial_functions", [])),
        template_suffixes=tuple(b.get("template_suffixes", [".jinja"])),
        generate=_generate(data.get("generate", {})),
    )
    for s in sinks:
        for n in s.def_names:
            r.by_def_name.setdefault(n, s)
        for n in s.externals:
            r.by_external.setdefault(n, s)
        for n in s.base_classes:
            r.base_names.setdefault(n, s)
    return r


@lru_cache(maxsize=1)
def jit_rules() -> JitRules:
    return parse_rules(load_rule("jit"))
