"""JSON output: a documented, versioned object (see docs/architecture.md "JSON schema"). Pure function of a scan."""
from __future__ import annotations

import json

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


def to_json(result, reg: Registry) -> str:
    obj = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "archaudit", "version": __version__},
        "root": result.root,
        "targets": [t.gpu.name for t in result.targets],
        "packages": [
            {"name": d.name, "version": d.version, "top_level": list(d.top_level)}
            for d in sorted(result.packages, key=lambda d: d.name.lower())
        ],
        "gates": [gate_to_json(g, reg, result.targets) for g in result.gates],
        "findings": [finding_to_json(f) for f in sorted(result.findings, key=Finding.sort_key)],
        "modules": [m.to_json(reg) for m in result.modules],
        "diagnostics": [d.to_json() for d in result.diagnostics],
        # what the command's filters left out (archaudit/filters.py); None when none were applied
        "filters": result.stats.get("filters"),
        "stats": {k: v for k, v in result.stats.items() if k not in ("seconds", "filters")},
    }
    return json.dumps(obj, indent=2, sort_keys=False) + "\n"
