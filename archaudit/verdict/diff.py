"""Compare two scans (a dependency bump): gates added, removed, and changed (admitted GPUs,
expression, or verdict per target), and per target what that does to the findings.

Gates are matched by identity, never by line number or order: the distribution, the qualified
name of the enclosing function, the gate kind and the expression text (whitespace normalised),
plus an occurrence index among gates with that same identity (in file order). A gate that only
moved is therefore not a change, and three gates of one function that trade places
(`== 9`, `== 10`, `== 12`) are three unchanged gates. Gates left over on both sides are paired
as "changed" only when there is no doubt which is which: the only leftover of its shape (the
expression with arch numbers taken out, baseline.expr_skeleton) in its function, else the only
leftover of its kind in its function. Everything else is added or removed.
Pure functions; the CLI scans, and report/diff.py renders the result.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..model import Gate
from .baseline import expr_skeleton, occurrence_keys, reportable

ADMITTED = "admitted"  # verdict-like status of a gate that admits the target
ADDED, REMOVED, CHANGED = "added", "removed", "changed"

_WS = re.compile(r"\s+")
_PUNCT_SPACE = re.compile(r" ?([^\w\s]) ?")
_TRAILING_COMMA = re.compile(r",([\])}])")


def norm_expr(expr: str) -> str:
    """The expression text with layout taken out: whitespace runs collapsed, no space around
    punctuation, no trailing comma before a closing bracket (`f(\\n  x=[9, 10],\\n)` == `f(x=[9,10])`)."""
    s = _PUNCT_SPACE.sub(r"\1", _WS.sub(" ", expr).strip())
    return _TRAILING_COMMA.sub(r"\1", s)


def identity(g: Gate) -> str:
    return f"{g.package or '-'}|{g.function}|{g.kind}|{norm_expr(g.expr)}"


def gate_identities(gates: list[Gate]) -> list[str]:
    """identity|occurrence of each gate (same order as `gates`)."""
    return occurrence_keys(gates, identity)


@dataclass
class GateChange:
    change: str  # added | removed | changed
    key: str
    old: Gate | None
    new: Gate | None
    verdicts: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)  # target -> (old, new)

    @property
    def gate(self) -> Gate:
        return self.new if self.new is not None else self.old

    @property
    def admits_gained(self) -> frozenset:
        return (self.new.admits if self.new else frozenset()) - (self.old.admits if self.old else frozenset())

    @property
    def admits_lost(self) -> frozenset:
        return (self.old.admits if self.old else frozenset()) - (self.new.admits if self.new else frozenset())

    @property
    def expr_changed(self) -> bool:
        return bool(self.old and self.new and norm_expr(self.old.expr) != norm_expr(self.new.expr))

    def regressions(self) -> list[str]:
        """Targets that this change newly excludes (admitted or absent before, excluded now)."""
        out = []
        for t, (o, n) in sorted(self.verdicts.items()):
            if o in (None, ADMITTED) and n not in (None, ADMITTED):
                out.append(t)
        return out


def _excluded(v: str | None) -> bool:
    return v not in (None, ADMITTED)


@dataclass
class TargetSummary:
    """What the changes do to one target's findings."""

    new: dict[str, int] = field(default_factory=dict)  # verdict -> findings that appeared (excluded now, not before)
    gone: dict[str, int] = field(default_factory=dict)  # old verdict -> findings that disappeared
    changed: dict[tuple[str, str], int] = field(default_factory=dict)  # (old, new) verdict -> count

    @property
    def empty(self) -> bool:
        return not (self.new or self.gone or self.changed)


@dataclass
class ScanDiff:
    old_root: str
    new_root: str
    old_packages: list
    new_packages: list
    targets: list[str]
    changes: list[GateChange]
    moved: int = 0  # matched gates whose line changed and nothing else

    def count(self, kind: str) -> int:
        return sum(1 for c in self.changes if c.change == kind)

    def target_summary(self, target: str) -> TargetSummary:
        s = TargetSummary()
        for c in self.changes:
            o, n = c.verdicts.get(target, (None, None))
            if _excluded(n) and not _excluded(o):
                s.new[n] = s.new.get(n, 0) + 1
            elif _excluded(o) and not _excluded(n):
                s.gone[o] = s.gone.get(o, 0) + 1
            elif _excluded(o) and _excluded(n) and o != n:
                s.changed[(o, n)] = s.changed.get((o, n), 0) + 1
        return s


def _status(result) -> dict[tuple, str]:
    """(gate location, target) -> verdict of each excluding (gate, target); absent = admitted."""
    return {((r.finding.gate.path, r.finding.gate.line, r.finding.gate.col, r.finding.gate.kind), r.finding.target):
            r.finding.verdict for r in reportable(result)}


def _loc(g: Gate) -> tuple:
    return (g.path, g.line, g.col, g.kind)


def match_gates(og: list[Gate], ng: list[Gate]) -> list[tuple[str, Gate | None, Gate | None]]:
    """(key, old gate, new gate) for every gate of either side; None where it has no partner."""
    old_by = dict(zip(gate_identities(og), og))
    new_by = dict(zip(gate_identities(ng), ng))
    pairs: list[tuple[str, Gate | None, Gate | None]] = [(k, old_by[k], new_by[k]) for k in sorted(set(old_by) & set(new_by))]
    rest_old = {k: g for k, g in old_by.items() if k not in new_by}
    rest_new = {k: g for k, g in new_by.items() if k not in old_by}

    # leftovers: the same gate rewritten, when it is the only candidate on both sides
    def pair_unique(shape) -> None:
        lo: dict[tuple, list[str]] = {}
        ln: dict[tuple, list[str]] = {}
        for k, g in rest_old.items():
            lo.setdefault(shape(g), []).append(k)
        for k, g in rest_new.items():
            ln.setdefault(shape(g), []).append(k)
        for s in sorted(set(lo) & set(ln), key=str):
            if len(lo[s]) == 1 and len(ln[s]) == 1:
                ko, kn = lo[s][0], ln[s][0]
                pairs.append((kn, rest_old.pop(ko), rest_new.pop(kn)))

    pair_unique(lambda g: (g.package, g.function, g.kind, expr_skeleton(g.expr)))
    pair_unique(lambda g: (g.package, g.function, g.kind))
    pairs += [(k, g, None) for k, g in rest_old.items()]
    pairs += [(k, None, g) for k, g in rest_new.items()]
    return pairs


def diff_scans(old, new, targets: list[str]) -> ScanDiff:
    so, sn = _status(old), _status(new)
    changes: list[GateChange] = []
    moved = 0
    for k, o, n in match_gates(list(old.gates), list(new.gates)):
        verdicts = {}
        for t in targets:
            vo = so.get((_loc(o), t), ADMITTED) if o is not None else None
            vn = sn.get((_loc(n), t), ADMITTED) if n is not None else None
            if vo != vn:
                verdicts[t] = (vo, vn)
        if o is not None and n is not None:
            c = GateChange(CHANGED, k, o, n, verdicts)
            if not verdicts and o.admits == n.admits and not c.expr_changed and o.resolved == n.resolved:
                if (o.path, o.line) != (n.path, n.line):
                    moved += 1
                continue
            changes.append(c)
        else:
            changes.append(GateChange(REMOVED if n is None else ADDED, k, o, n, verdicts))
    order = {CHANGED: 0, ADDED: 1, REMOVED: 2}
    changes.sort(key=lambda c: (order[c.change], c.gate.path, c.gate.line, c.gate.col, c.key))
    return ScanDiff(old.root, new.root, list(old.packages), list(new.packages), list(targets), changes, moved)


def keys_for(gates: list[Gate]) -> dict[str, Gate]:  # convenience for tests and tools
    return dict(zip(gate_identities(gates), gates))


__all__ = ["diff_scans", "ScanDiff", "GateChange", "TargetSummary", "expr_skeleton", "keys_for", "match_gates", "identity",
           "norm_expr"]
