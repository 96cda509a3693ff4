"""Human-readable output of a scan: the first screen (archaudit/summary.py's Summary, printed),
then, when asked for or when there are few, the findings one by one, and with --all every gate.

Two renderings of the same lines: `render_text` (plain lines, for pipes, files and --format text:
a line is never wrapped, so a path is never broken) and `render_table` (rich, on a terminal: its
width follows the terminal). Every name, path, expression and reason goes through shown()/cell()
(report/shown.py): nothing read from a scanned file can start a line of its own or reach the
terminal as markup or an escape sequence. Nothing here analyses: the Summary is computed in
archaudit/summary.py.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..model import VERDICTS
from ..summary import Summary, summarize
from ..targets import Registry
from .shown import cell, shown

# at most this many findings (and diagnostics) are listed one by one without being asked for
FEW = 30

VERDICT_STYLE = {"software-only": "green", "partial": "yellow", "hardware-bound": "red",
                 "binary-only": "magenta", "unresolved": "dim", "no-gpu-code": "cyan"}
ORDER = {v: i for i, v in enumerate(("hardware-bound", "partial", "software-only", "binary-only",
                                     "no-gpu-code", "unresolved"))}


@dataclass(frozen=True)
class View:
    """How much to print, and how to spell the commands the screen suggests."""

    path_arg: str | None = None  # PATH as given on the command line (None: the default)
    show_all: bool = False  # --all: every finding and every gate
    list_findings: bool | None = None  # None: when asked for by --verdict, or when there are few


def _cmd(view: View, *words: str) -> str:
    parts = ["archaudit", words[0]]
    if view.path_arg:
        parts.append(shlex.quote(view.path_arg))
    parts += [shlex.quote(w) if w not in (">",) else w for w in words[1:]]
    return " ".join(parts)


def _admits(reg: Registry, admits) -> str:
    names = reg.sort_names(admits)
    if not names:
        return "(none)"
    if frozenset(names) == reg.all:
        return "(all)"
    return " ".join(n.replace("sm_", "") for n in names)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


# --- the first screen, as (text, style, wrap) lines ---------------------------------------------
def _row(label: str, count: int, unit: str, width: int, *rest: str) -> str:
    cols = [f"    {label:<{width}}", f"{_plural(count, unit):>9}"] + [r for r in rest if r]
    return "  ".join(cols)


def screen_lines(s: Summary, view: View, targets_given: bool) -> list[tuple[str, str, bool]]:
    """The first screen: (text, rich style, may wrap). Every text is already shown()."""
    out: list[tuple[str, str, bool]] = []

    def add(text: str, style: str = "", wrap: bool = False) -> None:
        out.append((shown(text), style, wrap))

    _head_lines(s, add)
    if not targets_given:
        _untargeted_lines(s, view, add)
        return out
    for t in s.targets:
        add("")
        _target_lines(t, view, add)
    add("")
    tgt = s.targets[0].target if s.targets else "sm_120"
    add(f"Findings one by one: --verdict {'|'.join(VERDICTS)} (repeatable), --all (and every gate); "
        f"one gate's evidence: {_cmd(view, 'explain', 'FILE:LINE', '-t', tgt)}", "dim", wrap=True)
    return out


def _head_lines(s: Summary, add) -> None:
    """The scan root, its packages and gate count, what was only read, the filters."""
    add(f"archaudit: {s.root}", "bold", wrap=True)
    pk = ", ".join(f"{n} {v}" for n, v in s.packages)
    tests = f" ({s.test_gates_left_out} more in test files)" if s.test_gates_left_out else ""
    add(f"{pk + ': ' if pk else ''}{_plural(s.gates, 'gate')} that test{'s' if s.gates == 1 else ''} "
        f"the GPU architecture{tests}", wrap=True)
    if s.packages_read:
        # said only when some package's Python was never parsed (no trigger, no gate's name, no
        # call the verdicts followed into it): what the scan's answers stand on
        add(f"analysed: {', '.join(s.packages_analysed) or 'none'}; only read (nothing architecture-dependent "
            f"found in their bytes): {', '.join(s.packages_read)}", "dim", wrap=True)
    if s.filters and (s.filters.get("verdict") or s.filters.get("package") or s.filters.get("include")
                      or s.filters.get("exclude")):
        f = s.filters
        parts = [f"{k} {', '.join(f[k]) if isinstance(f[k], list) else f[k]}"
                 for k in ("verdict", "package", "include", "exclude") if f.get(k)]
        add("filters: " + "; ".join(parts), "dim", wrap=True)


def _untargeted_lines(s: Summary, view: View, add) -> None:
    """Without --target: the gates counted by kind and by GPU they exclude."""
    if s.gates_by_kind:
        add("  by kind: " + ", ".join(f"{n} {k}" for k, n in sorted(s.gates_by_kind.items(), key=lambda x: (-x[1], x[0]))))
    if s.excluding:
        add("  gates that exclude each GPU: " + ", ".join(f"{g} {n}" for g, n in s.excluding.items()), wrap=True)
    if s.test_gates_left_out:
        add("  gates in test files are left out; --include-tests to show")
    add("")
    add(f"No --target given: the gates are listed, not judged. Which gates stop a GPU, and which can be patched: "
        f"{_cmd(view, 'scan', '-t', 'sm_120')}", wrap=True)


def _stop(n: int, what: str) -> str:
    return f"no {what} stops it" if not n else f"1 {what} stops it" if n == 1 else f"{n} {what}s stop it"


def _target_lines(t, view: View, add) -> None:
    """One target's block: its head line, then each verdict's lines."""
    prods: list[str] = []
    for p in t.products:
        if not any(p.startswith(q) for q in prods):
            prods.append(p)
    prod = f" ({', '.join(prods[:3])})" if prods else ""
    if t.baseline is not None:
        known, new = t.baseline
        head = f"{t.target}{prod}: {_stop(new, 'new gate')} ({known} known, in the baseline)"
    else:
        head = f"{t.target}{prod}: {_stop(t.stopped, 'gate')}"
    add(head, "bold", wrap=True)
    _patchable_lines(t, view, add)
    for verdict, groups, more, what in (("hardware-bound", t.hardware, t.hardware_more,
                                         f"{t.target} lacks what they need"),
                                        ("binary-only", t.binary, t.binary_more,
                                         f"prebuilt code with no build for {t.target}")):
        n = t.counts.get(verdict, 0)
        if not n:
            continue
        nfeat = sum(g.modules for g in groups) + (more.modules if more else 0)
        add(f"  {n} {verdict}: {what} ({_plural(nfeat, 'module')})", VERDICT_STYLE[verdict])
        rows = groups + ([more] if more else [])
        w = min(40, max(len(g.label) for g in rows))
        for g in rows:
            add(_row(g.label, g.count, "gate", w, g.why, g.example))
    ng = t.counts.get("no-gpu-code", 0)
    if ng:
        add(f"  {ng} no-gpu-code: patching them changes only Python, no GPU code "
            f"(list: --verdict no-gpu-code)", VERDICT_STYLE["no-gpu-code"])
    nu = t.counts.get("unresolved", 0)
    if nu:
        add(f"  {nu} unresolved: not followed to the end, by the first obstacle met "
            f"(list: {_cmd(view, 'scan', '-t', t.target, '--verdict', 'unresolved')})", "yellow", wrap=True)
        for g in t.unresolved + ([t.unresolved_more] if t.unresolved_more else []):
            add(f"    {g.count:>5}  {g.label}")
    if t.tests_left_out:
        add(f"  {_plural(t.tests_left_out, 'finding')} in test files left out; --include-tests to show", "dim")


def _patchable_lines(t, view: View, add) -> None:
    """What can be patched for one target: the counts, the command, the features."""
    so, pa = t.counts.get("software-only", 0), t.counts.get("partial", 0)
    if not (so or pa):
        return
    kinds = ", ".join(x for x in (f"{so} software-only" if so else "", f"{pa} partial" if pa else "") if x)
    auto = (f"{t.patch_auto} with an automatic patch, {t.patch_manual} with a step by hand"
            if t.patch_manual else "each with an automatic patch")
    add(f"  {so + pa} can be patched ({kinds}; {auto}):", "green", wrap=True)
    add("    " + _cmd(view, "patch", "-t", t.target, ">", f"enable-{t.target}.patch"), "green", wrap=True)
    groups = t.patchable + ([t.patchable_more] if t.patchable_more else [])
    w = min(40, max(len(g.label) for g in groups))
    for g in groups:
        mods = f"{g.modules} modules" if g.modules > 1 and g is not t.patchable_more else ""
        add(_row(g.label, g.count, "gate", w, mods, g.example))
    if pa:
        add("    partial ones are patched with --include-partial (only some of their kernels, modules or source lists work there)", "dim")


# --- plain text ---------------------------------------------------------------------------------
def _finding_lines(result) -> list[str]:
    lines = []
    for f in sorted(result.findings, key=lambda f: (f.target, ORDER.get(f.verdict, 9), f.gate.path, f.gate.line)):
        lines.append(f"{f.gate.path}:{f.gate.line}:{f.gate.col}: {f.target}: {f.verdict}: {f.reason}")
        for e in f.evidence:
            lines.append(f"    evidence {e.path}:{e.line}: {e.feature}: {e.message}"
                         + (f" (supported on {', '.join(e.supported_on)})" if e.supported_on else ""))
    return lines


def _gate_lines(result, reg: Registry) -> list[str]:
    lines = []
    for g in result.gates:
        extra = "".join(f" {t.gpu.name}={'yes' if t.gpu.name in g.admits else 'no'}" for t in result.targets)
        lines.append(f"{g.path}:{g.line}:{g.col}: {g.kind}: {g.expr} admits [{' '.join(reg.sort_names(g.admits))}]"
                     f"{extra} ({g.resolution})")
    return lines


def _diagnostic_lines(result) -> list[str]:
    return [f"{d.path}:{d.line}: {d.severity}: {d.kind}: {d.message}" if d.line else
            f"{d.path}: {d.severity}: {d.kind}: {d.message}" for d in result.diagnostics]


def _lists(result, view: View) -> tuple[bool, bool, bool]:
    """(list the findings, list the gates, list the diagnostics)."""
    asked = bool((result.stats.get("filters") or {}).get("verdict"))
    findings = view.list_findings if view.list_findings is not None else (
        view.show_all or asked or len(result.findings) <= FEW)
    gates = view.show_all or (not result.targets and len(result.gates) <= FEW)
    diags = view.show_all or len(result.diagnostics) <= FEW
    return findings and bool(result.findings), gates and bool(result.gates), diags and bool(result.diagnostics)


def render_text(result, reg: Registry, view: View | None = None) -> str:
    """The first screen as plain lines; then the findings (when asked for or few), every gate
    (--all, or few without --target) and the diagnostics (when few). Each line is shown()."""
    view = view or View()
    s = summarize(result, reg)
    lines = [t for t, _, _ in screen_lines(s, view, bool(result.targets))]
    fl, gl, dl = _lists(result, view)
    if fl:
        lines += ["", "findings:"] + [shown(x) for x in _finding_lines(result)]
    if gl:
        lines += ["", "gates:"] + [shown(x) for x in _gate_lines(result, reg)]
    if dl:
        lines += ["", "diagnostics:"] + [shown(x) for x in _diagnostic_lines(result)]
    elif result.diagnostics:
        lines.append(f"{_plural(len(result.diagnostics), 'diagnostic')} (files that could not be read fully); "
                     "--all or --format json lists them")
    return "\n".join(lines) + "\n"


# --- rich, on a terminal --------------------------------------------------------------------------
def render_table(result, reg: Registry, console: Console, view: View | None = None) -> None:
    """The same screen for a terminal: the width follows the console; list rows that do not fit
    end in an ellipsis (the plain format and --format json keep everything). Cells are Text of
    shown() (no markup, no emoji, control characters escaped)."""
    view = view or View()
    s = summarize(result, reg)
    for text, style, wrap in screen_lines(s, view, bool(result.targets)):
        t = Text(text, style=style)
        if wrap:
            console.print(t, overflow="fold")
        else:
            console.print(t, no_wrap=True, overflow="ellipsis")
    fl, gl, dl = _lists(result, view)
    if fl:
        render_findings(result, console)
    if gl:
        render_gates(result, reg, console)
    if dl:
        console.print(Text("diagnostics:", style="bold"))
        for line in _diagnostic_lines(result):
            console.print(cell(line), overflow="fold")
    elif result.diagnostics:
        console.print(cell(f"{_plural(len(result.diagnostics), 'diagnostic')} (files that could not be read fully); "
                           "--all or --format json lists them"))


def render_gates(result, reg: Registry, console: Console) -> None:
    table = Table(title="gates", show_lines=False, header_style="bold")
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


def _evidence_line(f) -> str:
    if f.evidence:
        e = f.evidence[0]
        more = f" (+{len(f.evidence) - 1} more)" if len(f.evidence) > 1 else ""
        return f"{e.path}:{e.line} {e.feature}{more}"
    return f.reason


def render_findings(result, console: Console) -> None:
    """Findings grouped by the feature (JIT modules) behind them, the strongest verdicts first."""
    table = Table(title="gates that exclude the target", header_style="bold", show_lines=False)
    for col in ("target", "verdict", "gate", "modules", "evidence / reason"):
        table.add_column(col, overflow="fold", max_width=None if col != "evidence / reason" else 70)
    for f in sorted(result.findings, key=lambda f: (f.target, ORDER.get(f.verdict, 9), f.feature, f.gate.path, f.gate.line)):
        style = VERDICT_STYLE.get(f.verdict, "")
        table.add_row(cell(f.target), cell(f.verdict, style), cell(f"{f.gate.path}:{f.gate.line}"),
                      cell(f.feature or "-"), cell(_evidence_line(f)))
    console.print(table)
