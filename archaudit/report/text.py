"""Human-readable output: a rich table (default) or plain text lines. Pure functions of a scan."""
from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..targets import Registry
from .shown import cell, shown


def _admits(reg: Registry, admits) -> str:
    names = reg.sort_names(admits)
    if not names:
        return "(none)"
    if frozenset(names) == reg.all:
        return "(all)"
    return " ".join(n.replace("sm_", "") for n in names)


def render_table(result, reg: Registry, console: Console) -> None:
    # paths, expressions and package metadata come from scanned files: every cell is a Text of
    # shown() (no markup, no emoji, control characters escaped)
    pk = ", ".join(f"{d.name} {d.version}" for d in sorted(result.packages, key=lambda d: d.name.lower()))
    console.print(Text.assemble(("archaudit", "bold"), " ", cell(result.root), cell(f"  ({pk})" if pk else "")))
    table = Table(show_lines=False, header_style="bold")
    table.add_column("location", overflow="fold")
    table.add_column("kind")
    table.add_column("expression", overflow="fold", max_width=60)
    table.add_column("admits (sm_)", overflow="fold")
    for t in result.targets:
        table.add_column(t.gpu.name)
    table.add_column("resolution", overflow="fold", max_width=40)
    for g in result.gates:
        row = [cell(f"{g.path}:{g.line}"), cell(g.kind), cell(g.expr), cell(_admits(reg, g.admits))]
        for t in result.targets:
            row.append(cell("yes", "green") if t.gpu.name in g.admits else cell("no", "red"))
        row.append(cell(g.resolution.split(":", 1)[0]) if g.resolved else cell(g.resolution, "yellow"))
        table.add_row(*row)
    console.print(table)
    if result.findings:
        render_findings(result, console)
    elif result.stats.get("baseline") is not None:
        # nothing new: how many were known (target names and counts only)
        console.print(verdict_summary(result), markup=False, emoji=False)
    console.print(cell(summary_line(result)))
    if result.diagnostics:
        console.print(f"{len(result.diagnostics)} diagnostics (files that could not be read fully); --format json lists them")


VERDICT_STYLE = {"software-only": "green", "partial": "yellow", "hardware-bound": "red",
                 "binary-only": "magenta", "unresolved": "dim", "no-gpu-code": "cyan"}


def _evidence_line(f) -> str:
    if f.evidence:
        e = f.evidence[0]
        more = f" (+{len(f.evidence) - 1} more)" if len(f.evidence) > 1 else ""
        return f"{e.path}:{e.line} {e.feature}{more}"
    return f.reason


def render_findings(result, console: Console) -> None:
    """Findings grouped by the feature (JIT modules) behind them, the strongest verdicts first."""
    order = {v: i for i, v in enumerate(("hardware-bound", "partial", "software-only", "binary-only", "no-gpu-code", "unresolved"))}
    table = Table(title="gates that exclude the target", header_style="bold", show_lines=False)
    for col in ("target", "verdict", "gate", "modules", "evidence / reason"):
        table.add_column(col, overflow="fold", max_width=None if col != "evidence / reason" else 70)
    for f in sorted(result.findings, key=lambda f: (f.target, order.get(f.verdict, 9), f.feature, f.gate.path, f.gate.line)):
        style = VERDICT_STYLE.get(f.verdict, "")
        table.add_row(cell(f.target), cell(f.verdict, style), cell(f"{f.gate.path}:{f.gate.line}"),
                      cell(f.feature or "-"), cell(_evidence_line(f)))
    console.print(table)
    console.print(cell(verdict_summary(result)))


def verdict_summary(result) -> str:
    """Per target, the findings by verdict; against a baseline (the findings are then the new ones
    only), how many were known and how many are new."""
    parts = []
    base = result.stats.get("baseline")
    for t in result.targets:
        c = Counter(f.verdict for f in result.findings if f.target == t.gpu.name)
        verdicts = ", ".join(f"{n} {v}" for v, n in sorted(c.items()))
        if base is not None:
            known, new = base.get(t.gpu.name, (0, 0))
            parts.append(f"{t.gpu.name}: {known} known, {new} new" + (f" ({verdicts})" if verdicts else ""))
        else:
            parts.append(f"{t.gpu.name}: " + (verdicts or "no gate excludes it"))
    return "; ".join(parts)


def summary_line(result) -> str:
    kinds = Counter(g.resolution.split(":", 1)[0] for g in result.gates)
    parts = ", ".join(f"{v} {k}" for k, v in sorted(kinds.items()))
    return f"{len(result.gates)} gates ({parts}) in {result.stats.get('seconds', 0)} s"


def render_text(result, reg: Registry) -> str:
    """One line per gate, finding, evidence and diagnostic; each line is shown() (see
    report/shown.py), so nothing read from a scanned file can start a line of its own."""
    lines = []
    for g in result.gates:
        extra = ""
        for t in result.targets:
            extra += f" {t.gpu.name}={'yes' if t.gpu.name in g.admits else 'no'}"
        lines.append(
            f"{g.path}:{g.line}:{g.col}: {g.kind}: {g.expr} admits [{' '.join(reg.sort_names(g.admits))}]{extra} ({g.resolution})"
        )
    for f in result.findings:
        lines.append(f"{f.gate.path}:{f.gate.line}:{f.gate.col}: {f.target}: {f.verdict}: {f.reason}")
        for e in f.evidence:
            lines.append(f"    evidence {e.path}:{e.line}: {e.feature}: {e.message}"
                         + (f" (supported on {', '.join(e.supported_on)})" if e.supported_on else ""))
    for d in result.diagnostics:
        loc = f"{d.path}:{d.line}" if d.line else d.path
        lines.append(f"{loc}: {d.severity}: {d.kind}: {d.message}")
    lines.append(summary_line(result))
    if result.targets:
        lines.append(verdict_summary(result))
    return "\n".join(map(shown, lines)) + "\n"
