"""Gate identities, fingerprints, reportable findings, inline suppressions and baseline files.

A gate's identity must survive what does not change its meaning: unrelated lines moving, the
package version, re-formatting, and the arch numbers themselves (so that a gate whose list
gains 12 is "the same gate, changed" in a diff). It is therefore made of the distribution, the
qualified name of the enclosing function, the gate kind and the expression with whitespace and
arch numbers taken out, plus an ordinal among look-alikes in the same function.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field

from .. import __version__
from ..model import UNRESOLVED, VERDICTS, Finding, Gate
from ..safeio import UnsafeInput, load_json_file

# a finding that no verdict was computed for (before/without the judge): honest, never a guess
NOT_JUDGED = "no verdict was computed for this gate on this GPU"

_NUM_SEQ = re.compile(r"[\[(]\s*\d+(?:\s*,\s*\d+)*\s*,?\s*[\])]")  # [9, 10] / (9, 0)
_ARCH_WORD = re.compile(r"\b(sm|compute)_?\d+[af]?\b", re.I)  # code=sm_100a (not is_sm90_supported)
_NUM = re.compile(r"(?<![\w.])\d+(?:\.\d+)?[af]?(?![\w.])")  # 90, 9.0a, 12.0
_WS = re.compile(r"\s+")


def expr_skeleton(expr: str) -> str:
    s = _WS.sub("", expr)
    s = _NUM_SEQ.sub("[#]", s)
    s = _ARCH_WORD.sub(lambda m: m.group(1).lower() + "_#", s)
    return _NUM.sub("#", s)


def _base_key(g: Gate) -> str:
    return f"{g.package or '-'}|{g.function}|{g.kind}|{expr_skeleton(g.expr)}"


def gate_keys(gates: list[Gate]) -> list[str]:
    """Stable identity of each gate (same order as `gates`)."""
    return occurrence_keys(gates, _base_key)


def occurrence_keys(gates: list[Gate], base) -> list[str]:
    """base(gate)|occurrence for each gate (same order as `gates`); the occurrence counts gates
    of equal base in (path, line, col) order."""
    groups: dict[str, list[int]] = {}
    for i, g in enumerate(gates):
        groups.setdefault(base(g), []).append(i)
    keys = [""] * len(gates)
    for b, idx in groups.items():
        idx.sort(key=lambda i: (gates[i].path, gates[i].line, gates[i].col))
        for n, i in enumerate(idx):
            keys[i] = f"{b}|{n}"
    return keys


def fingerprint(rule: str, gate_key: str, target: str) -> str:
    h = hashlib.sha256(f"archaudit-v1\0{rule}\0{gate_key}\0{target}".encode())
    return h.hexdigest()[:32]


def _gate_id(g: Gate) -> tuple:
    return (g.path, g.line, g.col, g.kind, g.expr)


# --- inline suppressions ---------------------------------------------------------------------
_SUPPRESS = re.compile(r"(?:#|//)\s*archaudit:\s*ignore(?:\[([^\]]*)\])?", re.I)


def parse_suppression(line: str) -> frozenset | None:
    """Rules a source line suppresses: None when it has no `# archaudit: ignore[...]` comment,
    an empty set for a bare `# archaudit: ignore` (every rule)."""
    m = _SUPPRESS.search(line)
    if not m:
        return None
    if m.group(1) is None:
        return frozenset()
    return frozenset(x.strip().lower() for x in m.group(1).split(",") if x.strip())


def suppresses(rules: frozenset | None, rule: str) -> bool:
    if rules is None:
        return False
    return not rules or rule in rules or "*" in rules or "all" in rules


# --- reportable findings ---------------------------------------------------------------------
@dataclass
class Reported:
    """A finding as the reports and the baseline see it."""

    finding: Finding
    key: str  # gate identity
    fingerprint: str
    suppressed: str | None = None  # the suppressing comment, when the gate's line has one
    new: bool | None = None  # against a baseline: True new, False known; None without one

    @property
    def rule(self) -> str:
        return self.finding.verdict


def reportable(result, read_line=None) -> list[Reported]:
    """Every (gate, target) that excludes the target, with its finding.

    Findings of the judge are used as they are. A gate that excludes a requested target and has
    no finding, or whose admitted set could not be resolved, becomes an `unresolved` finding that
    says so, so that nothing that blocks a GPU is silently dropped; one that an earlier arm of its
    if/elif chain serves for the target (the scan's `not_evaluated_pairs`) is left out, as the
    findings leave it out. `read_line(path, line)` gives the text of a source line for inline
    suppressions (None: no suppressions)."""
    judged: dict[tuple, Finding] = {}
    for f in result.findings:
        judged.setdefault((_gate_id(f.gate), f.target), f)
    gates = list(result.gates)
    seen = {_gate_id(g) for g in gates}
    for f in result.findings:
        if _gate_id(f.gate) not in seen:
            seen.add(_gate_id(f.gate))
            gates.append(f.gate)
    keys = gate_keys(gates)
    # gates an earlier if/elif arm serves for the target: no finding in any format
    served = {(t, path, line, col, kind) for t, path, line, col, kind in result.stats.get("not_evaluated_pairs", [])}
    out: list[Reported] = []
    for t in [t.gpu.name for t in result.targets] or sorted({f.target for f in result.findings}):
        for g, k in zip(gates, keys):
            f = judged.get((_gate_id(g), t))
            if f is None:
                if (t, g.path, g.line, g.col, g.kind) in served:
                    continue
                if not g.resolved:
                    f = Finding(g, t, UNRESOLVED, reason=f"the gate could not be resolved ({g.resolution})")
                elif t not in g.admits:
                    f = Finding(g, t, UNRESOLVED, reason=NOT_JUDGED)
                else:
                    continue
            out.append(Reported(f, k, fingerprint(f.verdict, k, t)))
    if read_line is not None:
        cache: dict[tuple, frozenset | None] = {}
        for r in out:
            g = r.finding.gate
            at = (g.path, g.line)
            if at not in cache:
                text = read_line(g.path, g.line)
                cache[at] = parse_suppression(text) if text else None
            if suppresses(cache[at], r.rule):
                r.suppressed = (read_line(g.path, g.line) or "").strip()
    out.sort(key=lambda r: (r.finding.target, *r.finding.gate.sort_key(), r.finding.verdict))
    return out


def _can_suppress(data: bytes) -> bool:
    """Can the decoded bytes hold a _SUPPRESS match? It needs "archaudit" in some case; with
    re.I, an "i" also matches the dotless and dotted capital i (U+0131, U+0130)."""
    return b"archaudit" in data.lower() or b"\xc4\xb1" in data or b"\xc4\xb0" in data


def line_reader(source, only_suppressions: bool = False):
    """read_line for a Source (bytes are decoded leniently; files are read once).
    only_suppressions: the caller only looks for suppression comments, so a file that cannot
    hold one reads as having no lines, without decoding it (_can_suppress)."""
    cache: dict[str, list[str] | None] = {}

    def read_line(path: str, line: int) -> str | None:
        if path not in cache:
            data = source.read(path)
            if data is not None and only_suppressions and not _can_suppress(data):
                data = None
            cache[path] = data.decode("utf-8", "replace").splitlines() if data is not None else None
        lines = cache[path]
        if lines is None or not 1 <= line <= len(lines):
            return None
        return lines[line - 1]

    return read_line


# --- baseline files --------------------------------------------------------------------------
BASELINE_FORMAT = "archaudit-baseline"
BASELINE_VERSION = 1


class BaselineError(ValueError):
    """A baseline file that cannot be used (missing, not JSON, wrong format): exit code 2."""


@dataclass
class Baseline:
    targets: list[str]
    entries: list[dict] = field(default_factory=list)

    @property
    def fingerprints(self) -> frozenset:
        return frozenset(e["fingerprint"] for e in self.entries)


def baseline_entries(items: list[Reported]) -> list[dict]:
    out = []
    for r in items:
        if r.suppressed is not None:
            continue
        g = r.finding.gate
        out.append({
            "fingerprint": r.fingerprint,
            "rule": r.rule,
            "target": r.finding.target,
            "package": g.package,
            "function": g.function,
            "kind": g.kind,
            "expr": g.expr,
            "path": g.path,  # informative only: matching is by fingerprint
            "line": g.line,
        })
    out.sort(key=lambda e: (e["target"], e["path"], e["line"], e["fingerprint"]))
    return out


def dump_baseline(items: list[Reported], targets: list[str]) -> str:
    obj = {
        "format": BASELINE_FORMAT,
        "version": BASELINE_VERSION,
        "tool": {"name": "archaudit", "version": __version__},
        "targets": list(targets),
        "findings": baseline_entries(items),
    }
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def load_baseline(path) -> Baseline:
    try:
        obj = load_json_file(path)
    except FileNotFoundError:
        raise BaselineError(f"{path}: no such baseline file (create one with `archaudit baseline`)") from None
    except (OSError, UnicodeDecodeError, UnsafeInput) as e:
        raise BaselineError(f"{path}: cannot read baseline: {e}") from None
    except ValueError as e:
        raise BaselineError(f"{path}: not a JSON baseline file ({e})") from None
    if not isinstance(obj, dict) or obj.get("format") != BASELINE_FORMAT:
        raise BaselineError(f"{path}: not an archaudit baseline (missing \"format\": \"{BASELINE_FORMAT}\")")
    if obj.get("version") != BASELINE_VERSION:
        raise BaselineError(f"{path}: baseline version {obj.get('version')!r} is not supported (expected {BASELINE_VERSION})")
    entries = obj.get("findings")
    targets = obj.get("targets", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) and isinstance(e.get("fingerprint"), str)
                                                for e in entries):
        raise BaselineError(f"{path}: \"findings\" must be a list of objects with a \"fingerprint\"")
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise BaselineError(f"{path}: \"targets\" must be a list of GPU names")
    return Baseline(targets=targets, entries=entries)


def mark_new(items: list[Reported], baseline: Baseline) -> list[Reported]:
    """Set `new` on each item; return the new, unsuppressed ones."""
    known = baseline.fingerprints
    for r in items:
        r.new = r.fingerprint not in known
    return [r for r in items if r.new and r.suppressed is None]


# --- --fail-on -------------------------------------------------------------------------------
def parse_fail_on(text: str | None) -> frozenset | None:
    """`none` -> empty set, `any` -> every verdict, `a,b` -> those; None stays None (the default)."""
    if text is None:
        return None
    items = {x.strip().lower() for x in text.split(",") if x.strip()}
    if items == {"none"}:
        return frozenset()
    if "any" in items or "all" in items:
        return frozenset(VERDICTS)
    bad = sorted(items - set(VERDICTS))
    if bad:
        raise ValueError(f"unknown verdict(s) {', '.join(bad)}; choose from any, none, {', '.join(VERDICTS)}")
    return frozenset(items)
