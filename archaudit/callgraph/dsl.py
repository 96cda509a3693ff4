"""CuTe DSL calls that need an architecture-specific instruction (rules/cute_dsl.toml).

A kernel written in the CuTe DSL is Python that `cutlass.cute.compile` traces and lowers to PTX
for the compile target; the call graph follows the traced function (externals.toml
`traces_arguments`), so the DSL calls it makes appear as calls outside the scan on a gate's path.
A call listed in rules/cute_dsl.toml emits the instructions of the features it requires, and
builds only on compile targets that have all of them (rules/instructions.toml, checked by ptxas).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from ..cuda.ruleset import FeatureRule, RuleError, feature_rule
from ..ruledata import load_rule
from ..targets import CompileTarget


@dataclass(frozen=True)
class DslCallRule:
    names: tuple[re.Pattern, ...]
    requires: tuple[FeatureRule, ...]
    description: str

    def matches(self, dotted: str) -> bool:
        return any(p.fullmatch(dotted) for p in self.names)

    def builds_for(self, ct: CompileTarget) -> bool:
        return all(f.supports(ct) for f in self.requires)


@lru_cache(maxsize=1)
def dsl_call_rules() -> tuple[DslCallRule, ...]:
    out = []
    for i, entry in enumerate(load_rule("cute_dsl").get("call", [])):
        where = f"cute_dsl.toml call #{i + 1}"
        try:
            names = tuple(re.compile(n) for n in entry["names"])
            requires = tuple(feature_rule(q) for q in entry["requires"])
        except KeyError as e:
            raise RuleError(f"{where}: missing or unknown {e}") from None
        except re.error as e:
            raise RuleError(f"{where}: bad pattern: {e}") from None
        out.append(DslCallRule(names, requires, entry.get("description", "")))
    return tuple(out)


def dsl_rule_for(dotted: str) -> DslCallRule | None:
    """The rule a DSL call (its dotted name outside the scan) falls under, if any."""
    return next((r for r in dsl_call_rules() if r.matches(dotted)), None)
