"""JSON output: a documented, versioned object (see docs/architecture.md "JSON schema"). Pure function of a scan."""
from __future__ import annotations

import json
from types import GeneratorType

from .. import __version__
from ..model import Finding, Gate
from ..targets import Registry

SCHEMA_VERSION = 2


def gate_to_json(g: Gate, reg: Registry, targets) -> dict:
    d = {
        "path": g.path,
        "line": g.line,
        "col": g.col,
        "function": g.function,
        "kind": g.kind,
        "expr": g.expr,
        "admits": reg.sort_names(g.admits),
        "resolution": g.resolution,
        "resolved": g.resolved,
        "package": g.package,
        "region": g.region,
        "via": list(g.via),
    }
    if targets:
        d["admits_target"] = {t.gpu.name: t.gpu.name in g.admits for t in targets}
    return d


def finding_to_json(f: Finding) -> dict:
    return {
        "gate": {"path": f.gate.path, "line": f.gate.line, "col": f.gate.col, "function": f.gate.function,
                 "kind": f.gate.kind, "expr": f.gate.expr},
        "target": f.target,
        "verdict": f.verdict,
        "feature": f.feature,
        "reason": f.reason,
        "modules": [m.to_json() for m in f.modules],
        "chain": [link.to_json() for link in f.chain],
        "evidence": [e.to_json() for e in f.evidence],
        "patch": f.patch,
    }


def report_sections(result, reg: Registry) -> list[tuple[str, object]]:
    """The report object's (key, value) pairs in order; the long lists (gates, findings, modules,
    diagnostics) as iterators that convert one item at a time."""
    return [
        ("schema_version", SCHEMA_VERSION),
        ("tool", {"name": "archaudit", "version": __version__}),
        ("root", result.root),
        ("targets", [t.gpu.name for t in result.targets]),
        ("packages", [
            {"name": d.name, "version": d.version, "top_level": list(d.top_level)}
            for d in sorted(result.packages, key=lambda d: d.name.lower())
        ]),
        ("gates", (gate_to_json(g, reg, result.targets) for g in result.gates)),
        ("findings", (finding_to_json(f) for f in sorted(result.findings, key=Finding.sort_key))),
        ("modules", (m.to_json(reg) for m in result.modules)),
        ("diagnostics", (d.to_json() for d in result.diagnostics)),
        # what the command's filters left out (archaudit/filters.py); None when none were applied
        ("filters", result.stats.get("filters")),
        ("stats", {k: v for k, v in result.stats.items() if k not in ("seconds", "filters")}),
    ]


def to_json(result, reg: Registry) -> str:
    """json.dumps(dict(report_sections(...)), indent=2) + "\n": the text of json_pieces."""
    return "".join(json_pieces(result, reg))


def json_pieces(result, reg: Registry):
    """The report's JSON text (to_json) as pieces, one list item at a time, to be written as they
    come: json's indented encoder makes a list of every token before joining them (several times
    the memory of the text itself), and neither the whole report object nor its whole text need
    exist at once."""
    return _object_text(report_sections(result, reg))


def _indented(value, level: int) -> str:
    """json.dumps(value, indent=2) as it reads nested `level` spaces deep (JSON text holds no raw
    newline inside a string: every newline is the encoder's own, followed by the indent)."""
    text = json.dumps(value, indent=2)
    return text.replace("\n", "\n" + " " * level) if level else text


def _object_text(sections):
    yield "{"
    for i, (key, value) in enumerate(sections):
        yield ("\n  " if i == 0 else ",\n  ") + json.dumps(key) + ": "
        if not isinstance(value, GeneratorType):
            yield _indented(value, 2)
            continue
        first = True
        for item in value:  # an iterator of list items
            yield ("[\n    " if first else ",\n    ") + _indented(item, 4)
            first = False
        yield "[]" if first else "\n  ]"
    yield "\n}\n"
