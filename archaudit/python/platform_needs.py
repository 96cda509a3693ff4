"""Platform requirements of a gate: tests of a system facility (NVLink multicast, ...) that sit in
the same condition as the architecture test.

`if device_sm not in (100, 103) or not has_multicast: return None` lets the code after it run only
where both hold. Widening the architecture test cannot admit a GPU whose systems lack the facility
(targets.toml says "no" for the feature): what stands in the way there is the platform, not the gate. The flags are
found by name (rules/gates.toml [[platform_flag]]); the condition's text is parsed with the
standard library's `ast` (read only, never run).
"""
from __future__ import annotations

import ast
import re
from functools import lru_cache

from ..ruledata import load_rule

# regions whose guarded code runs when the condition is false (an early exit: every `or` term
# false) or true (an assert: every `and` term true)
_EXIT_REGIONS = ("after-early-exit",)
_ASSERT_REGIONS = ("assert",)


@lru_cache(maxsize=1)
def _flag_rules() -> tuple[tuple[re.Pattern, str], ...]:
    return tuple((re.compile(r["pattern"]), r["needs"]) for r in load_rule("gates").get("platform_flag", []))


def _flag_facility(node: ast.AST) -> str:
    """The facility a bare flag (`has_multicast`, `comm.has_multicast`, `x.has_nvls()`) names."""
    if isinstance(node, ast.Call) and not node.args and not node.keywords:
        node = node.func
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    for pattern, needs in _flag_rules():
        if name and pattern.match(name):
            return needs
    return ""


def _terms(node: ast.AST, op: type) -> list[ast.AST]:
    if isinstance(node, ast.BoolOp) and isinstance(node.op, op):
        return [t for v in node.values for t in _terms(v, op)]
    return [node]


def platform_needs(text: str, region: str) -> tuple[tuple[str, str], ...]:
    """The facilities the code a gate guards needs, read off the gate's condition `text`: pairs of
    (a platform field of targets.toml such as "nvlink_multicast", the flag test as written)."""
    if region not in _EXIT_REGIONS + _ASSERT_REGIONS or not _flag_rules():
        return ()
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ()
    out: list[tuple[str, str]] = []
    if region in _EXIT_REGIONS:
        # `if A or not flag: return`: the code after it needs the flag
        for t in _terms(tree, ast.Or):
            if isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not):
                facility = _flag_facility(t.operand)
                if facility:
                    out.append((facility, ast.unparse(t)))
    else:
        for t in _terms(tree, ast.And):
            facility = _flag_facility(t)
            if facility:
                out.append((facility, ast.unparse(t)))
    return tuple(dict.fromkeys(out))
