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
Pure functions; the CLI scans and prints.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from . import __version__
from .baseline import expr_skeleton, fingerprint, occurrence_keys, reportable
from .model import Gate
from .report.sarif import INFORMATION_URI, SCHEMA_URI, base_uri
from .report.shown import shown

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


# --- output ----------------------------------------------------------------------------------
def _names(reg, s) -> list[str]:
    return reg.sort_names(s)


def _pk(pkgs) -> str:
    return ", ".join(f"{d.name} {d.version}" for d in sorted(pkgs, key=lambda d: d.name.lower()))


def _counts(d: dict) -> str:
    return ", ".join(f"{n} {v}" for v, n in sorted(d.items(), key=lambda kv: (-kv[1], kv[0])))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def summary_lines(d: ScanDiff) -> list[str]:
    """The short summary the text report starts with: the gates, then per target its findings."""
    moved = f"; {d.moved} moved only (not changes)" if d.moved else ""
    lines = [f"gates: {d.count(ADDED)} added, {d.count(REMOVED)} removed, {d.count(CHANGED)} changed{moved}"]
    for t in d.targets:
        s = d.target_summary(t)
        if s.empty:
            lines.append(f"{t}: no finding appeared, disappeared or changed verdict")
            continue
        parts = []
        if s.new:
            parts.append(f"{_plural(sum(s.new.values()), 'new finding')} ({_counts(s.new)})")
        if s.gone:
            parts.append(f"{_plural(sum(s.gone.values()), 'finding')} gone (were {_counts(s.gone)})")
        if s.changed:
            parts.append(f"{_plural(sum(s.changed.values()), 'verdict')} changed ("
                         + _counts({f'{o} -> {n}': k for (o, n), k in s.changed.items()}) + ")")
        lines.append(f"{t}: " + "; ".join(parts))
    return lines


def render_text(d: ScanDiff, reg) -> str:
    lines = [f"old: {d.old_root}" + (f" ({_pk(d.old_packages)})" if d.old_packages else ""),
             f"new: {d.new_root}" + (f" ({_pk(d.new_packages)})" if d.new_packages else "")]
    lines += summary_lines(d)
    if d.changes:
        lines.append("")
    for c in d.changes:
        g = c.gate
        where = f"{g.path}:{g.line}"
        if c.change == CHANGED and (c.old.path, c.old.line) != (c.new.path, c.new.line):
            where = f"{c.old.path}:{c.old.line} -> {g.path}:{g.line}"
        lines.append(f"{c.change:8} {where}: {g.kind} in {g.function}")
        if c.change == CHANGED:
            if c.expr_changed:
                lines.append(f"         expr: {' '.join(c.old.expr.split())}  ->  {' '.join(c.new.expr.split())}")
            if c.admits_gained or c.admits_lost:
                delta = " ".join([f"+{x}" for x in _names(reg, c.admits_gained)] + [f"-{x}" for x in _names(reg, c.admits_lost)])
                lines.append(f"         admits: {delta}  (now: {' '.join(_names(reg, c.new.admits)) or 'none'})")
            if c.old.resolved != c.new.resolved:
                lines.append(f"         {'resolved' if c.new.resolved else 'no longer resolved'}: {c.new.resolution}")
        else:
            lines.append(f"         {' '.join(g.expr.split())}  admits: {' '.join(_names(reg, g.admits)) or 'none'}")
        for t, (o, n) in sorted(c.verdicts.items()):
            lines.append(f"         {t}: {o or '(no gate)'} -> {n or '(no gate)'}")
    return "\n".join(map(shown, lines)) + "\n"  # names from the scanned trees: report/shown.py


def _gate_json(g: Gate | None, reg) -> dict | None:
    if g is None:
        return None
    return {"path": g.path, "line": g.line, "col": g.col, "expr": g.expr, "admits": _names(reg, g.admits),
            "resolution": g.resolution, "resolved": g.resolved}


def _target_json(s: TargetSummary) -> dict:
    return {"new": dict(sorted(s.new.items())), "gone": dict(sorted(s.gone.items())),
            "changed": [{"old": o, "new": n, "count": k} for (o, n), k in sorted(s.changed.items())]}


def to_json_obj(d: ScanDiff, reg) -> dict:
    return {
        "schema_version": 1,
        "tool": {"name": "archaudit", "version": __version__},
        "old": {"root": d.old_root, "packages": [{"name": p.name, "version": p.version} for p in d.old_packages]},
        "new": {"root": d.new_root, "packages": [{"name": p.name, "version": p.version} for p in d.new_packages]},
        "targets": d.targets,
        "summary": {"added": d.count(ADDED), "removed": d.count(REMOVED), "changed": d.count(CHANGED), "moved": d.moved,
                    "targets": {t: _target_json(d.target_summary(t)) for t in d.targets}},
        "changes": [
            {
                "change": c.change,
                "key": c.key,
                "package": c.gate.package,
                "function": c.gate.function,
                "kind": c.gate.kind,
                "old": _gate_json(c.old, reg),
                "new": _gate_json(c.new, reg),
                "admits_gained": _names(reg, c.admits_gained),
                "admits_lost": _names(reg, c.admits_lost),
                "verdicts": {t: {"old": o, "new": n} for t, (o, n) in sorted(c.verdicts.items())},
                "regressions": c.regressions(),
            }
            for c in d.changes
        ],
    }


def render_json(d: ScanDiff, reg) -> str:
    return json.dumps(to_json_obj(d, reg), indent=2, ensure_ascii=False) + "\n"


DIFF_RULES = [
    ("gate-changed", "GateChanged", "An architecture gate changed between the two environments",
     "The gate exists in both environments but admits other GPUs, reads differently, or gets another verdict."),
    ("gate-added", "GateAdded", "An architecture gate appeared", "The new environment has a gate the old one did not have."),
    ("gate-removed", "GateRemoved", "An architecture gate disappeared", "The old environment had a gate the new one does not have."),
]


def to_sarif(d: ScanDiff, reg, repo_new=None) -> dict:
    """SARIF for a diff: one run, one result per change; regressions are warnings."""
    rules = []
    for rid, name, short, full in DIFF_RULES:
        rules.append({"id": rid, "name": name, "shortDescription": {"text": short}, "fullDescription": {"text": full},
                      "help": {"text": full, "markdown": f"**{short}.** {full}"},
                      "properties": {"tags": ["gpu", "cuda", "dependency-bump"], "precision": "high"}})
    index = {r["id"]: i for i, r in enumerate(rules)}
    results = []
    for c in d.changes:
        rid = f"gate-{c.change}"
        g = c.gate
        base = "NEWROOT" if c.new is not None else "OLDROOT"
        pin = repo_new.pin(g.package) if repo_new is not None else None
        if pin is not None:
            primary = {"physicalLocation": {"artifactLocation": {"uri": quote(pin.path, safe="/"), "uriBaseId": "%SRCROOT%"},
                                            "region": {"startLine": pin.line}}}
        else:
            primary = {"physicalLocation": {"artifactLocation": {"uri": quote(g.path, safe="/"), "uriBaseId": base},
                                            "region": {"startLine": g.line, "startColumn": max(1, g.col)}}}
        parts = [f"{c.change}: {g.kind} `{' '.join(g.expr.split())}` in {g.function}"]
        if c.admits_gained:
            parts.append("now admits " + ", ".join(_names(reg, c.admits_gained)))
        if c.admits_lost:
            parts.append("no longer admits " + ", ".join(_names(reg, c.admits_lost)))
        for t, (o, n) in sorted(c.verdicts.items()):
            parts.append(f"{t}: {o or '(no gate)'} -> {n or '(no gate)'}")
        related = []
        for i, (gg, b, what) in enumerate([(c.old, "OLDROOT", "before"), (c.new, "NEWROOT", "after")]):
            if gg is not None:
                related.append({"id": len(related), "physicalLocation": {
                    "artifactLocation": {"uri": quote(gg.path, safe="/"), "uriBaseId": b},
                    "region": {"startLine": gg.line}}, "message": {"text": f"{what}: {' '.join(gg.expr.split())}"}})
        fp = fingerprint(rid, c.key, ",".join(d.targets))
        results.append({
            "ruleId": rid, "ruleIndex": index[rid], "level": "warning" if c.regressions() else "note",
            "message": {"text": "; ".join(parts) + "."},
            "locations": [primary], "relatedLocations": related,
            "partialFingerprints": {"primaryLocationLineHash": fp},
            "properties": {"change": c.change, "admitsGained": _names(reg, c.admits_gained),
                           "admitsLost": _names(reg, c.admits_lost), "regressions": c.regressions(),
                           "verdicts": {t: {"old": o, "new": n} for t, (o, n) in sorted(c.verdicts.items())}},
        })
    bases = {}
    for name, root in (("OLDROOT", d.old_root), ("NEWROOT", d.new_root)):
        bases[name] = {"uri": base_uri(Path(root).resolve()), "description": {"text": f"{name[:3].lower()} environment"}}
    if repo_new is not None and repo_new.root is not None:
        bases["%SRCROOT%"] = {"uri": base_uri(repo_new.root)}
    run = {
        "tool": {"driver": {"name": "archaudit", "version": __version__, "semanticVersion": __version__,
                            "informationUri": INFORMATION_URI, "rules": rules}},
        "automationDetails": {"id": f"archaudit-diff/{'+'.join(d.targets) or 'gates'}/"},
        "invocations": [{"executionSuccessful": True}],
        "originalUriBaseIds": bases,
        "results": results,
        "properties": {"old": [{"name": p.name, "version": p.version} for p in d.old_packages],
                       "new": [{"name": p.name, "version": p.version} for p in d.new_packages]},
    }
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def keys_for(gates: list[Gate]) -> dict[str, Gate]:  # convenience for tests and tools
    return dict(zip(gate_identities(gates), gates))


__all__ = ["diff_scans", "render_text", "render_json", "to_sarif", "ScanDiff", "GateChange", "expr_skeleton", "keys_for", "match_gates", "identity",
           "norm_expr", "summary_lines"]
