"""The comparison of two scans (verdict/diff.py) as text, JSON and SARIF: a dependency bump's
gates added, removed and changed, and per target what that does to the findings."""
from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

from .. import __version__
from ..model import Gate
from ..verdict.baseline import fingerprint
from ..verdict.diff import ADDED, CHANGED, REMOVED, ScanDiff, TargetSummary
from .sarif import INFORMATION_URI, SCHEMA_URI, base_uri
from .shown import shown


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
