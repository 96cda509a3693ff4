"""Architecture facts as data: feature rules (rules/instructions.toml) and predefined macros
(rules/macros.toml), expanded against the compile targets of rules/targets.toml.

Both files are checked against the local toolchain by `archaudit rules verify`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from ..ruledata import load_rule
from ..targets import CompileTarget, registry

KINDS = ("ptx", "intrinsic", "atom")


class RuleError(ValueError):
    """A rule file is malformed; the message names the file and the entry."""


@dataclass(frozen=True)
class FeatureRule:
    id: str
    kind: str  # "ptx" | "intrinsic" | "atom"
    pattern: re.Pattern
    description: str
    supported_on: frozenset[str]  # explicit compile-target names, e.g. {"sm_90a"}
    # Probe material for `archaudit rules verify`; the engine does not need these.
    probe: str = field(default="", compare=False, repr=False)
    probe_kind: str = field(default="", compare=False, repr=False)  # "ptx" | "cuda" | "macro"
    supported_spec: tuple[str, ...] = field(default=(), compare=False, repr=False)
    probe_include: str = field(default="", compare=False, repr=False)  # macro probes
    requires: tuple[str, ...] = field(default=(), compare=False, repr=False)  # atoms: instructions they emit
    # a CUTLASS ArchTag names the architecture a kernel was written for, not an instruction it
    # runs: evidence only where no concrete instruction or atom stands behind the same verdict
    selection_tag: bool = False

    def supports(self, target: CompileTarget) -> bool:
        return target.name in self.supported_on


# --- compile targets ----------------------------------------------------------------------


@lru_cache(maxsize=1)
def _all_targets() -> tuple[CompileTarget, ...]:
    out = []
    for g in registry().gpus:
        for v in g.variants:
            out.append(CompileTarget(g.major, g.minor, v))
    return tuple(sorted(out, key=lambda t: (t.major, t.minor, _VARIANT_ORDER.get(t.variant, 9))))


_VARIANT_ORDER = {"": 0, "a": 1, "f": 2}


def all_compile_targets() -> list[CompileTarget]:
    """Every compile target nvcc accepts, per the `variants` lists of rules/targets.toml."""
    return list(_all_targets())


def target_by_name(name: str) -> CompileTarget | None:
    for t in _all_targets():
        if t.name == name:
            return t
    return None


# --- supported_on expansion ---------------------------------------------------------------
# Grammar (documented at the top of rules/instructions.toml). Each item of the list is:
#   sm_90a              exactly that compile target
#   sm_80+              every target with capability >= 8.0, any variant
#   sm_100+:af          ... restricted to the listed variants ("p" = plain, "a", "f")
#   sm_100..sm_110:af   capability range, inclusive, with optional variant filter
#   -<any of the above> remove (removals apply after all additions)

_SPEC_RE = re.compile(
    r"^(?P<neg>-)?sm_(?P<lo>\d{2,3})(?P<lov>[af]?)"
    r"(?:(?P<plus>\+)|\.\.sm_(?P<hi>\d{2,3}))?"
    r"(?::(?P<vars>[paf]+))?$"
)


def _cap(digits: str) -> tuple[int, int]:
    return int(digits[:-1]), int(digits[-1])


def expand_supported(items, where: str = "") -> frozenset[str]:
    """Expand the compact supported_on list into explicit compile-target names."""
    if isinstance(items, str):
        items = [items]
    targets = _all_targets()
    names = {t.name for t in targets}
    add: set[str] = set()
    remove: set[str] = set()
    for item in items:
        m = _SPEC_RE.match(str(item).strip())
        if not m:
            raise RuleError(f"{where}: bad supported_on item {item!r}")
        lo = _cap(m.group("lo"))
        ranged = m.group("plus") or m.group("hi")
        if ranged and m.group("lov"):
            raise RuleError(f"{where}: {item!r}: put variants after ':' in a range")
        if ranged:
            hi = _cap(m.group("hi")) if m.group("hi") else (999, 9)
            vs = m.group("vars")
            allowed = {"p": "", "a": "a", "f": "f"}
            variants = {allowed[c] for c in vs} if vs else {"", "a", "f"}
            sel = {t.name for t in targets if lo <= (t.major, t.minor) <= hi and t.variant in variants}
        else:
            if m.group("vars"):
                raise RuleError(f"{where}: {item!r}: ':variants' only applies to ranges")
            name = f"sm_{m.group('lo')}{m.group('lov')}"
            if name not in names:
                raise RuleError(f"{where}: {item!r} is not a compile target nvcc accepts")
            sel = {name}
        (remove if m.group("neg") else add).update(sel)
    return frozenset(add - remove)


# --- feature rules ------------------------------------------------------------------------


def _feature(entry: dict, i: int) -> FeatureRule:
    where = f"instructions.toml feature #{i + 1} ({entry.get('id', '?')})"
    for key in ("id", "kind", "pattern", "supported_on"):
        if key not in entry:
            raise RuleError(f"{where}: missing {key!r}")
    kind = entry["kind"]
    if kind not in KINDS:
        raise RuleError(f"{where}: kind must be one of {KINDS}, not {kind!r}")
    try:
        pattern = re.compile(entry["pattern"])
    except re.error as e:
        raise RuleError(f"{where}: bad pattern: {e}") from None
    default_probe_kind = {"ptx": "ptx", "intrinsic": "cuda", "atom": "macro"}[kind]
    spec = entry["supported_on"]
    return FeatureRule(
        id=entry["id"],
        kind=kind,
        pattern=pattern,
        description=entry.get("description", ""),
        supported_on=expand_supported(spec, where),
        probe=entry.get("probe", ""),
        probe_kind=entry.get("probe_kind", default_probe_kind),
        supported_spec=tuple([spec] if isinstance(spec, str) else spec),
        probe_include=entry.get("probe_include", "cute/arch/config.hpp" if kind == "atom" else ""),
        requires=tuple(entry.get("requires", ())),
        selection_tag=bool(entry.get("selection_tag", False)),
    )


@lru_cache(maxsize=1)
def feature_rules() -> tuple[FeatureRule, ...]:
    data = load_rule("instructions")
    rules = tuple(_feature(e, i) for i, e in enumerate(data.get("feature", [])))
    seen: set[str] = set()
    for r in rules:
        if r.id in seen:
            raise RuleError(f"instructions.toml: duplicate feature id {r.id!r}")
        seen.add(r.id)
    for r in rules:
        missing = [q for q in r.requires if q not in seen]
        if missing:
            raise RuleError(f"instructions.toml: {r.id} requires unknown feature(s) {missing}")
    return rules


def feature_rule(rule_id: str) -> FeatureRule:
    for r in feature_rules():
        if r.id == rule_id:
            return r
    raise KeyError(rule_id)


# --- predefined macros --------------------------------------------------------------------


def _int_table(table: dict, where: str) -> dict[str, int]:
    out = {}
    for k, v in table.items():
        if isinstance(v, bool) or not isinstance(v, int):
            continue  # sub-tables (e.g. "functions") are not object-like macros
        out[k] = v
    return out


@lru_cache(maxsize=None)
def _macros(target_name: str | None) -> tuple[tuple[str, int], ...]:
    data = load_rule("macros")
    out = dict(_int_table(data.get("common", {}), "common"))
    if target_name is None:
        out.update(_int_table(data.get("host", {}), "host"))
    else:
        dev = data.get("device", {}).get(target_name)
        if dev is None:
            raise RuleError(f"macros.toml: no [device.{target_name}] table")
        out.update(_int_table(dev, target_name))
    return tuple(sorted(out.items()))


def predefined_macros(target: CompileTarget | None) -> dict[str, int]:
    """Object-like macros nvcc predefines: device pass for `target`, host pass for None.

    Includes what nvcc passes with -D and the version macros of the cuda_runtime.h it
    force-includes. __CUDA_ARCH_LIST__ is given for a single-target build (device pass only:
    on the host pass it depends on the whole -gencode list).
    """
    return dict(_macros(None if target is None else target.name))


@lru_cache(maxsize=None)
def _functions(target_name: str | None) -> tuple[tuple[str, tuple[str, ...], str], ...]:
    data = load_rule("macros")
    defined = dict(_macros(target_name))
    out = []
    for sig, spec in sorted(data.get("functions", {}).items()):
        m = re.fullmatch(r"(\w+)\(([^)]*)\)", sig)
        if not m or not isinstance(spec, dict) or "body" not in spec:
            raise RuleError(f"macros.toml: bad function-like macro {sig!r}")
        params = tuple(p.strip() for p in m.group(2).split(",") if p.strip())
        body = spec["body"]
        if spec.get("when_defined") in defined:
            body = spec["body_when_defined"]
        out.append((m.group(1), params, body))
    return tuple(out)


def function_macros(target: CompileTarget | None) -> dict[str, tuple[tuple[str, ...], str]]:
    """Function-like macros from the force-included CUDA headers that code tests in #if
    (e.g. __CUDA_HAS_ARCH_FAMILY_SPECIFIC(N)): name -> (parameters, replacement text)."""
    return {name: (params, body) for name, params, body in _functions(None if target is None else target.name)}
